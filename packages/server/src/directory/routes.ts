import { DISCOVERY_SCHEMA } from "@proto/protocol";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { ApiError, invalidRequest } from "../platform/errors.js";
import { addFastRoute, rateLimitHook } from "../platform/http.js";
import { FREE_TEXT, SINGLE_LINE } from "../platform/input-rules.js";
import { ERROR_ENVELOPE, type OpenApiOptions } from "../platform/openapi.js";
import type { RateLimiter } from "../platform/rate-limit.js";
import { constantTimeEqual } from "../platform/tokens.js";
import { answerItem, ITEM_PATTERN, itemReadFastRoute } from "./item-read.js";
import { LISTING_STATUSES, type ListingStatus } from "./listing.js";
import { conditionalRead, READ_CORS, registerReadPreflights, sendAnswer } from "./read-answers.js";
import type { DirectoryService, ListingPatch, Submission } from "./service.js";
import type { DirectorySettings } from "./settings.js";
import { renderSitemap } from "./sitemap.js";

export const DISCOVERY_SCHEMA_PATH = "/schemas/discovery-0.1.json";

export interface DirectoryRoutesOptions {
  service: DirectoryService;
  limiter: RateLimiter;
  settings: DirectorySettings;
  publicUrl: string;
  adminToken: string | undefined;
}

/** The directory's OpenAPI document: everything but the server URL. */
export const DIRECTORY_OPENAPI: Omit<OpenApiOptions, "publicUrl"> = {
  title: "proto listing directory",
  description:
    "Services prove control of their host and list themselves; anyone reads and mirrors the listings (spec `directory.md`). Errors use the envelope `{ error: { code, message } }`.",
  version: "0.1",
  tags: [
    { name: "listings", description: "Challenge, register, update, withdraw and read listings." },
    { name: "discovery", description: "The sitemap and the published discovery document schema." },
    { name: "pages", description: "Pages for people." },
    { name: "operations", description: "Health, readiness and the admin API." },
  ],
  securitySchemes: {
    sessionToken: { type: "http", scheme: "bearer", description: "The listing's session token (`sess_…`)." },
    adminToken: { type: "http", scheme: "bearer", description: "DIRECTORY_ADMIN_TOKEN." },
  },
  defaultTag: "pages",
};

const isoTime = { type: "string", format: "date-time" } as const;

const challengeIssued = {
  description: "Publish challenge_token at proof_url, then submit the listing.",
  type: "object",
  required: ["challenge_token", "proof_url", "expires_at"],
  properties: { challenge_token: { type: "string" }, proof_url: { type: "string" }, expires_at: isoTime },
} as const;

const sessionIssued = {
  type: "object",
  required: ["service_did", "session_token", "expires_at"],
  properties: { service_did: { type: "string" }, session_token: { type: "string" }, expires_at: isoTime },
} as const;

const listing = {
  description: "A listing.",
  type: "object",
  required: ["service_did", "discovery_url", "status", "updated_at"],
  properties: {
    service_did: { type: "string" },
    discovery_url: { type: "string" },
    discovery_doc: { type: "object", additionalProperties: true },
    fetched_at: isoTime,
    first_listed_at: isoTime,
    updated_at: isoTime,
    status: { type: "string", enum: LISTING_STATUSES },
    tags: { type: "array", items: { type: "string" } },
    // null when never set or cleared (decision D11), as the API sends it.
    title: { type: ["string", "null"] },
    description: { type: ["string", "null"] },
    _meta: { type: "object", additionalProperties: true },
  },
} as const;

const listingPage = {
  description: "One page of listings; next_cursor is null on the last page.",
  type: "object",
  required: ["listings", "next_cursor"],
  properties: { listings: { type: "array", items: listing }, next_cursor: { type: ["string", "null"] } },
} as const;

const LIST_CACHE = "public, max-age=30, s-maxage=120";

const tagsSchema = {
  type: "array",
  maxItems: 20,
  items: { type: "string", minLength: 1, maxLength: 40, pattern: SINGLE_LINE },
} as const;

const challengeBody = {
  type: "object",
  required: ["discovery_url"],
  properties: { discovery_url: { type: "string", minLength: 1, maxLength: 2048, pattern: SINGLE_LINE } },
} as const;

const submitBody = {
  type: "object",
  required: ["discovery_url", "challenge_token"],
  properties: {
    discovery_url: { type: "string", minLength: 1, maxLength: 2048, pattern: SINGLE_LINE },
    challenge_token: { type: "string", minLength: 1, maxLength: 256, pattern: SINGLE_LINE },
    title: { type: "string", maxLength: 120, pattern: SINGLE_LINE },
    description: { type: "string", maxLength: 500, pattern: FREE_TEXT },
    tags: tagsSchema,
  },
} as const;

