/**
 * Single-listing reads are served from a cache in each directory process. The contract: the
 * replica that took a write serves it at once; every other replica within a second; the cache
 * never depends on the writer surviving its write; and while a replica cannot hear of other
 * writers' changes (its PostgreSQL listening connection is down), it serves from the store.
 *
 * Two directory instances share one store here. Waits are bounded by the contract's second (a
 * loop of reads, no fixed sleeps). A write made straight in the database with triggers off
 * (`session_replication_role = replica`, so no notification) is a probe: only a replica that
 * serves from its cache keeps answering the old listing after it.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { encodeDidKey } from "@proto/protocol";
import { startTcpProxy, type TcpProxy } from "@proto/testkit";
import pg from "pg";
import { FEED_APPLICATION_NAME } from "../src/directory/listing-changes.js";
import {
  type DirectoryHarness,
  type DirectoryReplica,
  type HttpResult,
  startDirectoryHarness,
} from "./support/directory.js";
import { within } from "./support/eventually.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";

reportSkippedVariants();

const METRICS_TOKEN = "metrics-token-for-tests-0123456789";

/** The contract: a change is visible at every replica within one second. */
const VISIBLE_WITHIN_MS = 1000;

type Reader = Pick<DirectoryReplica, "request">;

async function read(replica: Reader, did: string, headers: Record<string, string> = {}): Promise<HttpResult> {
  const answer = await replica.request("GET", `/v1/listings/${did}`, { headers });
  assert.ok(answer.status === 200 || answer.status === 304, `${answer.status}: ${answer.text}`);
  return answer;
}

async function titleAt(replica: Reader, did: string): Promise<string> {
  return (await read(replica, did)).json.title as string;
}

function untilTitle(replica: Reader, did: string, title: string, what: string): Promise<void> {
  return within(VISIBLE_WITHIN_MS, what, async () => (await titleAt(replica, did)) === title);
}

