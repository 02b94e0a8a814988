import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { createAttestationVerifier, RemoteKeySet } from "@proto/protocol";
import { createLocalJWKSet, decodeProtectedHeader, type JWTPayload, jwtVerify } from "jose";
import pg from "pg";
import type { HttpResult } from "./support/http.js";
import {
  createTestDatabase,
  POSTGRES_URL,
  reportSkippedVariants,
  STORE_VARIANTS,
  uniquePrefix,
} from "./support/stores.js";
import {
  type Agent,
  assertError,
  assertRetryAfter,
  type MintOptions,
  newAgent,
  RELAXED_RATE_LIMITS,
  startTrustHarness,
  type TrustHarness,
} from "./support/trust.js";

reportSkippedVariants();

const DAY = 86400;
const AUD = "did:web:svc.test";
const email = (label: string) => `${label}-${Math.random().toString(36).slice(2)}@mail.test`;

/** Verifies with the protocol library against the live key set URL, on the attestor's clock. */
async function verifyWithLibrary(h: TrustHarness, jwt: string, audience: string, agentDid: string) {
  const now = await h.nowMs();
  const keySet = new RemoteKeySet(`${h.url}/.well-known/jwks.json`, { now: () => now });
  return createAttestationVerifier({ keySet, now: () => now }).verify(jwt, { audience, agentDid });
}

/** A second verifier written directly on jose, sharing nothing with the protocol library. */
async function verifyWithJose(h: TrustHarness, jwt: string, audience: string, agentDid: string) {
  const now = await h.nowMs();
  const jwks = await h.request("GET", "/.well-known/jwks.json");
  assert.equal(jwks.status, 200);
  return jwtVerify(jwt, createLocalJWKSet(jwks.json), {
    algorithms: ["EdDSA"],
    issuer: "proto-trust",
    audience,
    subject: agentDid,
    typ: "JWT",
    currentDate: new Date(now),
    requiredClaims: ["iss", "aud", "sub", "sub_h", "iat", "exp", "verification"],
  });
}

function decodePart(jwt: string, index: number): string {
  return Buffer.from(jwt.split(".")[index] as string, "base64url").toString("utf8");
}

async function mintOk(h: TrustHarness, agent: Agent, aud = AUD) {
  const result = await h.mint(agent, aud);
  assert.equal(result.status, 200, result.text);
  return result.json as { jwt: string; expires_at: number; verification: string; binding_expires_at: number };
}

function payloadOf(jwt: string): JWTPayload {
  return JSON.parse(decodePart(jwt, 1)) as JWTPayload;
}

