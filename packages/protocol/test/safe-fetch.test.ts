import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";
import type { HttpsHost, Sentinel, TestCA } from "@proto/testkit";
import { createTestCA, DISCOVERY_PATH, PROOF_PATH, startHttpsHost, startSentinel } from "@proto/testkit";
import { isPublicAddress, parseAddress } from "../src/address-policy.js";
import type { ResolvedAddress, SafeFetchConfig, SafeFetchFailure } from "../src/safe-fetch.js";
import { createSafeFetcher, parseResolveOverrides, SafeFetchError } from "../src/safe-fetch.js";

async function fetchError(promise: Promise<unknown>): Promise<SafeFetchError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof SafeFetchError, `expected a SafeFetchError, got ${String(error)}`);
    return error;
  }
  assert.fail("expected the fetch to fail");
}

async function assertFailure(promise: Promise<unknown>, kind: SafeFetchFailure): Promise<SafeFetchError> {
  const error = await fetchError(promise);
  assert.equal(error.kind, kind, `expected ${kind}, got ${error.kind}: ${error.message}`);
  return error;
}

function assertNoAddressIn(message: string, addresses: readonly string[]): void {
  for (const address of addresses) assert.ok(!message.includes(address), `message reveals ${address}: ${message}`);
}

/** A resolver that records its calls and must be asked exactly as the test expects. */
function recordingLookup(answers: (call: number) => ResolvedAddress[]) {
  const calls: string[] = [];
  const lookup = async (hostname: string): Promise<ResolvedAddress[]> => {
    calls.push(hostname);
    return answers(calls.length);
  };
  return { calls, lookup };
}

function familyOf(address: string): 4 | 6 {
  return address.includes(":") ? 6 : 4;
}

