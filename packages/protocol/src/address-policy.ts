import { BlockList, isIPv4, isIPv6 } from "node:net";

/**
 * Which addresses we may connect to on behalf of whoever named the host. Anything that is not plain
 * globally routed unicast is refused, so a submitted URL cannot reach the operator's own network,
 * cloud metadata endpoints, or a range that translates to one of those (NAT64, 6to4, Teredo).
 *
 * Ranges follow the IANA IPv4 and IPv6 special-purpose address registries. Where a registry block
 * mixes reachable and unreachable entries (192.0.0.0/24, 2001::/23), the whole block is refused:
 * none of them hosts a web server a listing could point at.
 */

const IPV4_NON_PUBLIC: readonly (readonly [string, number])[] = [
  ["0.0.0.0", 8], // "this network", unspecified
  ["10.0.0.0", 8], // private
  ["100.64.0.0", 10], // carrier-grade NAT
  ["127.0.0.0", 8], // loopback
  ["169.254.0.0", 16], // link-local, cloud metadata
  ["172.16.0.0", 12], // private
  ["192.0.0.0", 24], // IETF protocol assignments
  ["192.0.2.0", 24], // documentation TEST-NET-1
  ["192.88.99.0", 24], // deprecated 6to4 relay anycast
  ["192.168.0.0", 16], // private
  ["198.18.0.0", 15], // benchmarking
  ["198.51.100.0", 24], // documentation TEST-NET-2
  ["203.0.113.0", 24], // documentation TEST-NET-3
  ["224.0.0.0", 4], // multicast
  ["240.0.0.0", 4], // reserved, limited broadcast
];

/**
 * Everything outside global unicast 2000::/3 is refused wholesale: that already covers ::, ::1,
 * IPv4-compatible ::/96, IPv4-translated ::ffff:0:0:0/96, NAT64 64:ff9b::/96 and 64:ff9b:1::/48,
 * discard-only 100::/64, ULA fc00::/7, link-local fe80::/10, site-local fec0::/10, multicast ff00::/8
 * and whatever gets assigned there later. IPv4-mapped ::ffff:0:0/96 is judged before this list.
 */
const IPV6_NON_PUBLIC: readonly (readonly [string, number])[] = [
  ["::", 3],
  ["4000::", 2],
  ["8000::", 1],
  ["2001::", 23], // IETF protocol assignments: Teredo, benchmarking, ORCHID, ...
  ["2001:db8::", 32], // documentation
  ["2002::", 16], // 6to4
  ["3fff::", 20], // documentation (RFC 9637)
];

function buildBlockList(ranges: readonly (readonly [string, number])[], type: "ipv4" | "ipv6"): BlockList {
  const list = new BlockList();
  for (const [network, prefix] of ranges) list.addSubnet(network, prefix, type);
  return list;
}

const ipv4Blocked = buildBlockList(IPV4_NON_PUBLIC, "ipv4");
const ipv6Blocked = buildBlockList(IPV6_NON_PUBLIC, "ipv6");

export interface ParsedAddress {
  family: 4 | 6;
  /** 4 or 16 bytes, network order. */
  bytes: Uint8Array;
}

function parseIPv4Bytes(text: string): Uint8Array {
  return Uint8Array.from(text.split(".").map(Number));
}

/** Expands an already validated IPv6 text (no zone) into its 16 bytes. */
function parseIPv6Bytes(text: string): Uint8Array {
  const [head = "", tail] = text.split("::");
  const toGroups = (part: string): number[] => {
    if (part === "") return [];
    return part.split(":").flatMap((group) => {
      if (!group.includes(".")) return [Number.parseInt(group, 16)];
      const [a = 0, b = 0, c = 0, d = 0] = parseIPv4Bytes(group);
      return [(a << 8) | b, (c << 8) | d];
    });
  };
  const left = toGroups(head);
  const right = tail === undefined ? [] : toGroups(tail);
  const groups = [...left, ...new Array<number>(8 - left.length - right.length).fill(0), ...right];
  const bytes = new Uint8Array(16);
  groups.forEach((group, i) => {
    bytes[i * 2] = group >> 8;
    bytes[i * 2 + 1] = group & 0xff;
  });
  return bytes;
}

/**
 * Parses an IPv4 dotted quad or an IPv6 address (without brackets) into bytes. Returns undefined for
 * anything else, including IPv6 addresses with a zone index, which only make sense on a local link.
 */
export function parseAddress(text: string): ParsedAddress | undefined {
  if (isIPv4(text)) return { family: 4, bytes: parseIPv4Bytes(text) };
  if (text.includes("%") || !isIPv6(text)) return undefined;
  return { family: 6, bytes: parseIPv6Bytes(text) };
}

/** The IPv4 address inside ::ffff:a.b.c.d, which a dual-stack socket connects to as plain IPv4. */
export function mappedIPv4(bytes: Uint8Array): string | undefined {
  for (let i = 0; i < 10; i++) if (bytes[i] !== 0) return undefined;
  if (bytes[10] !== 0xff || bytes[11] !== 0xff) return undefined;
  return `${bytes[12]}.${bytes[13]}.${bytes[14]}.${bytes[15]}`;
}

function formatIPv6(bytes: Uint8Array): string {
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push((((bytes[i] ?? 0) << 8) | (bytes[i + 1] ?? 0)).toString(16));
  return groups.join(":");
}

/**
 * True only for globally routed unicast addresses. Anything unparsable (a name, a bracketed or
 * zoned address) is not public, so a caller that passes the wrong thing fails closed.
 */
export function isPublicAddress(ip: string): boolean {
  const parsed = parseAddress(ip);
  if (parsed === undefined) return false;
  if (parsed.family === 4) return !ipv4Blocked.check(ip, "ipv4");
  const embedded = mappedIPv4(parsed.bytes);
  if (embedded !== undefined) return !ipv4Blocked.check(embedded, "ipv4");
  // The expanded form keeps BlockList from reading a dotted tail in its own way.
  return !ipv6Blocked.check(formatIPv6(parsed.bytes), "ipv6");
}
