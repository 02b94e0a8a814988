/**
 * Mirror mode, black-box: an upstream directory (the harness, with its sites and test hooks) and a
 * mirror built in-process exactly as `proto-server directory --mirror-of URL` builds it. Passes run
 * through `/__test/mirror/sync`, clocks move through `/__test/clock`; nothing sleeps. Upstream
 * requests are counted (and broken, where a test needs it) through the mirror's injected fetch.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { createServer, type ServerResponse } from "node:http";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { SqliteHandle } from "@proto/protocol";
import { DISCOVERY_PATH } from "@proto/testkit";
import BetterSqlite3 from "better-sqlite3";
import { buildDirectoryApp, type DirectoryApp } from "../src/directory/app.js";
import { readDirectoryConfig } from "../src/directory/config.js";
import type { MirrorFetch } from "../src/directory/mirror.js";
import { MIRROR_HEARTBEAT_MS, MIRROR_LEASE_MS } from "../src/directory/mirror-lease.js";
import { type DirectoryHarness, didPath, type HttpResult, startDirectoryHarness } from "./support/directory.js";
import { httpRequest, quietLog, type RequestOptions } from "./support/http.js";
import {
  createTestDatabase,
  reportSkippedVariants,
  STORE_VARIANTS,
  type StoreVariant,
  type TestDatabase,
} from "./support/stores.js";

reportSkippedVariants();

const DAY = 86400;
const MIRROR_PUBLIC_URL = "https://mirror.test";
const UPSTREAM_PUBLIC_URL = "https://directory.test";

// ---- the mirror under test -----------------------------------------------------------------

interface Call {
  url: URL;
  status: number | "error";
  retryAfter: string | null;
  /** Listings in a 200 page. */
  listings: number;
}

/** The mirror's fetch, recording every upstream request and what it brought back. */
function recorder(inner: MirrorFetch = (url, init) => fetch(url, init)) {
  const calls: Call[] = [];
  const recorded: MirrorFetch = async (url, init) => {
    let response: Response;
    try {
      response = await inner(url, init);
    } catch (error) {
      calls.push({ url: new URL(url), status: "error", retryAfter: null, listings: 0 });
      throw error;
    }
    let listings = 0;
    if (response.status === 200)
      listings = ((await response.clone().json()) as { listings: unknown[] }).listings.length;
    calls.push({
      url: new URL(url),
      status: response.status,
      retryAfter: response.headers.get("retry-after"),
      listings,
    });
    return response;
  };
  return {
    fetch: recorded,
    calls,
    listingsFetched: () => calls.reduce((n, c) => n + c.listings, 0),
  };
}

interface Mirror {
  url: string;
  app: DirectoryApp;
  request(method: string, path: string, options?: RequestOptions): Promise<HttpResult>;
  // biome-ignore lint/suspicious/noExplicitAny: hook answers, asserted field by field
  sync(): Promise<any>;
  // biome-ignore lint/suspicious/noExplicitAny: the readiness answer, asserted field by field
  ready(): Promise<{ status: number; json: any }>;
  advance(seconds: number): Promise<void>;
  close(): Promise<void>;
}

/** A mirror on `database`, configured the way `--mirror-of upstream` and the environment do it. */
async function startMirror(
  database: TestDatabase,
  upstream: string,
  options: { fetch?: MirrorFetch; env?: Record<string, string> } = {},
): Promise<Mirror> {
  const config = readDirectoryConfig({
    PROTO_TEST_HOOKS: "1",
    DIRECTORY_DATABASE_URL: database.url,
    DIRECTORY_PUBLIC_URL: MIRROR_PUBLIC_URL,
    DIRECTORY_MIRROR_OF: upstream,
    DIRECTORY_MIRROR_POLL_SECONDS: "0",
    LOG_LEVEL: "warn",
    ...options.env,
  });
  const app = await buildDirectoryApp(config, {
    logStream: quietLog(),
    ...(options.fetch ? { mirrorFetch: options.fetch } : {}),
  });
  await app.app.listen({ port: 0, host: "127.0.0.1" });
  const address = app.app.server.address();
  if (address === null || typeof address === "string") throw new Error("no address");
  const url = `http://127.0.0.1:${address.port}`;
  const request = (method: string, path: string, opts?: RequestOptions) => httpRequest(url, method, path, opts);
  return {
    url,
    app,
    request,
    async sync() {
      const res = await request("POST", "/__test/mirror/sync", { body: {} });
      assert.equal(res.status, 200, res.text);
      return res.json;
    },
    async ready() {
      const res = await request("GET", "/readyz");
      assert.equal(res.headers.get("cache-control"), "no-store");
      return { status: res.status, json: res.json };
    },
    async advance(seconds) {
      const res = await request("POST", "/__test/clock", { body: { advance_seconds: seconds } });
      assert.equal(res.status, 200, res.text);
    },
    close: () => app.close(),
  };
}

