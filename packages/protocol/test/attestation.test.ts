import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { describe, test } from "node:test";
import { loadVectors } from "@proto/testkit";
import { exportJWK, type JSONWebKeySet, type JWTPayload, SignJWT } from "jose";
import { createAttestationVerifier } from "../src/attestation.js";
import { ProtoError } from "../src/errors.js";

interface AttestationVector {
  jwt: string;
  jwks: JSONWebKeySet;
  verification_inputs: { expected_aud: string; expected_agent_did: string; now_unix: number };
  expected: { accept: boolean; error_code: string | null };
  payload_decoded: Record<string, unknown>;
}

const { vectors, skipReason } = loadVectors<AttestationVector>("trust-attestation");

describe("trust-attestation vectors", { skip: skipReason ?? false }, () => {
  for (const { file, vector } of vectors) {
    test(file, async () => {
      const inputs = vector.verification_inputs;
      const verifier = createAttestationVerifier({ keySet: vector.jwks, now: () => inputs.now_unix * 1000 });
      const expected = { audience: inputs.expected_aud, agentDid: inputs.expected_agent_did };
      if (vector.expected.accept) {
        const result = await verifier.verify(vector.jwt, expected);
        assert.equal(result.agentDid, inputs.expected_agent_did);
        assert.equal(result.audience, inputs.expected_aud);
        assert.equal(result.issuer, "proto-trust");
        assert.equal(result.verification, vector.payload_decoded.verification);
        assert.equal(result.subH, vector.payload_decoded.sub_h);
      } else {
        await assert.rejects(
          verifier.verify(vector.jwt, expected),
          (e: unknown) => e instanceof ProtoError && e.code === vector.expected.error_code && e.status === 401,
        );
      }
    });
  }
});

describe("attestation verifier rules", async () => {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const jwk = await exportJWK(publicKey);
  const jwks: JSONWebKeySet = { keys: [{ ...jwk, kid: "k1" }] };
  const NOW = 1_800_000_000;
  const AUD = "did:web:svc.example";
  const AGENT = "did:key:z6MkiYbwC5honA2sxE7XLAyJMDFibLvVg8FgodBX4A4CaUgr";
  const SUB_H = "tR6nWsqjQ6rXehUPidkhOw0WNYjk2oB1qptEOHO2K4o";
  const base: JWTPayload = {
    iss: "proto-trust",
    aud: AUD,
    sub: AGENT,
    iat: NOW,
    exp: NOW + 900,
    verification: "email",
    sub_h: SUB_H,
  };

  function mint(payload: JWTPayload, header: Record<string, unknown> = {}, key = privateKey) {
    return new SignJWT(payload).setProtectedHeader({ alg: "EdDSA", typ: "JWT", kid: "k1", ...header }).sign(key);
  }
  const verifier = (opts: Partial<Parameters<typeof createAttestationVerifier>[0]> = {}) =>
    createAttestationVerifier({ keySet: jwks, now: () => (NOW + 10) * 1000, ...opts });
  const expect = { audience: AUD, agentDid: AGENT };

  async function rejects(jwt: string | Promise<string>, v = verifier(), exp = expect) {
    await assert.rejects(
      v.verify(await jwt, exp),
      (e: unknown) => e instanceof ProtoError && e.code === "invalid_attestation" && e.status === 401,
    );
  }

  test("a well-formed token passes with its claims", async () => {
    const result = await verifier().verify(await mint(base), expect);
    assert.deepEqual(result, {
      issuer: "proto-trust",
      audience: AUD,
      agentDid: AGENT,
      issuedAt: NOW,
      expiresAt: NOW + 900,
      verification: "email",
      subH: SUB_H,
      kid: "k1",
    });
  });

  test("wrong audience, wrong subject, wrong issuer", async () => {
    await rejects(mint({ ...base, aud: "did:web:other.example" }));
    await rejects(mint({ ...base, aud: [AUD] }));
    await rejects(mint({ ...base, sub: "did:key:z6MkpTHR8VNsBxYAAWHut2Geadd9jSdoom5bxQbCDuJ3LZTW" }));
    await rejects(mint({ ...base, iss: "someone-else" }));
  });

  test("accepted issuers are configurable", async () => {
    const jwt = await mint({ ...base, iss: "https://trust.example" });
    const result = await verifier({ issuers: ["proto-trust", "https://trust.example"] }).verify(jwt, expect);
    assert.equal(result.issuer, "https://trust.example");
  });

  test("lifetime, expiry and iat", async () => {
    await rejects(mint({ ...base, exp: NOW + 901 }));
    await rejects(mint({ ...base, iat: undefined }));
    await rejects(mint({ ...base, exp: undefined }));
    await rejects(mint({ ...base, iat: NOW - 1000, exp: NOW - 100 }));
    await rejects(mint({ ...base, iat: NOW + 500, exp: NOW + 900 }));
    await rejects(mint(base), verifier({ now: () => (NOW + 900) * 1000 }));
  });

  test("an optional lower bound on iat", async () => {
    await rejects(mint(base), verifier({ minIssuedAt: NOW + 1 }));
    assert.ok(await verifier({ minIssuedAt: () => NOW }).verify(await mint(base), expect));
  });

  test("sub_h rules, and unknown verification values ignored", async () => {
    await rejects(mint({ ...base, sub_h: undefined }));
    await rejects(mint({ ...base, sub_h: "short" }));
    await rejects(mint({ ...base, sub_h: "a+b/c=".repeat(5) }));
    const unknown = await verifier().verify(await mint({ ...base, verification: "retina" }), expect);
    assert.equal(unknown.verification, undefined);
    assert.equal(unknown.subH, SUB_H);
  });

  test("EdDSA only, and only keys from the key set", async () => {
    const other = generateKeyPairSync("ed25519");
    await rejects(mint(base, {}, other.privateKey));
    await rejects(mint(base, { kid: "unknown" }));
    const hs = await new SignJWT(base).setProtectedHeader({ alg: "HS256", kid: "k1" }).sign(new Uint8Array(32));
    await rejects(hs);
    await rejects("not.a.jwt");
    await rejects("");
  });
});

describe("attestation header", async () => {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const jwks: JSONWebKeySet = { keys: [{ ...(await exportJWK(publicKey)), kid: "k1" }] };
  test("a typ other than JWT is refused", async () => {
    const jwt = await new SignJWT({ iss: "proto-trust", aud: "did:web:a", sub: "did:key:x", iat: 1000, exp: 1100 })
      .setProtectedHeader({ alg: "EdDSA", typ: "at+jwt", kid: "k1" })
      .sign(privateKey);
    const verifier = createAttestationVerifier({ keySet: jwks, now: () => 1_010_000 });
    await assert.rejects(verifier.verify(jwt, { audience: "did:web:a", agentDid: "did:key:x" }), ProtoError);
  });
});