describe("isPublicAddress", () => {
  const publicAddresses = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "11.0.0.1",
    "100.63.255.255",
    "100.128.0.0",
    "172.15.255.255",
    "172.32.0.0",
    "192.0.1.255",
    "192.169.0.1",
    "198.17.255.255",
    "198.20.0.0",
    "223.255.255.255",
    "2606:4700::1111",
    "2001:4860:4860::8888",
    "2a00:1450:4001:80b::200e",
    "2001:200::1",
    "2003::1",
    "::ffff:8.8.8.8",
    "::FFFF:1.1.1.1",
    "::ffff:808:808",
  ];
  const nonPublicAddresses: [string, string][] = [
    ["0.0.0.0", "unspecified"],
    ["0.1.2.3", "this network 0/8"],
    ["10.0.0.1", "private 10/8"],
    ["10.255.255.255", "private 10/8"],
    ["100.64.0.1", "CGNAT"],
    ["100.127.255.255", "CGNAT"],
    ["127.0.0.1", "loopback"],
    ["127.255.255.254", "loopback"],
    ["169.254.169.254", "link-local / metadata"],
    ["172.16.0.1", "private 172.16/12"],
    ["172.31.255.255", "private 172.16/12"],
    ["192.0.0.1", "IETF protocol assignments"],
    ["192.0.0.170", "IETF protocol assignments"],
    ["192.0.2.1", "TEST-NET-1"],
    ["192.88.99.1", "6to4 relay anycast"],
    ["192.168.1.1", "private 192.168/16"],
    ["198.18.0.1", "benchmarking"],
    ["198.19.255.255", "benchmarking"],
    ["198.51.100.7", "TEST-NET-2"],
    ["203.0.113.9", "TEST-NET-3"],
    ["224.0.0.1", "multicast"],
    ["239.255.255.250", "multicast"],
    ["240.0.0.1", "reserved"],
    ["255.255.255.255", "broadcast"],
    ["::", "unspecified"],
    ["::1", "loopback"],
    ["::127.0.0.1", "IPv4-compatible"],
    ["::8.8.8.8", "IPv4-compatible, even of a public address"],
    ["::ffff:127.0.0.1", "IPv4-mapped loopback"],
    ["::ffff:7f00:1", "IPv4-mapped loopback, hex"],
    ["0:0:0:0:0:ffff:127.0.0.1", "IPv4-mapped loopback, expanded"],
    ["::ffff:10.0.0.1", "IPv4-mapped private"],
    ["::ffff:169.254.169.254", "IPv4-mapped metadata"],
    ["::FFFF:192.168.0.1", "IPv4-mapped private, uppercase"],
    ["::ffff:0:8.8.8.8", "IPv4-translated"],
    ["64:ff9b::808:808", "NAT64"],
    ["64:ff9b::127.0.0.1", "NAT64"],
    ["64:ff9b:1::1", "local-use NAT64"],
    ["100::1", "discard-only"],
    ["fc00::1", "ULA"],
    ["fd12:3456::1", "ULA"],
    ["fe80::1", "link-local"],
    ["febf::1", "link-local"],
    ["fec0::1", "site-local"],
    ["ff02::1", "multicast"],
    ["ff0e::1", "multicast"],
    ["2001::1", "Teredo"],
    ["2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"],
    ["2001:2::1", "benchmarking"],
    ["2001:10::1", "ORCHID"],
    ["2001:20::1", "ORCHIDv2"],
    ["2001:db8::1", "documentation"],
    ["2001:db8:ffff::1", "documentation"],
    ["2002:c000:0204::1", "6to4"],
    ["3fff::1", "documentation (RFC 9637)"],
    ["5f00::1", "outside global unicast"],
    ["fe80::1%eth0", "zoned"],
    ["[2606:4700::1111]", "bracketed: not an address"],
    ["example.com", "a name"],
    ["", "empty"],
    [" 8.8.8.8", "whitespace"],
    ["1.2.3", "short IPv4"],
    ["01.2.3.4", "leading zero"],
    ["256.1.1.1", "octet out of range"],
  ];

  for (const address of publicAddresses) {
    it(`accepts ${address}`, () => assert.equal(isPublicAddress(address), true));
  }
  for (const [address, why] of nonPublicAddresses) {
    it(`refuses ${JSON.stringify(address)} (${why})`, () => assert.equal(isPublicAddress(address), false));
  }

  it("parses addresses into bytes", () => {
    assert.deepEqual(parseAddress("1.2.3.4"), { family: 4, bytes: Uint8Array.from([1, 2, 3, 4]) });
    assert.deepEqual(parseAddress("::ffff:1.2.3.4"), {
      family: 6,
      bytes: Uint8Array.from([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2, 3, 4]),
    });
    assert.deepEqual(parseAddress("2001:db8::1"), {
      family: 6,
      bytes: Uint8Array.from([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
    });
    assert.equal(parseAddress("fe80::1%lo"), undefined);
    assert.equal(parseAddress("host.test"), undefined);
  });
});

describe("parseResolveOverrides", () => {
  it("treats unset and blank as no overrides", () => {
    assert.equal(parseResolveOverrides(undefined).size, 0);
    assert.equal(parseResolveOverrides("").size, 0);
    assert.equal(parseResolveOverrides(" , ").size, 0);
  });

  it("parses curl --resolve entries into host:port keys", () => {
    const overrides = parseResolveOverrides("a.test:443:127.0.0.1, B.Test:8443:[::1],c.test:0443:::1,");
    assert.deepEqual(
      [...overrides],
      [
        ["a.test:443", "127.0.0.1"],
        ["b.test:8443", "::1"],
        ["c.test:443", "::1"],
      ],
    );
  });

  it("keys internationalised names as a URL spells them", () => {
    assert.deepEqual([...parseResolveOverrides("bücher.test:443:10.0.0.1")], [["xn--bcher-kva.test:443", "10.0.0.1"]]);
  });

  it("accepts the same entry twice", () => {
    assert.equal(parseResolveOverrides("a.test:443:10.0.0.1,a.test:443:10.0.0.1").size, 1);
  });

  const invalid: [string, RegExp][] = [
    ["a.test", /expected host:port:address/],
    ["a.test:443", /expected host:port:address/],
    ["a.test:https:10.0.0.1", /expected host:port:address/],
    [":443:10.0.0.1", /expected host:port:address/],
    ["a.test:443:", /expected host:port:address/],
    ["a.test:0:10.0.0.1", /port/],
    ["a.test:70000:10.0.0.1", /port/],
    ["a.test:443:not-an-address", /not an IP address/],
    ["a.test:443:10.0.0.1,10.0.0.2", /expected host:port:address/],
    ["[::1]:443:10.0.0.1", /expected host:port:address/],
    ["127.0.0.1:443:10.0.0.1", /IP address/],
    ["+a.test:443:10.0.0.1", /host name/],
    ["a@b.test:443:10.0.0.1", /host name/],
    ["a/b.test:443:10.0.0.1", /host name/],
    ["a b.test:443:10.0.0.1", /host name/],
    ["a.test:443:10.0.0.1,A.test:443:10.0.0.2", /already pinned/],
  ];
  for (const [value, pattern] of invalid) {
    it(`rejects ${JSON.stringify(value)}`, () => {
      assert.throws(() => parseResolveOverrides(value), pattern);
    });
  }
});

describe("createSafeFetcher", () => {
  let ca: TestCA;
  let host: HttpsHost;
  let sentinel: Sentinel;

  before(async () => {
    ca = await createTestCA();
    host = await startHttpsHost({ ca, hostnames: ["files.test", "other.test"] });
    sentinel = await startSentinel();
  });

  after(async () => {
    await host.close();
    await sentinel.close();
  });

  beforeEach(() => host.reset());

  /** Loopback hosts need allowPrivate; every test that checks the policy itself turns it off. */
  function fetcher(overrides: Partial<SafeFetchConfig> = {}) {
    return createSafeFetcher({
      allowPrivate: true,
      resolve: parseResolveOverrides(host.resolveEntries()),
      ca: ca.certPem,
      lookup: async () => assert.fail("DNS must not be consulted for a pinned name"),
      ...overrides,
    });
  }

  describe("successful fetches", () => {
    it("returns the exact bytes, the status and the raw content type", async () => {
      const body = Buffer.from([0x74, 0x6f, 0x6b, 0x00, 0xff, 0xfe, 0x0a, 0xc3, 0xa9]);
      host.route(PROOF_PATH, { body, headers: { "content-type": "text/plain; charset=utf-8" } });
      const response = await fetcher().get(`${host.origin()}${PROOF_PATH}`, { accept: "text/plain" });
      assert.equal(response.status, 200);
      assert.equal(response.contentType, "text/plain; charset=utf-8");
      assert.deepEqual(response.body, body);
    });

    it("returns the response fields by lower-cased name, repeated lines joined", async () => {
      host.route("/cached", (_req, res) => {
        res.setHeader("Cache-Control", "public, max-age=60");
        res.setHeader("ETag", '"v1"');
        res.setHeader("X-Repeated", ["a", "b"]);
        res.setHeader("content-type", "application/json");
        res.end("{}");
      });
      const { headers } = await fetcher().get(`${host.origin()}/cached`);
      assert.equal(headers["cache-control"], "public, max-age=60");
      assert.equal(headers.etag, '"v1"');
      assert.equal(headers["x-repeated"], "a, b");
      assert.equal(headers["content-type"], "application/json");
      assert.ok(Object.isFrozen(headers));
    });

    it("sends the configured User-Agent", async () => {
      host.serveProof("token");
      await fetcher({ userAgent: "proto-kit/0.1" }).get(`${host.origin()}${PROOF_PATH}`);
      assert.equal(host.requests[0]?.headers["user-agent"], "proto-kit/0.1");
    });

    it("sends the hostname as SNI and Host, its User-Agent and Accept, and no cookies", async () => {
      host.serveDiscovery({ service_did: "did:web:files.test" });
      await fetcher().get(`${host.origin()}${DISCOVERY_PATH}?probe=1`, { accept: "application/json" });
      const [request] = host.requests;
      assert.ok(request);
      assert.equal(host.requests.length, 1);
      assert.equal(request.method, "GET");
      assert.equal(request.path, `${DISCOVERY_PATH}?probe=1`);
      assert.equal(request.servername, "files.test");
      assert.equal(request.headers.host, `files.test:${host.port}`);
      assert.equal(request.headers["user-agent"], "proto-directory/0.1");
      assert.equal(request.headers.accept, "application/json");
      assert.equal(request.headers.cookie, undefined);
      assert.equal(request.headers.authorization, undefined);
    });

    it("accepts anything by default and matches the host case-insensitively", async () => {
      host.serveProof("token");
      const response = await fetcher().get(`https://FILES.test:${host.port}${PROOF_PATH}`);
      assert.equal(response.body.toString(), "token");
      assert.equal(host.requests[0]?.headers.accept, "*/*");
    });

    it("returns a body of exactly maxBytes", async () => {
      host.route("/exact", { body: Buffer.alloc(1024, "x") });
      const response = await fetcher({ maxBytes: 1024 }).get(`${host.origin()}/exact`);
      assert.equal(response.body.length, 1024);
    });

    it("connects to an IP-literal host as is, without SNI and without DNS", async () => {
      const literal = await startHttpsHost({ ca, hostnames: ["127.0.0.1"] });
      try {
        literal.route("/x", { body: "by address" });
        const response = await fetcher({ resolve: new Map() }).get(`https://127.0.0.1:${literal.port}/x`);
        assert.equal(response.body.toString(), "by address");
        assert.equal(literal.requests[0]?.servername, undefined);
      } finally {
        await literal.close();
      }
    });
  });

  describe("responses it refuses", () => {
    it("does not follow a redirect, and never requests its target", async () => {
      host.serveProof("token");
      host.misbehave(PROOF_PATH, "redirect");
      const error = await assertFailure(fetcher().get(`${host.origin()}${PROOF_PATH}`), "redirect");
      assert.equal(error.status, 302);
      assert.deepEqual(
        host.requests.map((r) => r.path),
        [PROOF_PATH],
      );
    });

    it("does not follow a redirect to another host", async () => {
      host.misbehave(PROOF_PATH, "redirect", { status: 301, location: `${host.origin("other.test")}/elsewhere` });
      const error = await assertFailure(fetcher().get(`${host.origin()}${PROOF_PATH}`), "redirect");
      assert.equal(error.status, 301);
      assert.equal(host.requests.length, 1);
    });

    it("reports a 500 as http_status", async () => {
      host.misbehave(PROOF_PATH, "status-500");
      const error = await assertFailure(fetcher().get(`${host.origin()}${PROOF_PATH}`), "http_status");
      assert.equal(error.status, 500);
    });

    it("reports a 404 as http_status", async () => {
      const error = await assertFailure(fetcher().get(`${host.origin()}/nothing-here`), "http_status");
      assert.equal(error.status, 404);
    });

    it("times out on a host that never answers", async () => {
      host.misbehave(PROOF_PATH, "hang");
      await assertFailure(fetcher({ timeoutMs: 300 }).get(`${host.origin()}${PROOF_PATH}`), "timeout");
    });

    it("times out a body that keeps trickling: the deadline covers the whole request", async () => {
      host.misbehave(PROOF_PATH, "slow-drip", { intervalMs: 20 });
      await assertFailure(fetcher({ timeoutMs: 300 }).get(`${host.origin()}${PROOF_PATH}`), "timeout");
    });

    it("stops reading a streamed body past the cap", async () => {
      host.serveProof("token");
      host.misbehave(PROOF_PATH, "oversized");
      await assertFailure(fetcher().get(`${host.origin()}${PROOF_PATH}`), "too_large");
    });

    it("refuses a declared Content-Length over the cap", async () => {
      host.route("/big", { body: Buffer.alloc(2048, "x") });
      await assertFailure(fetcher({ maxBytes: 1024 }).get(`${host.origin()}/big`), "too_large");
    });
  });

  describe("TLS", () => {
    it("refuses a certificate from an untrusted CA", async () => {
      host.serveProof("token");
      const error = await assertFailure(fetcher({ ca: undefined }).get(`${host.origin()}${PROOF_PATH}`), "tls_failed");
      assertNoAddressIn(error.message, ["127.0.0.1"]);
      assert.equal(host.requests.length, 0);
    });

    it("verifies the certificate against the hostname, not the address", async () => {
      host.serveProof("token");
      const resolve = new Map([[`unlisted.test:${host.port}`, "127.0.0.1"]]);
      await assertFailure(fetcher({ resolve }).get(`https://unlisted.test:${host.port}${PROOF_PATH}`), "tls_failed");
      assert.equal(host.requests.length, 0);
    });
  });

  describe("URLs it refuses", () => {
    const invalid = [
      "http://files.test/.well-known/proto",
      "ftp://files.test/",
      "file:///etc/passwd",
      "not a url",
      "//files.test/",
      "https://user:secret@files.test/",
      "https://user@files.test/",
      "https://:secret@files.test/",
    ];
    for (const url of invalid) {
      it(`refuses ${url}`, async () => {
        await assertFailure(fetcher().get(url), "invalid_url");
      });
    }

    it("refuses userinfo on a reachable host without contacting it", async () => {
      host.serveProof("token");
      const url = `https://user:pw@files.test:${host.port}${PROOF_PATH}`;
      await assertFailure(fetcher().get(url), "invalid_url");
      assert.equal(host.requests.length, 0);
    });
  });

  describe("address policy (allowPrivate off)", () => {
    const forbidden = ["127.0.0.1", "10.0.0.1", "::ffff:127.0.0.1", "169.254.169.254", "::1", "fd00::1"];

    for (const address of forbidden) {
      it(`refuses a name pinned to ${address} without connecting`, async () => {
        const resolve = new Map([[`evil.test:${sentinel.port}`, address]]);
        const safe = fetcher({ allowPrivate: false, resolve });
        const error = await assertFailure(safe.get(`https://evil.test:${sentinel.port}/`), "no_public_address");
        assertNoAddressIn(error.message, [address, sentinel.address, String(sentinel.port)]);
        assert.equal(sentinel.hits, 0);
      });

      it(`refuses a name that DNS resolves to ${address} without connecting`, async () => {
        const { calls, lookup } = recordingLookup(() => [{ address, family: familyOf(address) }]);
        const safe = fetcher({ allowPrivate: false, resolve: new Map(), lookup });
        const error = await assertFailure(safe.get(`https://evil.test:${sentinel.port}/`), "no_public_address");
        assert.deepEqual(calls, ["evil.test"]);
        assertNoAddressIn(error.message, [address, sentinel.address]);
        assert.equal(sentinel.hits, 0);
      });
    }

    it("refuses a name with one public and one private address, in either order", async () => {
      for (const answers of [
        ["8.8.8.8", "127.0.0.1"],
        ["127.0.0.1", "8.8.8.8"],
        ["2606:4700::1111", "::ffff:127.0.0.1"],
      ]) {
        const { lookup } = recordingLookup(() => answers.map((address) => ({ address, family: familyOf(address) })));
        const safe = fetcher({ allowPrivate: false, resolve: new Map(), lookup });
        const error = await assertFailure(safe.get(`https://mixed.test:${sentinel.port}/`), "no_public_address");
        assertNoAddressIn(error.message, answers);
      }
      assert.equal(sentinel.hits, 0);
    });

    it("refuses IP-literal URLs of non-public addresses", async () => {
      const safe = fetcher({ allowPrivate: false, resolve: new Map() });
      for (const literal of ["127.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "0x7f.1", "2130706433"]) {
        await assertFailure(safe.get(`https://${literal}:${sentinel.port}/`), "no_public_address");
      }
      assert.equal(sentinel.hits, 0);
    });

    it("a name that does not resolve fails exactly like one that resolves to a private address", async () => {
      const lookup = async (hostname: string): Promise<ResolvedAddress[]> => {
        if (hostname === "internal.test") return [{ address: "10.0.0.7", family: 4 }];
        throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: "ENOTFOUND" });
      };
      const safe = fetcher({ allowPrivate: false, resolve: new Map(), lookup });
      const internal = await fetchError(safe.get("https://internal.test/"));
      const missing = await fetchError(safe.get("https://missing.test/"));
      const literal = await fetchError(safe.get("https://10.0.0.7/"));
      for (const other of [missing, literal]) {
        assert.deepEqual([other.kind, other.message], [internal.kind, internal.message]);
      }
      assert.equal(internal.kind, "no_public_address");
    });

    it("vets a pinned address even though it comes from configuration", async () => {
      const safe = fetcher({ allowPrivate: false, resolve: parseResolveOverrides(host.resolveEntries()) });
      host.serveProof("token");
      await assertFailure(safe.get(`${host.origin()}${PROOF_PATH}`), "no_public_address");
      assert.equal(host.requests.length, 0);
    });
  });

  describe("resolution", () => {
    it("pins a name only for the port given", async () => {
      const { calls, lookup } = recordingLookup(() => []);
      const safe = fetcher({ lookup });
      await assertFailure(safe.get(`https://files.test:${host.port + 1}/`), "no_public_address");
      assert.deepEqual(calls, ["files.test"]);
    });

    it("reports a failing resolver as no_public_address", async () => {
      const lookup = async (): Promise<ResolvedAddress[]> => {
        throw Object.assign(new Error("getaddrinfo ENOTFOUND nowhere.test"), { code: "ENOTFOUND" });
      };
      const error = await assertFailure(
        fetcher({ resolve: new Map(), lookup }).get("https://nowhere.test/"),
        "no_public_address",
      );
      assert.ok(!error.message.includes("getaddrinfo"));
    });

    it("reports a resolver answer that is not an address as no_public_address", async () => {
      const lookup = async (): Promise<ResolvedAddress[]> => [{ address: "localhost", family: 4 }];
      await assertFailure(fetcher({ resolve: new Map(), lookup }).get("https://odd.test/"), "no_public_address");
    });

    it("counts a resolver that never answers against the deadline", async () => {
      const lookup = (): Promise<ResolvedAddress[]> => new Promise(() => {});
      await assertFailure(fetcher({ resolve: new Map(), lookup, timeoutMs: 300 }).get("https://slow.test/"), "timeout");
    });

    it("connects to the vetted address even when a later lookup would answer differently", async () => {
      // Same port on two loopback addresses: a second resolution would land on the sentinel.
      const decoy = await startSentinel({ address: "127.0.0.2" });
      const target = await startHttpsHost({ ca, hostnames: ["rebind.test"], port: decoy.port });
      try {
        target.serveProof("vetted");
        const { calls, lookup } = recordingLookup((call) => [
          call === 1 ? { address: "127.0.0.1", family: 4 } : { address: "127.0.0.2", family: 4 },
        ]);
        const response = await fetcher({ resolve: new Map(), lookup }).get(`${target.origin()}${PROOF_PATH}`);
        assert.equal(response.body.toString(), "vetted");
        assert.deepEqual(calls, ["rebind.test"]);
        assert.equal(target.requests.length, 1);
        assert.equal(target.requests[0]?.servername, "rebind.test");
        assert.equal(decoy.hits, 0);
      } finally {
        await target.close();
        await decoy.close();
      }
    });

    it("resolves once per fetch", async () => {
      host.serveProof("token");
      const { calls, lookup } = recordingLookup(() => [{ address: "127.0.0.1", family: 4 }]);
      const safe = fetcher({ resolve: new Map(), lookup });
      await safe.get(`${host.origin()}${PROOF_PATH}`);
      await safe.get(`${host.origin()}${PROOF_PATH}`);
      assert.deepEqual(calls, ["files.test", "files.test"]);
      assert.equal(host.requests.length, 2);
    });
  });

  describe("connection failures", () => {
    it("reports a refused connection without naming the address", async () => {
      const closed = await startSentinel();
      await closed.close();
      const resolve = new Map([[`gone.test:${closed.port}`, "127.0.0.1"]]);
      const error = await assertFailure(
        fetcher({ resolve }).get(`https://gone.test:${closed.port}/`),
        "connect_failed",
      );
      assertNoAddressIn(error.message, ["127.0.0.1", String(closed.port)]);
    });

    it("reports a peer that drops the connection during the handshake as tls_failed", async () => {
      const resolve = new Map([[`drop.test:${sentinel.port}`, "127.0.0.1"]]);
      const before = sentinel.hits;
      await assertFailure(fetcher({ resolve }).get(`https://drop.test:${sentinel.port}/`), "tls_failed");
      assert.equal(sentinel.hits, before + 1);
    });

    it("rejects with the caller's abort reason", async () => {
      const controller = new AbortController();
      host.route(PROOF_PATH, () => controller.abort());
      await assert.rejects(fetcher().get(`${host.origin()}${PROOF_PATH}`, { signal: controller.signal }), {
        name: "AbortError",
      });
    });
  });

  describe("configuration", () => {
    it("refuses a resolve map whose address is not an IP address", () => {
      assert.throws(() => fetcher({ resolve: new Map([["a.test:443", "a.test"]]) }), /not an IP address/);
    });

    it("refuses a non-positive timeout and a negative cap", () => {
      assert.throws(() => fetcher({ timeoutMs: 0 }), RangeError);
      assert.throws(() => fetcher({ maxBytes: -1 }), RangeError);
    });
  });
});
