/**
 * What `GET /` answers a client that does not ask for HTML (curl, scripts, HTTP libraries): which
 * service this is, its version, and where its API is, as absolute URLs on its public URL. A
 * browser asks for HTML and keeps the service's page there; both answers vary on `Accept`.
 */
import { readFileSync } from "node:fs";
import type { FastifyReply, FastifyRequest } from "fastify";
import { acceptsHtml } from "./accepts-html.js";
import { DOCS_PATH, OPENAPI_PATH } from "./openapi.js";

/** The server package's version: package.json is two folders up from both src/platform and dist/platform. */
const VERSION = (
  JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }
).version;

export interface ApiIndex {
  name: string;
  version: string;
  description: string;
  /** The main endpoints by name, absolute; `{…}` marks a path parameter. */
  endpoints: Record<string, string>;
  openapi: string;
  docs: string;
}

export interface ApiIndexOptions {
  name: string;
  description: string;
  publicUrl: string;
  /** The main endpoints by name, as paths on the public URL. */
  paths: Record<string, string>;
}

export function apiIndex(options: ApiIndexOptions): ApiIndex {
  const at = (path: string) => `${options.publicUrl}${path}`;
  return {
    name: options.name,
    version: VERSION,
    description: options.description,
    endpoints: Object.fromEntries(Object.entries(options.paths).map(([name, path]) => [name, at(path)])),
    openapi: at(OPENAPI_PATH),
    docs: at(DOCS_PATH),
  };
}

/** `GET /`'s two answers, for the OpenAPI document. */
export function homeResponses(page: string) {
  return {
    200: {
      description:
        "To a client whose `Accept` names `text/html` and prefers it to JSON (a browser): " +
        `${page}. To any other client (no \`Accept\`, \`*/*\`, \`application/json\`): this JSON index of the API. ` +
        "The answer varies on `Accept`.",
      content: {
        "application/json": {
          schema: {
            type: "object",
            required: ["name", "version", "description", "endpoints", "openapi", "docs"],
            properties: {
              name: { type: "string" },
              version: { type: "string" },
              description: { type: "string" },
              endpoints: {
                type: "object",
                description: "The main endpoints by name, as absolute URLs; `{…}` marks a path parameter.",
                additionalProperties: { type: "string", format: "uri" },
              },
              openapi: { type: "string", format: "uri", description: "This document." },
              docs: { type: "string", format: "uri", description: "The API documentation for people." },
            },
          },
        },
        "text/html": { schema: { type: "string" } },
      },
    },
  } as const;
}

/**
 * For `GET /`: answers a client that does not ask for HTML with `index` (returning the reply),
 * or returns undefined for the route to send its page. Either way the answer varies on `Accept`,
 * so a cache keeps the page and the index apart.
 */
export function apiIndexResponder(index: ApiIndex) {
  // Indented and ending in a newline: people read it in a terminal.
  const body = `${JSON.stringify(index, null, 2)}\n`;
  return (request: FastifyRequest, reply: FastifyReply): FastifyReply | undefined => {
    reply.header("vary", "accept");
    if (acceptsHtml(request)) return undefined;
    return reply
      .code(200)
      .header("content-type", "application/json; charset=utf-8")
      .header("cache-control", "no-cache")
      .header("access-control-allow-origin", "*")
      .send(body);
  };
}
