/**
 * The one place the SDK touches the network: an injectable `fetch`, a timeout over the whole
 * exchange (body included), a cap on response sizes, no redirects, and failures turned into
 * one-line `NetworkError`s instead of `TypeError: fetch failed` with a cause chain.
 */
import { isLoopbackHttpUrl, parseErrorEnvelope } from "@proto/protocol";
import { NetworkError, type ServerError, type ServerErrorInit, UsageError } from "./errors.js";
import { isTlsCode, tlsReason } from "./tls-errors.js";

/** A WHATWG `fetch`: the global one, or one that trusts a test CA (`testFetch` of the test kit). */
export type FetchFunction = typeof globalThis.fetch;

export interface HttpOptions {
  /** Defaults to the global `fetch`. */
  fetch?: FetchFunction;
  /** Time allowed for one request, from sending to the last byte of the response. Default 10 s. */
  timeoutMs?: number;
  /** Largest response body accepted. Default 1 MiB. */
  maxResponseBytes?: number;
}

export const DEFAULT_TIMEOUT_MS = 10_000;
export const DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024;
/** The cap for discovery documents: the directory applies the same (decisions §4). */
export const DISCOVERY_MAX_BYTES = 64 * 1024;

export interface HttpRequest {
  method: string;
  headers?: Record<string, string> | Headers;
  body?: Uint8Array | string | undefined;
  /** Aborts the request (on top of the timeout). */
  signal?: AbortSignal | undefined;
  /** Overrides the client's cap for this request. */
  maxResponseBytes?: number;
}

export interface HttpResponse {
  status: number;
  statusText: string;
  headers: Headers;
  /** The whole body, at most `maxResponseBytes` long. */
  body: Uint8Array;
  url: string;
}

export class HttpClient {
  readonly fetch: FetchFunction;
  readonly timeoutMs: number;
  readonly maxResponseBytes: number;

  constructor(options: HttpOptions = {}) {
    this.fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.maxResponseBytes = options.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
  }

  /** Sends one request and reads the whole (capped) response. Redirects are returned, never followed. */
  async request(url: string, request: HttpRequest): Promise<HttpResponse> {
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, this.timeoutMs);
    const outer = request.signal;
    const forward = () => controller.abort(outer?.reason);
    if (outer?.aborted) forward();
    else outer?.addEventListener("abort", forward, { once: true });
    try {
      const response = await this.fetch(url, {
        method: request.method,
        ...(request.headers === undefined ? {} : { headers: request.headers }),
        ...(request.body === undefined ? {} : { body: request.body }),
        redirect: "manual",
        signal: controller.signal,
      });
      const body = await readCapped(response, request.maxResponseBytes ?? this.maxResponseBytes, url);
      return {
        status: response.status,
        statusText: response.statusText,
        headers: new Headers(response.headers),
        body,
        url,
      };
    } catch (error) {
      if (error instanceof NetworkError) throw error;
      if (timedOut) {
        throw new NetworkError("timeout", `no answer from ${origin(url)} within ${formatMs(this.timeoutMs)}`, url);
      }
      if (outer?.aborted) throw outer.reason ?? error;
      throw networkError(error, url);
    } finally {
      clearTimeout(timer);
      outer?.removeEventListener("abort", forward);
    }
  }
}

async function readCapped(response: Response, maxBytes: number, url: string): Promise<Uint8Array> {
  const tooLarge = () =>
    new NetworkError("response_too_large", `the response from ${origin(url)} is larger than ${maxBytes} bytes`, url);
  const declared = Number(response.headers.get("content-length") ?? Number.NaN);
  if (Number.isFinite(declared) && declared > maxBytes) {
    await response.body?.cancel().catch(() => {});
    throw tooLarge();
  }
  if (response.body === null) return new Uint8Array();
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel().catch(() => {});
      throw tooLarge();
    }
    chunks.push(value);
  }
  return concat(chunks, size);
}

function concat(chunks: Uint8Array[], size: number): Uint8Array {
  if (chunks.length === 1 && chunks[0] !== undefined) return chunks[0];
  const out = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return out;
}

function formatMs(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000} s` : `${ms} ms`;
}

/** `https://host:port` of a URL, for messages (never the path or query, which may carry tokens). */
export function origin(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return url;
  }
}

/** The first `code` in an error's cause chain (undici nests it; happy eyeballs aggregates it). */
function errorCode(error: unknown, depth = 0): string | undefined {
  if (depth > 5 || typeof error !== "object" || error === null) return undefined;
  const code = (error as { code?: unknown }).code;
  if (typeof code === "string" && code !== "UND_ERR" && !code.startsWith("ABORT")) return code;
  if (error instanceof AggregateError) {
    for (const inner of error.errors) {
      const found = errorCode(inner, depth + 1);
      if (found !== undefined) return found;
    }
  }
  return errorCode((error as { cause?: unknown }).cause, depth + 1);
}