const patchBody = {
  type: "object",
  additionalProperties: false,
  minProperties: 1,
  properties: {
    title: { type: ["string", "null"], maxLength: 120, pattern: SINGLE_LINE },
    description: { type: ["string", "null"], maxLength: 500, pattern: FREE_TEXT },
    tags: tagsSchema,
  },
} as const;

const listQuery = {
  type: "object",
  properties: {
    cursor: { type: "string", maxLength: 4096 },
    limit: { type: "integer", minimum: 1, maximum: 100, default: 50 },
    search: { type: "string", maxLength: 200 },
    tag: { type: "string", maxLength: 40 },
    updated_since: { type: "string", maxLength: 64 },
    status: { type: "string", enum: LISTING_STATUSES },
    include_deleted: { type: "boolean", default: false },
  },
} as const;

const didParams = {
  type: "object",
  required: ["did"],
  properties: { did: { type: "string", minLength: 1, maxLength: 2048 } },
} as const;

interface ListQuery {
  cursor?: string;
  limit: number;
  search?: string;
  tag?: string;
  updated_since?: string;
  status?: ListingStatus;
  include_deleted: boolean;
}

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

/** RFC 3339 date-time to milliseconds, rounding sub-millisecond fractions up (`>=` stays exact). */
export function parseRfc3339(value: string): number | undefined {
  const match = RFC3339.exec(value);
  if (match === null) return undefined;
  const [, y, mo, d, h, mi, s, fraction, zone] = match;
  // Date.parse takes 24:00:00 as the next midnight; RFC 3339 hours end at 23.
  if (Number(h) > 23) return undefined;
  const base = Date.parse(`${y}-${mo}-${d}T${h}:${mi}:${s}${zone === "z" || zone === "Z" ? "Z" : zone}`);
  if (Number.isNaN(base)) return undefined;
  const check = new Date(Date.UTC(Number(y), Number(mo) - 1, Number(d)));
  if (check.getUTCDate() !== Number(d)) return undefined;
  return base + (fraction === undefined ? 0 : Math.ceil(Number(fraction) * 1000));
}

function bearerToken(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  if (header === undefined) return undefined;
  const match = /^Bearer +([\x21-\x7e]{1,512})$/i.exec(header.trim());
  return match?.[1];
}

