import { notFound } from "../platform/errors.js";
import { type FastAnswer, type FastRoute, fastError } from "../platform/fast-path.js";
import { rateLimitError } from "../platform/http.js";
import {
  addressRateLimitKey,
  type RateLimitDecision,
  type RateLimiter,
  type RateLimitRule,
} from "../platform/rate-limit.js";
import type { StoredBody } from "./body-cache.js";
import { conditionalRead, READ_CORS } from "./read-answers.js";
import type { DirectoryService } from "./service.js";

/** Spec: single-listing reads may be cached by clients for a minute and by shared caches for five. */
export const ITEM_CACHE = "public, max-age=60, s-maxage=300";

const JSON_TYPE = "application/json; charset=utf-8";

export const ITEM_PATTERN = "/v1/listings/:did";
const ITEM_PREFIX = "/v1/listings/";
// A path whose :did Fastify would pass on unchanged (nothing to percent-decode, no query, no
// further segment) and within the parameter's 2,048 characters. Anything else goes to Fastify.
const PLAIN_DID = /^did:[A-Za-z0-9._:-]{1,2044}$/;

/**
 * The answer of `GET /v1/listings/{did}` once the read limit let the request through. The
 * Fastify route and the fast route both answer with it, so they cannot drift apart.
 */
export function answerItem(
  service: DirectoryService,
  did: string,
  ifNoneMatch: string | string[] | undefined,
): FastAnswer | Promise<FastAnswer> {
  const body = service.get(did);
  return body instanceof Promise ? body.then((stored) => found(stored, ifNoneMatch)) : found(body, ifNoneMatch);
}

// The 200 of each listing the cache holds, made once: a read that hits allocates nothing for its
// answer (per-request objects here were promoted, or pretenured, and made every young-generation
// collection slow). Answers are never modified by whoever sends them.
const okAnswers = new WeakMap<StoredBody, FastAnswer>();

function found(body: StoredBody | undefined, ifNoneMatch: string | string[] | undefined): FastAnswer {
  if (body === undefined) return fastError(notFound("no listing for that DID"), READ_CORS);
  if (ifNoneMatch !== undefined) return conditionalRead(body, ITEM_CACHE, JSON_TYPE, ifNoneMatch);
  let answer = okAnswers.get(body);
  if (answer === undefined) {
    answer = conditionalRead(body, ITEM_CACHE, JSON_TYPE, undefined);
    okAnswers.set(body, answer);
  }
  return answer;
}

/** The same read ahead of Fastify's router, for the plain paths that are nearly all of them. */
export function itemReadFastRoute(service: DirectoryService, limiter: RateLimiter, rule: RateLimitRule): FastRoute {
  // The last client's key: a connection sends many reads, and building the key for each was a
  // string made and dropped on every one.
  let lastIp: string | undefined;
  let lastKey = "";
  return {
    pattern: ITEM_PATTERN,
    answer(request, clientIp) {
      if (request.method !== "GET" || request.url === undefined || !request.url.startsWith(ITEM_PREFIX))
        return undefined;
      const did = request.url.slice(ITEM_PREFIX.length);
      if (!PLAIN_DID.test(did)) return undefined;
      const ip = clientIp(request);
      if (ip !== lastIp) {
        lastIp = ip;
        lastKey = addressRateLimitKey(ip);
      }
      const key = lastKey;
      const ifNoneMatch = request.headers["if-none-match"];
      const decision = limiter.hitSync?.(rule, key);
      if (decision !== undefined) return afterLimit(service, decision, did, ifNoneMatch);
      return limiter.hit(rule, key).then((decision) => afterLimit(service, decision, did, ifNoneMatch));
    },
  };
}

function afterLimit(
  service: DirectoryService,
  decision: RateLimitDecision,
  did: string,
  ifNoneMatch: string | string[] | undefined,
) {
  return decision.allowed ? answerItem(service, did, ifNoneMatch) : fastError(rateLimitError(decision), READ_CORS);
}
