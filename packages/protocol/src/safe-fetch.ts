import type { LookupAddress } from "node:dns";
import { promises as dnsPromises } from "node:dns";
import { readFileSync } from "node:fs";
import type { ClientRequest, IncomingMessage } from "node:http";
import type { RequestOptions } from "node:https";
import { request as httpsRequest } from "node:https";
import type { LookupFunction } from "node:net";
import { isIP } from "node:net";
import type { ConnectionOptions, SecureContext } from "node:tls";
import { createSecureContext, rootCertificates } from "node:tls";
import { isPublicAddress } from "./address-policy.js";

/**
 * The one way out to hosts named by strangers: the directory's proof files, discovery documents
 * and revalidation, a service's Web Bot Auth key directories. It refuses anything but public
 * addresses and connects to exactly the address it vetted, so neither a hostile name nor DNS
 * rebinding can point it at the operator's network. Redirects are never followed.
 */

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

export interface SafeFetchConfig {
  /** PROTO_FETCH_ALLOW_PRIVATE=1: lets tests and local development reach loopback/private hosts. */
  allowPrivate: boolean;
  /**
   * Pinned names, as returned by `parseResolveOverrides`. Keys are `host:port`: the host as a URL's
   * `hostname` gives it (lowercase, IDNs in punycode) and the port as a number (443 included). Keys
   * never hold IP literals, since an IP-literal URL is never resolved. Values are IP addresses, IPv6
   * with or without brackets. A pinned address is vetted like a resolved one.
   */
  resolve: ReadonlyMap<string, string>;
  /** Whole request, resolution to last body byte. Defaults to 5000. */
  timeoutMs?: number;
  /** Body cap. Defaults to 65536. */
  maxBytes?: number;
  /**
   * Extra trusted CAs, on top of Node's bundled roots and NODE_EXTRA_CA_CERTS (which Node applies by
   * itself when this is absent).
   */
  ca?: string | string[];
  /** Injectable resolver; defaults to `dns.promises.lookup(hostname, { all: true })`. */
  lookup?: (hostname: string) => Promise<ResolvedAddress[]>;
  /** The User-Agent header; defaults to `proto-directory/0.1`, the directory's own. */
  userAgent?: string;
}

export type SafeFetchFailure =
  | "invalid_url"
  | "no_public_address"
  | "connect_failed"
  | "tls_failed"
  | "timeout"
  | "redirect"
  | "http_status"
  | "too_large";

/**
 * Messages are generic on purpose: they may reach whoever named the host and must not reveal addresses.
 * A name that does not resolve and one that resolves to a non-public address fail alike (kind and
 * message), so a submitter cannot probe which internal names exist.
 */
export class SafeFetchError extends Error {
  readonly kind: SafeFetchFailure;
  /** The HTTP status, for `redirect` and `http_status`. */
  readonly status?: number;

  constructor(kind: SafeFetchFailure, message: string, status?: number) {
    super(message);
    this.name = "SafeFetchError";
    this.kind = kind;
    if (status !== undefined) this.status = status;
  }
}

/** Response fields by lower-cased name; a field sent on several lines is joined with `, `. */
export type SafeResponseHeaders = Readonly<Record<string, string>>;

export interface SafeResponse {
  status: number;
  /** The raw header; the caller decides which types it accepts. */
  contentType: string | undefined;
  /** Every response field, so callers can honour Cache-Control, Expires, ETag and the like. */
  headers: SafeResponseHeaders;
  body: Buffer;
}

export interface SafeFetchOptions {
  /** The Accept header; defaults to accepting any type. */
  accept?: string;
  /** Aborting rejects with the signal's reason, as `fetch` does. */
  signal?: AbortSignal;
}

export interface SafeFetcher {
  get(url: string, options?: SafeFetchOptions): Promise<SafeResponse>;
}

const DEFAULT_TIMEOUT_MS = 5000;
const DEFAULT_MAX_BYTES = 64 * 1024;
const DEFAULT_USER_AGENT = "proto-directory/0.1";
const HTTPS_PORT = 443;

function noPublicAddress(): SafeFetchError {
  return new SafeFetchError("no_public_address", "the host does not resolve to a public address");
}

// ---------------------------------------------------------------------------------------------
// PROTO_FETCH_RESOLVE

