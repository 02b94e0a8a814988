import type { LookupAddress, LookupOptions } from "node:dns";
import { lookup as dnsLookup } from "node:dns";
import type { LookupFunction } from "node:net";
import { isIP } from "node:net";
import { Agent, fetch as undiciFetch } from "undici";
import type { TestCA } from "./ca.js";

export interface TestFetchOptions {
  /**
   * Names to pin to addresses: either a `PROTO_FETCH_RESOLVE` string (`host:port:address,...`, as
   * returned by `host.resolveEntries()`) or a `{ hostname: address }` map. The port of a string
   * entry is not matched (a DNS lookup never sees it): a name maps to one address for every port.
   * Names not listed resolve through DNS as usual.
   */
  resolve?: string | Record<string, string>;
}

export type TestFetch = typeof undiciFetch & {
  /** The agent behind the function, for code that takes an undici `dispatcher`. */
  readonly dispatcher: Agent;
  /** Closes pooled connections; optional, since hosts close their sockets on `close()` anyway. */
  close(): Promise<void>;
};

/** Parses curl `--resolve` syntax; IPv6 addresses may be bracketed (`h:443:[::1]`). */
export function parseResolveEntries(entries: string): Map<string, string> {
  const map = new Map<string, string>();
  for (const raw of entries.split(",")) {
    const entry = raw.trim();
    if (entry === "") continue;
    const match = /^([^:]+):(\d+):(.+)$/.exec(entry);
    const host = match?.[1];
    const address = match?.[3]?.replace(/^\[(.*)\]$/, "$1");
    if (host === undefined || address === undefined || isIP(address) === 0) {
      throw new Error(`invalid resolve entry ${JSON.stringify(entry)}, expected host:port:address`);
    }
    map.set(host.toLowerCase(), address);
  }
  return map;
}

function pinnedLookup(pins: Map<string, string>): LookupFunction {
  return (hostname: string, options: LookupOptions, callback) => {
    const address = pins.get(hostname.toLowerCase());
    if (address === undefined) {
      dnsLookup(hostname, options, callback);
      return;
    }
    const family = isIP(address);
    // Node 20 connects with autoSelectFamily, which asks for every address (`all: true`).
    if (options.all) {
      const all: LookupAddress[] = [{ address, family }];
      callback(null, all);
    } else {
      callback(null, address, family);
    }
  };
}

/** An undici agent trusting only the test CA, with optional pinned names. */
export function createTestAgent(ca: TestCA | string, options: TestFetchOptions = {}): Agent {
  const caPem = typeof ca === "string" ? ca : ca.certPem;
  const pins =
    typeof options.resolve === "string"
      ? parseResolveEntries(options.resolve)
      : new Map(Object.entries(options.resolve ?? {}).map(([host, address]) => [host.toLowerCase(), address]));
  return new Agent({
    connect: pins.size > 0 ? { ca: caPem, lookup: pinnedLookup(pins) } : { ca: caPem },
  });
}

/**
 * A `fetch` that trusts the test CA, through its own agent so neither the global dispatcher nor
 * `NODE_EXTRA_CA_CERTS` of the test process changes.
 */
export function testFetch(ca: TestCA | string, options: TestFetchOptions = {}): TestFetch {
  const dispatcher = createTestAgent(ca, options);
  const fetchWithAgent: typeof undiciFetch = (input, init) => undiciFetch(input, { ...init, dispatcher });
  return Object.assign(fetchWithAgent, { dispatcher, close: () => dispatcher.close() });
}
