import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { describe, test } from "node:test";
import { exportJWK, SignJWT } from "jose";
import {
  createAttestationVerifier,
  encodeDidKey,
  formatAmount,
  grantClaims,
  insufficientPermission,
  ProtoError,
  parseAmount,
  plainAmount,
  rawPublicKey,
  readGrantClaims,
  spendLimitExceeded,
  spendLimitPhrase,
  spendPeriodEnd,
  spendPeriodKey,
} from "../src/index.js";

const GRANT = {
  id: "grt_abc",
  permissions: ["notes:read", "purchase"],
  spendLimits: [
    { permission: "purchase", currency: "EUR", perTransaction: 2000, perPeriod: 10000, period: "month" as const },
  ],
};

describe("grant claims", () => {
  test("written and read back as they are on the wire", () => {
    const claims = grantClaims(GRANT);
    assert.deepEqual(claims, {
      grant_id: "grt_abc",
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
    });
    assert.deepEqual(readGrantClaims(claims as unknown as Record<string, unknown>), GRANT);
  });

  test("absent claims are no grant; other authorization_details types are ignored", () => {
    assert.equal(readGrantClaims({ iss: "proto-trust" }), undefined);
    const read = readGrantClaims({
      grant_id: "g1",
      authorization_details: [{ type: "payment_initiation", instructedAmount: { amount: "1" } }],
    });
    assert.deepEqual(read, { id: "g1", permissions: [], spendLimits: [] });
  });

  for (const [what, payload, message] of [
    ["scope without a grant_id", { scope: "notes:read" }, /come with a grant_id/],
    ["a grant_id that is not an identifier", { grant_id: "a b" }, /grant_id/],
    ["a scope token that is not a permission name", { grant_id: "g", scope: "Admin" }, /permission names/],
    ["authorization_details not an array", { grant_id: "g", authorization_details: {} }, /array/],
    [
      "a limit with a float",
      {
        grant_id: "g",
        authorization_details: [{ type: "spend_limit", permission: "p", currency: "EUR", per_transaction: 1.5 }],
      },
      /per_transaction/,
    ],
    [
      "a limit with neither amount",
      { grant_id: "g", authorization_details: [{ type: "spend_limit", permission: "p", currency: "EUR" }] },
      /per_transaction or per_period/,
    ],
    [
      "a period amount without its period",
      {
        grant_id: "g",
        authorization_details: [{ type: "spend_limit", permission: "p", currency: "EUR", per_period: 5 }],
      },
      /together/,
    ],
    [
      "an unknown period",
      {
        grant_id: "g",
        authorization_details: [
          { type: "spend_limit", permission: "p", currency: "EUR", per_period: 5, period: "year" },
        ],
      },
      /day, week or month/,
    ],
    [
      "a lowercase currency",
      {
        grant_id: "g",
        authorization_details: [{ type: "spend_limit", permission: "p", currency: "eur", per_transaction: 5 }],
      },
      /ISO 4217/,
    ],
  ] as const) {
    test(`refused: ${what}`, () => {
      assert.throws(() => readGrantClaims(payload as Record<string, unknown>), message);
    });
  }

  test("an attestation with malformed grant claims is invalid_attestation; a good one exposes its grant", async () => {
    const { privateKey, publicKey } = generateKeyPairSync("ed25519");
    const did = encodeDidKey(rawPublicKey(publicKey));
    const jwks = { keys: [{ ...(await exportJWK(publicKey)), kid: "k" }] };
    const now = Math.floor(Date.now() / 1000);
    const sign = (extra: Record<string, unknown>) =>
      new SignJWT({ iss: "proto-trust", aud: "did:web:svc.example", sub: did, iat: now, exp: now + 600, ...extra })
        .setProtectedHeader({ alg: "EdDSA", kid: "k" })
        .sign(privateKey);
    const verifier = createAttestationVerifier({ keySet: jwks });
    const expected = { audience: "did:web:svc.example", agentDid: did };
    assert.deepEqual((await verifier.verify(await sign({ ...grantClaims(GRANT) }), expected)).grant, GRANT);
    assert.equal((await verifier.verify(await sign({}), expected)).grant, undefined);
    await assert.rejects(verifier.verify(await sign({ scope: "notes:read" }), expected), (error: unknown) => {
      assert.ok(error instanceof ProtoError);
      assert.equal(error.code, "invalid_attestation");
      assert.match(error.message, /grant/);
      return true;
    });
  });
});

describe("spend periods (UTC)", () => {
  test("day, ISO week and month keys, and where each period ends", () => {
    const at = Date.UTC(2026, 11, 2, 23, 59, 59); // Wednesday 2 December 2026
    assert.equal(spendPeriodKey("day", at), "2026-12-02");
    assert.equal(spendPeriodKey("week", at), "2026-W49");
    assert.equal(spendPeriodKey("month", at), "2026-12");
    assert.equal(spendPeriodEnd("day", at), Date.UTC(2026, 11, 3));
    assert.equal(spendPeriodEnd("week", at), Date.UTC(2026, 11, 7));
    assert.equal(spendPeriodEnd("month", at), Date.UTC(2027, 0, 1));
    // ISO weeks cross years: 1 January 2027 (a Friday) is in week 53 of 2026; 4 January 2027 starts W01.
    assert.equal(spendPeriodKey("week", Date.UTC(2027, 0, 1)), "2026-W53");
    assert.equal(spendPeriodKey("week", Date.UTC(2027, 0, 4)), "2027-W01");
    assert.equal(spendPeriodKey("week", Date.UTC(2025, 11, 29)), "2026-W01");
  });
});

describe("amounts in a person's words", () => {
  test("minor units in the currency's own decimals, exactly, and typed amounts back", () => {
    assert.equal(formatAmount(50, "EUR"), "0.50 EUR");
    assert.equal(formatAmount(123456789, "EUR"), "1,234,567.89 EUR");
    assert.equal(formatAmount(500, "JPY"), "500 JPY");
    assert.equal(formatAmount(1005, "KWD"), "1.005 KWD");
    assert.equal(plainAmount(2050, "EUR"), "20.50");
    assert.deepEqual(parseAmount("20.5", "EUR"), { amount: 2050 });
    assert.deepEqual(parseAmount("20,50", "EUR"), { amount: 2050 });
    assert.deepEqual(parseAmount(" 7 ", "JPY"), { amount: 7 });
    assert.match((parseAmount("1.234", "EUR") as { problem: string }).problem, /like 20 or 20.50/);
    assert.match((parseAmount("1.5", "JPY") as { problem: string }).problem, /whole number/);
    assert.match((parseAmount("9999999999999999", "EUR") as { problem: string }).problem, /at most/);
    assert.equal(spendLimitPhrase(GRANT.spendLimits[0]), "up to 20.00 EUR per transaction and 100.00 EUR per month");
    assert.equal(spendLimitPhrase(undefined), "no spending");
  });

  test("the refusals carry what the agent needs to ask for more", () => {
    const missing = insufficientPermission(["notes:delete"], { audience: "did:web:a", attestor: "https://t" });
    assert.equal(missing.status, 403);
    assert.deepEqual(missing.toEnvelope().error.details, {
      missing: ["notes:delete"],
      audience: "did:web:a",
      attestor: "https://t",
    });
    const over = spendLimitExceeded(
      { permission: "purchase", currency: "EUR", limit: "per_period", remaining: 20, period: "month" },
      { audience: "did:web:a" },
    );
    assert.equal(over.code, "spend_limit_exceeded");
    assert.equal(over.toEnvelope().error.details?.remaining, 20);
  });
});