const HOST_NAME = /^[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?$/;

function stripBrackets(address: string): string {
  return address.replace(/^\[(.*)\]$/, "$1");
}

function badEntry(entry: string, reason: string): Error {
  return new Error(`invalid fetch resolve override ${JSON.stringify(entry)}: ${reason}`);
}

/** The host as the fetcher will see it in a URL, so keys match whatever spelling the entry used. */
function normalizeOverrideHost(entry: string, host: string): string {
  let url: URL;
  try {
    url = new URL(`https://${host}/`);
  } catch {
    throw badEntry(entry, "the host is not a valid host name");
  }
  const onlyHost = url.username === "" && url.password === "" && url.port === "" && url.pathname === "/";
  if (!onlyHost || url.search !== "" || url.hash !== "") throw badEntry(entry, "the host is not a valid host name");
  if (url.hostname.startsWith("[") || isIP(url.hostname) !== 0) {
    throw badEntry(entry, "the host is an IP address, and IP-literal URLs are never resolved");
  }
  // Also keeps curl's `+host` (expiring entry) from passing as a name.
  if (!HOST_NAME.test(url.hostname)) throw badEntry(entry, "the host is not a valid host name");
  return url.hostname;
}

function parseOverrideEntry(entry: string): [key: string, address: string] {
  const match = /^([^:[\]]+):(\d+):(.+)$/.exec(entry);
  if (!match) throw badEntry(entry, "expected host:port:address");
  const [, rawHost = "", rawPort = "", rawAddress = ""] = match;
  const host = normalizeOverrideHost(entry, rawHost);
  const port = Number(rawPort);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw badEntry(entry, "the port is not 1-65535");
  const address = stripBrackets(rawAddress);
  if (isIP(address) === 0) throw badEntry(entry, "the address is not an IP address");
  return [`${host}:${port}`, address];
}

/**
 * Parses curl `--resolve` syntax, `host:port:address` entries separated by commas; an IPv6 address
 * may be bracketed (`h:443:[::1]`). Unset or blank means no overrides. curl's extensions (several
 * addresses per entry, `+`/`-` prefixes) are rejected rather than half-supported.
 */
export function parseResolveOverrides(value: string | undefined): Map<string, string> {
  const overrides = new Map<string, string>();
  for (const raw of (value ?? "").split(",")) {
    const entry = raw.trim();
    if (entry === "") continue;
    const [key, address] = parseOverrideEntry(entry);
    const earlier = overrides.get(key);
    if (earlier !== undefined && earlier !== address) throw badEntry(entry, `${key} is already pinned elsewhere`);
    overrides.set(key, address);
  }
  return overrides;
}

// ---------------------------------------------------------------------------------------------
// Configuration

interface Settings {
  allowPrivate: boolean;
  resolve: ReadonlyMap<string, string>;
  timeoutMs: number;
  maxBytes: number;
  secureContext: SecureContext | undefined;
  lookup: (hostname: string) => Promise<ResolvedAddress[]>;
  userAgent: string;
}

async function systemLookup(hostname: string): Promise<ResolvedAddress[]> {
  const answers: LookupAddress[] = await dnsPromises.lookup(hostname, { all: true, verbatim: true });
  return answers.map(({ address, family }) => ({ address, family: family === 6 ? 6 : 4 }));
}

/** Node reads NODE_EXTRA_CA_CERTS only into its default store, which an explicit `ca` replaces. */
function environmentCAs(): string[] {
  const path = process.env.NODE_EXTRA_CA_CERTS;
  if (!path) return [];
  try {
    return [readFileSync(path, "utf8")];
  } catch {
    // Node already warned about the unreadable file at startup; the default store lacks it too.
    return [];
  }
}

/** Built once: parsing the whole root store on every request would cost more than the request. */
function buildSecureContext(extra: string | string[] | undefined): SecureContext | undefined {
  if (extra === undefined) return undefined;
  const extras = typeof extra === "string" ? [extra] : extra;
  return createSecureContext({ ca: [...rootCertificates, ...environmentCAs(), ...extras] });
}

function normalizeOverrides(resolve: ReadonlyMap<string, string>): Map<string, string> {
  const normalized = new Map<string, string>();
  for (const [key, value] of resolve) {
    const address = stripBrackets(value);
    if (isIP(address) === 0) throw new Error(`fetch resolve override for ${JSON.stringify(key)} is not an IP address`);
    normalized.set(key.toLowerCase(), address);
  }
  return normalized;
}

function settingsFrom(config: SafeFetchConfig): Settings {
  const timeoutMs = config.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const maxBytes = config.maxBytes ?? DEFAULT_MAX_BYTES;
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) throw new RangeError("timeoutMs must be a positive number");
  if (!Number.isSafeInteger(maxBytes) || maxBytes < 0) throw new RangeError("maxBytes must be a whole number ≥ 0");
  return {
    allowPrivate: config.allowPrivate,
    resolve: normalizeOverrides(config.resolve),
    timeoutMs,
    maxBytes,
    secureContext: buildSecureContext(config.ca),
    lookup: config.lookup ?? systemLookup,
    userAgent: config.userAgent ?? DEFAULT_USER_AGENT,
  };
}

