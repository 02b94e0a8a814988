import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { after, before, describe, test } from "node:test";
import {
  createTestCA,
  freePort,
  type HttpsHost,
  startHttpsHost,
  type TestCA,
  type TestFetch,
  testFetch,
} from "@proto/testkit";
import { exportJWK, type JWK, SignJWT } from "jose";
import { createAttestationVerifier } from "../src/attestation.js";
import { ProtoError } from "../src/errors.js";
import { KeySetUnavailableError, RemoteKeySet } from "../src/key-set.js";

const AUD = "did:web:svc.example";
const AGENT = "did:key:z6MkiYbwC5honA2sxE7XLAyJMDFibLvVg8FgodBX4A4CaUgr";
const HOST = "trust.test";

describe("remote key set over real HTTPS", () => {
  let ca: TestCA;
  let host: HttpsHost;
  let fetcher: TestFetch;
  let now = 1_800_000_000_000;
  const keys = [generateKeyPairSync("ed25519"), generateKeyPairSync("ed25519")];
  let published: JWK[] = [];
  let cacheControl = "public, max-age=300, stale-while-revalidate=900";
  let status = 200;

  before(async () => {
    ca = await createTestCA();
    host = await startHttpsHost({ ca, hostnames: [HOST] });
    fetcher = testFetch(ca, { resolve: host.resolveEntries() });
    host.route("/.well-known/jwks.json", (_req, res) => {
      res.writeHead(status, { "content-type": "application/json", "cache-control": cacheControl });
      res.end(JSON.stringify({ keys: published }));
    });
  });
  after(async () => {
    await fetcher.close();
    await host.close();
  });

  const jwk = async (i: number) => ({ ...(await exportJWK(keys[i]!.publicKey)), kid: `k${i}` });
  const mint = (i: number) => {
    const iat = Math.floor(now / 1000);
    return new SignJWT({ iss: "proto-trust", aud: AUD, sub: AGENT, iat, exp: iat + 600 })
      .setProtectedHeader({ alg: "EdDSA", typ: "JWT", kid: `k${i}` })
      .sign(keys[i]!.privateKey);
  };
  const fetchCount = () => host.requests.filter((r) => r.path === "/.well-known/jwks.json").length;

  function setup() {
    host.requests.length = 0;
    const keySet = new RemoteKeySet(`${host.origin(HOST)}/.well-known/jwks.json`, { fetch: fetcher, now: () => now });
    return createAttestationVerifier({ keySet, now: () => now });
  }

  test("fetches once and serves from cache within max-age", async () => {
    published = [await jwk(0)];
    const verifier = setup();
    for (let i = 0; i < 3; i++)
      assert.equal((await verifier.verify(await mint(0), { audience: AUD, agentDid: AGENT })).kid, "k0");
    assert.equal(fetchCount(), 1);
    now += 299_000;
    await verifier.verify(await mint(0), { audience: AUD, agentDid: AGENT });
    assert.equal(fetchCount(), 1);
  });

  test("an unknown kid refetches at most once per 30 s", async () => {
    published = [await jwk(0)];
    const verifier = setup();
    await verifier.verify(await mint(0), { audience: AUD, agentDid: AGENT });
    now += 31_000;
    published = [await jwk(0), await jwk(1)];
    assert.equal((await verifier.verify(await mint(1), { audience: AUD, agentDid: AGENT })).kid, "k1");
    assert.equal(fetchCount(), 2, "the new kid caused one refetch");

    const forged = async () =>
      new SignJWT({
        iss: "proto-trust",
        aud: AUD,
        sub: AGENT,
        iat: Math.floor(now / 1000),
        exp: Math.floor(now / 1000) + 60,
      })
        .setProtectedHeader({ alg: "EdDSA", kid: "nobody" })
        .sign(keys[0]!.privateKey);
    for (let i = 0; i < 5; i++) {
      await assert.rejects(verifier.verify(await forged(), { audience: AUD, agentDid: AGENT }), ProtoError);
    }
    assert.equal(fetchCount(), 2, "unknown kids within the cooldown cause no fetch");
    now += 30_000;
    await assert.rejects(verifier.verify(await forged(), { audience: AUD, agentDid: AGENT }), ProtoError);
    assert.equal(fetchCount(), 3);
  });

  test("honours the response's max-age and serves stale while revalidating", async () => {
    published = [await jwk(0)];
    cacheControl = "max-age=60, stale-while-revalidate=120";
    const verifier = setup();
    await verifier.verify(await mint(0), { audience: AUD, agentDid: AGENT });
    now += 61_000;
    status = 503;
    assert.ok(
      await verifier.verify(await mint(0), { audience: AUD, agentDid: AGENT }),
      "stale copy is used while the source fails",
    );
    now += 200_000;
    const before = fetchCount();
    await assert.rejects(
      verifier.verify(await mint(0), { audience: AUD, agentDid: AGENT }),
      (e: unknown) => e instanceof KeySetUnavailableError && e.retryAfterSeconds === 5,
      "past the stale window a failing source is unavailable, not the token's fault",
    );
    assert.equal(fetchCount(), before + 1);
    status = 200;
    cacheControl = "public, max-age=300, stale-while-revalidate=900";
    now += 2_000;
    for (let i = 0; i < 3; i++) {
      await assert.rejects(
        verifier.verify(await mint(0), { audience: AUD, agentDid: AGENT }),
        (e: unknown) => e instanceof KeySetUnavailableError && e.retryAfterSeconds === 3,
        "within the backoff the failure answers, with the seconds left",
      );
    }
    assert.equal(fetchCount(), before + 1, "no fetch within the backoff");
    now += 3_000;
    assert.ok(await verifier.verify(await mint(0), { audience: AUD, agentDid: AGENT }), "recovered after the backoff");
    assert.equal(fetchCount(), before + 2);
  });

  test("a key set URL that does not answer is KeySetUnavailableError, not invalid_attestation nor a crash", async () => {
    const keySet = new RemoteKeySet(`${host.origin(HOST)}/missing.json`, { fetch: fetcher, now: () => now });
    const verifier = createAttestationVerifier({ keySet, now: () => now });
    await assert.rejects(
      verifier.verify(await mint(0), { audience: AUD, agentDid: AGENT }),
      (e: unknown) => e instanceof KeySetUnavailableError && /HTTP 404/.test(e.message) && !(e instanceof ProtoError),
    );
  });

  test("a key set host that refuses connections: unavailable at once, one fetch per backoff", async () => {
    const closed = await freePort();
    let fetches = 0;
    const keySet = new RemoteKeySet(`https://127.0.0.1:${closed}/.well-known/jwks.json`, {
      fetch: (input, init) => {
        fetches++;
        return fetch(input, init);
      },
      now: () => now,
      failureBackoffSeconds: 10,
    });
    const verifier = createAttestationVerifier({ keySet, now: () => now });
    for (let i = 0; i < 4; i++) {
      await assert.rejects(
        verifier.verify(await mint(0), { audience: AUD, agentDid: AGENT }),
        (e: unknown) =>
          e instanceof KeySetUnavailableError && e.retryAfterSeconds === 10 && /unreachable/.test(e.message),
      );
    }
    assert.equal(fetches, 1, "callers within the backoff do not each wait on a fetch");
    now += 10_000;
    await assert.rejects(verifier.verify(await mint(0), { audience: AUD, agentDid: AGENT }), KeySetUnavailableError);
    assert.equal(fetches, 2);
  });

  test("an unknown kid whose refetch fails is unavailable: only a fresh copy could tell", async () => {
    published = [await jwk(0)];
    const verifier = setup();
    await verifier.verify(await mint(0), { audience: AUD, agentDid: AGENT });
    now += 31_000;
    status = 502;
    await assert.rejects(verifier.verify(await mint(1), { audience: AUD, agentDid: AGENT }), KeySetUnavailableError);
    assert.ok(await verifier.verify(await mint(0), { audience: AUD, agentDid: AGENT }), "known keys still verify");
    status = 200;
  });
});
