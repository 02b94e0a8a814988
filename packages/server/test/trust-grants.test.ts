import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { decodeJwt } from "jose";
import { findGrant, putGrant, revokeGrant } from "../src/trust/authority/grants.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";
import { assertError, newAgent, RELAXED_RATE_LIMITS, startTrustHarness, type TrustHarness } from "./support/trust.js";

/**
 * Bounded authority at the mint (docs/authority.md): an attestation carries the grant of its agent
 * and service in force (`grant_id`, `scope`, `authorization_details`), none without one (the
 * service's defaults apply), none once the grant expired; a revoked grant stops the mint with 403
 * `grant_revoked` for that service only; the agent reads its grants at `GET /v1/grants`.
 */

reportSkippedVariants();

const NOTES = "did:web:notes.example";
const SHOP = "did:web:shop.example";
const PURCHASE_LIMIT = {
  permission: "purchase",
  currency: "EUR",
  perTransaction: 2000,
  perPeriod: 10000,
  period: "month" as const,
};

for (const variant of STORE_VARIANTS) {
  describe(`grants at the mint (${variant.name})`, { timeout: 120_000 }, () => {
    let h: TrustHarness;

    before(async () => {
      h = await startTrustHarness(variant, { env: { TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS } });
    });
    after(() => h.close());

    async function grant(
      bindingId: string,
      aud: string,
      content: { permissions: string[]; spendLimits?: (typeof PURCHASE_LIMIT)[]; expiresAt?: number | null },
    ) {
      const binding = await h.app.service.database.db
        .selectFrom("trust_bindings")
        .select("human_id")
        .where("id", "=", bindingId)
        .executeTakeFirstOrThrow();
      const now = await h.nowMs();
      return h.app.service.database.db.transaction().execute((trx) =>
        putGrant(
          trx,
          { bindingId, humanId: binding.human_id, aud, serviceUrl: "https://notes.example", now, method: "session" },
          {
            permissions: content.permissions,
            spendLimits: content.spendLimits ?? [],
            expiresAt: content.expiresAt ?? null,
          },
        ),
      );
    }

    async function claimsOf(agent: ReturnType<typeof newAgent>, aud: string) {
      const minted = await h.mint(agent, aud);
      assert.equal(minted.status, 200, minted.text);
      return decodeJwt(minted.json.jwt as string);
    }

    test("without a grant the attestation carries no grant claims: the service's defaults apply", async () => {
      const { agent } = await h.link();
      const claims = await claimsOf(agent, NOTES);
      assert.equal(claims.grant_id, undefined);
      assert.equal(claims.scope, undefined);
      assert.equal(claims.authorization_details, undefined);
    });

    test("a grant's permissions and spend limits ride in the attestation for its service only", async () => {
      const { agent, bindingId } = await h.link();
      const granted = await grant(bindingId, NOTES, {
        permissions: ["notes:read", "notes:delete", "purchase"],
        spendLimits: [PURCHASE_LIMIT],
      });
      const claims = await claimsOf(agent, NOTES);
      assert.equal(claims.grant_id, granted.id);
      assert.equal(claims.scope, "notes:read notes:delete purchase");
      assert.deepEqual(claims.authorization_details, [
        {
          type: "spend_limit",
          permission: "purchase",
          currency: "EUR",
          per_transaction: 2000,
          per_period: 10000,
          period: "month",
        },
      ]);
      const other = await claimsOf(agent, SHOP);
      assert.equal(other.grant_id, undefined, "another service gets no grant of this one");
    });

    test("narrowing takes effect at the next mint; an expired grant mints as if there were none", async () => {
      const { agent, bindingId } = await h.link();
      const now = await h.nowMs();
      await grant(bindingId, NOTES, { permissions: ["notes:read", "notes:delete"], expiresAt: now + 3_600_000 });
      assert.equal((await claimsOf(agent, NOTES)).scope, "notes:read notes:delete");
      await grant(bindingId, NOTES, { permissions: ["notes:read"], expiresAt: now + 3_600_000 });
      assert.equal((await claimsOf(agent, NOTES)).scope, "notes:read");
      await h.advance(3601);
      const expired = await claimsOf(agent, NOTES);
      assert.equal(expired.grant_id, undefined);
      assert.equal(expired.scope, undefined);
    });

    test("a revoked grant stops the next mint for its service with 403 grant_revoked, and only there", async () => {
      const { agent, bindingId } = await h.link();
      const granted = await grant(bindingId, NOTES, { permissions: ["notes:read"] });
      await claimsOf(agent, NOTES);
      const db = h.app.service.database.db;
      const humanId = (await findGrant(db, bindingId, NOTES))?.humanId as string;
      const now = await h.nowMs();
      assert.equal(
        await db.transaction().execute((trx) => revokeGrant(trx, humanId, granted.id, { now, method: "session" })),
        true,
      );
      const refused = await h.mint(agent, NOTES);
      assertError(refused, 403, "grant_revoked");
      await claimsOf(agent, SHOP);
      // Approving again (a new content for the pair) lifts the revocation, under the same grant id.
      const again = await grant(bindingId, NOTES, { permissions: ["notes:read"] });
      assert.equal(again.id, granted.id);
      assert.equal((await claimsOf(agent, NOTES)).grant_id, granted.id);
    });

    test("a re-link by the same person keeps the grant, its id and its claims", async () => {
      const email = `relink-${Math.random().toString(36).slice(2)}@mail.test`;
      const { agent, bindingId } = await h.link(undefined, email);
      const granted = await grant(bindingId, NOTES, { permissions: ["notes:read", "notes:delete"] });
      const again = await h.link(agent, email);
      assert.notEqual(again.bindingId, bindingId);
      const claims = await claimsOf(agent, NOTES);
      assert.equal(claims.grant_id, granted.id);
      assert.equal(claims.scope, "notes:read notes:delete");
    });

    test("GET /v1/grants, signed by the agent, lists its grants; unsigned or unlinked is refused", async () => {
      const { agent, bindingId } = await h.link();
      const granted = await grant(bindingId, NOTES, {
        permissions: ["notes:read", "purchase"],
        spendLimits: [PURCHASE_LIMIT],
      });
      const listed = await h.signed(agent, "GET", "/v1/grants");
      assert.equal(listed.status, 200, listed.text);
      assert.deepEqual(listed.json.grants, [
        {
          grant_id: granted.id,
          aud: NOTES,
          service_url: "https://notes.example",
          scope: "notes:read purchase",
          authorization_details: [
            {
              type: "spend_limit",
              permission: "purchase",
              currency: "EUR",
              per_transaction: 2000,
              per_period: 10000,
              period: "month",
            },
          ],
          expires_at: null,
          revoked_at: null,
          updated_at: new Date(granted.updatedAt).toISOString(),
        },
      ]);
      assertError(await h.request("GET", "/v1/grants"), 401, "invalid_signature");
      assertError(await h.signed(newAgent(), "GET", "/v1/grants"), 401, "unauthorized");
    });
  });
}
