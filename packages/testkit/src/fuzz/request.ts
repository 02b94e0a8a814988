/**
 * A fuzzed request: a well-formed request for one route (its example, or fields from the
 * vocabulary), then broken by one or two mutations (see mutations.ts), then written out as bytes.
 */
import type { FuzzRoute } from "./routes.js";
import { percentEncode } from "./values.js";

/**
 * How a route answers: `api` errors are the JSON envelope, `oauth` errors the OAuth error JSON
 * (`/oidc/*`, as the spec says), `page` answers are HTML, `dual` errors are the envelope or HTML
 * (a route that takes JSON from agents and forms from people), `asset` anything but a 5xx.
 */
/**
 * How a route answers errors: `api` the envelope, `oauth` RFC 6749's JSON, `page` HTML, `dual`
 * either, `asset` anything; `jsonrpc` (an MCP endpoint) the envelope when refused before the
 * protocol (the bearer check), else a JSON-RPC 2.0 error response.
 */
export type RouteKind = "api" | "oauth" | "page" | "dual" | "asset" | "jsonrpc";

/** Classifies by path, first match wins; a route no pattern matches is a page. */
export function kindByPath(patterns: [RegExp, RouteKind][]): (route: { url: string }) => RouteKind {
  return (route) => patterns.find(([pattern]) => pattern.test(route.url))?.[1] ?? "page";
}

export interface RouteExample {
  query?: Record<string, string>;
  body?: Record<string, unknown>;
  /** How the body is sent (default: JSON on API routes, a form on pages). */
  encoding?: "json" | "form";
  headers?: Record<string, string>;
}

/** What a target tells the fuzzer about itself, so requests get past the first checks. */
export interface FuzzVocabulary {
  /** Plausible path parameter values by name (`did`, `id`): existing records reach deeper code. */
  params: Record<string, string[]>;
  /** Field names and plausible values, used in query strings, JSON bodies and forms. */
  fields: Record<string, string[]>;
  /** A well-formed request per route key (`POST /v1/link/start`), the base that is then broken. */
  examples: Record<string, RouteExample>;
  /** A signed-in session's cookies (`name=value`), sent with some requests. */
  cookies: string[];
}

/** The request being built; mutations change it in place. */
export interface Draft {
  route: FuzzRoute;
  kind: RouteKind;
  method: string;
  path: string;
  /** The raw query string (after `?`), already encoded (or broken). */
  query: string | undefined;
  /** Host header values sent ([] sends none). */
  host: string[];
  headers: [string, string][];
  cookies: string[];
  /** undefined: the body's own type; null: no Content-Type header. */
  contentType: string | null | undefined;
  /** undefined: the body's length; otherwise the Content-Length headers to send for a body of that length. */
  contentLength: ((length: number) => string[]) | undefined;
  /** Send the body chunked; "broken" sends a chunk size that is not hexadecimal. */
  chunked: "valid" | "broken" | undefined;
  encoding: "json" | "form";
  fields: Record<string, unknown> | undefined;
  /** Bytes that replace the encoded fields. */
  raw: Buffer | undefined;
  sign: boolean;
  kinds: string[];
  /** Broken below HTTP routing (framing, Host, header sizes): no route can own the answer. */
  transport: boolean;
  /** The path may no longer match the route (so a 404 envelope is a fair answer). */
  offRoute: boolean;
}

export interface FuzzRequest {
  route: FuzzRoute;
  kind: RouteKind;
  kinds: string[];
  transport: boolean;
  offRoute: boolean;
  method: string;
  /** The request target as sent: path and query. */
  target: string;
  headers: [string, string][];
  body: Buffer | undefined;
  chunked: "valid" | "broken" | undefined;
  /** Sign it (the target's signer adds headers over the final bytes). */
  sign: boolean;
  /** With several mutations: the same request with each one alone. */
  alone?: () => FuzzRequest[];
}

/** Node's default limit on the request line and headers together (beyond it: 431). */
export const HEADER_LIMIT = 16 * 1024;

export const BODY_METHODS = new Set(["POST", "PUT", "PATCH", "DELETE"]);

/** `/v1/listings/:did` with the first plausible value of each parameter (or `x`). */
export function fillPath(url: string, params: Record<string, string[]>): string {
  return url
    .split("/")
    .map((segment) => {
      if (segment === "*") return "x";
      if (!segment.startsWith(":")) return segment;
      const value = params[segment.slice(1)]?.[0] ?? "x";
      return percentEncode(value);
    })
    .join("/");
}

export function encodeQuery(query: Record<string, string>): string {
  return Object.entries(query)
    .map(([name, value]) => `${percentEncode(name)}=${percentEncode(value)}`)
    .join("&");
}

