/**
 * Which peers may say who the client is. `X-Forwarded-For` is honoured only from the proxies the
 * operator listed (`TRUSTED_PROXIES`), and the walk from its right end passes only through listed
 * addresses: the first address that is not a listed proxy is the client. A client that connects
 * directly is never a listed proxy, so whatever it writes in the header is ignored.
 */
import { isIP } from "node:net";
import proxyAddr from "@fastify/proxy-addr";

/** Names proxy-addr expands to its well-known ranges. */
const NAMED_RANGES = ["loopback", "linklocal", "uniquelocal"];

/** `(address, hop)` → whether that address is a proxy whose forwarded address to believe. */
export type ProxyTrust = (address: string, hop: number) => boolean;

/**
 * `TRUSTED_PROXIES`: comma-separated IPv4/IPv6 addresses, CIDRs (`10.0.0.0/8`, `fd00::/8`) or
 * `loopback`, `linklocal`, `uniquelocal`. Throws with one message naming every bad entry.
 */
export function parseTrustedProxies(value: string | undefined): string[] {
  if (value === undefined) return [];
  const entries = value
    .split(",")
    .map((entry) => entry.trim())
    .filter((entry) => entry !== "");
  if (entries.length === 0) throw new Error("lists no address");
  const bad = entries.filter((entry) => !isProxyEntry(entry));
  if (bad.length > 0) {
    throw new Error(
      `entries must be IP addresses, CIDRs (address/prefix) or loopback, linklocal, uniquelocal (got ${bad
        .map((entry) => JSON.stringify(entry))
        .join(", ")})`,
    );
  }
  return entries;
}

function isProxyEntry(entry: string): boolean {
  if (NAMED_RANGES.includes(entry)) return true;
  const slash = entry.indexOf("/");
  const address = slash === -1 ? entry : entry.slice(0, slash);
  const family = isIP(address);
  if (family === 0) return false;
  if (slash === -1) return true;
  const prefix = entry.slice(slash + 1);
  // A zero prefix would trust every address, which is the spoofable setup this list prevents.
  return /^\d{1,3}$/.test(prefix) && Number(prefix) >= 1 && Number(prefix) <= (family === 4 ? 32 : 128);
}

/**
 * The trust rule of both Fastify (`request.ip`) and the fast path. Without proxies nothing is
 * trusted: the client is the peer. `hops` > 0 also caps how many listed proxies the walk passes.
 */
export function proxyTrust(proxies: readonly string[], hops: number): ProxyTrust {
  if (proxies.length === 0) return () => false;
  const listed = proxyAddr.compile([...proxies]);
  return hops === 0 ? listed : (address, hop) => hop < hops && listed(address, hop);
}
