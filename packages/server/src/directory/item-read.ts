import { notFound } from "../platform/errors.js";
import { type FastAnswer, type FastRoute, fastError } from "../platform/fast-path.js";
import { rateLimitError } from "../platform/http.js";
import { type RateLimitDecision, type RateLimiter, type RateLimitRule, rateLimitKey } from "../platform/rate-limit.js";
import type { DirectoryService } from "./service.js";

/** Spec: single-listing reads may be cached by clients for a minute and by shared caches for five. */
export const ITEM_CACHE = "public, max-age=60, s-maxage=300";

const FOUND_HEADERS = {
  "access-control-allow-origin": "*",
  "cache-control": ITEM_CACHE,
  "content-type": "application/json; charset=utf-8",
} as const;
const ERROR_HEADERS = { "access-control-allow-origin": "*" } as const;

export const ITEM_PATTERN = "/v1/listings/:did";
const ITEM_PREFIX = "/v1/listings/";
// A path whose :did Fastify would pass on unchanged (nothing to percent-decode, no query, no
// further segment) and within the parameter's 2,048 characters. Anything else goes to Fastify.
const PLAIN_DID = /^did:[A-Za-z0-9._:-]{1,2044}$/;

/**
 * The answer of `GET /v1/listings/{did}` once the read limit let the request through. The
 * Fastify route and the fast route both answer with it, so they cannot drift apart.
 */
export function answerItem(service: DirectoryService, did: string): FastAnswer | Promise<FastAnswer> {
  const body = service.get(did);
  return body instanceof Promise ? body.then(found) : found(body);
}

function found(body: string | undefined): FastAnswer {
  if (body === undefined) return fastError(notFound("no listing for that DID"), ERROR_HEADERS);
  return { status: 200, headers: FOUND_HEADERS, body };
}

/** The same read ahead of Fastify's router, for the plain paths that are nearly all of them. */
export function itemReadFastRoute(service: DirectoryService, limiter: RateLimiter, rule: RateLimitRule): FastRoute {
  return {
    pattern: ITEM_PATTERN,
    answer(request, clientIp) {
      if (request.method !== "GET" || request.url === undefined || !request.url.startsWith(ITEM_PREFIX))
        return undefined;
      const did = request.url.slice(ITEM_PREFIX.length);
      if (!PLAIN_DID.test(did)) return undefined;
      const key = rateLimitKey("ip", clientIp(request));
      if (limiter.hitSync !== undefined) return afterLimit(service, limiter.hitSync(rule, key), did);
      return limiter.hit(rule, key).then((decision) => afterLimit(service, decision, did));
    },
  };
}

function afterLimit(service: DirectoryService, decision: RateLimitDecision, did: string) {
  return decision.allowed ? answerItem(service, did) : fastError(rateLimitError(decision), ERROR_HEADERS);
}
