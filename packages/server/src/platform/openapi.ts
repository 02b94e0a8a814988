/**
 * The OpenAPI 3.1 document of a service, generated from its route schemas by `@fastify/swagger`,
 * at `GET /openapi.json`, and a Swagger UI page at `/docs` whose assets come from this server
 * (`@fastify/swagger-ui` ships them; nothing is loaded from a CDN).
 *
 * Register it before any route: the document is collected from the routes added afterwards.
 */
import fastifySwagger from "@fastify/swagger";
import fastifySwaggerUi from "@fastify/swagger-ui";
import type { FastifyInstance, FastifySchema, RouteOptions } from "fastify";
import { escapeHtml } from "./html.js";

export const OPENAPI_PATH = "/openapi.json";
export const DOCS_PATH = "/docs";

/**
 * The docs page's Content-Security-Policy, for `/docs` and its assets only: scripts and styles
 * from this origin, the inline style attributes Swagger UI's components set, the logo as a data:
 * image, and fetches of the document from this origin. Every other page keeps `PAGE_CSP`.
 */
export const DOCS_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

/** Paths that exist for tests, development and operators, and the pages' static assets: never in the document. */
const INTERNAL = [/^\/__test\//, /^\/dev\//, /^\/metrics$/, /^\/openapi\.json$/, /^\/docs(\/|$)/, /^\/assets\//];

/** Documentation for a route declared without a schema of its own (e.g. one mounted by a plugin). */
export interface RouteDoc {
  summary: string;
  description?: string;
  tags: readonly string[];
}

export interface OpenApiOptions {
  title: string;
  description: string;
  version: string;
  /** The service's public base URL: the document's only server. */
  publicUrl: string;
  tags: readonly { name: string; description: string }[];
  /** Security schemes routes refer to in `schema.security`. */
  securitySchemes?: Record<string, Record<string, unknown>>;
  /** Summary and tags of routes whose own schema has none, keyed `"METHOD /path"` (Fastify's pattern). */
  routeDocs?: Readonly<Record<string, RouteDoc>>;
  /** The tag of every route left without one (pages for people). */
  defaultTag: string;
  /** More path patterns to leave out (static assets and the like). */
  hide?: readonly RegExp[];
}

/** The error envelope both services answer non-2xx with, for `response` schemas. */
export const ERROR_ENVELOPE = {
  description: "The error envelope: a code from the spec's tables and a message for people.",
  type: "object",
  required: ["error"],
  properties: {
    error: {
      type: "object",
      required: ["code", "message"],
      properties: {
        code: { type: "string" },
        message: { type: "string" },
        details: { type: "object", additionalProperties: true },
      },
    },
  },
} as const;

/** The 503 every route may answer while a dependency is away. */
const OUTAGE_RESPONSE = {
  ...ERROR_ENVELOPE,
  description:
    "A dependency (the database or Redis) is unavailable: error code `service_unavailable`, with `Retry-After` in seconds. Retry after that delay; nothing was changed.",
} as const;

/**
 * The docs page's logo: the service's name as an SVG image (Swagger UI shows the logo as a data:
 * image in its top bar), in place of the framework's own logo.
 */
export function docsLogo(title: string): Buffer {
  const name = escapeHtml(title);
  // Wide enough for the name at 18px in a system font; the top bar scales the image to 40px high.
  const width = Math.ceil(title.length * 10.5) + 16;
  return Buffer.from(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="40" viewBox="0 0 ${width} 40" role="img" aria-label="${name}"><title>${name}</title><text x="0" y="27" font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif" font-size="18" font-weight="700" fill="#ffffff">${name}</text></svg>`,
  );
}

/** Swagger UI's page has no viewport meta: without one a phone lays it out 980px wide and shrinks it. */
const VIEWPORT = '<meta name="viewport" content="width=device-width, initial-scale=1">';

function withViewport(payload: unknown): unknown {
  return typeof payload === "string" && payload.includes("<head>") && !payload.includes('name="viewport"')
    ? payload.replace("<head>", `<head>\n${VIEWPORT}`)
    : payload;
}

function methodsOf(route: RouteOptions): string[] {
  return Array.isArray(route.method) ? route.method : [route.method as string];
}

export async function registerOpenApi(app: FastifyInstance, options: OpenApiOptions): Promise<void> {
  const hidden = [...INTERNAL, ...(options.hide ?? [])];
  await app.register(fastifySwagger, {
    openapi: {
      openapi: "3.1.0",
      info: { title: options.title, description: options.description, version: options.version },
      servers: [{ url: options.publicUrl }],
      tags: options.tags.map((tag) => ({ ...tag })),
      components: { securitySchemes: (options.securitySchemes ?? {}) as never },
    },
    transform: ({ schema, url, route }) => {
      const own: FastifySchema = schema ?? {};
      if (own.hide || hidden.some((pattern) => pattern.test(url))) return { schema: { ...own, hide: true }, url };
      const doc = methodsOf(route)
        .map((method) => options.routeDocs?.[`${method} ${url}`])
        .find((entry) => entry !== undefined);
      const merged: FastifySchema = { ...doc, ...own };
      if (merged.tags === undefined || merged.tags.length === 0) merged.tags = [options.defaultTag];
      // Every route can meet an outage of the database or Redis (docs/operations.md).
      const responses = (merged.response ?? {}) as Record<string, unknown>;
      if (Object.keys(responses).length > 0 && responses["503"] === undefined) {
        merged.response = { ...responses, 503: OUTAGE_RESPONSE };
      }
      return { schema: merged, url };
    },
  });

  app.get(OPENAPI_PATH, { schema: { hide: true } }, async (_request, reply) =>
    reply
      .header("cache-control", "public, max-age=300")
      .header("access-control-allow-origin", "*")
      .type("application/json; charset=utf-8")
      .send(app.swagger()),
  );

  // The UI in a scope of its own, so its headers reach its page and assets and nothing else.
  await app.register(async (docs) => {
    docs.addHook("onSend", async (_request, reply, payload) => {
      const type = String(reply.getHeader("content-type") ?? "");
      reply
        .header("content-security-policy", DOCS_CSP)
        .header("x-content-type-options", "nosniff")
        .header("referrer-policy", "no-referrer")
        .header("x-frame-options", "DENY");
      return type.startsWith("text/html") ? withViewport(payload) : payload;
    });
    await docs.register(fastifySwaggerUi, {
      routePrefix: DOCS_PATH,
      uiConfig: { deepLinking: true, validatorUrl: null },
      theme: { title: `${options.title}: API` },
      logo: { type: "image/svg+xml", content: docsLogo(options.title), href: DOCS_PATH, target: "_self" },
    });
  });
}