for (const variant of STORE_VARIANTS) {
  describe(`token mint errors (${variant.name})`, () => {
    let h: TrustHarness;
    let agent: Agent;
    before(async () => {
      h = await startTrustHarness(variant, { env: { TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS } });
      agent = (await h.link()).agent;
    });
    after(() => h.close());
    const now = async () => Math.floor((await h.nowMs()) / 1000);

    test("a replayed nonce is 401 replayed_nonce", async () => {
      const nonce = `n-${Math.random().toString(36).slice(2)}`;
      assert.equal((await h.mint(agent, AUD, { nonce })).status, 200);
      assertError(await h.mint(agent, AUD, { nonce }), 401, "replayed_nonce");
      // The same nonce is the agent's own: another agent may use it.
      const other = (await h.link()).agent;
      assert.equal((await h.mint(other, AUD, { nonce })).status, 200);
    });

    test("a signature past expires + 60 s is 401 expired_signature", async () => {
      const created = (await now()) - 200;
      assertError(await h.mint(agent, AUD, { created, expires: created + 60 }), 401, "expired_signature");
      // Within the skew it still counts.
      const recent = (await now()) - 100;
      assert.equal((await h.mint(agent, AUD, { created: recent, expires: recent + 60 })).status, 200);
    });

    test("a future-dated signature is 401 invalid_signature", async () => {
      const created = (await now()) + 300;
      assertError(await h.mint(agent, AUD, { created, expires: created + 60 }), 401, "invalid_signature");
    });

    test("expires more than 300 s after created is 401 invalid_signature", async () => {
      const created = await now();
      assertError(await h.mint(agent, AUD, { created, expires: created + 301 }), 401, "invalid_signature");
      assertError(await h.mint(agent, AUD, { created, expires: created - 1 }), 401, "invalid_signature");
      assert.equal((await h.mint(agent, AUD, { created, expires: created + 300 })).status, 200);
    });

    test("a body altered after signing is 401 invalid_signature", async () => {
      const sentBody = JSON.stringify({ aud: "did:web:other.test" });
      assertError(await h.mint(agent, AUD, { sentBody }), 401, "invalid_signature");
      // The digest header recomputed for the new body does not help: the signature covers it.
      const forged = await h.mint(agent, AUD, {
        sentBody,
        headers: { "content-digest": `sha-256=:${sha256Base64(sentBody)}:` },
      });
      assertError(forged, 401, "invalid_signature");
      assertError(await h.mint(agent, AUD, { headers: { "content-digest": "" } }), 401, "invalid_signature");
    });

    test("a signature for any URL but {trust_url}/v1/token is 401 invalid_signature", async () => {
      for (const url of [
        `${h.url}/v1/token`,
        `http://trust.test/v1/token`,
        `${h.publicUrl}/v1/token2`,
        `${h.publicUrl}/v1/link/poll`,
        `${h.publicUrl}/v1/token?x=1`,
        "https://other.test/v1/token",
      ]) {
        assertError(await h.mint(agent, AUD, { url }), 401, "invalid_signature");
      }
    });

    test("unsigned or wrongly signed requests are 401 invalid_signature", async () => {
      assertError(await h.mint(agent, AUD, { unsigned: true }), 401, "invalid_signature");
      assertError(await h.mint(agent, AUD, { headers: { signature: "sig1=:AAAA:" } }), 401, "invalid_signature");
      assertError(await h.mint(agent, AUD, { headers: { "signature-input": "garbage" } }), 401, "invalid_signature");
      // Signed with another key than the one keyid names.
      const impostor = { ...agent, privateKey: newAgent().privateKey };
      assertError(await h.mint(impostor, AUD), 401, "invalid_signature");
    });

    test("a valid signature from an agent with no binding is 401 unauthorized", async () => {
      assertError(await h.mint(newAgent(), AUD), 401, "unauthorized");
      // Started but never confirmed: still no binding.
      const pending = newAgent();
      await h.startLink(pending);
      assertError(await h.mint(pending, AUD), 401, "unauthorized");
    });

    test("a revoked binding is 403 binding_revoked", async () => {
      const linked = await h.link();
      assert.equal((await h.mint(linked.agent, AUD)).status, 200);
      const revoked = await h.hook("/__test/bindings/revoke", { binding_id: linked.bindingId });
      assert.equal(revoked.status, 200, revoked.text);
      assertError(await h.mint(linked.agent, AUD), 403, "binding_revoked");
    });

    test("an expired binding is 410 binding_expired", async () => {
      const linked = await h.link();
      assert.equal((await h.hook("/__test/bindings/expire", { binding_id: linked.bindingId })).status, 200);
      assertError(await h.mint(linked.agent, AUD), 410, "binding_expired");
    });

    test("a human without verifications is 403 verification_required", async () => {
      const who = email("unverified");
      const linked = await h.link(newAgent(), who);
      const cleared = await h.hook("/__test/humans/clear-verifications", { email: who });
      assert.equal(cleared.status, 200, cleared.text);
      assertError(await h.mint(linked.agent, AUD), 403, "verification_required");
    });

    test("aud must be a did:web or did:key DID: else 400 invalid_request", async () => {
      const bodies = [
        { aud: "https://svc.test" },
        { aud: "did:example:123" },
        { aud: "did:web:svc.test/path" },
        { aud: "did:key:zNotAKey" },
        { aud: "" },
        { aud: 42 },
        { aud: null },
        {},
        [AUD],
      ];
      for (const body of bodies) {
        assertError(await h.mint(agent, AUD, { body: JSON.stringify(body) }), 400, "invalid_request");
      }
      assert.equal((await h.mint(agent, newAgent().did)).status, 200);
    });

    test("a correctly signed body that is not JSON is 400 invalid_request", async () => {
      for (const body of ["aud=did:web:svc.test", "{", "", "null"]) {
        assertError(await h.mint(agent, AUD, { body }), 400, "invalid_request");
      }
    });

    test("a token request over 64 KiB is 413 payload_too_large", async () => {
      const body = JSON.stringify({ aud: AUD, pad: "x".repeat(70 * 1024) });
      assertError(await h.mint(agent, AUD, { body }), 413, "payload_too_large");
    });
  });

  describe(`attestation tokens (${variant.name})`, () => {
    let h: TrustHarness;
    before(async () => {
      h = await startTrustHarness(variant, { env: { TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS } });
    });
    after(() => h.close());

    test("a minted token verifies with the protocol library (live key set) and with plain jose", async () => {
      const { agent } = await h.link();
      const minted = await mintOk(h, agent);
      const library = await verifyWithLibrary(h, minted.jwt, AUD, agent.did);
      assert.equal(library.issuer, "proto-trust");
      assert.equal(library.audience, AUD);
      assert.equal(library.agentDid, agent.did);
      assert.equal(library.verification, "email");
      assert.equal(library.expiresAt, minted.expires_at);

      const { payload, protectedHeader } = await verifyWithJose(h, minted.jwt, AUD, agent.did);
      assert.equal(payload.sub, agent.did);
      assert.equal(protectedHeader.kid, library.kid);

      // Replay to another service fails in both.
      await assert.rejects(verifyWithLibrary(h, minted.jwt, "did:web:other.test", agent.did), {
        code: "invalid_attestation",
      });
      await assert.rejects(verifyWithJose(h, minted.jwt, "did:web:other.test", agent.did));
      // And it is not a token for another agent.
      await assert.rejects(verifyWithLibrary(h, minted.jwt, AUD, newAgent().did), { code: "invalid_attestation" });
    });

    test("header is exactly {alg, typ, kid}; claims exactly the spec's set; response mirrors them", async () => {
      const who = email("claims");
      const { agent } = await h.link(newAgent(), who);
      const before = Math.floor((await h.nowMs()) / 1000);
      const minted = await mintOk(h, agent);
      const jwks = (await h.request("GET", "/.well-known/jwks.json")).json as { keys: { kid: string }[] };

      const header = decodeProtectedHeader(minted.jwt);
      assert.deepEqual(Object.keys(header).sort(), ["alg", "kid", "typ"]);
      assert.equal(header.alg, "EdDSA");
      assert.equal(header.typ, "JWT");
      assert.ok(jwks.keys.some((k) => k.kid === header.kid));

      const claims = payloadOf(minted.jwt);
      assert.deepEqual(Object.keys(claims).sort(), ["aud", "exp", "iat", "iss", "sub", "sub_h", "verification"]);
      assert.equal(claims.iss, "proto-trust");
      assert.equal(claims.aud, AUD);
      assert.equal(claims.sub, agent.did);
      assert.equal(claims.verification, "email");
      assert.match(claims.sub_h as string, /^[A-Za-z0-9_-]{43}$/);
      assert.ok(Number.isInteger(claims.iat) && Number.isInteger(claims.exp));
      const iat = claims.iat as number;
      const exp = claims.exp as number;
      assert.ok(exp > iat && exp - iat <= 900, `lifetime ${exp - iat}`);
      assert.ok(iat >= before && iat <= before + 5);

      // No personal data anywhere in the token.
      const [local, domain] = who.split("@") as [string, string];
      for (const text of [minted.jwt, decodePart(minted.jwt, 0), decodePart(minted.jwt, 1)]) {
        assert.ok(!text.includes(local) && !text.includes(domain) && !text.includes("@"), text);
        assert.ok(!text.includes("hum_"), text);
      }

      assert.deepEqual(Object.keys(minted).sort(), ["binding_expires_at", "expires_at", "jwt", "verification"]);
      assert.equal(minted.expires_at, exp);
      assert.equal(minted.verification, claims.verification);
      assert.ok(Number.isInteger(minted.binding_expires_at));
      assert.ok(Math.abs(minted.binding_expires_at - (iat + 90 * DAY)) <= 5);
    });

    test("sub_h is stable per (human, aud), differs across audiences and humans, and is 43 base64url chars", async () => {
      const alice = email("alice");
      const aliceAgent = (await h.link(newAgent(), alice)).agent;
      const aliceSecondAgent = (await h.link(newAgent(), alice)).agent;
      const bobAgent = (await h.link(newAgent(), email("bob"))).agent;
      const subH = async (agent: Agent, aud: string) => payloadOf((await mintOk(h, agent, aud)).jwt).sub_h as string;

      const a1 = await subH(aliceAgent, AUD);
      assert.match(a1, /^[A-Za-z0-9_-]{43}$/);
      assert.equal(await subH(aliceAgent, AUD), a1, "stable across mints");
      assert.equal(await subH(aliceSecondAgent, AUD), a1, "a property of the human, not of the agent");
      await h.advance(3 * DAY);
      assert.equal(await subH(aliceAgent, AUD), a1, "stable over time");
      const a2 = await subH(aliceAgent, "did:web:other.test");
      assert.notEqual(a2, a1, "different across audiences");
      const b1 = await subH(bobAgent, AUD);
      assert.notEqual(b1, a1, "different across humans");
      assert.notEqual(await subH(bobAgent, "did:web:other.test"), a2);
    });

    test("each mint re-arms the binding's expiry; 90 idle days end it", async () => {
      const { agent } = await h.link();
      const first = await mintOk(h, agent);
      await h.advance(10 * DAY);
      const second = await mintOk(h, agent);
      assert.ok(
        second.binding_expires_at >= first.binding_expires_at + 10 * DAY - 2,
        `${second.binding_expires_at} vs ${first.binding_expires_at}`,
      );
      // 85 days after the last mint (95 after the first), the binding is alive because of it.
      await h.advance(85 * DAY);
      const third = await mintOk(h, agent);
      assert.ok(third.binding_expires_at > second.binding_expires_at);
      // 90 days and a bit without a mint: lapsed.
      await h.advance(90 * DAY + 10);
      assertError(await h.mint(agent, AUD), 410, "binding_expired");
    });

    test("the poll's binding_token_expires_at matches the first mint's deadline when minted at once", async () => {
      const agent = newAgent();
      const reqId = (await h.startLink(agent)).json.req_id as string;
      await h.hook("/__test/link/confirm", { req_id: reqId, email: email("deadline") });
      const polled = await h.poll(agent, reqId);
      const minted = await mintOk(h, agent);
      assert.ok(Math.abs(minted.binding_expires_at - polled.json.binding_token_expires_at) <= 5);
    });
  });

  if (variant.engine === "postgres") {
    describe(`database connection loss (${variant.name})`, () => {
      test("the attestor survives the database terminating its idle connections and keeps minting", async (t) => {
        const h = await startTrustHarness(variant, { env: { TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS } });
        t.after(() => h.close());
        const { agent } = await h.link();
        await mintOk(h, agent);
        // What a database restart or failover does to a pool's idle connections.
        const admin = new pg.Client({ connectionString: POSTGRES_URL });
        await admin.connect();
        try {
          // Waits (up to 5 s each) for the backends to be gone, as they are once a restart is
          // over: a request racing a termination still in progress may fairly get a 503.
          const terminated = await admin.query(
            "select pg_terminate_backend(pid, 5000) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()",
            [new URL(h.databaseUrl).pathname.slice(1)],
          );
          assert.ok((terminated.rowCount ?? 0) >= 1);
        } finally {
          await admin.end();
        }
        await mintOk(h, agent);
        assert.match((await h.link()).bindingId, /^bnd_/);
      });
    });
  }

  describe(`token rate limits (${variant.name})`, () => {
    let h: TrustHarness;
    before(async () => {
      h = await startTrustHarness(variant);
    });
    after(() => h.close());

    test("60 mints per minute per IP, then 429 rate_limited with Retry-After", async () => {
      const { agent } = await h.link();
      await h.alignTo(60);
      for (let i = 0; i < 60; i++) {
        const result = await h.mint(agent, AUD);
        assert.equal(result.status, 200, `mint ${i + 1}: ${result.text}`);
      }
      const limited = await h.mint(agent, AUD);
      assertError(limited, 429, "rate_limited");
      assertRetryAfter(limited, 1, 60);
      // The IP limit is the IP's: another agent is refused too.
      const other = await h.mint(newAgent(), AUD);
      assertError(other, 429, "rate_limited");
      await h.advance(60);
      assert.equal((await h.mint(agent, AUD)).status, 200);
    });

    test("requests refused before their nonce is checked count against the address too", async () => {
      const { agent } = await h.link();
      await h.alignTo(60);
      for (let i = 0; i < 60; i++) {
        const forged = await h.mint(agent, AUD, { sentBody: JSON.stringify({ aud: `${AUD}x` }) });
        assertError(forged, 401, "invalid_signature");
      }
      assertError(await h.mint(agent, AUD), 429, "rate_limited");
      await h.advance(60);
      assert.equal((await h.mint(agent, AUD)).status, 200);
    });
  });

  describe(`the token endpoint ahead of the router and through it (${variant.name})`, () => {
    let h: TrustHarness;
    before(async () => {
      h = await startTrustHarness(variant, { env: { TRUST_RATE_LIMITS: "token=1000/60" } });
    });
    after(() => h.close());

    // `/v1/token?via=router` is declined by the fast route (a query string), so Fastify answers it;
    // the signature is for the attestor's token URL either way.
    const both = async (agent: Agent, options: MintOptions = {}) => [
      await h.mint(agent, AUD, options),
      await h.mint(agent, AUD, { ...options, path: "/v1/token?via=router" }),
    ];
    const same = (fast: HttpResult, router: HttpResult, what: string) => {
      assert.equal(fast.status, router.status, `${what}: ${fast.text} / ${router.text}`);
      assert.equal(fast.headers.get("content-type"), router.headers.get("content-type"), what);
      assert.equal(fast.headers.get("retry-after"), router.headers.get("retry-after"), what);
      assert.deepEqual(Object.keys(fast.json), Object.keys(router.json), what);
    };

    test("a mint, and each refusal, is answered alike both ways", async () => {
      const { agent } = await h.link();
      const [fast, router] = await both(agent);
      same(fast!, router!, "a mint");
      assert.equal(fast!.status, 200);
      assert.deepEqual(Object.keys(fast!.json), ["jwt", "expires_at", "verification", "binding_expires_at"]);
      for (const [what, options, status] of [
        ["a body altered after signing", { sentBody: JSON.stringify({ aud: `${AUD}x` }) }, 401],
        ["not JSON", { body: "aud", sentBody: "aud" }, 400],
        ["an unsigned request", { unsigned: true }, 401],
        ["a signature from the future", { created: Math.floor(Date.now() / 1000) + 3600 }, 401],
      ] as const) {
        const [a, b] = await both(agent, options);
        same(a!, b!, what);
        assert.equal(a!.status, status, `${what}: ${a!.text}`);
        assert.deepEqual(a!.json, b!.json, what);
      }
      const [unknownFast, unknownRouter] = await both(newAgent());
      same(unknownFast!, unknownRouter!, "an unlinked agent");
      assertError(unknownFast!, 401, "unauthorized");
      const replay = { nonce: `n-${Math.random()}` };
      assert.equal((await h.mint(agent, AUD, replay)).status, 200);
      const [replayFast, replayRouter] = await both(agent, replay);
      same(replayFast!, replayRouter!, "a replayed nonce");
      assertError(replayFast!, 401, "replayed_nonce");
    });
  });

  describe(`per-binding daily token limit, across attestors on one database (${variant.name})`, () => {
    test("two attestors share one count: the limit holds wherever the mints land", async () => {
      const database = await createTestDatabase(variant.engine);
      const env = { TRUST_PER_BINDING_DAILY_TOKEN_LIMIT: "4", TRUST_RATE_LIMITS: "token=1000/60" };
      const redisPrefix = uniquePrefix("trust-replicas");
      const first = await startTrustHarness(variant, { database, env, redisPrefix });
      const second = await startTrustHarness(variant, { database, env, redisPrefix });
      try {
        const { agent } = await first.link();
        await first.alignTo(DAY);
        await second.advance((await first.nowMs()) / 1000 - (await second.nowMs()) / 1000);
        const statuses: number[] = [];
        for (let i = 0; i < 6; i++) statuses.push((await (i % 2 === 0 ? first : second).mint(agent, AUD)).status);
        assert.deepEqual(statuses, [200, 200, 200, 200, 429, 429]);
        await second.advance(DAY);
        assert.equal((await second.mint(agent, AUD)).status, 200, "a new day, a new count");
      } finally {
        await second.close();
        await first.close();
        await database.drop();
      }
    });
  });

  describe(`mints that arrive together (${variant.name})`, () => {
    // On PostgreSQL, mints that arrive while others are at the database share one statement.
    let h: TrustHarness;
    before(async () => {
      h = await startTrustHarness(variant, {
        env: { TRUST_PER_BINDING_DAILY_TOKEN_LIMIT: "5", TRUST_RATE_LIMITS: "token=1000/60" },
      });
    });
    after(() => h.close());

    test("each is checked and counted on its own: the daily limit, revocation, and each token's person", async () => {
      const busy = (await h.link()).agent;
      const revoked = await h.link();
      const others = await Promise.all(Array.from({ length: 12 }, () => h.link()));
      assert.equal((await h.hook("/__test/bindings/revoke", { binding_id: revoked.bindingId })).status, 200);
      // Each agent's own pseudonym, minted alone first.
      const alone = new Map<string, string>();
      for (const { agent } of others) alone.set(agent.did, payloadOf((await mintOk(h, agent)).jwt).sub_h as string);
      assert.equal(new Set(alone.values()).size, others.length, "twelve people, twelve pseudonyms");

      const [busyResults, revokedResult, otherResults] = await Promise.all([
        Promise.all(Array.from({ length: 12 }, () => h.mint(busy, AUD))),
        h.mint(revoked.agent, AUD),
        Promise.all(others.map(({ agent }) => h.mint(agent, AUD))),
      ]);
      const statuses = busyResults.map((r) => r.status).sort();
      assert.deepEqual(statuses, [...Array(5).fill(200), ...Array(7).fill(429)], "exactly the day's five");
      for (const limited of busyResults.filter((r) => r.status === 429)) assertError(limited, 429, "rate_limited");
      assertError(revokedResult, 403, "binding_revoked");
      for (const [i, result] of otherResults.entries()) {
        assert.equal(result.status, 200, result.text);
        const claims = payloadOf((result.json as { jwt: string }).jwt);
        const agent = others[i]!.agent;
        assert.equal(claims.sub, agent.did);
        assert.equal(claims.sub_h, alone.get(agent.did), "the token names its own agent's person");
      }
    });

    test("one nonce sent many times at once is accepted exactly once", async () => {
      const { agent } = await h.link();
      const results = await Promise.all(
        Array.from({ length: 10 }, () => h.mint(agent, AUD, { nonce: "the-same-nonce" })),
      );
      assert.deepEqual(results.map((r) => r.status).sort(), [200, ...Array(9).fill(401)]);
      for (const replayed of results.filter((r) => r.status === 401)) assertError(replayed, 401, "replayed_nonce");
    });
  });

  describe(`per-binding daily token limit (${variant.name})`, () => {
    let h: TrustHarness;
    before(async () => {
      h = await startTrustHarness(variant, {
        env: { TRUST_PER_BINDING_DAILY_TOKEN_LIMIT: "3", TRUST_RATE_LIMITS: "token=1000/60" },
      });
    });
    after(() => h.close());

    test("the 4th mint of a day is 429 rate_limited with Retry-After; the next day it works", async () => {
      const { agent } = await h.link();
      const other = (await h.link()).agent;
      for (let i = 0; i < 3; i++) assert.equal((await h.mint(agent, AUD)).status, 200, `mint ${i + 1}`);
      const limited = await h.mint(agent, AUD);
      assertError(limited, 429, "rate_limited");
      assertRetryAfter(limited, 1, DAY);
      // Another binding has its own count.
      assert.equal((await h.mint(other, AUD)).status, 200);
      await h.advance(DAY);
      assert.equal((await h.mint(agent, AUD)).status, 200);
    });
  });
}

/** Base64 SHA-256 of a string, as Content-Digest carries it. */
function sha256Base64(text: string): string {
  return createHash("sha256").update(text).digest("base64");
}
