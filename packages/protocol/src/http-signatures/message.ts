/** The parts of an HTTP request a signature covers, read from a Fetch `Request` or a raw object. */
import type { MessageComponents } from "./components.js";
import { normaliseFieldValue, normaliseFieldValues } from "./components.js";
import { canonicalTargetUri, fetchTargetUri, receivedTargetUri } from "./target-uri.js";

export type HeaderSource = Headers | Record<string, string | string[] | undefined>;

/** A request as frameworks without Fetch objects have it (Fastify, node:http, Express). */
export interface RawRequest {
  method: string;
  /**
   * The absolute URL the request was addressed to. With `target`, only its origin counts. Without,
   * a verifier takes its path and query as given, and a signer as `fetch` would send them.
   */
  url: string;
  /**
   * The request-target exactly as on the request line (`req.url` in node:http and Fastify). With
   * it, `@target-uri` is the origin of `url` followed by these bytes, untouched by any URL parser.
   */
  target?: string;
  headers: HeaderSource;
  /** The exact body bytes received; absent, null or empty when there is none. */
  body?: Uint8Array | string | null | undefined;
}

export interface SignedMessage extends MessageComponents {
  body: Uint8Array | undefined;
}

const encoder = new TextEncoder();

export function bodyBytes(body: Uint8Array | string | null | undefined): Uint8Array | undefined {
  if (body === null || body === undefined) return undefined;
  const bytes = typeof body === "string" ? encoder.encode(body) : body;
  return bytes.length === 0 ? undefined : bytes;
}

/** A header getter over either shape; field lines are combined and normalised as RFC 9421 §2.1 says. */
export function headerReader(headers: HeaderSource): (name: string) => string | undefined {
  if (headers instanceof Headers) {
    // Headers already trims each line and joins repeated lines with ", ".
    return (name) => headers.get(name) ?? undefined;
  }
  return (name) => {
    let value = headers[name];
    if (value === undefined) {
      // Node lowercases incoming names; a hand-built object may not have.
      for (const key of Object.keys(headers)) {
        if (key.toLowerCase() === name) {
          value = headers[key];
          break;
        }
      }
    }
    if (value === undefined) return undefined;
    return typeof value === "string" ? normaliseFieldValue(value) : normaliseFieldValues(value);
  };
}

/** The `@target-uri` a verifier checks: what the server received, never a re-serialised URL. */
export function verifierTargetUri(request: Pick<RawRequest, "url" | "target">): string {
  return request.target === undefined
    ? canonicalTargetUri(request.url)
    : receivedTargetUri(new URL(request.url).origin, request.target);
}

/** The `@target-uri` a signer signs: the bytes that will go out. */
export function signerTargetUri(request: Pick<RawRequest, "url" | "target">): string {
  return request.target === undefined
    ? fetchTargetUri(request.url)
    : receivedTargetUri(new URL(request.url).origin, request.target);
}

export function fromRaw(request: RawRequest): SignedMessage {
  return {
    method: request.method,
    targetUri: verifierTargetUri(request),
    header: headerReader(request.headers),
    body: bodyBytes(request.body),
  };
}
