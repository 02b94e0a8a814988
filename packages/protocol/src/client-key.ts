import { isIPv4, SocketAddress } from "node:net";
import { mappedIPv4, parseAddress } from "./address-policy.js";

/**
 * The key a client's per-address limits count it under: an IPv4 address (or an IPv4-mapped IPv6
 * one) as itself, any other IPv6 address as the /64 it is in, e.g. `2001:db8:0:1::/64`. One host
 * usually holds a whole /64, so counting its addresses one by one would hand it 2^64 budgets.
 * A zone id (`fe80::1%eth0`) is dropped; anything that is not an address comes back unchanged.
 */
export function addressKey(address: string): string {
  // The common case first, without allocating: the key is the address as given.
  if (isIPv4(address)) return address;
  const zone = address.indexOf("%");
  const parsed = parseAddress(zone === -1 ? address : address.slice(0, zone));
  if (parsed === undefined || parsed.family !== 6) return address;
  const mapped = mappedIPv4(parsed.bytes);
  if (mapped !== undefined) return mapped;
  const groups: string[] = [];
  for (let i = 0; i < 8; i += 2) groups.push((((parsed.bytes[i] ?? 0) << 8) | (parsed.bytes[i + 1] ?? 0)).toString(16));
  // SocketAddress prints the network in its canonical (RFC 5952) form.
  const network = new SocketAddress({ address: `${groups.join(":")}:0:0:0:0`, family: "ipv6" }).address;
  return `${network}/64`;
}
