/**
 * DID syntax for the two methods proto uses: `did:web` (anchored in DNS and TLS) and `did:key`
 * (Ed25519 only). Shared by recipient normalisation and the directory's host check.
 */
import { DidKeyError, decodeDidKey } from "./did-key.js";

/** Longer values are refused before any parsing: no real DID comes close. */
export const MAX_DID_LENGTH = 2048;

export type DidUrlComponent = "path" | "query" | "fragment";

export interface ParsedDidKey {
  method: "key";
  did: string;
}

export interface ParsedDidWeb {
  method: "web";
  did: string;
  /** `hostname` or `hostname:port`, percent-decoded once, letter case as written. */
  host: string;
  hostname: string;
  port: number | undefined;
  /** Colon-separated segments after the host, each percent-decoded once: `did:web:h:users:alice` -> `["users", "alice"]`. */
  path: string[];
}

export type ParsedDid = ParsedDidKey | ParsedDidWeb;

export type DidParseResult = { ok: true; did: ParsedDid } | { ok: false; reason: string };

const DID_PREFIX = /^did:([a-z0-9]+):(.+)$/;
// DID Core: method-specific-id = *( *idchar ":" ) 1*idchar, idchar = ALPHA / DIGIT / "." / "-" / "_" / pct-encoded.
const METHOD_SPECIFIC_ID = /^(?:[A-Za-z0-9._:-]|%[0-9A-Fa-f]{2})*$/;
const HOSTNAME_LABEL = /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/;
const PORT = /^[1-9][0-9]{0,4}$/;
const MAX_HOSTNAME_LENGTH = 253;

/**
 * Which DID URL component a value carries, if any. A DID URL's path, query and fragment start at the
 * first `/`, `?` or `#` respectively, so the earliest of them names the component.
 */
export function didUrlComponent(value: string): DidUrlComponent | undefined {
  const at = value.search(/[/?#]/);
  if (at < 0) return undefined;
  const marker = value[at];
  return marker === "/" ? "path" : marker === "?" ? "query" : "fragment";
}

/** Parses a bare DID (never a DID URL) of method `web` or `key`. Never throws. */
export function parseDid(value: unknown): DidParseResult {
  if (typeof value !== "string") return fail("did must be a string");
  if (value.length > MAX_DID_LENGTH) return fail(`did is longer than ${MAX_DID_LENGTH} characters`);
  const component = didUrlComponent(value);
  if (component !== undefined) return fail(`did contains DID URL component (${component})`);
  const match = DID_PREFIX.exec(value);
  if (match === null) return fail("not a DID (expected did:<method>:<identifier>)");
  const [, method, id] = match as unknown as [string, string, string];
  if (!METHOD_SPECIFIC_ID.test(id) || id.endsWith(":")) return fail("did contains characters a DID does not allow");
  if (method === "key") return parseDidKey(value);
  if (method === "web") return parseDidWeb(value, id);
  return fail(`unsupported DID method "${method}" (expected did:web or did:key)`);
}

export function isDidSyntax(value: unknown): value is string {
  return parseDid(value).ok;
}

/**
 * The host a `did:web` DID names, lowercased, with `:port` when the DID encodes one (`%3A`), path
 * segments ignored: `did:web:Example.com%3A8443:users:alice` -> `example.com:8443`. Undefined for
 * anything that is not a valid did:web.
 */
export function didWebHost(did: string): string | undefined {
  const parsed = parseDid(did);
  return parsed.ok && parsed.did.method === "web" ? parsed.did.host.toLowerCase() : undefined;
}

/**
 * Whether a did:web names the host of an https URL (`new URL(...).host`): compared lowercase, the
 * port is part of the host, and an explicit `:443` equals none because URL parsing drops it.
 */
export function didWebMatchesHost(did: string, host: string): boolean {
  const didHost = didWebHost(did);
  return didHost !== undefined && withoutHttpsPort(didHost) === withoutHttpsPort(host.toLowerCase());
}

/**
 * The `did:web` DID of a host (`new URL(...).host`), as the did:web method writes it: the port's
 * colon percent-encoded, `localhost:18103` -> `did:web:localhost%3A18103`; `:443` is no port.
 */
export function didWebForHost(host: string): string {
  return `did:web:${withoutHttpsPort(host.toLowerCase()).replace(/:(\d+)$/, "%3A$1")}`;
}

/**
 * Why `did` (a did:web) does not name `host`, in words that give the DID that would, so whoever
 * wrote `did:web:localhost:18103` learns that a port is written `%3A`. Undefined when it does.
 * `where` says which host in the caller's words (default `the host {host}`).
 */
export function didWebMismatch(did: string, host: string, where = `the host ${host}`): string | undefined {
  if (didWebMatchesHost(did, host)) return undefined;
  if (host.startsWith("["))
    return `${did} does not name ${where}: a did:web cannot name an IPv6 address; use a host name`;
  const expected = didWebForHost(host);
  const port = expected.includes("%3A") ? " (did:web writes the port's colon as %3A)" : "";
  return `${did} does not name ${where}: the did:web of that host is ${expected}${port}`;
}

function withoutHttpsPort(host: string): string {
  return host.endsWith(":443") ? host.slice(0, -4) : host;
}

function parseDidKey(did: string): DidParseResult {
  try {
    decodeDidKey(did);
    return { ok: true, did: { method: "key", did } };
  } catch (error) {
    const detail = error instanceof DidKeyError ? `: ${error.message}` : "";
    return fail(`did:key is not a canonical Ed25519 did:key${detail}`);
  }
}

function parseDidWeb(did: string, id: string): DidParseResult {
  const segments = id.split(":");
  if (segments.some((s) => s === "")) return fail("did:web has an empty segment");
  const decoded = segments.map(decodeOnce);
  if (decoded.some((s) => s === undefined)) return fail("did:web contains invalid percent-encoding");
  const [host, ...path] = decoded as string[];
  const hostParts = splitHost(host as string);
  if (typeof hostParts === "string") return fail(hostParts);
  return { ok: true, did: { method: "web", did, host: host as string, ...hostParts, path } };
}

/** Exactly one decoding pass: `%253A` stays `%3A`, which is then not a valid host character. */
function decodeOnce(segment: string): string | undefined {
  try {
    return decodeURIComponent(segment);
  } catch {
    return undefined;
  }
}

function splitHost(host: string): { hostname: string; port: number | undefined } | string {
  const colon = host.indexOf(":");
  const hostname = colon < 0 ? host : host.slice(0, colon);
  if (!isHostname(hostname)) return "did:web host is not a valid domain name";
  if (colon < 0) return { hostname, port: undefined };
  const port = host.slice(colon + 1);
  if (!PORT.test(port) || Number(port) > 65535) return "did:web port is not a valid port number";
  return { hostname, port: Number(port) };
}

function isHostname(hostname: string): boolean {
  return hostname.length <= MAX_HOSTNAME_LENGTH && hostname.split(".").every((label) => HOSTNAME_LABEL.test(label));
}

function fail(reason: string): DidParseResult {
  return { ok: false, reason };
}