for (const variant of STORE_VARIANTS) {
  describe(`single-listing read cache, two directory processes on one store (${variant.name})`, () => {
    let a: DirectoryHarness;
    let b: DirectoryReplica;

    /** A listing with a plain DID (read ahead of the router), registered at A. */
    async function listed(title: string): Promise<{ did: string; token: string }> {
      const site = a.site();
      const did = encodeDidKey(new Uint8Array(randomBytes(32)));
      site.serveDiscovery(site.document({ service_did: did }));
      const { token } = await a.register(site, { title });
      return { did, token };
    }

    /** A connection of the test's own to the store (PostgreSQL). */
    let admin: pg.Client | undefined;
    const sql = (text: string, values: unknown[] = []) => {
      if (admin === undefined) throw new Error("PostgreSQL only");
      return admin.query(text, values);
    };

    /** Writes the listing's body with the table's triggers off: no notification is sent. */
    async function writeUnannounced(did: string, title: string): Promise<void> {
      const body = JSON.stringify({ ...(await read(a, did)).json, title });
      await sql("begin");
      await sql("set local session_replication_role = replica");
      await sql("update dir_listings set body = $1 where service_did = $2", [body, did]);
      await sql("commit");
    }

    /** Writes the listing's body from outside the directory, as any writer would (notified). */
    async function announce(did: string, title: string): Promise<void> {
      const body = JSON.stringify({ ...(await read(a, did)).json, title });
      await sql("update dir_listings set body = $1 where service_did = $2", [body, did]);
    }

    /** `proto_directory_listing_feed_up` as the replica's /metrics reports it. */
    async function feedUp(replica: Reader): Promise<number> {
      const res = await replica.request("GET", "/metrics", { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
      assert.equal(res.status, 200);
      const line = res.text.split("\n").find((l) => l.startsWith("proto_directory_listing_feed_up"));
      return Number(line?.slice(line.lastIndexOf(" ") + 1));
    }

    before(async () => {
      a = await startDirectoryHarness(variant, {
        sites: 12,
        env: {
          METRICS_TOKEN,
          DIRECTORY_RATE_LIMITS: "challenge=1000/60,create=1000/60,write=1000/60,read=1000000/60",
        },
      });
      b = await a.replica();
      if (variant.engine === "postgres") {
        admin = new pg.Client({ connectionString: a.databaseUrl });
        await admin.connect();
      }
    });
    after(async () => {
      await admin?.end();
      await a?.close();
    });

    test("a write is served by the replica that took it at once, and by the other within a second", async () => {
      const { did, token } = await listed("First");
      for (const replica of [a, b, a, b]) assert.equal(await titleAt(replica, did), "First");

      const patched = await a.request("PATCH", `/v1/listings/${did}`, { token, body: { title: "Second" } });
      assert.equal(patched.status, 200, patched.text);
      assert.equal(await titleAt(a, did), "Second", "the writer serves its write at once");
      await untilTitle(b, did, "Second", "the other replica serves the write");

      const again = await b.request("PATCH", `/v1/listings/${did}`, { token, body: { title: "Third" } });
      assert.equal(again.status, 200, again.text);
      assert.equal(await titleAt(b, did), "Third");
      await untilTitle(a, did, "Third", "the first replica serves the other's write");

      assert.equal((await b.request("DELETE", `/v1/listings/${did}`, { token })).status, 204);
      assert.equal((await read(b, did)).json.status, "deleted");
      await within(
        VISIBLE_WITHIN_MS,
        "the withdrawal is served",
        async () => (await read(a, did)).json.status === "deleted",
      );
    });

    test("entity tags and 304s follow the listing as it changes", async () => {
      const { did, token } = await listed("Tagged");
      const first = await read(b, did);
      const etag = first.headers.get("etag") ?? "";
      assert.match(etag, /^".+"$/);
      assert.equal((await read(a, did)).headers.get("etag"), etag, "equal bytes, equal tags, on every replica");
      for (const replica of [a, b]) {
        const notModified = await read(replica, did, { "if-none-match": etag });
        assert.equal(notModified.status, 304);
        assert.equal(notModified.headers.get("etag"), etag);
      }

      assert.equal(
        (await a.request("PATCH", `/v1/listings/${did}`, { token, body: { title: "Retagged" } })).status,
        200,
      );
      const changed = await read(a, did, { "if-none-match": etag });
      assert.equal(changed.status, 200, "the writer no longer matches the old tag");
      assert.equal(changed.json.title, "Retagged");
      const newTag = changed.headers.get("etag") ?? "";
      assert.notEqual(newTag, etag);
      assert.equal((await read(a, did, { "if-none-match": newTag })).status, 304);

      let seen: HttpResult | undefined;
      await within(VISIBLE_WITHIN_MS, "the other replica answers the old tag with the new listing", async () => {
        seen = await read(b, did, { "if-none-match": etag });
        return seen.status === 200;
      });
      assert.equal(seen?.json.title, "Retagged");
      assert.equal(seen?.headers.get("etag"), newTag);
      assert.equal((await read(b, did, { "if-none-match": newTag })).status, 304);
    });

    if (variant.engine === "postgres") {
      test("a write committed by a process that dies right after its commit reaches every replica", async () => {
        const { did } = await listed("Before the crash");
        for (const replica of [a, b, a, b]) assert.equal(await titleAt(replica, did), "Before the crash");
        const body = JSON.stringify({ ...(await read(a, did)).json, title: "Written before a crash" });
        // Its own process: an ordinary UPDATE (the table's trigger notifies in the transaction),
        // COMMIT, and at once SIGKILL, so nothing after the commit can have run.
        const child = spawn(
          process.execPath,
          [
            "-e",
            `const pg = require("pg");
             (async () => {
               const client = new pg.Client({ connectionString: process.env.WRITE_URL });
               await client.connect();
               await client.query("begin");
               await client.query("update dir_listings set body = $1 where service_did = $2", [process.env.WRITE_BODY, process.env.WRITE_DID]);
               await client.query("commit");
               process.kill(process.pid, "SIGKILL");
             })();`,
          ],
          {
            cwd: fileURLToPath(new URL("..", import.meta.url)),
            env: { ...process.env, WRITE_URL: a.databaseUrl, WRITE_BODY: body, WRITE_DID: did },
            stdio: ["ignore", "ignore", "inherit"],
          },
        );
        const [code, signal] = await new Promise<[number | null, string | null]>((resolve) =>
          child.once("exit", (c, s) => resolve([c, s])),
        );
        assert.deepEqual([code, signal], [null, "SIGKILL"], "the writer died after its commit");
        await untilTitle(a, did, "Written before a crash", "replica A serves the dead writer's commit");
        await untilTitle(b, did, "Written before a crash", "replica B serves the dead writer's commit");
      });

      test("a killed listening connection: the store is read until it is back, then caching resumes", async () => {
        const { did } = await listed("Cached");
        assert.equal(await titleAt(b, did), "Cached");
        assert.equal(await titleAt(b, did), "Cached");
        // A write nobody announces stays unseen while B trusts its cache...
        await writeUnannounced(did, "Unannounced while listening");
        assert.equal(await titleAt(b, did), "Cached", "B serves its cached listing");

        // ...until its listening connection is killed: then B reads the store.
        const ended = await sql(
          "select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and application_name = $1",
          [FEED_APPLICATION_NAME],
        );
        assert.equal(ended.rowCount, 2, "one listening connection per replica");
        await untilTitle(b, did, "Unannounced while listening", "B stops serving its cache");

        // The connection comes back by itself (this deadline only guards the test), and B caches again.
        await within(10_000, "B listens again", async () => (await feedUp(b)) === 1);
        assert.equal(await titleAt(b, did), "Unannounced while listening");
        assert.equal(await titleAt(b, did), "Unannounced while listening");
        await writeUnannounced(did, "Unannounced after reconnection");
        assert.equal(await titleAt(b, did), "Unannounced while listening", "B caches again");
        await announce(did, "Announced");
        await untilTitle(b, did, "Announced", "B hears of writes again");
      });

      describe("a replica whose listening connection goes through a link that breaks", () => {
        let proxy: TcpProxy;
        let c: DirectoryReplica;

        before(async () => {
          const url = new URL(a.databaseUrl);
          proxy = await startTcpProxy(url.hostname, Number(url.port || 5432));
          url.hostname = "127.0.0.1";
          url.port = String(proxy.port);
          c = await a.replica({ DIRECTORY_LISTEN_DATABASE_URL: url.href });
        });
        after(async () => {
          await c?.close();
          await proxy?.close();
        });

        test("cut: every write is served within a second for as long as the link is down", async () => {
          const { did, token } = await listed("Before the cut");
          assert.equal(await titleAt(c, did), "Before the cut");
          assert.equal(await titleAt(c, did), "Before the cut");
          proxy.cut();
          await within(VISIBLE_WITHIN_MS, "C reports its feed down", async () => (await feedUp(c)) === 0);
          for (const title of ["During the cut, 1", "During the cut, 2", "During the cut, 3"]) {
            const patched = await a.request("PATCH", `/v1/listings/${did}`, { token, body: { title } });
            assert.equal(patched.status, 200, patched.text);
            await untilTitle(c, did, title, `C serves "${title}"`);
            // Written where no notification is ever sent: C still sees it, so it caches nothing.
            await writeUnannounced(did, `${title}, unannounced`);
            await untilTitle(c, did, `${title}, unannounced`, "C reads the store");
          }
          proxy.restore();
          await within(10_000, "C listens again", async () => (await feedUp(c)) === 1);
          assert.equal(await titleAt(c, did), "During the cut, 3, unannounced");
          assert.equal(await titleAt(c, did), "During the cut, 3, unannounced");
          await writeUnannounced(did, "After the cut, unannounced");
          assert.equal(await titleAt(c, did), "During the cut, 3, unannounced", "C caches again");
        });

        test("stall: a listening connection that stops answering is not trusted a second later", async () => {
          await within(10_000, "C listens", async () => (await feedUp(c)) === 1);
          // Nothing is closed: C's connection simply hears nothing more, its notifications included.
          proxy.stall();
          const { did, token } = await listed("Before the write");
          assert.equal(await titleAt(c, did), "Before the write");
          assert.equal(await titleAt(c, did), "Before the write");
          const patched = await a.request("PATCH", `/v1/listings/${did}`, {
            token,
            body: { title: "During the stall" },
          });
          assert.equal(patched.status, 200, patched.text);
          await untilTitle(c, did, "During the stall", "C serves the write it was never told of");
          proxy.restore();
          await within(10_000, "C listens again", async () => (await feedUp(c)) === 1);
          await announce(did, "After the stall");
          await untilTitle(c, did, "After the stall", "C hears of writes again");
        });
      });
    }
  });
}
