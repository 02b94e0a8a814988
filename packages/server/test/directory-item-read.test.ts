/**
 * `GET /v1/listings/{did}` has two ways in: plain paths are answered ahead of Fastify's router,
 * everything else (percent-encoded DIDs, query strings, HEAD) by the Fastify route. A client must
 * not be able to tell them apart: same status, bytes, headers, rate limit and metrics. On SQLite
 * the read also goes through an in-memory cache: the process that wrote a listing serves it at
 * once, and a write by another process is served within a second.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { encodeDidKey, SqliteHandle } from "@proto/protocol";
import BetterSqlite3 from "better-sqlite3";
import { type DirectoryHarness, didPath, type HttpResult, startDirectoryHarness } from "./support/directory.js";
import { within } from "./support/eventually.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";

reportSkippedVariants();

const METRICS_TOKEN = "metrics-token-for-tests-0123456789";
const SAME_HEADERS = [
  "content-type",
  "cache-control",
  "access-control-allow-origin",
  "access-control-expose-headers",
  "content-length",
  "retry-after",
  "etag",
];

function assertSameAnswer(fast: HttpResult, routed: HttpResult, label: string): void {
  assert.equal(fast.status, routed.status, `${label}: status`);
  assert.equal(fast.text, routed.text, `${label}: body`);
  for (const name of SAME_HEADERS) {
    if (name === "retry-after") continue;
    assert.equal(fast.headers.get(name), routed.headers.get(name), `${label}: ${name}`);
  }
  // The clock runs on between the two requests (only pushed forward by the hook), so the window's
  // remaining seconds may tick down by one from the first answer to the second.
  const [first, second] = [fast, routed].map((r) => r.headers.get("retry-after"));
  if (first === null || second === null || first === undefined || second === undefined) {
    assert.equal(first, second, `${label}: retry-after`);
  } else {
    const tick = Number(first) - Number(second);
    assert.ok(tick === 0 || tick === 1, `${label}: retry-after ${first} then ${second}`);
  }
}

/**
 * Registers a fresh site whose document declares a did:key: a DID with nothing to
 * percent-encode, so `/v1/listings/{did}` as written is a plain path.
 */
async function registerPlain(h: DirectoryHarness, extra: Record<string, unknown>) {
  const site = h.site();
  const did = encodeDidKey(new Uint8Array(randomBytes(32)));
  site.serveDiscovery(site.document({ service_did: did }));
  const registered = await h.register(site, extra);
  assert.equal(registered.did, did);
  return registered;
}

/** The request count of one route and status, from `/metrics`. */
async function requestCount(h: DirectoryHarness, status: number): Promise<number> {
  const res = await h.request("GET", "/metrics", { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
  assert.equal(res.status, 200);
  const line = res.text
    .split("\n")
    .find(
      (l) =>
        l.startsWith("proto_http_requests_total{") &&
        l.includes('method="GET"') &&
        l.includes('route="/v1/listings/:did"') &&
        l.includes(`status="${status}"`),
    );
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(" ") + 1));
}