/** The directory API of spec `directory.md`, the sitemap, and the published discovery schema. */
export async function directoryRoutes(app: FastifyInstance, options: DirectoryRoutesOptions): Promise<void> {
  const { service, limiter, settings } = options;
  const limits = settings.rateLimits;

  app.post<{ Body: { discovery_url: string } }>(
    "/v1/listings/challenge",
    {
      schema: {
        summary: "Request a challenge",
        tags: ["listings"],
        body: challengeBody,
        response: { 200: challengeIssued, "4xx": ERROR_ENVELOPE },
      },
      onRequest: rateLimitHook(limiter, limits.challenge),
    },
    async (request) => service.issueChallenge(request.body.discovery_url),
  );

  app.post<{ Body: Submission }>(
    "/v1/listings",
    {
      schema: {
        summary: "Create or re-register a listing",
        description:
          "Consumes the challenge, fetches the proof and the discovery document. 201 for a new listing, 200 on the re-challenge path (earlier sessions revoked).",
        tags: ["listings"],
        body: submitBody,
        response: {
          200: { description: "Re-registered: a new session.", ...sessionIssued },
          201: { description: "Listed: the session token for later updates.", ...sessionIssued },
          "4xx": ERROR_ENVELOPE,
        },
      },
      onRequest: rateLimitHook(limiter, limits.create),
    },
    async (request, reply) => {
      const { created, session } = await service.submit(request.body);
      return reply.code(created ? 201 : 200).send(session);
    },
  );

  app.patch<{ Params: { did: string }; Body: ListingPatch }>(
    "/v1/listings/:did",
    {
      schema: {
        summary: "Update a listing's title, description or tags",
        tags: ["listings"],
        security: [{ sessionToken: [] }],
        params: didParams,
        body: patchBody,
        response: { 200: listing, "4xx": ERROR_ENVELOPE },
      },
      onRequest: rateLimitHook(limiter, limits.write),
      // Credentials are judged before the body, so a caller without them learns nothing more.
      preValidation: async (request: FastifyRequest<{ Params: { did: string } }>) => {
        await service.checkAccess(request.params.did, bearerToken(request));
      },
    },
    async (request) => service.update(request.params.did, bearerToken(request), request.body),
  );

  app.delete<{ Params: { did: string } }>(
    "/v1/listings/:did",
    {
      schema: {
        summary: "Withdraw a listing (soft delete)",
        tags: ["listings"],
        security: [{ sessionToken: [] }],
        params: didParams,
        response: { 204: { description: "Withdrawn; the record stays with status deleted." }, "4xx": ERROR_ENVELOPE },
      },
      onRequest: rateLimitHook(limiter, limits.write),
    },
    async (request, reply) => {
      await service.withdraw(request.params.did, bearerToken(request));
      return reply.code(204).send();
    },
  );

  const readLimit = rateLimitHook(limiter, limits.read);
  app.get<{ Querystring: ListQuery }>(
    "/v1/listings",
    {
      schema: {
        summary: "List listings",
        description: "Ordered by updated_at, then service_did; the cursor is bound to the query's filters.",
        tags: ["listings"],
        querystring: listQuery,
        response: { 200: listingPage, "4xx": ERROR_ENVELOPE },
      },
      onRequest: async (request, reply) => {
        reply.headers(READ_CORS);
        await readLimit(request);
      },
    },
    async (request, reply) => {
      const q = request.query;
      let updatedSince: number | undefined;
      if (q.updated_since !== undefined) {
        updatedSince = parseRfc3339(q.updated_since);
        if (updatedSince === undefined) throw invalidRequest("updated_since must be an RFC 3339 date-time");
      }
      const page = await service.list({
        cursor: q.cursor,
        limit: q.limit,
        search: q.search === "" ? undefined : q.search,
        tag: q.tag === "" ? undefined : q.tag,
        updatedSince,
        status: q.status,
        includeDeleted: q.include_deleted,
      });
      const body = `{"listings":[${page.bodies.join(",")}],"next_cursor":${JSON.stringify(page.nextCursor)}}`;
      return sendAnswer(
        reply,
        conditionalRead(body, LIST_CACHE, "application/json; charset=utf-8", request.headers["if-none-match"]),
      );
    },
  );

  app.get<{ Params: { did: string } }>(
    ITEM_PATTERN,
    {
      schema: {
        summary: "Read one listing",
        description: "A withdrawn listing still answers 200 with status deleted.",
        tags: ["listings"],
        params: didParams,
        response: { 200: listing, "4xx": ERROR_ENVELOPE },
      },
      onRequest: async (request, reply) => {
        reply.headers(READ_CORS);
        await readLimit(request);
      },
    },
    async (request, reply) =>
      sendAnswer(reply, await answerItem(service, request.params.did, request.headers["if-none-match"])),
  );
  addFastRoute(app, itemReadFastRoute(service, limiter, limits.read));

  app.get<{ Querystring: { page?: number } }>(
    "/sitemap.xml",
    {
      schema: {
        summary: "Sitemap of active listings",
        description: "Past 50,000 listings, a sitemap index of `/sitemap.xml?page=N`.",
        tags: ["discovery"],
        querystring: { type: "object", properties: { page: { type: "integer", minimum: 1, maximum: 100000 } } },
        response: {
          200: {
            description: "A sitemap or sitemap index.",
            content: { "application/xml": { schema: { type: "string" } } },
          },
          "4xx": ERROR_ENVELOPE,
        },
      },
      onRequest: rateLimitHook(limiter, limits.sitemap),
    },
    async (request, reply) => {
      const xml = await renderSitemap(service, options.publicUrl, request.query.page);
      if (xml === undefined) throw new ApiError(404, "not_found", "no such sitemap page");
      return reply.header("cache-control", "public, max-age=3600").type("application/xml; charset=utf-8").send(xml);
    },
  );

  const schemaDoc = {
    summary: "The discovery document's JSON Schema",
    tags: ["discovery"],
    response: {
      200: {
        description: "JSON Schema.",
        content: { "application/schema+json": { schema: { type: "object", additionalProperties: true } } },
      },
    },
  };
  const schemaBody = JSON.stringify(DISCOVERY_SCHEMA);
  app.get(DISCOVERY_SCHEMA_PATH, { schema: schemaDoc }, async (request, reply) =>
    sendAnswer(
      reply,
      conditionalRead(schemaBody, "public, max-age=86400", "application/schema+json", request.headers["if-none-match"]),
    ),
  );
  registerReadPreflights(app, ["/v1/listings", ITEM_PATTERN, DISCOVERY_SCHEMA_PATH]);

  const revalidateDoc = {
    summary: "Run one revalidation pass now",
    description: "Needs DIRECTORY_ADMIN_TOKEN; 404 when it is not configured. Answers with the pass's counts.",
    tags: ["operations"],
    security: [{ adminToken: [] }],
    response: {
      200: {
        description: "What the pass did.",
        type: "object",
        properties: {
          checked: { type: "integer" },
          succeeded: { type: "integer" },
          failed: { type: "integer" },
          became_stale: { type: "integer" },
          deleted: { type: "integer" },
        },
      },
      "4xx": ERROR_ENVELOPE,
    },
  };
  app.post("/admin/revalidate", { schema: revalidateDoc }, async (request) => {
    const token = bearerToken(request);
    if (options.adminToken === undefined) throw new ApiError(404, "not_found", "the admin API is not configured");
    if (token === undefined || !constantTimeEqual(token, options.adminToken)) {
      throw new ApiError(401, "unauthorized", "a valid admin token is required");
    }
    return service.revalidateDue();
  });
}
