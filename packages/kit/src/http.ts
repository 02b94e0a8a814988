import { appendChallenge, ProtoError, protoError } from "@proto/protocol";
import { kitError } from "./errors.js";

/** A request as the kit's core sees it, whatever the framework: the public URL and the exact body bytes. */
export interface KitRequest {
  method: string;
  /** The URL the client used on the public origin, parsed (for routing and pages). */
  url: URL;
  /**
   * The request-target exactly as received: what an agent signed, byte for byte, after the origin.
   * Parsing it into `url` may rewrite it (`'` in a query, `%2e%2e` segments), so signatures never use `url`.
   */
  target: string;
  headers: Headers;
  body: Uint8Array | undefined;
  /**
   * The client's address as the framework reports it (after its trusted proxies), when known:
   * what new Web Bot Auth key directories are charged to.
   */
  clientAddress?: string | undefined;
}

/** A response of the kit's core; adapters turn it into a Fetch `Response` or a framework reply. */
export interface KitResponse {
  status: number;
  headers: Record<string, string | string[]>;
  body: string | undefined;
}

export const DEFAULT_MAX_BODY_BYTES = 64 * 1024;

export function jsonResponse(
  status: number,
  value: unknown,
  headers: Record<string, string | string[]> = {},
): KitResponse {
  return {
    status,
    headers: { "content-type": "application/json; charset=utf-8", "cache-control": "no-store", ...headers },
    body: JSON.stringify(value),
  };
}

export function errorResponse(error: ProtoError): KitResponse {
  return jsonResponse(error.status, error.toEnvelope(), error.headers());
}

export function redirectResponse(location: string, cookies: string[] = []): KitResponse {
  return {
    status: 303,
    headers: { location, "cache-control": "no-store", ...(cookies.length > 0 ? { "set-cookie": cookies } : {}) },
    body: undefined,
  };
}

/**
 * `WWW-Authenticate` values once the kit's challenges are added (upstream §5.7): the application's
 * own challenges (a bearer scheme, say) stay, in order; the kit's follow.
 */
export function mergeChallenges(
  existing: string | readonly string[] | undefined,
  added: string | readonly string[],
): string[] {
  let challenges: string[] = existing === undefined ? [] : typeof existing === "string" ? [existing] : [...existing];
  for (const challenge of typeof added === "string" ? [added] : added) {
    challenges = appendChallenge(challenges, challenge);
  }
  return challenges;
}

/** Headers from a plain object (node:http, Fastify) or a `Headers`. */
export function toHeaders(source: Headers | Record<string, string | string[] | undefined>): Headers {
  if (source instanceof Headers) return source;
  const headers = new Headers();
  for (const [name, value] of Object.entries(source)) {
    if (value === undefined) continue;
    headers.set(name, Array.isArray(value) ? value.join(", ") : value);
  }
  return headers;
}

export function parseCookies(header: string | null | undefined): Map<string, string> {
  const cookies = new Map<string, string>();
  if (!header) return cookies;
  for (const part of header.split(";")) {
    const index = part.indexOf("=");
    if (index <= 0) continue;
    const name = part.slice(0, index).trim();
    const value = part.slice(index + 1).trim();
    if (!cookies.has(name)) cookies.set(name, value);
  }
  return cookies;
}

export interface CookieOptions {
  maxAgeSeconds: number;
  path: string;
  secure: boolean;
}

export function serializeCookie(name: string, value: string, options: CookieOptions): string {
  return [
    `${name}=${value}`,
    `Path=${options.path}`,
    `Max-Age=${Math.max(0, Math.floor(options.maxAgeSeconds))}`,
    "HttpOnly",
    "SameSite=Lax",
    ...(options.secure ? ["Secure"] : []),
  ].join("; ");
}

/** The URL on the public origin for a request path (`/a?b`), never letting the path change the host. */
export function publicUrlFor(origin: string, pathAndQuery: string): URL {
  const path = pathAndQuery.startsWith("/") ? pathAndQuery : `/${pathAndQuery}`;
  return new URL(`${origin}${path}`);
}

/** Reads a Fetch body with a cap; a larger body is 413 `payload_too_large`. */
export async function readFetchBody(request: Request, maxBytes: number): Promise<Uint8Array | undefined> {
  const declared = Number(request.headers.get("content-length") ?? "0");
  if (Number.isFinite(declared) && declared > maxBytes) throw kitError("payload_too_large");
  if (request.body === null) return undefined;
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    for await (const chunk of request.body as unknown as AsyncIterable<Uint8Array>) {
      total += chunk.byteLength;
      if (total > maxBytes) throw kitError("payload_too_large");
      chunks.push(chunk);
    }
  } catch (error) {
    if (error instanceof ProtoError) throw error;
    // The client went away or broke the framing mid-body: its mistake, not the service's.
    throw protoError("malformed_request", { message: "the request body could not be read" });
  }
  return total === 0 ? undefined : Buffer.concat(chunks);
}

export async function fromFetchRequest(request: Request, origin: string, maxBytes: number): Promise<KitRequest> {
  const url = new URL(request.url);
  // A Fetch runtime hands over the URL already serialised; the raw request line is gone.
  const target = `${url.pathname}${url.search}`;
  return {
    method: request.method.toUpperCase(),
    url: publicUrlFor(origin, target),
    target,
    headers: request.headers,
    body: await readFetchBody(request, maxBytes),
  };
}

export function toFetchResponse(response: KitResponse): Response {
  const headers = new Headers();
  for (const [name, value] of Object.entries(response.headers)) {
    if (Array.isArray(value)) for (const item of value) headers.append(name, item);
    else headers.set(name, value);
  }
  return new Response(response.body ?? null, { status: response.status, headers });
}