// ---- comparing reads -----------------------------------------------------------------------

/** Every page of a list query, as the raw response texts. */
async function pages(request: Mirror["request"], query: string): Promise<string[]> {
  const out: string[] = [];
  let cursor: string | null = null;
  do {
    const path: string = `/v1/listings?${query}${cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`}`;
    const res = await request("GET", path);
    assert.equal(res.status, 200, `${path}: ${res.text}`);
    assert.equal(res.headers.get("cache-control"), "public, max-age=30, s-maxage=120");
    out.push(res.text);
    cursor = res.json.next_cursor;
  } while (cursor !== null);
  return out;
}

const LIST_QUERIES = [
  "limit=100",
  "limit=100&include_deleted=true",
  "limit=2&include_deleted=true",
  "limit=100&status=active",
  "limit=100&status=stale",
  "limit=100&status=deleted",
  "limit=100&tag=alpha",
  "limit=100&tag=beta&include_deleted=true",
  "limit=100&search=widget",
  "limit=100&search=WIDGET&tag=alpha",
  "limit=100&updated_since=2000-01-01T00:00:00Z",
];

const FETCHED_AT = /"fetched_at":"([^"]*)"/g;

/**
 * `actual` is `expected` byte for byte; with `trailing`, except that a listing's `fetched_at` may
 * be earlier than the upstream's. A revalidation that changes nothing a reader sees moves
 * `fetched_at` without moving `updated_at` (decisions §9), so no `updated_since` poll can see it.
 */
function assertSameBytes(actual: string, expected: string, what: string, trailing: boolean): void {
  if (!trailing) {
    assert.equal(actual, expected, what);
    return;
  }
  const mine = [...actual.matchAll(FETCHED_AT)].map((m) => Date.parse(m[1] as string));
  const theirs = [...expected.matchAll(FETCHED_AT)].map((m) => Date.parse(m[1] as string));
  assert.equal(mine.length, theirs.length, what);
  for (const [i, at] of mine.entries()) assert.ok(at <= (theirs[i] as number), `${what}: fetched_at ahead`);
  const blank = (text: string) => text.replace(FETCHED_AT, '"fetched_at":""');
  assert.equal(blank(actual), blank(expected), what);
}

/**
 * The mirror answers every read as the upstream does: byte for byte, cursors included, for lists
 * under each filter, for each listing (deleted ones too) and for an unknown DID; the sitemap
 * differs only in the public URL it links to. `trailing`: see `assertSameBytes`.
 */
async function assertSameReads(
  up: DirectoryHarness,
  mirror: Mirror,
  dids: string[],
  { trailing = false } = {},
): Promise<void> {
  for (const query of LIST_QUERIES) {
    const [expected, actual] = await Promise.all([pages(up.request, query), pages(mirror.request, query)]);
    assert.equal(actual.length, expected.length, `GET /v1/listings?${query}: pages`);
    for (const [i, page] of actual.entries()) {
      assertSameBytes(page, expected[i] as string, `GET /v1/listings?${query} page ${i}`, trailing);
    }
  }
  for (const did of [...dids, "did:web:never-listed.test"]) {
    const [expected, actual] = await Promise.all([
      up.request("GET", didPath(did)),
      mirror.request("GET", didPath(did)),
    ]);
    assert.equal(actual.status, expected.status, did);
    if (expected.status === 200) {
      assertSameBytes(actual.text, expected.text, `GET ${didPath(did)}`, trailing);
      assert.equal(actual.headers.get("cache-control"), expected.headers.get("cache-control"));
    }
  }
  const [expected, actual] = await Promise.all([
    up.request("GET", "/sitemap.xml"),
    mirror.request("GET", "/sitemap.xml"),
  ]);
  assert.equal(actual.status, 200);
  assert.equal(actual.text, expected.text.replaceAll(UPSTREAM_PUBLIC_URL, MIRROR_PUBLIC_URL));
}

async function patch(up: DirectoryHarness, did: string, token: string, body: Record<string, unknown>) {
  const res = await up.request("PATCH", didPath(did), { token, body });
  assert.equal(res.status, 200, res.text);
}

const failing = (_req: unknown, res: ServerResponse) => {
  res.writeHead(500, { "content-type": "text/plain" });
  res.end("down");
};

/** Serves an upstream-shaped answer from the mirror's injected fetch, with no upstream at all. */
const answering =
  (status: number, body: unknown, headers: Record<string, string> = {}): MirrorFetch =>
  async () =>
    new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } });

// ---- per store ------------------------------------------------------------------------------

for (const variant of STORE_VARIANTS) {
  describe(`directory mirror (${variant.name})`, () => {
    test("creates, updates, deletes and revalidation outcomes upstream all reach the mirror", async () => {
      const up = await startDirectoryHarness(variant, { sites: 8 });
      const database = await createTestDatabase(variant.engine);
      const counted = recorder();
      const mirror = await startMirror(database, up.url, { fetch: counted.fetch });
      try {
        // Before a first complete pass the mirror is unready, and says why.
        let ready = await mirror.ready();
        assert.equal(ready.status, 503);
        assert.equal(ready.json.error.code, "unavailable");
        assert.match(ready.json.error.message, /first sync/);
        assert.equal(ready.json.error.details.mirror.upstream, up.url);
        assert.equal(ready.json.error.details.mirror.last_synced_at, null);

        const a = await up.register(undefined, { title: "Widget shop", tags: ["alpha", "beta"] });
        const b = await up.register(undefined, { title: "Gadgets", description: "widgets too", tags: ["alpha"] });
        const c = await up.register(undefined, { description: "plain" });
        const d = await up.register(undefined, { title: "Goes stale", tags: ["beta"] });
        // A did:key listing that will leave its host for another, which a new listing then takes.
        const keyDid = "did:key:z6MkmirrorTestKeyOnlyListing";
        const movingFrom = up.site();
        movingFrom.serveDiscovery(movingFrom.document({ service_did: keyDid }));
        const moving = await up.register(movingFrom, { title: "Moving widget" });

        let result = await mirror.sync();
        assert.equal(result.outcome, "synced");
        assert.equal(result.listings_fetched, 5);
        assert.equal(result.listings_applied, 5);
        // The first pass reads everything, deleted listings included, from the start.
        const first = counted.calls[0]?.url;
        assert.equal(first?.pathname, "/v1/listings");
        assert.equal(first?.searchParams.get("include_deleted"), "true");
        assert.equal(first?.searchParams.get("updated_since"), null);
        ready = await mirror.ready();
        assert.equal(ready.status, 200);
        assert.equal(ready.json.status, "ready");
        await assertSameReads(up, mirror, [a.did, b.did, c.did, d.did, keyDid]);

        // Updates, a withdrawal, a document change and a listing going stale, all upstream.
        await patch(up, a.did, a.token, { title: "Widget shop, renamed", tags: ["beta"] });
        await patch(up, b.did, b.token, { description: null });
        assert.equal((await up.request("DELETE", didPath(c.did), { token: c.token })).status, 204);
        d.site.setHandler(DISCOVERY_PATH, failing);
        b.site.serveDiscovery(b.site.document({ features: ["attestation"] }));
        for (let day = 0; day < 3; day++) {
          await up.advance(DAY);
          await up.revalidate();
        }
        assert.equal((await up.request("GET", didPath(d.did))).json.status, "stale");
        // The did:key listing is withdrawn, its host taken by a new listing, and it lists itself
        // again from another host: the mirror last saw it live on the host the new one now holds.
        assert.equal((await up.request("DELETE", didPath(keyDid), { token: moving.token })).status, 204);
        movingFrom.serveDiscovery(movingFrom.document());
        const taker = await up.register(movingFrom, { title: "Took the host" });
        const movingTo = up.site();
        movingTo.serveDiscovery(movingTo.document({ service_did: keyDid }));
        await up.register(movingTo, { title: "Moved widget" });

        const before = counted.calls.length;
        result = await mirror.sync();
        assert.equal(result.outcome, "synced");
        // An incremental pass: from the last position, less the look-back (10 s by default).
        const incremental = counted.calls[before]?.url;
        const position = Date.parse(ready.json.mirror.position.updated_at);
        assert.equal(incremental?.searchParams.get("updated_since"), new Date(position - 10_000).toISOString());
        assert.equal(incremental?.searchParams.get("include_deleted"), "true");
        assert.ok(result.listings_fetched < 9, `an incremental pass fetched ${result.listings_fetched}`);
        await assertSameReads(up, mirror, [a.did, b.did, c.did, d.did, keyDid, taker.did], { trailing: true });

        // Thirty days later the stale listing is deleted upstream, and then on the mirror.
        await up.advance(30 * DAY);
        const counts = await up.revalidate();
        assert.equal(counts.deleted, 1);
        result = await mirror.sync();
        assert.equal(result.outcome, "synced");
        assert.equal((await mirror.request("GET", didPath(d.did))).json.status, "deleted");
        await assertSameReads(up, mirror, [a.did, b.did, c.did, d.did, keyDid, taker.did], { trailing: true });

        // Nothing changed: another pass writes nothing.
        result = await mirror.sync();
        assert.equal(result.outcome, "synced");
        assert.equal(result.listings_applied, 0);
      } finally {
        await mirror.close();
        await up.close();
        await database.drop();
      }
    });

    test("a mirror stopped mid-sync resumes from its cursor instead of downloading everything again", async () => {
      const up = await startDirectoryHarness(variant, { sites: 7 });
      const database = await createTestDatabase(variant.engine);
      const mirrors: Mirror[] = [];
      try {
        const dids: string[] = [];
        for (let i = 0; i < 7; i++) dids.push((await up.register(undefined, { title: `Listing ${i}` })).did);
        const env = { DIRECTORY_MIRROR_PAGE_SIZE: "2", DIRECTORY_MIRROR_LOOKBACK_SECONDS: "0" };

        // The first mirror gets one page of two; its second request hangs until it is stopped.
        let requests = 0;
        let secondRequest: () => void = () => undefined;
        const stalled = new Promise<void>((resolve) => {
          secondRequest = resolve;
        });
        const stalling: MirrorFetch = (url, init) => {
          if (requests++ === 0) return fetch(url, init);
          secondRequest();
          return new Promise((_resolve, reject) => {
            init.signal?.addEventListener("abort", () => reject(init.signal?.reason));
          });
        };
        const first = await startMirror(database, up.url, { fetch: stalling, env });
        mirrors.push(first);
        const pending = first.sync();
        await stalled;
        await first.close();
        const stopped = await pending;
        assert.equal(stopped.outcome, "stopped");
        assert.equal(stopped.pages, 1);
        assert.equal(stopped.listings_applied, 2);
        assert.equal(stopped.mirror.last_error, null, "stopping is not an upstream failure");

        // A new process on the same database goes on from the second page.
        const counted = recorder();
        const second = await startMirror(database, up.url, { fetch: counted.fetch, env });
        mirrors.push(second);
        assert.equal((await second.ready()).status, 503, "no pass has completed yet");
        const resumed = await second.sync();
        assert.equal(resumed.outcome, "synced");
        assert.ok(counted.calls[0]?.url.searchParams.get("cursor"), "the first request carries the saved cursor");
        assert.equal(counted.calls.length, 3, "pages 2 to 4 of 4");
        assert.equal(counted.listingsFetched(), 5, "the 7 listings less the 2 already applied");
        assert.equal(resumed.listings_applied, 5);
        await assertSameReads(up, second, dids);

        // Caught up: the next pass asks only from the last position (updated_since is inclusive).
        const caughtUp = await second.sync();
        assert.equal(caughtUp.outcome, "synced");
        assert.equal(counted.calls.length, 4);
        assert.ok(counted.calls[3]?.url.searchParams.get("updated_since"));
        assert.ok(caughtUp.listings_fetched < 7);
        assert.equal(caughtUp.listings_applied, 0);
        await second.close();

        // A restart after a complete pass is ready at once, its lag read from the database.
        const third = await startMirror(database, up.url, { env });
        mirrors.push(third);
        const ready = await third.ready();
        assert.equal(ready.status, 200);
        assert.equal(ready.json.mirror.last_synced_at, caughtUp.mirror.last_synced_at);
      } finally {
        for (const mirror of mirrors) await mirror.close();
        await up.close();
        await database.drop();
      }
    });

    test("a replica killed mid-sync is taken over once its short lease runs out, not minutes later", {
      timeout: 60_000,
    }, async () => {
      const up = await startDirectoryHarness(variant, { sites: 2 });
      const database = await createTestDatabase(variant.engine);
      // The upstream as the killed replica knows it: it answers no request, so the pass hangs.
      const hanging = createServer();
      const firstRequest = once(hanging, "request");
      hanging.listen(0, "127.0.0.1");
      await once(hanging, "listening");
      const address = hanging.address();
      assert.ok(address !== null && typeof address === "object");
      const upstream = `http://127.0.0.1:${address.port}`;
      const env: Record<string, string> = {};
      for (const [key, value] of Object.entries(process.env)) {
        if (value !== undefined && !/^(NODE_TEST_CONTEXT|NODE_OPTIONS|DIRECTORY_|PROTO_|LOG_LEVEL)/.test(key)) {
          env[key] = value;
        }
      }
      const child = spawn(
        process.execPath,
        [
          "--conditions=source",
          "--import",
          "tsx",
          fileURLToPath(new URL("../src/cli.ts", import.meta.url)),
          ...["directory", "--port", "0", "--host", "127.0.0.1", "--mirror-of", upstream],
        ],
        {
          env: { ...env, DIRECTORY_DATABASE_URL: database.url, DIRECTORY_PUBLIC_URL: MIRROR_PUBLIC_URL },
          stdio: "ignore",
        },
      );
      const exited = once(child, "exit");
      let mirror: Mirror | undefined;
      try {
        await Promise.race([
          firstRequest,
          exited.then(() => assert.fail("the replica ended before it asked the upstream")),
        ]);
        // It holds the lease (taken before its first request) and dies without a word.
        child.kill("SIGKILL");
        await exited;
        hanging.closeAllConnections();

        const dids = [(await up.register()).did, (await up.register()).did];
        // The surviving replica reaches the same upstream (here: the harness behind that URL).
        mirror = await startMirror(database, upstream, {
          fetch: (url, init) => fetch(url.replace(upstream, up.url), init),
        });
        assert.equal((await mirror.sync()).outcome, "busy", "the lease is the dead replica's for now");
        await mirror.advance(MIRROR_LEASE_MS / 1000 - 2);
        assert.equal((await mirror.sync()).outcome, "busy");
        await mirror.advance(3);
        const takenOver = await mirror.sync();
        assert.equal(takenOver.outcome, "synced", takenOver.error);
        assert.equal(takenOver.listings_applied, 2);
        await assertSameReads(up, mirror, dids);
      } finally {
        if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
        await mirror?.close();
        hanging.closeAllConnections();
        hanging.close();
        await up.close();
        await database.drop();
      }
    });

    test("a rate-limited mirror waits for the upstream's Retry-After before it asks again", async () => {
      const up = await startDirectoryHarness(variant, { sites: 1, env: { DIRECTORY_RATE_LIMITS: "read=1/3600" } });
      const database = await createTestDatabase(variant.engine);
      const counted = recorder();
      const mirror = await startMirror(database, up.url, { fetch: counted.fetch });
      try {
        await up.register();
        // One read an hour: a second pass is refused (a third, if the first two straddled windows).
        let result = await mirror.sync();
        assert.equal(result.outcome, "synced");
        for (let i = 0; i < 2 && result.outcome === "synced"; i++) result = await mirror.sync();
        assert.equal(result.outcome, "failed");
        const refused = counted.calls.at(-1);
        assert.equal(refused?.status, 429);
        const retryAfter = Number(refused?.retryAfter);
        assert.ok(retryAfter >= 1 && retryAfter <= 3600, `Retry-After ${refused?.retryAfter}`);
        assert.match(result.error, /HTTP 429 \(rate_limited/);
        assert.ok(result.error.includes(up.url), "the error names the upstream");
        const status = result.mirror;
        assert.equal(status.consecutive_failures, 1);
        const failedAt = Date.parse(status.last_error_at);
        const nextAttempt = Date.parse(status.next_attempt_at);
        assert.equal(nextAttempt - failedAt, retryAfter * 1000, "the next attempt is Retry-After away");

        // Until then a pass is deferred: no request goes out.
        const requests = counted.calls.length;
        result = await mirror.sync();
        assert.equal(result.outcome, "deferred");
        assert.equal(counted.calls.length, requests);
        assert.equal(result.mirror.next_attempt_at, status.next_attempt_at);
        const readiness = await mirror.ready();
        assert.equal(readiness.status, 200, "a mirror that has synced once keeps serving");
        assert.match(readiness.json.mirror.last_error, /429/);
        assert.equal(readiness.json.mirror.next_attempt_at, status.next_attempt_at);
        if (retryAfter > 1) {
          await mirror.advance(retryAfter - 1);
          assert.equal((await mirror.sync()).outcome, "deferred");
          assert.equal(counted.calls.length, requests);
        }

        // Once Retry-After has passed (and the upstream's window too), the mirror asks again.
        await mirror.advance(1);
        await up.advance(3600);
        result = await mirror.sync();
        assert.equal(result.outcome, "synced");
        assert.equal(counted.calls.length, requests + 1);
        assert.equal(result.mirror.consecutive_failures, 0);
        assert.equal(result.mirror.last_error, null);
      } finally {
        await mirror.close();
        await up.close();
        await database.drop();
      }
    });
  });
}

