/**
 * How the directory's public reads answer browsers on other origins and caches: the CORS
 * headers of every read (errors included), the preflight, and conditional reads by entity tag.
 * The fast path and the Fastify routes build their answers here, so their headers cannot differ.
 */
import type { FastifyInstance, FastifyReply } from "fastify";
import { entityTag, noneMatch } from "../platform/conditional.js";
import type { FastAnswer } from "../platform/fast-path.js";

/** On every read answer. A reader's script may see the entity tag and a 429's Retry-After. */
export const READ_CORS = {
  "access-control-allow-origin": "*",
  "access-control-expose-headers": "ETag, Retry-After",
} as const;

/**
 * The preflight of a read. Writes are not offered: their answers carry no CORS headers, so a
 * script on another origin could not read them anyway. `If-None-Match` is what makes a reader's
 * conditional request need a preflight at all. Browsers cap the age (Chromium at two hours).
 */
export const READ_PREFLIGHT = {
  ...READ_CORS,
  "access-control-allow-methods": "GET, HEAD, OPTIONS",
  "access-control-allow-headers": "Accept, If-None-Match",
  "access-control-max-age": "86400",
} as const;

/** A body with what a conditional read needs of it, when it was computed once and kept. */
export interface TaggedBody {
  text: string;
  /** Its entity tag (`entityTag(text)`). */
  etag: string;
  /** Its length in UTF-8 bytes. */
  bytes: number;
}

/**
 * A 200 with the body and its entity tag, or a 304 (the tag, Cache-Control and CORS headers, no
 * body) when `If-None-Match` already names it. A `TaggedBody` saves hashing the bytes again.
 */
export function conditionalRead(
  body: string | TaggedBody,
  cacheControl: string,
  contentType: string,
  ifNoneMatch: string | string[] | undefined,
): FastAnswer {
  // Object literals with every header named, not spreads of READ_CORS: on the hottest read a
  // spread made each answer's object slow to build and to walk, and left garbage that outlived
  // young-generation collections (measured: a quarter of the read's CPU).
  const etag = typeof body === "string" ? entityTag(body) : body.etag;
  if (ifNoneMatch !== undefined && noneMatch(ifNoneMatch, etag)) {
    return {
      status: 304,
      headers: {
        "access-control-allow-origin": READ_CORS["access-control-allow-origin"],
        "access-control-expose-headers": READ_CORS["access-control-expose-headers"],
        "cache-control": cacheControl,
        etag,
      },
      body: "",
    };
  }
  const text = typeof body === "string" ? body : body.text;
  return {
    status: 200,
    headers: {
      "access-control-allow-origin": READ_CORS["access-control-allow-origin"],
      "access-control-expose-headers": READ_CORS["access-control-expose-headers"],
      "cache-control": cacheControl,
      "content-type": contentType,
      etag,
      "content-length": String(typeof body === "string" ? Buffer.byteLength(text) : body.bytes),
    },
    body: text,
  };
}

/** Sends an answer through Fastify with exactly its headers (a 304 without body or Content-Type). */
export function sendAnswer(reply: FastifyReply, answer: FastAnswer): FastifyReply {
  reply.code(answer.status).headers(answer.headers);
  return answer.status === 304 ? reply.send() : reply.send(answer.body);
}

/** `OPTIONS` on each read path: 204 with the preflight headers. */
export function registerReadPreflights(app: FastifyInstance, paths: readonly string[]): void {
  for (const path of paths) {
    app.options(path, { schema: { hide: true } }, async (_request, reply) =>
      reply.code(204).headers(READ_PREFLIGHT).send(),
    );
  }
}
