/**
 * RFC 8707 resource indicators: the protected resource (an MCP server's URL) an access token is
 * for, and the audience its holder's pairwise subject is derived from.
 */

import { isSingleLine } from "../../platform/input-rules.js";

export const MAX_RESOURCE_LENGTH = 2048;

const LOOPBACK_HOSTS = new Set(["127.0.0.1", "localhost", "[::1]"]);

/**
 * The resource as given when it is one (absolute http(s) URI, no fragment, no userinfo; http
 * only for a loopback host or outside production), else undefined. It is kept as sent: the
 * token's `aud` must equal what the resource server calls itself, byte for byte.
 */
export function parseResource(value: unknown, production: boolean): string | undefined {
  if (typeof value !== "string" || value.length === 0 || value.length > MAX_RESOURCE_LENGTH) return undefined;
  if (!isSingleLine(value) || /\s/.test(value)) return undefined;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return undefined;
  }
  if (url.hash !== "" || value.includes("#") || url.username !== "" || url.password !== "") return undefined;
  if (url.protocol === "https:") return value;
  if (url.protocol === "http:" && (LOOPBACK_HOSTS.has(url.hostname) || !production)) return value;
  return undefined;
}

/**
 * The audience a person's pseudonym for `resource` is made for: the did:web of the resource's
 * host (with its port, `%3A`-encoded, as a did:web names it). A service whose DID is the did:web
 * of the host it serves from (the usual case, and the kit's default) so sees the same subject in
 * an access token as in an attestation's `sub_h`; any other resource is pairwise per origin.
 */
export function resourceAudience(resource: string): string {
  const url = new URL(resource);
  // An IPv6 literal has no did:web form: its origin is the audience.
  if (url.hostname.startsWith("[")) return url.origin;
  return `did:web:${url.host.replace(":", "%3A")}`;
}
