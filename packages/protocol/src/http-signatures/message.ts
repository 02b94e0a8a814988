/** The parts of an HTTP request a signature covers, read from a Fetch `Request` or a raw object. */

export type HeaderSource = Headers | Record<string, string | string[] | undefined>;

/** A request as frameworks without Fetch objects have it (Fastify, node:http, Express). */
export interface RawRequest {
  method: string;
  /** The absolute URL the request was addressed to, as the client signed it. */
  url: string;
  headers: HeaderSource;
  /** The exact body bytes received; absent, null or empty when there is none. */
  body?: Uint8Array | string | null | undefined;
}

export interface SignedMessage {
  method: string;
  targetUri: string;
  header(name: string): string | undefined;
  body: Uint8Array | undefined;
}

const encoder = new TextEncoder();

export function bodyBytes(body: Uint8Array | string | null | undefined): Uint8Array | undefined {
  if (body === null || body === undefined) return undefined;
  const bytes = typeof body === "string" ? encoder.encode(body) : body;
  return bytes.length === 0 ? undefined : bytes;
}

/** A header getter over either shape; list values are combined as RFC 9110 §5.3 says. */
export function headerReader(headers: HeaderSource): (name: string) => string | undefined {
  if (headers instanceof Headers) {
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
    return Array.isArray(value) ? value.join(", ") : value;
  };
}

/** `@target-uri` is compared in its normalised form so both sides spell one URL the same way. */
export function normaliseTargetUri(url: string): string {
  const parsed = new URL(url);
  // A fragment never travels with a request, so it is never part of what is signed.
  parsed.hash = "";
  return parsed.href;
}

export function fromRaw(request: RawRequest): SignedMessage {
  return {
    method: request.method,
    targetUri: normaliseTargetUri(request.url),
    header: headerReader(request.headers),
    body: bodyBytes(request.body),
  };
}