/** The well-formed request for `route`: its example, or nothing but the route's own path. */
export function baseDraft(route: FuzzRoute, kind: RouteKind, vocabulary: FuzzVocabulary, host: string): Draft {
  const example = vocabulary.examples[`${route.method} ${route.url}`] ?? vocabulary.examples[`GET ${route.url}`] ?? {};
  const hasBody = BODY_METHODS.has(route.method) && route.method !== "DELETE";
  return {
    route,
    kind,
    method: route.method,
    path: fillPath(route.url, vocabulary.params),
    query: example.query === undefined ? undefined : encodeQuery(example.query),
    host: [host],
    headers: [["accept", kind === "page" ? "text/html" : "application/json"], ...Object.entries(example.headers ?? {})],
    cookies: [],
    contentType: undefined,
    contentLength: undefined,
    chunked: undefined,
    encoding: example.encoding ?? (kind === "page" ? "form" : "json"),
    fields: hasBody ? { ...(example.body ?? {}) } : undefined,
    raw: undefined,
    sign: false,
    kinds: [],
    transport: false,
    offRoute: false,
  };
}

function encodeForm(fields: Record<string, unknown>): string {
  return Object.entries(fields)
    .map(
      ([name, value]) =>
        `${percentEncode(name)}=${percentEncode(typeof value === "string" ? value : JSON.stringify(value))}`,
    )
    .join("&");
}

export function bodyOf(draft: Draft): Buffer | undefined {
  if (draft.raw !== undefined) return draft.raw;
  if (draft.fields === undefined) return undefined;
  return Buffer.from(draft.encoding === "json" ? JSON.stringify(draft.fields) : encodeForm(draft.fields), "utf8");
}

export function finish(draft: Draft): FuzzRequest {
  const body = bodyOf(draft);
  const headers: [string, string][] = [...draft.host.map((value): [string, string] => ["host", value])];
  headers.push(["connection", "close"], ["user-agent", "proto-fuzz"], ...draft.headers);
  if (draft.cookies.length > 0) headers.push(["cookie", draft.cookies.join("; ")]);
  if (body !== undefined) {
    const type =
      draft.contentType === undefined
        ? draft.encoding === "json"
          ? "application/json"
          : "application/x-www-form-urlencoded"
        : draft.contentType;
    if (type !== null) headers.push(["content-type", type]);
  }
  const framed = [...headers, ...framing(draft, body)];
  const target = draft.query === undefined ? draft.path : `${draft.path}?${draft.query}`;
  // Past Node's header limit the request is refused before routing, whatever else it carries.
  const headBytes = Buffer.byteLength(`${target}${framed.map(([n, v]) => `${n}: ${v}\r\n`).join("")}`);
  return {
    route: draft.route,
    kind: draft.kind,
    kinds: draft.kinds.length === 0 ? ["plain"] : draft.kinds,
    transport: draft.transport || headBytes > HEADER_LIMIT - 256,
    offRoute: draft.offRoute,
    method: draft.method,
    target,
    headers: framed,
    body,
    chunked: draft.chunked,
    sign: draft.sign,
  };
}

/** Content-Length / Transfer-Encoding as the draft asks; the chunked body itself is made in `toBytes`. */
function framing(draft: Draft, body: Buffer | undefined): [string, string][] {
  const length = body?.length ?? 0;
  const lengths = draft.contentLength?.(length) ?? (body === undefined || draft.chunked ? [] : [String(length)]);
  const headers = lengths.map((value): [string, string] => ["content-length", value]);
  if (draft.chunked !== undefined) headers.push(["transfer-encoding", "chunked"]);
  return headers;
}

function chunk(body: Buffer, broken: boolean): Buffer {
  const size = broken ? "zz" : body.length.toString(16);
  return Buffer.concat([Buffer.from(`${size}\r\n`), body, Buffer.from(body.length > 0 ? "\r\n0\r\n\r\n" : "\r\n")]);
}

/** The bytes on the wire. `extra` are headers added after building (a signature). */
export function toBytes(request: FuzzRequest, extra: [string, string][] = []): Buffer {
  const lines = [
    `${request.method} ${request.target} HTTP/1.1`,
    ...[...request.headers, ...extra].map(([n, v]) => `${n}: ${v}`),
  ];
  const head = Buffer.from(`${lines.join("\r\n")}\r\n\r\n`, "utf8");
  const body = request.body ?? Buffer.alloc(0);
  if (request.chunked !== undefined) return Buffer.concat([head, chunk(body, request.chunked === "broken")]);
  return Buffer.concat([head, body]);
}

/** The request as text, for a failure report: escaped, long parts elided, lengths given. */
export function describeRequest(request: FuzzRequest, limit = 600): string {
  const quote = (text: string) => {
    const json = JSON.stringify(text);
    return json.length > limit ? `${json.slice(0, limit)}…" (${text.length} chars)` : json;
  };
  const lines = [`${request.method} ${quote(request.target)}`];
  for (const [name, value] of request.headers) lines.push(`  ${name}: ${quote(value)}`);
  if (request.body !== undefined)
    lines.push(`  body (${request.body.length} bytes): ${quote(request.body.toString("latin1"))}`);
  if (request.sign) lines.push("  (signed by the target's signer before sending)");
  return lines.join("\n");
}