// ---------------------------------------------------------------------------------------------
// Target and addresses

interface Target {
  url: URL;
  /** Lowercase, IPv6 without brackets. */
  hostname: string;
  port: number;
  isLiteral: boolean;
}

function parseTarget(raw: string): Target {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new SafeFetchError("invalid_url", "the URL is not valid");
  }
  if (url.protocol !== "https:") throw new SafeFetchError("invalid_url", "only https URLs are fetched");
  if (url.username !== "" || url.password !== "") {
    throw new SafeFetchError("invalid_url", "URLs with credentials are not fetched");
  }
  const hostname = stripBrackets(url.hostname);
  if (hostname === "") throw new SafeFetchError("invalid_url", "the URL has no host");
  const port = url.port === "" ? HTTPS_PORT : Number(url.port);
  return { url, hostname, port, isLiteral: isIP(hostname) !== 0 };
}

/** Rejects with the signal's reason on abort; `dns.lookup` itself cannot be cancelled. */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

async function resolveAddresses(settings: Settings, target: Target, signal: AbortSignal): Promise<string[]> {
  if (target.isLiteral) return [target.hostname];
  const pinned = settings.resolve.get(`${target.hostname}:${target.port}`);
  if (pinned !== undefined) return [pinned];
  let answers: ResolvedAddress[];
  try {
    answers = await untilAborted(
      Promise.resolve().then(() => settings.lookup(target.hostname)),
      signal,
    );
  } catch {
    if (signal.aborted) throw signal.reason;
    throw noPublicAddress();
  }
  const addresses = answers.map((answer) => answer.address);
  if (addresses.length === 0 || addresses.some((address) => isIP(address) === 0)) {
    throw noPublicAddress();
  }
  return addresses;
}

/** One bad address taints the name: which one a connection would pick is not ours to predict. */
function vetAddresses(allowPrivate: boolean, addresses: readonly string[]): void {
  if (allowPrivate || addresses.every(isPublicAddress)) return;
  throw noPublicAddress();
}

/**
 * Hands the socket the vetted addresses instead of asking DNS again, which is what makes the vetting
 * hold. Every vetted address is offered so Node's happy-eyeballs fallback still works.
 */
function pinnedLookup(addresses: readonly string[]): LookupFunction {
  const entries: LookupAddress[] = addresses.map((address) => ({ address, family: isIP(address) }));
  return (_hostname, options, callback) => {
    const first = entries[0];
    if (options.all || first === undefined) callback(null, entries);
    else callback(null, first.address, first.family);
  };
}

// ---------------------------------------------------------------------------------------------
// The exchange

type Phase = "connect" | "tls" | "http";

function transportFailure(phase: Phase, error: NodeJS.ErrnoException): SafeFetchError {
  if (phase === "connect") return new SafeFetchError("connect_failed", "could not connect to the host");
  if (phase === "http") return new SafeFetchError("connect_failed", "the connection to the host failed");
  // Only the code, never Node's message: that one can quote the address connected to.
  const code = typeof error.code === "string" && /^[A-Z][A-Z0-9_]*$/.test(error.code) ? ` (${error.code})` : "";
  return new SafeFetchError("tls_failed", `the TLS handshake with the host failed${code}`);
}

/** `secureContext` is passed through to `tls.connect`, though the https typings leave it out. */
type PinnedRequestOptions = RequestOptions & Pick<ConnectionOptions, "secureContext">;

function requestOptions(
  settings: Settings,
  target: Target,
  addresses: readonly string[],
  accept: string,
): PinnedRequestOptions {
  const options: PinnedRequestOptions = {
    method: "GET",
    host: target.hostname,
    port: target.port,
    path: `${target.url.pathname}${target.url.search}`,
    headers: { host: target.url.host, "user-agent": settings.userAgent, accept },
    // A fresh agent per request: a pooled socket could belong to an earlier resolution.
    agent: false,
    lookup: pinnedLookup(addresses),
    // SNI carries names only; for an IP literal Node checks the certificate's IP SANs against `host`.
    servername: target.isLiteral ? undefined : target.hostname,
    rejectUnauthorized: true,
  };
  if (settings.secureContext) options.secureContext = settings.secureContext;
  return options;
}