// ---- independent of the store -----------------------------------------------------------------

describe("directory mirror (behaviour without an upstream)", () => {
  const sqlite: StoreVariant = { name: "sqlite", engine: "sqlite", redis: false };
  const UPSTREAM = "https://upstream.test";

  test("without Retry-After, failures back off exponentially up to the cap", async () => {
    const database = await createTestDatabase(sqlite.engine);
    const counted = recorder(answering(503, { error: { code: "unavailable", message: "maintenance" } }));
    const mirror = await startMirror(database, UPSTREAM, {
      fetch: counted.fetch,
      env: { DIRECTORY_MIRROR_MAX_BACKOFF_SECONDS: "20" },
    });
    try {
      // 5 s, 10 s (each with up to 20% jitter), then the 20 s cap.
      const expected = [
        [5_000, 6_000],
        [10_000, 12_000],
        [20_000, 20_000],
        [20_000, 20_000],
      ];
      for (const [failures, [low, high]] of expected.entries()) {
        const result = await mirror.sync();
        assert.equal(result.outcome, "failed");
        assert.equal(result.error, `${UPSTREAM}/v1/listings answered HTTP 503 (unavailable: maintenance)`);
        assert.equal(result.mirror.consecutive_failures, failures + 1);
        const delay = Date.parse(result.mirror.next_attempt_at) - Date.parse(result.mirror.last_error_at);
        assert.ok(delay >= (low as number) && delay <= (high as number), `failure ${failures + 1}: ${delay} ms`);
        assert.equal((await mirror.sync()).outcome, "deferred");
        await mirror.advance(delay / 1000);
      }
      assert.equal(counted.calls.length, 4, "one request per attempt, none while backing off");
      const ready = await mirror.ready();
      assert.equal(ready.status, 503);
      assert.equal(
        ready.json.error.details.mirror.last_error,
        `${UPSTREAM}/v1/listings answered HTTP 503 (unavailable: maintenance)`,
      );
      assert.equal(ready.json.error.details.mirror.consecutive_failures, 4);
    } finally {
      await mirror.close();
      await database.drop();
    }
  });

  test("malformed, oversized and redirected upstream answers fail the pass and apply nothing", async () => {
    const database = await createTestDatabase(sqlite.engine);
    let answer: MirrorFetch = answering(200, { listings: [{ service_did: "did:web:x.test" }], next_cursor: null });
    const mirror = await startMirror(database, UPSTREAM, {
      fetch: (url, init) => answer(url, init),
      env: { DIRECTORY_MIRROR_MAX_BACKOFF_SECONDS: "5" },
    });
    const attempt = async () => {
      await mirror.advance(10);
      const result = await mirror.sync();
      assert.equal(result.outcome, "failed");
      assert.equal(result.listings_applied, 0);
      return result.error as string;
    };
    try {
      assert.match(await attempt(), /listing 0 of a page \(did:web:x\.test\) has no discovery_url/);
      answer = async () => new Response("<html>", { status: 200 });
      assert.match(await attempt(), /not JSON/);
      answer = async () => new Response(null, { status: 301, headers: { location: "https://elsewhere.test/" } });
      assert.match(await attempt(), /HTTP 301 to https:\/\/elsewhere\.test\/; redirects are not followed/);
      answer = async () => new Response("x", { status: 200, headers: { "content-length": String(17 * 1024 * 1024) } });
      assert.match(await attempt(), /more than 16777216 bytes/);
      answer = async () => {
        throw new TypeError("fetch failed", { cause: { code: "ECONNREFUSED" } });
      };
      assert.match(await attempt(), /could not be reached \(ECONNREFUSED\)/);
      assert.equal((await mirror.request("GET", "/v1/listings?include_deleted=true")).json.listings.length, 0);
    } finally {
      await mirror.close();
      await database.drop();
    }
  });

  test("a cursor the upstream no longer takes restarts the traversal from the position", async () => {
    const listing = (n: number) => ({
      service_did: `did:web:s${n}.test`,
      discovery_url: `https://s${n}.test/.well-known/proto`,
      discovery_doc: { proto_version: "0.1", service_did: `did:web:s${n}.test` },
      fetched_at: `2030-01-0${n}T00:00:00.000Z`,
      first_listed_at: `2030-01-0${n}T00:00:00.000Z`,
      updated_at: `2030-01-0${n}T00:00:00.000Z`,
      status: "active",
      tags: ["t"],
      title: `Listing ${n}`,
      description: null,
      _meta: {},
    });
    const database = await createTestDatabase(sqlite.engine);
    const counted = recorder(async (url, init) => {
      const query = new URL(url).searchParams;
      if (query.has("cursor")) {
        return answering(400, { error: { code: "invalid_request", message: "cursor is not valid" } })(url, init);
      }
      if (query.has("updated_since"))
        return answering(200, { listings: [listing(1), listing(2)], next_cursor: null })(url, init);
      return answering(200, { listings: [listing(1)], next_cursor: "c1" })(url, init);
    });
    const mirror = await startMirror(database, UPSTREAM, {
      fetch: counted.fetch,
      env: { DIRECTORY_MIRROR_LOOKBACK_SECONDS: "0" },
    });
    try {
      const result = await mirror.sync();
      assert.equal(result.outcome, "synced", result.error);
      assert.deepEqual(
        counted.calls.map((c) => [c.status, c.url.searchParams.get("cursor"), c.url.searchParams.get("updated_since")]),
        [
          [200, null, null],
          [400, "c1", null],
          [200, null, "2030-01-01T00:00:00.000Z"],
        ],
      );
      const listed = await mirror.request("GET", "/v1/listings?tag=t");
      assert.deepEqual(listed.json, { listings: [listing(1), listing(2)], next_cursor: null });
    } finally {
      await mirror.close();
      await database.drop();
    }
  });

  test("a live replica's heartbeat keeps the lease through a slow page: one replica syncs at a time", async () => {
    const database = await createTestDatabase(sqlite.engine);
    let stalledResolve: () => void = () => undefined;
    const stalled = new Promise<void>((resolve) => {
      stalledResolve = resolve;
    });
    const slow: MirrorFetch = (_url, init) => {
      stalledResolve();
      return new Promise((_resolve, reject) => {
        init.signal?.addEventListener("abort", () => reject(init.signal?.reason));
      });
    };
    const holder = await startMirror(database, UPSTREAM, { fetch: slow });
    const counted = recorder(answering(200, { listings: [], next_cursor: null }));
    const other = await startMirror(database, UPSTREAM, { fetch: counted.fetch });
    const leaseUntil = () => {
      const file = new SqliteHandle(new BetterSqlite3(database.url.slice("sqlite:".length), { readonly: true }));
      try {
        return (file.prepare("select lease_until from dir_mirror_state").get() as { lease_until: number }).lease_until;
      } finally {
        file.close();
      }
    };
    try {
      const pending = holder.sync();
      await stalled;
      assert.equal((await other.sync()).outcome, "busy");
      // Time passes for both replicas, past the lease as it was taken: the holder's next heartbeat
      // (a real-time timer) renews it from its own clock. Wait for that write, not for a duration.
      const taken = leaseUntil();
      await holder.advance(MIRROR_LEASE_MS / 1000 + 5);
      await other.advance(MIRROR_LEASE_MS / 1000 + 5);
      const deadline = Date.now() + MIRROR_HEARTBEAT_MS * 3;
      while (leaseUntil() <= taken + MIRROR_LEASE_MS) {
        assert.ok(Date.now() < deadline, "no heartbeat renewed the lease");
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      assert.equal((await other.sync()).outcome, "busy", "a live holder is not displaced");
      assert.equal(counted.calls.length, 0, "the other replica never asked the upstream");
      // The holder stops: its lease goes with it, and the other replica syncs at once.
      await holder.close();
      assert.equal((await pending).outcome, "stopped");
      assert.equal((await other.sync()).outcome, "synced");
      assert.equal(counted.calls.length, 1);
    } finally {
      await holder.close();
      await other.close();
      await database.drop();
    }
  });

  test("write endpoints answer 405 read_only_mirror naming the upstream", async () => {
    const database = await createTestDatabase(sqlite.engine);
    const mirror = await startMirror(database, UPSTREAM, { env: { DIRECTORY_ADMIN_TOKEN: "admin-token-0123456789" } });
    try {
      const writes: [string, string, RequestOptions, string][] = [
        ["POST", "/v1/listings/challenge", { body: { discovery_url: "https://a.test/.well-known/proto" } }, ""],
        ["POST", "/v1/listings", { body: { discovery_url: "x", challenge_token: "y" } }, "GET, HEAD"],
        ["POST", "/v1/listings", { rawBody: "{not json" }, "GET, HEAD"],
        ["PATCH", didPath("did:web:a.test"), { token: "sess_x", body: { title: "t" } }, "GET, HEAD"],
        ["DELETE", didPath("did:web:a.test"), { token: "sess_x" }, "GET, HEAD"],
        ["POST", "/admin/revalidate", { token: "admin-token-0123456789", body: {} }, ""],
      ];
      for (const [method, path, options, allow] of writes) {
        const res = await mirror.request(method, path, options);
        assert.equal(res.status, 405, `${method} ${path}: ${res.text}`);
        assert.equal(res.headers.get("allow"), allow);
        assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
        assert.equal(res.json.error.code, "read_only_mirror");
        assert.equal(
          res.json.error.message,
          `this directory is a read-only mirror of ${UPSTREAM}; send changes to ${UPSTREAM}`,
        );
        assert.deepEqual(res.json.error.details, { upstream: UPSTREAM });
      }
      // Reads still work, and a mirror has no revalidation to drive.
      assert.equal((await mirror.request("GET", "/v1/listings")).status, 200);
      assert.equal((await mirror.request("POST", "/__test/revalidate", { body: {} })).status, 404);
    } finally {
      await mirror.close();
      await database.drop();
    }
  });

  test("/readyz reports the lag from the start of the last complete pass", async () => {
    const database = await createTestDatabase(sqlite.engine);
    const mirror = await startMirror(database, UPSTREAM, {
      fetch: answering(200, { listings: [], next_cursor: null }),
    });
    try {
      const synced = await mirror.sync();
      assert.equal(synced.outcome, "synced");
      await mirror.advance(120);
      const ready = await mirror.ready();
      assert.equal(ready.status, 200);
      assert.equal(ready.json.status, "ready");
      const status = ready.json.mirror;
      assert.equal(status.upstream, UPSTREAM);
      assert.equal(status.last_synced_at, synced.mirror.last_synced_at);
      assert.ok(status.lag_seconds >= 120 && status.lag_seconds < 180, `lag ${status.lag_seconds}`);
      assert.equal(status.last_error, null);
      assert.equal(status.syncing, false);
      // The same numbers, for metrics.
      const numbers = mirror.app.mirror?.status();
      assert.equal(numbers?.ready, true);
      assert.equal(numbers?.lastSyncedAt, Date.parse(status.last_synced_at));
      assert.ok((numbers?.lagSeconds ?? 0) >= 120);
      assert.equal(numbers?.totals.requests, 1);
      assert.equal(numbers?.totals.passes, 1);
    } finally {
      await mirror.close();
      await database.drop();
    }
  });

  test("a database is refused when it mirrors another upstream or holds listings of its own", async () => {
    const database = await createTestDatabase(sqlite.engine);
    try {
      await (await startMirror(database, UPSTREAM)).close();
      await assert.rejects(
        startMirror(database, "https://other.test"),
        /mirrors https:\/\/upstream\.test, not https:\/\/other\.test/,
      );
      // The same upstream, spelled with its /v1 base, is the same mirror.
      await (await startMirror(database, `${UPSTREAM}/v1/`)).close();
    } finally {
      await database.drop();
    }
    // A primary's database, with a listing in it.
    const primary = await createTestDatabase(sqlite.engine);
    try {
      const up = await startDirectoryHarness(sqlite, { sites: 1, env: { DIRECTORY_DATABASE_URL: primary.url } });
      await up.register().finally(() => up.close());
      await assert.rejects(startMirror(primary, UPSTREAM), /holds listings of its own/);
    } finally {
      await primary.drop();
    }
  });

  test("configuration: https in production, and polling only off with test hooks", () => {
    const production = { NODE_ENV: "production", DIRECTORY_PUBLIC_URL: "https://mirror.test" };
    assert.throws(
      () => readDirectoryConfig({ ...production, DIRECTORY_MIRROR_OF: "http://upstream.test" }),
      /DIRECTORY_MIRROR_OF must be https when NODE_ENV=production/,
    );
    assert.throws(
      () => readDirectoryConfig({ DIRECTORY_MIRROR_OF: "https://upstream.test", DIRECTORY_MIRROR_POLL_SECONDS: "0" }),
      /DIRECTORY_MIRROR_POLL_SECONDS=0 .* needs PROTO_TEST_HOOKS=1/,
    );
    assert.throws(() => readDirectoryConfig({ DIRECTORY_MIRROR_OF: "ftp://upstream.test" }), /DIRECTORY_MIRROR_OF/);
    const config = readDirectoryConfig({ DIRECTORY_MIRROR_OF: "https://upstream.test/registry/v1" });
    assert.equal(config.mirror?.upstream, "https://upstream.test/registry");
    assert.equal(config.mirror?.pollSeconds, 60);
    assert.equal(config.mirror?.pageSize, 100);
    assert.equal(readDirectoryConfig({}).mirror, undefined);
  });

  test("the command takes --mirror-of for the directory, by the same rules", async () => {
    const cli = fileURLToPath(new URL("../src/cli.ts", import.meta.url));
    const run = (args: string[]) =>
      new Promise<{ code: number | null; stderr: string }>((resolve) => {
        const env: Record<string, string> = {};
        for (const [key, value] of Object.entries(process.env)) {
          if (value !== undefined && !/^(NODE_TEST_CONTEXT|NODE_OPTIONS|DIRECTORY_|PROTO_)/.test(key)) env[key] = value;
        }
        const child = spawn(process.execPath, ["--conditions=source", "--import", "tsx", cli, ...args], {
          env,
          stdio: ["ignore", "ignore", "pipe"],
        });
        let stderr = "";
        child.stderr.on("data", (chunk) => {
          stderr += chunk;
        });
        child.on("exit", (code) => resolve({ code, stderr }));
      });
    const [badUrl, notDirectory] = await Promise.all([
      run(["directory", "--mirror-of", "ftp://upstream.test", "--port", "0"]),
      run(["trust", "--mirror-of", "https://upstream.test"]),
    ]);
    assert.equal(badUrl.code, 2, badUrl.stderr);
    assert.match(badUrl.stderr, /DIRECTORY_MIRROR_OF must be an http\(s\) URL/);
    assert.equal(notDirectory.code, 2, notDirectory.stderr);
    assert.match(notDirectory.stderr, /--mirror-of applies to the directory only/);
  });
});
