import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { sql } from "kysely";
import { type KyselyKitStore, openKitStore } from "../src/index.js";
import { createTestDatabase, ENGINES, newAgent, reportSkippedEngines, type TestDatabase } from "./support/env.js";

/** The store on both engines: migrations in their own table, and the atomic lifecycle steps. */

reportSkippedEngines();

for (const engine of ENGINES) {
  describe(`account store (${engine})`, { timeout: 60_000 }, () => {
    let database: TestDatabase;
    let store: KyselyKitStore;
    const now = Date.UTC(2030, 0, 1);

    before(async () => {
      database = await createTestDatabase(engine);
      store = await openKitStore(database.url);
    });
    after(async () => {
      await store?.close();
      await database?.drop();
    });

    async function account() {
      const { account, created } = await store.createAccount({ did: newAgent().did, now });
      assert.ok(created);
      return account;
    }

    test("migrations keep their own history table and run once, whoever opens the store", async () => {
      const second = await openKitStore(database.url);
      const applied = await sql<{ name: string }>`select name from kit_migrations`.execute(second.db);
      assert.deepEqual(
        applied.rows.map((r) => r.name),
        ["0001_initial", "0002_invitation_redirect", "0003_spends"],
      );
      await second.close();
    });

    test("an account per DID: a second create answers the existing one", async () => {
      const did = newAgent().did;
      const first = await store.createAccount({ did, now });
      const second = await store.createAccount({ did, now: now + 1000 });
      assert.equal(first.created, true);
      assert.equal(second.created, false);
      assert.equal(second.account.id, first.account.id);
      const person = await store.upsertPerson("proto-trust", "sub-1", now);
      assert.equal((await store.upsertPerson("proto-trust", "sub-1", now + 5)).id, person.id);
      await store.recordAttestation(first.account.id, person.id, {
        issuer: "proto-trust",
        verification: "email",
        at: now,
        until: now + 900_000,
      });
      const other = await store.upsertPerson("proto-trust", "sub-2", now);
      await store.recordAttestation(first.account.id, other.id, {
        issuer: "proto-trust",
        verification: "oauth",
        at: now,
        until: now + 1,
      });
      const stored = await store.findAccountByDid(did);
      assert.equal(stored?.personId, person.id, "the first person linked stays");
      assert.equal(stored?.attestedVerification, "oauth");
    });

    test("concurrent invitations leave exactly one pending; the others are replaced", async () => {
      const a = await account();
      const made = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          store.replaceInvitation({
            accountId: a.id,
            tokenHash: `hash-${a.id}-${i}`,
            recipient: { type: "email", value: `r${i}@example.com` },
            recipientKey: `email:r${i}@example.com`,
            now: now + i,
            expiresAt: now + 3_600_000,
          }),
        ),
      );
      const statuses = await Promise.all(made.map((m) => store.findInvitationByTokenHash(m.tokenHash)));
      assert.equal(statuses.filter((s) => s?.status === "pending").length, 1);
      assert.equal(statuses.filter((s) => s?.status === "replaced").length, 7);
      const pending = statuses.find((s) => s?.status === "pending");
      assert.equal((await store.findAccountById(a.id))?.invitation?.id, pending?.id);
    });

    test("a claim is atomic: of concurrent claims exactly one wins; an expired invitation cannot be claimed", async () => {
      const a = await account();
      const invitation = await store.replaceInvitation({
        accountId: a.id,
        tokenHash: `claim-${a.id}`,
        recipient: { type: "email", value: "o@example.com" },
        recipientKey: "email:o@example.com",
        now,
        expiresAt: now + 60_000,
      });
      const claim = (at: number) =>
        store.claim({
          invitationId: invitation.id,
          accountId: a.id,
          ownerKey: invitation.recipientKey,
          ownerRecipient: invitation.recipient,
          ownerPersonId: undefined,
          now: at,
        });
      assert.equal(await claim(now + 60_000), false, "expired at expires_at");
      const results = await Promise.all([claim(now + 1), claim(now + 2), claim(now + 3)]);
      assert.deepEqual(results.filter(Boolean).length, 1);
      const claimed = await store.findAccountById(a.id);
      assert.ok(claimed?.claimedAt);
      assert.equal(claimed?.invitation, undefined, "no pending invitation");
      assert.equal((await store.findInvitationByTokenHash(`claim-${a.id}`))?.status, "claimed");
      assert.equal(
        await store.rotateKey({
          accountId: a.id,
          fromDid: a.did,
          toDid: newAgent().did,
          now,
          reason: "rotated",
          unclaimedOnly: true,
        }),
        "stale",
        "an agent rotation cannot move a claimed account",
      );
      assert.equal(
        await store.rotateKey({
          accountId: a.id,
          fromDid: a.did,
          toDid: newAgent().did,
          now,
          reason: "owner_rekeyed",
          unclaimedOnly: false,
        }),
        "rotated",
        "its owner can",
      );
    });

    test("key rotation: moves the DID and revokes the old one; refuses a used or revoked DID, or a DID the account no longer has", async () => {
      const a = await account();
      const b = await account();
      const next = newAgent().did;
      assert.equal(
        await store.rotateKey({
          accountId: a.id,
          fromDid: a.did,
          toDid: b.did,
          now,
          reason: "rotated",
          unclaimedOnly: true,
        }),
        "did_in_use",
      );
      assert.equal(
        await store.rotateKey({
          accountId: a.id,
          fromDid: a.did,
          toDid: next,
          now,
          reason: "rotated",
          unclaimedOnly: true,
        }),
        "rotated",
      );
      assert.equal(await store.isRevoked(a.did), true);
      assert.equal((await store.findAccountById(a.id))?.did, next);
      assert.equal(
        await store.rotateKey({
          accountId: b.id,
          fromDid: b.did,
          toDid: a.did,
          now,
          reason: "rotated",
          unclaimedOnly: true,
        }),
        "did_in_use",
        "a revoked DID never comes back",
      );
      assert.equal(
        await store.rotateKey({
          accountId: a.id,
          fromDid: a.did,
          toDid: newAgent().did,
          now,
          reason: "rotated",
          unclaimedOnly: true,
        }),
        "stale",
        "the old DID is no longer the account's",
      );
      assert.equal(await store.revokeKey({ accountId: b.id, did: b.did, now, reason: "owner_revoked" }), true);
      assert.equal(await store.revokeKey({ accountId: b.id, did: b.did, now, reason: "owner_revoked" }), false);
      assert.ok((await store.findAccountById(b.id))?.keyRevokedAt);
    });

    test("rate counters, sign-in requests (single use) and sessions expire", async () => {
      assert.equal(await store.incrementCounter("route\ndid", now), 1);
      assert.equal(await store.incrementCounter("route\ndid", now), 2);
      assert.equal(await store.incrementCounter("route\ndid", now + 3_600_000), 1, "a new window");
      const request = {
        stateHash: "state-1",
        attestor: "proto-trust",
        codeVerifier: "v",
        nonce: "n",
        returnTo: "/",
        createdAt: now,
        expiresAt: now + 600_000,
      };
      await store.createSignInRequest(request);
      assert.deepEqual(await store.takeSignInRequest("state-1", now), request);
      assert.equal(await store.takeSignInRequest("state-1", now), undefined);
      await store.createSignInRequest({ ...request, stateHash: "state-2" });
      assert.equal(await store.takeSignInRequest("state-2", now + 600_000), undefined, "expired");
      await store.createSession({
        idHash: "s-1",
        createdAt: now,
        expiresAt: now + 1000,
        authenticatedAt: undefined,
        identities: [{ type: "email", value: "a@example.com" }],
        personId: undefined,
        csrf: "c",
      });
      assert.equal((await store.findSession("s-1", now))?.authenticatedAt, undefined);
      assert.equal(await store.findSession("s-1", now + 1000), undefined);
      await store.purgeExpired(now + 1000, now + 1);
      const left = await sql<{
        n: number;
      }>`select count(*) as n from kit_rate_counters where window_start < ${now + 1}`.execute(store.db);
      assert.equal(Number(left.rows[0]?.n), 0);
    });
  });
}