for (const variant of STORE_VARIANTS) {
  describe(`single-listing reads, both ways in (${variant.name})`, () => {
    let h: DirectoryHarness;
    let did: string;

    before(async () => {
      h = await startDirectoryHarness(variant, {
        sites: 4,
        env: {
          METRICS_TOKEN,
          DIRECTORY_RATE_LIMITS: "challenge=1000/60,create=1000/60,write=1000/60,read=12/60",
        },
      });
      ({ did } = await registerPlain(h, { title: "Both ways", tags: ["fast"] }));
    });
    after(async () => h?.close());

    test("a plain path, an encoded path, a query string and HEAD give the same answer", async () => {
      assert.ok(did.startsWith("did:"), did);
      const plain = await h.request("GET", `/v1/listings/${did}`);
      assert.equal(plain.status, 200);
      assert.equal(plain.json.service_did, did);
      assert.equal(plain.json.title, "Both ways");
      assert.equal(plain.headers.get("content-type"), "application/json; charset=utf-8");
      assert.equal(plain.headers.get("cache-control"), "public, max-age=60, s-maxage=300");
      assert.equal(plain.headers.get("access-control-allow-origin"), "*");
      assertSameAnswer(plain, await h.request("GET", didPath(did)), "encoded");
      assertSameAnswer(plain, await h.request("GET", `/v1/listings/${did}?unused=1`), "query string");
      const head = await h.request("HEAD", `/v1/listings/${did}`);
      assert.equal(head.status, 200);
      assert.equal(head.headers.get("cache-control"), plain.headers.get("cache-control"));

      // Not Modified: the same headers, every one of them, both ways in.
      const etag = plain.headers.get("etag") ?? "";
      assert.match(etag, /^".+"$/);
      const notModified = await h.request("GET", `/v1/listings/${did}`, { headers: { "if-none-match": etag } });
      const routedNotModified = await h.request("GET", didPath(did), { headers: { "if-none-match": etag } });
      assert.equal(notModified.status, 304);
      assert.equal(notModified.text, "");
      const headersOf = (res: HttpResult) =>
        [...res.headers].filter(([name]) => !["date", "connection", "keep-alive"].includes(name));
      assert.deepEqual(headersOf(notModified), headersOf(routedNotModified));
      assert.deepEqual(
        headersOf(notModified).map(([name]) => name),
        ["access-control-allow-origin", "access-control-expose-headers", "cache-control", "etag"],
      );

      const missing = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";
      const plainMissing = await h.request("GET", `/v1/listings/${missing}`);
      assert.equal(plainMissing.status, 404);
      assert.equal(plainMissing.json.error.code, "not_found");
      assertSameAnswer(plainMissing, await h.request("GET", didPath(missing)), "not found");
    });

    test("both ways spend the same read limit and answer 429 alike", async () => {
      // 7 reads so far this window (the test above); the limit is 12.
      await h.advance(60);
      const answers: HttpResult[] = [];
      for (let i = 0; i < 12; i++) {
        answers.push(await h.request("GET", i % 2 === 0 ? `/v1/listings/${did}` : didPath(did)));
      }
      assert.deepEqual(
        answers.map((a) => a.status),
        Array(12).fill(200),
      );
      const fast = await h.request("GET", `/v1/listings/${did}`);
      const routed = await h.request("GET", didPath(did));
      assert.equal(fast.status, 429);
      assert.equal(fast.json.error.code, "rate_limited");
      assert.match(fast.headers.get("retry-after") ?? "", /^[1-9][0-9]*$/);
      assert.equal(fast.headers.get("access-control-allow-origin"), "*");
      assertSameAnswer(fast, routed, "rate limited");
    });

    test("reads answered ahead of the router are counted in the metrics", async () => {
      await h.advance(60);
      const before200 = await requestCount(h, 200);
      const before404 = await requestCount(h, 404);
      await h.request("GET", `/v1/listings/${did}`);
      await h.request("GET", `/v1/listings/${did}`);
      await h.request("GET", "/v1/listings/did:web:nobody.example");
      assert.equal(await requestCount(h, 200), before200 + 2);
      assert.equal(await requestCount(h, 404), before404 + 1);
    });

    test("an update is seen by the very next read", async () => {
      await h.advance(60);
      const { did: other, token } = await registerPlain(h, { title: "Before" });
      assert.equal((await h.request("GET", `/v1/listings/${other}`)).json.title, "Before");
      const patched = await h.request("PATCH", didPath(other), { token, body: { title: "After" } });
      assert.equal(patched.status, 200);
      assert.equal((await h.request("GET", `/v1/listings/${other}`)).json.title, "After");
      assert.equal((await h.request("DELETE", didPath(other), { token })).status, 204);
      assert.equal((await h.request("GET", `/v1/listings/${other}`)).json.status, "deleted");
    });

    if (variant.engine === "sqlite") {
      test("a commit by another process on the same SQLite file is seen within a second", async () => {
        await h.advance(60);
        const first = await h.request("GET", `/v1/listings/${did}`);
        assert.equal(first.json.title, "Both ways");
        // Another process's connection: nothing in this server is told about the write.
        const path = h.databaseUrl.slice("sqlite:".length);
        assert.ok(path.endsWith(".db"), path);
        const other = new SqliteHandle(new BetterSqlite3(path));
        try {
          const changed = JSON.stringify({ ...first.json, title: "Written elsewhere" });
          other.prepare("update dir_listings set body = ? where service_did = ?").run([changed, did]);
        } finally {
          other.close();
        }
        // Each attempt from a client address of its own: the suite's read limit is 12 a minute.
        let client = 1;
        await within(1000, "the other process's write is served", async () => {
          const read = await h.request("GET", `/v1/listings/${did}`, { from: `127.0.0.${++client}` });
          assert.equal(read.status, 200);
          return read.json.title === "Written elsewhere";
        });
      });
    }
  });
}