/** Settles on the response, a transport error, or the abort, whichever comes first. */
function awaitResponse(req: ClientRequest, signal: AbortSignal): Promise<IncomingMessage> {
  return new Promise<IncomingMessage>((resolve, reject) => {
    let phase: Phase = "connect";
    // Not left to the error that destroying the request may or may not emit in every phase.
    signal.addEventListener("abort", () => reject(signal.reason), { once: true });
    req.once("socket", (socket) => {
      socket.once("connect", () => {
        phase = "tls";
      });
      socket.once("secureConnect", () => {
        phase = "http";
      });
    });
    // Stays attached: a late socket error after the response must not become an uncaught exception.
    req.on("error", (error: NodeJS.ErrnoException) => reject(transportFailure(phase, error)));
    req.once("response", resolve);
    req.end();
  });
}

function checkStatus(status: number): void {
  if (status >= 300 && status < 400) {
    throw new SafeFetchError("redirect", `the host answered with a redirect (${status}), not followed`, status);
  }
  if (status < 200 || status >= 300) {
    throw new SafeFetchError("http_status", `the host answered with HTTP status ${status}`, status);
  }
}

function tooLarge(maxBytes: number): SafeFetchError {
  return new SafeFetchError("too_large", `the response body is larger than ${maxBytes} bytes`);
}

function connectionLost(): SafeFetchError {
  return new SafeFetchError("connect_failed", "the connection to the host was lost during the response");
}

/**
 * Node already lower-cases names and joins repeated lines (all but `set-cookie`, which stays a list,
 * and singletons such as Content-Type, of which it keeps the first). `fromEntries` makes every name
 * an own property, so a field called `__proto__` cannot reach the prototype.
 */
function responseHeaders(res: IncomingMessage): SafeResponseHeaders {
  const entries: [string, string][] = [];
  for (const [name, value] of Object.entries(res.headers)) {
    if (value === undefined) continue;
    entries.push([name, Array.isArray(value) ? value.join(", ") : value]);
  }
  return Object.freeze(Object.fromEntries(entries));
}

async function readCapped(res: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const declared = Number(res.headers["content-length"]);
  if (Number.isFinite(declared) && declared > maxBytes) throw tooLarge(maxBytes);
  const chunks: Buffer[] = [];
  let total = 0;
  try {
    // The header may be absent or lie; the count is what holds.
    for await (const chunk of res as AsyncIterable<Buffer>) {
      total += chunk.length;
      if (total > maxBytes) throw tooLarge(maxBytes);
      chunks.push(chunk);
    }
  } catch (error) {
    throw error instanceof SafeFetchError ? error : connectionLost();
  }
  if (!res.complete) throw connectionLost();
  return Buffer.concat(chunks, total);
}

async function exchange(
  settings: Settings,
  target: Target,
  addresses: readonly string[],
  accept: string,
  signal: AbortSignal,
): Promise<SafeResponse> {
  signal.throwIfAborted();
  const req = httpsRequest(requestOptions(settings, target, addresses, accept));
  const onAbort = (): void => {
    req.destroy();
  };
  signal.addEventListener("abort", onAbort, { once: true });
  try {
    const res = await awaitResponse(req, signal);
    const status = res.statusCode ?? 0;
    checkStatus(status);
    const body = await readCapped(res, settings.maxBytes);
    return { status, contentType: res.headers["content-type"], headers: responseHeaders(res), body };
  } catch (error) {
    // Destroying the socket on abort surfaces as a connection error; the abort is the real cause.
    throw signal.aborted ? signal.reason : error;
  } finally {
    signal.removeEventListener("abort", onAbort);
    req.destroy();
  }
}

// ---------------------------------------------------------------------------------------------
// The fetcher

/** One controller for the whole request, so the timeout covers resolution, connect and body alike. */
async function withDeadline<T>(
  timeoutMs: number,
  external: AbortSignal | undefined,
  run: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  external?.throwIfAborted();
  const controller = new AbortController();
  const timer = setTimeout(() => {
    controller.abort(new SafeFetchError("timeout", "the host did not answer in time"));
  }, timeoutMs);
  const forward = (): void => controller.abort(external?.reason);
  external?.addEventListener("abort", forward, { once: true });
  try {
    return await run(controller.signal);
  } finally {
    clearTimeout(timer);
    external?.removeEventListener("abort", forward);
  }
}

async function safeGet(settings: Settings, url: string, options: SafeFetchOptions): Promise<SafeResponse> {
  const target = parseTarget(url);
  return withDeadline(settings.timeoutMs, options.signal, async (signal) => {
    const addresses = await resolveAddresses(settings, target, signal);
    // Vetting happens before any socket exists, so a refused address never sees a packet.
    vetAddresses(settings.allowPrivate, addresses);
    return exchange(settings, target, addresses, options.accept ?? "*/*", signal);
  });
}

export function createSafeFetcher(config: SafeFetchConfig): SafeFetcher {
  const settings = settingsFrom(config);
  return { get: (url, options = {}) => safeGet(settings, url, options) };
}