function innermostMessage(error: unknown): string {
  let current: unknown = error;
  for (let depth = 0; depth < 5; depth++) {
    const cause = (current as { cause?: unknown } | null)?.cause;
    if (cause === undefined || cause === null) break;
    current = cause;
  }
  const message = current instanceof Error ? current.message : String(current);
  return message.split("\n")[0] ?? message;
}

/** A fetch failure as a one-line error naming the host, never the addresses it resolved to. */
export function networkError(error: unknown, url: string): NetworkError {
  const host = origin(url);
  const code = errorCode(error);
  if (code !== undefined && isTlsCode(code)) {
    return new NetworkError("tls_error", `cannot reach ${host}: ${tlsReason(code)}`, url, { cause: error });
  }
  const reasons: Record<string, string> = {
    ECONNREFUSED: "connection refused",
    ENOTFOUND: "host not found",
    EAI_AGAIN: "host name lookup failed",
    ECONNRESET: "connection reset",
    EHOSTUNREACH: "host unreachable",
    ENETUNREACH: "network unreachable",
    ETIMEDOUT: "connection timed out",
    UND_ERR_CONNECT_TIMEOUT: "connection timed out",
    UND_ERR_SOCKET: "connection closed by the server",
    EPROTO: "TLS handshake failed",
  };
  const reason = (code !== undefined ? reasons[code] : undefined) ?? innermostMessage(error);
  return new NetworkError("unreachable", `cannot reach ${host}: ${reason}`, url, { cause: error });
}

/**
 * Checks and normalises the base URL of the attestor or the directory: `https://` (or `http://` on a
 * loopback host, for a server on this machine), no credentials, query or fragment, no trailing `/`.
 */
export function normaliseBaseUrl(value: string, what: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UsageError("invalid_url", `${what} URL ${JSON.stringify(value)} is not an absolute URL`);
  }
  // The one rule for plain http on this machine, shared with the kit's attestor URLs.
  if (url.protocol !== "https:" && !isLoopbackHttpUrl(url)) {
    throw new UsageError(
      "insecure_url",
      `${what} URL must be https:// (http:// only for localhost), got ${url.origin}`,
    );
  }
  if (url.username !== "" || url.password !== "" || url.search !== "" || url.hash !== "") {
    throw new UsageError("invalid_url", `${what} URL must not carry credentials, a query or a fragment`);
  }
  return url.href.replace(/\/+$/, "");
}

/** Parses a response body as JSON, or throws `invalid_response` through `makeError`. */
export function parseJson(response: HttpResponse, makeError: (init: ServerErrorInit) => ServerError): unknown {
  try {
    return JSON.parse(new TextDecoder().decode(response.body));
  } catch {
    throw makeError({
      status: response.status,
      code: "invalid_response",
      message: `${origin(response.url)} answered HTTP ${response.status} with a body that is not JSON`,
      url: stripQuery(response.url),
    });
  }
}

/** The server's error envelope as an error, or `http_<status>` when the body is not an envelope. */
export function errorFromResponse(
  response: HttpResponse,
  makeError: (init: ServerErrorInit) => ServerError,
): ServerError {
  let body: unknown;
  try {
    body = JSON.parse(new TextDecoder().decode(response.body));
  } catch {
    body = undefined;
  }
  const envelope = parseErrorEnvelope(body);
  const retryAfter = parseRetryAfter(response.headers.get("retry-after"));
  const url = stripQuery(response.url);
  if (envelope !== undefined) {
    return makeError({
      status: response.status,
      code: envelope.error.code,
      message: oneLine(envelope.error.message),
      url,
      retryAfter,
      details: envelope.error.details,
    });
  }
  const redirect = response.status >= 300 && response.status < 400;
  return makeError({
    status: response.status,
    code: redirect ? "unexpected_redirect" : `http_${response.status}`,
    message: redirect
      ? `${origin(response.url)} answered with a redirect (HTTP ${response.status}), which is not followed`
      : `${origin(response.url)} answered HTTP ${response.status} ${response.statusText}`.trim(),
    url,
    retryAfter,
  });
}

function parseRetryAfter(value: string | null): number | undefined {
  if (value === null) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim());
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, Math.ceil((date - Date.now()) / 1000));
}

function stripQuery(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.origin}${parsed.pathname}`;
  } catch {
    return url;
  }
}

/** Server messages are printed on one line: no control characters, bounded length. */
export function oneLine(text: string, max = 500): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: stripping control characters is the point
  const flat = text.replace(/[\u0000-\u001f\u007f]+/g, " ").trim();
  return flat.length > max ? `${flat.slice(0, max)}…` : flat;
}

export const isOk = (status: number): boolean => status >= 200 && status < 300;
