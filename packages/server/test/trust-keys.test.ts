import assert from "node:assert/strict";
import { chmodSync, existsSync, readFileSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { after, before, describe, type TestContext, test } from "node:test";
import {
  createAttestationVerifier,
  privateKeyFromSeed,
  RemoteKeySet,
  rawPublicKey,
  SqliteHandle,
} from "@proto/protocol";
import BetterSqlite3 from "better-sqlite3";
import { decodeProtectedHeader } from "jose";
import pg from "pg";
import { ConfigError, EnvReader } from "../src/platform/env.js";
import { readTrustConfig } from "../src/trust/config.js";
import { openSeed } from "../src/trust/keys.js";
import { readTrustSecrets } from "../src/trust/secrets.js";
import { createTestDatabase, reportSkippedVariants, STORE_VARIANTS, type StoreVariant } from "./support/stores.js";
import {
  type Agent,
  assertError,
  RELAXED_RATE_LIMITS,
  startTrustHarness,
  TEST_KEY_ENCRYPTION_KEY,
  type TrustHarness,
} from "./support/trust.js";

reportSkippedVariants();

const AUD = "did:web:svc.test";
const JWKS = "/.well-known/jwks.json";

interface Jwk {
  kty: string;
  crv: string;
  kid: string;
  x: string;
}

async function keySet(h: TrustHarness): Promise<Jwk[]> {
  const result = await h.request("GET", JWKS);
  assert.equal(result.status, 200, result.text);
  const keys = result.json.keys as Jwk[];
  assert.ok(keys.length >= 1, "the key set is never empty");
  return keys;
}

const kids = async (h: TrustHarness) => (await keySet(h)).map((k) => k.kid).sort();

async function mintKid(h: TrustHarness, agent: Agent): Promise<{ kid: string; jwt: string }> {
  const minted = await h.mint(agent, AUD);
  assert.equal(minted.status, 200, minted.text);
  const kid = decodeProtectedHeader(minted.json.jwt).kid;
  assert.equal(typeof kid, "string");
  return { kid: kid as string, jwt: minted.json.jwt };
}

/** A harness of its own for one test, closed after it. */
async function ownHarness(t: TestContext, variant: StoreVariant): Promise<TrustHarness> {
  const h = await startTrustHarness(variant, { env: { TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS } });
  t.after(() => h.close());
  return h;
}

async function signingKeyRows(h: TrustHarness): Promise<{ kid: string; public_x: string; private_enc: string }[]> {
  const query = "select kid, public_x, private_enc from trust_signing_keys order by activate_at";
  if (h.databaseUrl.startsWith("sqlite:")) {
    const db = new SqliteHandle(new BetterSqlite3(h.databaseUrl.slice("sqlite:".length), { readonly: true }));
    try {
      return db.prepare(query).all() as { kid: string; public_x: string; private_enc: string }[];
    } finally {
      db.close();
    }
  }
  const client = new pg.Client({ connectionString: h.databaseUrl });
  await client.connect();
  try {
    return (await client.query(query)).rows;
  } finally {
    await client.end();
  }
}

for (const variant of STORE_VARIANTS) {
  describe(`key set (${variant.name})`, () => {
    let h: TrustHarness;
    before(async () => {
      h = await startTrustHarness(variant, { env: { TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS } });
    });
    after(() => h.close());

    test("entries have exactly kty OKP, crv Ed25519, kid, x; the response is cacheable", async () => {
      const result = await h.request("GET", JWKS);
      assert.equal(result.status, 200);
      assert.match(result.headers.get("content-type") ?? "", /^application\/json/);
      assert.equal(result.headers.get("cache-control"), "public, max-age=300, stale-while-revalidate=900");
      assert.deepEqual(Object.keys(result.json), ["keys"]);
      assert.ok(result.json.keys.length >= 1);
      for (const key of result.json.keys as Record<string, unknown>[]) {
        assert.deepEqual(Object.keys(key).sort(), ["crv", "kid", "kty", "x"]);
        assert.equal(key.kty, "OKP");
        assert.equal(key.crv, "Ed25519");
        assert.equal(typeof key.kid, "string");
        assert.ok((key.kid as string).length > 0);
        assert.match(key.x as string, /^[A-Za-z0-9_-]{43}$/);
        assert.equal(Buffer.from(key.x as string, "base64url").length, 32);
      }
      assert.ok(!/"d"\s*:/.test(result.text), "no private key material");
    });

    test("keys are stored encrypted under the key-encryption key", async () => {
      await h.hook("/__test/keys/rotate", {});
      const rows = await signingKeyRows(h);
      assert.ok(rows.length >= 2);
      const published = new Map((await keySet(h)).map((k) => [k.kid, k.x]));
      for (const row of rows) {
        assert.match(row.private_enc, /^v1\.[A-Za-z0-9_-]+$/);
        const seed = Buffer.from(openSeed(TEST_KEY_ENCRYPTION_KEY, row.kid, row.private_enc));
        assert.equal(seed.length, 32);
        // It is the seed of the published key...
        const x = Buffer.from(rawPublicKey(privateKeyFromSeed(seed))).toString("base64url");
        assert.equal(x, row.public_x);
        assert.equal(published.get(row.kid), x);
        // ...and it is nowhere in the column in any plain encoding.
        for (const encoding of ["hex", "base64", "base64url", "latin1"] as const) {
          assert.ok(!row.private_enc.includes(seed.toString(encoding).replace(/=+$/, "")), encoding);
        }
        assert.ok(!Buffer.from(row.private_enc, "utf8").includes(seed));
        // Decryption needs the right key, and the row is bound to its kid.
        assert.throws(() => openSeed(Buffer.alloc(32, 8), row.kid, row.private_enc));
        const otherKid = rows.find((r) => r.kid !== row.kid)?.kid as string;
        assert.throws(() => openSeed(TEST_KEY_ENCRYPTION_KEY, otherKid, row.private_enc));
      }
    });

    test("rotation: published at once, signs only from +900 s, old kid kept until its tokens expired", async (t) => {
      const h = await ownHarness(t, variant);
      const { agent } = await h.link();
      const [oldKid] = await kids(h);
      assert.equal((await kids(h)).length, 1);
      assert.equal((await mintKid(h, agent)).kid, oldKid);

      const rotated = await h.hook("/__test/keys/rotate", {});
      assert.equal(rotated.status, 200, rotated.text);
      const newKid = rotated.json.kid as string;
      assert.notEqual(newKid, oldKid);
      assert.ok(Date.parse(rotated.json.signs_from) - Date.parse(rotated.json.published_at) >= 900_000);
      // Published at once; still the old key signs.
      assert.deepEqual(await kids(h), [oldKid, newKid].sort());
      assert.equal((await mintKid(h, agent)).kid, oldKid);

      // To 899 s after the rotation (measured from its signs_from, so slow requests cannot eat the margin).
      const signsFrom = Date.parse(rotated.json.signs_from);
      await h.advance((signsFrom - (await h.nowMs()) - 1000) / 1000);
      const lastOld = await mintKid(h, agent);
      assert.equal(lastOld.kid, oldKid, "the new key does not sign before it has been published 900 s");
      assert.deepEqual(await kids(h), [oldKid, newKid].sort());

      await h.advance(Math.max(0, (signsFrom - (await h.nowMs())) / 1000));
      const firstNew = await mintKid(h, agent);
      assert.equal(firstNew.kid, newKid);
      assert.equal((await mintKid(h, agent)).kid, newKid);
      assert.deepEqual(await kids(h), [oldKid, newKid].sort());

      // The last token of the old key still verifies against the live key set while it lives.
      await h.advance(500);
      const now = await h.nowMs();
      const verifier = createAttestationVerifier({
        keySet: new RemoteKeySet(`${h.url}${JWKS}`, { now: () => now }),
        now: () => now,
      });
      assert.equal((await verifier.verify(lastOld.jwt, { audience: AUD, agentDid: agent.did })).kid, oldKid);
      assert.equal((await verifier.verify(firstNew.jwt, { audience: AUD, agentDid: agent.did })).kid, newKid);

      // Activation + 899 s: the old key's last token has not expired yet, so it is still published.
      await h.advance(399);
      assert.deepEqual(await kids(h), [oldKid, newKid].sort());
      // Well after every old token expired: gone; the new key remains.
      await h.advance(1000);
      assert.deepEqual(await kids(h), [newKid]);
      assert.equal((await mintKid(h, agent)).kid, newKid);
    });

    test("a rotation while one is pending does not create a second pending key", async (t) => {
      const h = await ownHarness(t, variant);
      const [oldKid] = await kids(h);
      const first = await h.hook("/__test/keys/rotate", {});
      await h.advance(300);
      const second = await h.hook("/__test/keys/rotate", {});
      assert.equal(second.status, 200);
      assert.equal(second.json.kid, first.json.kid);
      assert.equal(second.json.signs_from, first.json.signs_from);
      assert.deepEqual(await kids(h), [oldKid as string, first.json.kid as string].sort());
      assert.equal((await signingKeyRows(h)).length, 2);
      // Once it signs, a new rotation starts a new pending key.
      await h.advance(600);
      const third = await h.hook("/__test/keys/rotate", {});
      assert.notEqual(third.json.kid, first.json.kid);
      assert.equal((await kids(h)).length, 3);
    });

    test("concurrent rotations start one pending key, not several", async (t) => {
      const h = await ownHarness(t, variant);
      const [oldKid] = await kids(h);
      const results = await Promise.all(Array.from({ length: 5 }, () => h.hook("/__test/keys/rotate", {})));
      for (const result of results) assert.equal(result.status, 200, result.text);
      const pending = new Set(results.map((r) => r.json.kid as string));
      assert.equal(pending.size, 1, [...pending].join(", "));
      assert.deepEqual(await kids(h), [oldKid as string, ...pending].sort());
      assert.equal((await signingKeyRows(h)).length, 2);
    });

    test("two attestors on one store, rotating at once, add one key between them", async (t) => {
      if (variant.engine !== "postgres") {
        // better-sqlite3 waits for a lock synchronously: two attestors in one process on one file
        // would stall the very thread that must release it. Replicas are PostgreSQL's case.
        t.skip("several attestors on one store is the PostgreSQL deployment; SQLite serves one process");
        return;
      }
      // Two processes' worth of attestor: separate pools to the same store, so only the store's
      // own lock can keep their check-then-insert apart.
      const database = await createTestDatabase(variant.engine);
      const env = { TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS };
      const a = await startTrustHarness(variant, { database, env });
      const b = await startTrustHarness(variant, { database, env });
      t.after(async () => {
        await a.close();
        await b.close();
        await database.drop();
      });
      const initial = await kids(a);
      assert.equal(initial.length, 1);
      assert.deepEqual(await kids(b), initial, "the second attestor took the first one's key");

      const results = await Promise.all([a, b, a, b, a, b].map((h) => h.hook("/__test/keys/rotate", {})));
      for (const result of results) assert.equal(result.status, 200, result.text);
      const pending = new Set(results.map((r) => r.json.kid as string));
      assert.equal(pending.size, 1, [...pending].join(", "));
      const expected = [...initial, ...pending].sort();
      assert.deepEqual(await kids(a), expected);
      assert.deepEqual(await kids(b), expected);
      assert.equal((await signingKeyRows(a)).length, 2);
    });

    test("the key set never has zero keys, however much time passes", async (t) => {
      const h = await ownHarness(t, variant);
      const { agent } = await h.link();
      const initial = await kids(h);
      for (const step of [900, 86400, 90 * 86400, 400 * 86400]) {
        await h.advance(step);
        assert.deepEqual(await kids(h), initial);
      }
      // A key rotated in long after still follows the rules; the key set is never empty meanwhile.
      const rotated = await h.hook("/__test/keys/rotate", {});
      for (const step of [0, 450, 450, 480, 480, 1000]) {
        await h.advance(step);
        assert.ok((await kids(h)).includes(rotated.json.kid));
      }
      assert.deepEqual(await kids(h), [rotated.json.kid]);
      // The binding lapsed long ago; re-linking mints with the new key.
      assertError(await h.mint(agent, AUD), 410, "binding_expired");
      const relinked = await h.link(agent);
      assert.equal((await mintKid(h, relinked.agent)).kid, rotated.json.kid);
    });
  });
}

describe("attestor configuration", () => {
  // SMTP_URL and any other production requirement are set so the problems left are about secrets.
  const productionBase = {
    NODE_ENV: "production",
    TRUST_PUBLIC_URL: "https://trust.example",
    TRUST_DATABASE_URL: "postgres://db.example/trust",
    SMTP_URL: "smtp://mail.example:587",
  };
  const keyA = Buffer.alloc(32, 1).toString("base64url");
  const keyB = Buffer.alloc(32, 2).toString("hex");
  const SECRET_NAMES = /TRUST_KEY_ENCRYPTION_KEY|TRUST_PSEUDONYM_KEY|PROTO_TEST_HOOKS/;

  const configError = (fn: () => unknown): ConfigError => {
    try {
      fn();
    } catch (error) {
      assert.ok(error instanceof ConfigError, String(error));
      return error;
    }
    assert.fail("expected a ConfigError");
  };
  /** The configuration problems that concern secrets and test hooks (others are not this test's). */
  const secretProblems = (env: Record<string, string>): string[] => {
    try {
      readTrustConfig(env);
      return [];
    } catch (error) {
      assert.ok(error instanceof ConfigError, String(error));
      return error.problems.filter((p) => SECRET_NAMES.test(p));
    }
  };

  test("production refuses to start without TRUST_KEY_ENCRYPTION_KEY and TRUST_PSEUDONYM_KEY", () => {
    const both = configError(() => readTrustConfig(productionBase));
    assert.match(both.message, /TRUST_KEY_ENCRYPTION_KEY/);
    assert.match(both.message, /TRUST_PSEUDONYM_KEY/);

    const kekMissing = secretProblems({ ...productionBase, TRUST_PSEUDONYM_KEY: keyA });
    assert.equal(kekMissing.length, 1);
    assert.match(kekMissing[0] as string, /TRUST_KEY_ENCRYPTION_KEY/);

    const pseudonymMissing = secretProblems({ ...productionBase, TRUST_KEY_ENCRYPTION_KEY: keyA });
    assert.equal(pseudonymMissing.length, 1);
    assert.match(pseudonymMissing[0] as string, /TRUST_PSEUDONYM_KEY/);

    const short = secretProblems({ ...productionBase, TRUST_KEY_ENCRYPTION_KEY: "abc", TRUST_PSEUDONYM_KEY: keyB });
    assert.equal(short.length, 1);
    assert.match(short[0] as string, /TRUST_KEY_ENCRYPTION_KEY/);

    assert.deepEqual(
      secretProblems({ ...productionBase, TRUST_KEY_ENCRYPTION_KEY: keyA, TRUST_PSEUDONYM_KEY: keyB }),
      [],
    );
    // Both given: used as given (hex or base64url), no development file.
    const reader = new EnvReader({ TRUST_KEY_ENCRYPTION_KEY: keyA, TRUST_PSEUDONYM_KEY: keyB });
    const secrets = readTrustSecrets(reader, true, "/nonexistent");
    assert.deepEqual(reader.problems, []);
    assert.equal(secrets.developmentFile, undefined);
    assert.deepEqual(secrets.keyEncryptionKey, Buffer.alloc(32, 1));
    assert.deepEqual(secrets.pseudonymKey, Buffer.alloc(32, 2));
  });

  test("production refuses PROTO_TEST_HOOKS=1, naming it", () => {
    const problems = secretProblems({
      ...productionBase,
      TRUST_KEY_ENCRYPTION_KEY: keyA,
      TRUST_PSEUDONYM_KEY: keyB,
      PROTO_TEST_HOOKS: "1",
    });
    assert.equal(problems.length, 1);
    assert.match(problems[0] as string, /PROTO_TEST_HOOKS/);
  });

  test("production without keys writes no secrets file", async () => {
    const database = await createTestDatabase("sqlite");
    try {
      configError(() => readTrustConfig({ ...productionBase, TRUST_DATABASE_URL: database.url }));
      assert.equal(existsSync(join(dirname(database.url.slice("sqlite:".length)), "trust-dev-secrets.json")), false);
    } finally {
      await database.drop();
    }
  });

  test("development without keys keeps generated secrets (mode 0600) in the data dir and reuses them", async () => {
    const database = await createTestDatabase("sqlite");
    const sqlite = STORE_VARIANTS.find((v) => v.engine === "sqlite") as StoreVariant;
    const noKeys = { TRUST_KEY_ENCRYPTION_KEY: "", TRUST_PSEUDONYM_KEY: "", TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS };
    try {
      const file = join(dirname(database.url.slice("sqlite:".length)), "trust-dev-secrets.json");
      const first = readTrustConfig({ TRUST_DATABASE_URL: database.url });
      assert.equal(first.secrets.developmentFile, file);
      assert.ok(existsSync(file));
      assert.equal(statSync(file).mode & 0o777, 0o600);
      assert.equal(first.secrets.keyEncryptionKey.length, 32);
      assert.equal(first.secrets.pseudonymKey.length, 32);
      assert.notDeepEqual(first.secrets.keyEncryptionKey, first.secrets.pseudonymKey);

      chmodSync(file, 0o644);
      const again = readTrustConfig({ TRUST_DATABASE_URL: database.url });
      assert.deepEqual(again.secrets.keyEncryptionKey, first.secrets.keyEncryptionKey);
      assert.deepEqual(again.secrets.pseudonymKey, first.secrets.pseudonymKey);
      assert.equal(statSync(file).mode & 0o777, 0o600, "tightened again");
      const stored = readFileSync(file, "utf8");

      // Two starts on the same data: the signing key still decrypts and pseudonyms are unchanged.
      const h1 = await startTrustHarness(sqlite, { database, env: noKeys });
      let agent: Agent;
      let firstToken: { kid: string; jwt: string };
      try {
        agent = (await h1.link(undefined, "restart@mail.test")).agent;
        firstToken = await mintKid(h1, agent);
      } finally {
        await h1.close();
      }
      const h2 = await startTrustHarness(sqlite, { database, env: noKeys });
      try {
        const secondToken = await mintKid(h2, agent);
        assert.equal(secondToken.kid, firstToken.kid);
        const subH = (jwt: string) =>
          JSON.parse(Buffer.from(jwt.split(".")[1] as string, "base64url").toString("utf8")).sub_h as string;
        assert.equal(subH(secondToken.jwt), subH(firstToken.jwt));
      } finally {
        await h2.close();
      }
      assert.equal(readFileSync(file, "utf8"), stored, "the secrets file was reused, not regenerated");
    } finally {
      await database.drop();
    }
  });
});
