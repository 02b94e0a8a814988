import assert from "node:assert/strict";
import { generateKeyPairSync, sign } from "node:crypto";
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
      // No grant claims: the service's default permissions apply (docs/authority.md).
      grant: undefined,
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

describe("attestation tokens checked as JWS", async () => {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const jwks: JSONWebKeySet = { keys: [{ ...(await exportJWK(publicKey)), kid: "k1" }] };
  const NOW = 1_800_000_000;
  const AUD = "did:web:svc.example";
  const AGENT = "did:key:z6MkiYbwC5honA2sxE7XLAyJMDFibLvVg8FgodBX4A4CaUgr";
  const claims = { iss: "proto-trust", aud: AUD, sub: AGENT, iat: NOW, exp: NOW + 900 };
  const header = { alg: "EdDSA", typ: "JWT", kid: "k1" };
  const b64 = (value: unknown) =>
    Buffer.from(typeof value === "string" ? value : JSON.stringify(value)).toString("base64url");

  /** A compact JWS over exactly these segments, signed with the key set's key unless told otherwise. */
  function token(h: unknown = header, p: unknown = claims, key = privateKey): string {
    const input = `${b64(h)}.${b64(p)}`;
    return `${input}.${sign(null, Buffer.from(input), key).toString("base64url")}`;
  }
  const verifier = (keySet: Parameters<typeof createAttestationVerifier>[0]["keySet"] = jwks) =>
    createAttestationVerifier({ keySet, now: () => (NOW + 10) * 1000 });
  const expect = { audience: AUD, agentDid: AGENT };
  const accepts = (jwt: string, v = verifier()) => v.verify(jwt, expect);
  async function rejects(jwt: string, v = verifier()) {
    await assert.rejects(
      v.verify(jwt, expect),
      (e: unknown) => e instanceof ProtoError && e.code === "invalid_attestation" && e.status === 401,
    );
  }

  test("a token signed by hand passes, without typ too", async () => {
    assert.equal((await accepts(token())).kid, "k1");
    assert.equal((await accepts(token({ alg: "EdDSA", kid: "k1" }))).agentDid, AGENT);
  });

  test("a tampered header, payload or signature fails", async () => {
    const [h, p, s] = token().split(".") as [string, string, string];
    await rejects(`${b64({ ...header, extra: 1 })}.${p}.${s}`);
    await rejects(`${h}.${b64({ ...claims, sub: "did:key:other" })}.${s}`);
    const bytes = Buffer.from(s, "base64url");
    bytes[0] = (bytes[0] as number) ^ 1;
    await rejects(`${h}.${p}.${bytes.toString("base64url")}`);
    await rejects(`${h}.${p}.${s.slice(0, -2)}`);
    await rejects(`${h}.${p}`);
    await rejects(`${h}.${p}.${s}.${s}`);
    // One accepted spelling per segment: padding, or standard base64, is refused.
    await rejects(`${h}=.${p}.${s}`);
    await rejects(`${h}.${p}.${Buffer.from(s, "base64url").toString("base64")}`);
  });

  test("alg must be EdDSA, whatever the key", async () => {
    await rejects(token({ ...header, alg: "none" }));
    await rejects(token({ ...header, alg: "Ed25519" }));
    await rejects(token({ ...header, alg: "ES256" }));
    await rejects(token({ typ: "JWT", kid: "k1" }));
    await rejects(token({ ...header, alg: ["EdDSA"] }));
  });

  test("crit: unknown extensions refused, b64 only as true", async () => {
    await rejects(token({ ...header, crit: ["exp"], exp: 1 }));
    await rejects(token({ ...header, crit: ["b64"] }));
    await rejects(token({ ...header, crit: ["b64"], b64: false }));
    await rejects(token({ ...header, crit: ["b64"], b64: "true" }));
    await rejects(token({ ...header, crit: [] }));
    await rejects(token({ ...header, crit: "b64", b64: true }));
    await rejects(token({ ...header, crit: ["b64", "b64"], b64: true }));
    assert.ok(await accepts(token({ ...header, crit: ["b64"], b64: true })));
  });

  test("typ and kid", async () => {
    await rejects(token({ ...header, typ: "at+jwt" }));
    await rejects(token({ ...header, kid: "k2" }));
    await rejects(token({ ...header, kid: 1 }));
    await rejects(
      token({ ...header, kid: 1 }),
      verifier(async () => publicKey as never),
    );
    await rejects(token({ alg: "EdDSA", typ: "JWT" }), verifier({ keys: [] }));
  });

  test("header and claims must be JSON objects", async () => {
    await rejects(token([header]));
    await rejects(token("not json"));
    await rejects(token(header, [claims]));
    await rejects(token(header, "null"));
    await rejects(token(header, "{"));
  });

  test("exp, nbf, iss, aud and required claims", async () => {
    await rejects(token(header, { ...claims, exp: NOW + 10 }));
    assert.ok(await accepts(token(header, { ...claims, exp: NOW + 11 })));
    await rejects(token(header, { ...claims, exp: String(NOW + 900) }));
    await rejects(token(header, { ...claims, nbf: NOW + 11 }));
    await rejects(token(header, { ...claims, nbf: String(NOW) }));
    assert.ok(await accepts(token(header, { ...claims, nbf: NOW + 10 })));
    await rejects(token(header, { ...claims, iat: String(NOW) }));
    await rejects(token(header, { ...claims, iss: "someone-else" }));
    await rejects(token(header, { ...claims, iss: ["proto-trust"] }));
    await rejects(token(header, { ...claims, aud: "did:web:other.example" }));
    for (const claim of ["iss", "aud", "sub", "iat", "exp"] as const) {
      const { [claim]: _, ...without } = claims;
      await rejects(token(header, without));
    }
  });

  test("the key must be an Ed25519 verification key", async () => {
    const { privateKey: ecPrivate, publicKey: ecPublic } = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const ecSet: JSONWebKeySet = { keys: [{ ...(await exportJWK(ecPublic)), kid: "k1" }] };
    await rejects(token(header, claims, ecPrivate), verifier(ecSet));
    await rejects(token(), verifier({ keys: [{ ...(jwks.keys[0] as object), key_ops: ["sign"] }] }));
    await rejects(token(), verifier({ keys: [{ ...(jwks.keys[0] as object), use: "enc" }] }));
    const signOnly = await crypto.subtle.importKey("jwk", await exportJWK(publicKey), "Ed25519", true, []);
    await rejects(
      token(),
      verifier(async () => signOnly as never),
    );
    assert.ok(
      await accepts(
        token(),
        verifier(async () => publicKey as never),
      ),
    );
    await rejects(
      token(),
      verifier(async () => privateKey as never),
    );
    await rejects(
      token(),
      verifier(async () => ecPublic as never),
    );
    await rejects(
      token(),
      verifier(async () => ({ ...(jwks.keys[0] as object) }) as never),
    );
  });
});
