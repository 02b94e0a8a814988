/**
 * The target URI of a request as RFC 9421 §2.2 signs it: the origin the request was addressed to
 * and the request-target exactly as it crossed the wire (RFC 9112 §3.3), never a re-serialised URL.
 * Re-parsing would rewrite what a client signed (the WHATWG parser encodes `'` in queries and
 * resolves `%2e%2e` segments), so a client that signs what it sends would fail.
 */

export interface TargetUriParts {
  /** Lower-case scheme, `http` or `https`. */
  scheme: string;
  /** `host[:port]` as RFC 9421 §2.2.3 normalises it: lower case, no userinfo, no default port. */
  authority: string;
  /** The path as received; `/` when empty (§2.2.6). */
  path: string;
  /** `?` and the query as received; `?` alone when there is none (§2.2.7). */
  query: string;
  /** Whether the target had a `?` at all (an empty query still has one). */
  hasQuery: boolean;
}

export class TargetUriError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TargetUriError";
  }
}

// Scheme, authority, then path and query: the RFC 3986 appendix B split, without any rewriting.
const ABSOLUTE = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?$/;
// Request-targets never hold controls, spaces or non-ASCII: HTTP/1.1 parsers refuse them, and a
// hand-built value that has them is not something any client could have sent.
const TARGET_CHARACTERS = /^[\x21-\x7e]*$/;
const DEFAULT_PORTS: Record<string, string> = { http: "80", https: "443" };

function normaliseAuthority(scheme: string, rawAuthority: string): string {
  // Userinfo never reaches a server, so it is never part of what is signed.
  const at = rawAuthority.lastIndexOf("@");
  const hostPort = (at === -1 ? rawAuthority : rawAuthority.slice(at + 1)).toLowerCase();
  let host = hostPort;
  let port = "";
  if (hostPort.startsWith("[")) {
    const end = hostPort.indexOf("]");
    const rest = end === -1 ? "" : hostPort.slice(end + 1);
    if (end === -1 || (rest !== "" && !rest.startsWith(":")))
      throw new TargetUriError("the target URI's host is malformed");
    host = hostPort.slice(0, end + 1);
    port = rest.slice(1);
  } else {
    const colon = hostPort.lastIndexOf(":");
    if (colon !== -1) {
      host = hostPort.slice(0, colon);
      port = hostPort.slice(colon + 1);
    }
  }
  if (host.length === 0) throw new TargetUriError("the target URI has no host");
  if (!/^\d*$/.test(port)) throw new TargetUriError("the target URI's port is not a number");
  return port === "" || port === DEFAULT_PORTS[scheme] ? host : `${host}:${port}`;
}

/** Splits an absolute http(s) target URI into the parts RFC 9421 derives components from. */
export function splitTargetUri(uri: string): TargetUriParts {
  const match = ABSOLUTE.exec(uri);
  if (match === null) throw new TargetUriError("the target URI is not absolute");
  const [, rawScheme = "", rawAuthority = "", path = "", query] = match;
  const scheme = rawScheme.toLowerCase();
  if (scheme !== "http" && scheme !== "https") throw new TargetUriError("the target URI is not http(s)");
  if (!TARGET_CHARACTERS.test(`${rawAuthority}${path}${query ?? ""}`)) {
    throw new TargetUriError("the target URI holds characters no request line can carry");
  }
  return {
    scheme,
    authority: normaliseAuthority(scheme, rawAuthority),
    path: path === "" ? "/" : path,
    query: query ?? "?",
    hasQuery: query !== undefined,
  };
}

// The last URI made canonical: a server that verifies every request against its one public URL
// (the attestor's token endpoint) asks for the same one each time.
let lastCanonical = { uri: "", canonical: "" };

/** The `@target-uri` value: scheme, normalised authority, then path and query exactly as given. */
export function canonicalTargetUri(uri: string): string {
  if (uri === lastCanonical.uri && uri !== "") return lastCanonical.canonical;
  const parts = splitTargetUri(uri);
  const canonical = `${parts.scheme}://${parts.authority}${parts.path}${parts.hasQuery ? parts.query : ""}`;
  lastCanonical = { uri, canonical };
  return canonical;
}

/** The origin-form request-target (path and query) of an absolute URI, spelled as given. */
export function requestTargetOf(uri: string): string {
  const { path, query, hasQuery } = splitTargetUri(uri);
  return hasQuery ? `${path}${query}` : path;
}

/**
 * The target URI a server received: its public origin and the raw request-target. An absolute-form
 * target (sent to proxies) contributes only its path and query, so a client cannot choose the
 * authority its signature is checked against.
 */
export function receivedTargetUri(origin: string, requestTarget: string): string {
  let target = requestTarget;
  if (!target.startsWith("/")) {
    const match = ABSOLUTE.exec(target);
    if (match === null) throw new TargetUriError("the request-target is neither origin-form nor absolute-form");
    target = `${match[3] || "/"}${match[4] ?? ""}`;
  }
  const base = origin.endsWith("/") ? origin.slice(0, -1) : origin;
  return canonicalTargetUri(`${base}${target}`);
}

/**
 * What a client sends for a URL it hands to `fetch`: the WHATWG serialisation, without fragment or
 * userinfo. Signers use it so that the bytes they sign are the bytes that go out.
 */
export function fetchTargetUri(url: string | URL): string {
  const parsed = new URL(url);
  parsed.hash = "";
  parsed.username = "";
  parsed.password = "";
  return canonicalTargetUri(parsed.href);
}
