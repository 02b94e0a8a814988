/**
 * On PostgreSQL the attestor records the mints that arrive while others are at the database in
 * one statement (store.recordMints). Each mint of a batch must be decided exactly as it would be
 * alone (store.recordMint): this suite runs both over bindings in every state and compares.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { openDatabase } from "../src/platform/database.js";
import { type TrustSchema, trustMigrations } from "../src/trust/migrations.js";
import * as store from "../src/trust/store.js";
import { createTestDatabase, POSTGRES_URL, type TestDatabase } from "./support/stores.js";
import { type Agent, startTrustHarness, type TrustHarness } from "./support/trust.js";

const AUD = "did:web:batch.test";
const OTHER_AUD = "did:web:other.test";
const DAY = 86_400_000;

if (!POSTGRES_URL) {
  process.stdout.write("# TEST_POSTGRES_URL not set: batched mints (PostgreSQL only) skipped\n");
} else {
  describe("mints recorded together on PostgreSQL", () => {
    let database: TestDatabase;
    let h: TrustHarness;
    let db: Awaited<ReturnType<typeof openDatabase<TrustSchema>>>;
    before(async () => {
      database = await createTestDatabase("postgres", "mintbatch");
      h = await startTrustHarness({ name: "postgres", engine: "postgres", redis: false }, { database });
      db = await openDatabase<TrustSchema>(database.url, {
        migrations: trustMigrations,
        migrationTable: "trust_migrations",
      });
    });
    after(async () => {
      await db?.close();
      await h?.close();
      await database?.drop();
    });

    const mint = (agent: Agent | string, now: number, day: number, aud = AUD): store.MintInput => ({
      agentDid: typeof agent === "string" ? agent : agent.did,
      aud,
      now,
      expiresAt: now + 90 * DAY,
      day,
      dailyLimit: 3,
    });
    const humanOf = async (agent: Agent) => (await store.mintContext(db.db, agent.did, AUD))!.binding.human_id;

    test("each mint of a batch is decided and counted as it would be alone", async () => {
      const live = (await h.link()).agent;
      const busy = (await h.link()).agent;
      const revoked = await h.link();
      const suspended = await h.link();
      const sameHuman = (await h.link(undefined, "batch-twin@example.com")).agent;
      const twin = (await h.link(undefined, "batch-twin@example.com")).agent;
      assert.equal((await h.hook("/__test/bindings/revoke", { binding_id: revoked.bindingId })).status, 200);
      assert.equal((await h.mint(suspended.agent, AUD)).status, 200);
      const suspend = await h.hook("/__test/bindings/suspend", { binding_id: suspended.bindingId, aud: AUD });
      assert.equal(suspend.status, 200, suspend.text);

      const now = await h.nowMs();
      const day = Math.floor(now / DAY);
      for (let i = 0; i < 3; i++) assert.ok(await store.recordMint(db.db, mint(busy, now, day)), `busy mint ${i + 1}`);

      const batch = [
        mint(live, now, day),
        mint(busy, now, day),
        mint(revoked.agent, now, day),
        mint(suspended.agent, now, day),
        mint(suspended.agent.did.replace(/.$/, "x"), now, day),
        mint(sameHuman, now, day),
        mint(twin, now, day, OTHER_AUD),
      ];
      const together = await store.recordMints(db.db, batch);
      assert.equal(together.length, batch.length);
      assert.equal(together[0]?.human_id, await humanOf(live), "a live binding mints, for its own person");
      assert.equal(together[1], undefined, "the day's limit reached");
      assert.equal(together[2], undefined, "revoked");
      assert.equal(together[3], undefined, "suspended for this service");
      assert.equal(together[4], undefined, "no binding");
      assert.equal(together[5]?.human_id, await humanOf(sameHuman));
      assert.equal(together[6]?.human_id, together[5]?.human_id, "two agents of one person");
      assert.notEqual(together[6]?.id, together[5]?.id, "each its own binding");
      assert.deepEqual(together[0]?.methods, ["email"]);

      // Counted once each: the live binding has two mints left today, then none.
      const again = await store.recordMints(db.db, [mint(live, now, day), mint(busy, now, day + 1)]);
      assert.ok(again[0], "the live binding's second mint");
      assert.ok(again[1], "a new day starts the busy binding's count afresh");
      assert.ok(await store.recordMint(db.db, mint(live, now, day)), "its third");
      assert.equal(await store.recordMint(db.db, mint(live, now, day)), undefined, "and no fourth");

      // The same mints alone answer the same.
      const alone = [];
      for (const input of batch.slice(2, 5)) alone.push(await store.recordMint(db.db, input));
      assert.deepEqual(alone, [undefined, undefined, undefined]);
    });
  });
}