/**
 * Behind proxies the rate-limit identity comes from `X-Forwarded-For`, but only as told by a
 * listed proxy. On this machine 127.0.0.2 plays the proxy and 127.0.0.1 a client that reaches the
 * server directly; 192.0.2.0/24 holds the proxies in front of it. At most two proxies are walked
 * through (TRUSTED_PROXY_HOPS). Reads alternate between the fast path and the Fastify route: one
 * rule for both.
 */
for (const variant of STORE_VARIANTS) {
  describe(`the client address behind trusted proxies (${variant.name})`, () => {
    const PROXY = "127.0.0.2";
    let h: DirectoryHarness;
    let did: string;
    const read = (i: number, headers: Record<string, string>, from?: string) =>
      h.request("GET", i % 2 === 0 ? `/v1/listings/${did}` : didPath(did), {
        headers,
        ...(from === undefined ? {} : { from }),
      });
    /** Two reads allowed a window: both succeed, the third is 429, whichever way each came in. */
    async function assertOneIdentity(label: string, headersOf: (i: number) => Record<string, string>, from?: string) {
      const statuses: number[] = [];
      for (let i = 0; i < 4; i++) statuses.push((await read(i, headersOf(i), from)).status);
      assert.deepEqual(statuses, [200, 200, 429, 429], label);
    }

    before(async () => {
      h = await startDirectoryHarness(variant, {
        sites: 2,
        env: {
          TRUSTED_PROXIES: `${PROXY}, 192.0.2.0/24`,
          TRUSTED_PROXY_HOPS: "2",
          DIRECTORY_RATE_LIMITS: "create=1000/60,read=2/60",
        },
      });
      ({ did } = await registerPlain(h, { title: "Behind a proxy" }));
    });
    after(async () => h?.close());

    test("a client that connects directly cannot choose its identity with X-Forwarded-For", async () => {
      await h.advance(60);
      await assertOneIdentity("every read names another address", (i) => ({ "x-forwarded-for": `198.51.100.${i}` }));
      const sideways = await h.request("GET", `/v1/listings/${did}`, {
        headers: { "x-forwarded-for": "198.51.100.99, 127.0.0.2" },
      });
      assert.equal(sideways.status, 429, "naming the proxy does not help either");
    });

    test("a listed proxy's X-Forwarded-For names the client, read from the right", async () => {
      await h.advance(60);
      await assertOneIdentity("the direct client", () => ({}));
      const client = { "x-forwarded-for": "203.0.113.7" };
      await assertOneIdentity("203.0.113.7 through the proxy", () => client, PROXY);
      // Another client behind the same proxy has its own counter; what that client wrote to the
      // left of the proxy's entry (here the exhausted 203.0.113.7) is not believed.
      const other = await read(0, { "x-forwarded-for": "203.0.113.7, 203.0.113.8" }, PROXY);
      assert.equal(other.status, 200);
      // A second listed proxy (192.0.2.0/24) in the chain is walked through.
      await assertOneIdentity(
        "203.0.113.9 through two proxies",
        () => ({ "x-forwarded-for": "203.0.113.9, 192.0.2.10" }),
        PROXY,
      );
      // A third proxy is past TRUSTED_PROXY_HOPS: the walk stops at it, whatever is to its left.
      await assertOneIdentity(
        "192.0.2.11, the third hop",
        (i) => ({ "x-forwarded-for": `203.0.113.${20 + i}, 192.0.2.11, 192.0.2.10` }),
        PROXY,
      );
      const proxyItself = await read(0, {}, PROXY);
      assert.equal(proxyItself.status, 200, "without the header the proxy is its own client");
    });
  });
}
