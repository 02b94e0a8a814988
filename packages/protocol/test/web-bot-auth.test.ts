import assert from "node:assert/strict";
import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from "node:crypto";
import { describe, test } from "node:test";
import { encodeDidKey } from "../src/did-key.js";
import { rawPublicKey } from "../src/ed25519.js";
import { ProtoError } from "../src/errors.js";
import { createRequestVerifier } from "../src/http-signatures/verify.js";
import { MemoryNonceStore } from "../src/nonce-store.js";
import { jwkThumbprint } from "../src/web-bot-auth/directory-keys.js";
import { signProtoAndWebBotAuth, signWebBotAuth } from "../src/web-bot-auth/sign.js";
import { createWebBotAuthVerifier, signatureProfiles } from "../src/web-bot-auth/verify.js";

// RFC 9421 Appendix B.1.4 `test-key-ed25519`, which draft-ietf-webbotauth-httpsig-protocol-01 signs its vectors with.
const TEST_KEY = createPrivateKey({
  key: {
    kty: "OKP",
    crv: "Ed25519",
    d: "n4Ni-HpISpVObnQMW0wOhCKROaIKqKtW_2ZYb2p9KcU",
    x: "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs",
  },
  format: "jwk",
});
const TEST_THUMBPRINT = "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";
const AGENT_URL = "https://signature-agent.test";

function keysOf(entries: Record<string, Record<string, KeyObject>>) {
  const lookups: string[] = [];
  return {
    lookups,
    async lookup(url: string, thumbprint: string) {
      lookups.push(`${url} ${thumbprint}`);
      return entries[url]?.[thumbprint];
    },
  };
}

function verifierAt(seconds: number, keys = keysOf({ [AGENT_URL]: { [TEST_THUMBPRINT]: createPublicKey(TEST_KEY) } })) {
  return createWebBotAuthVerifier({
    keys,
    nonceStore: new MemoryNonceStore({ now: () => seconds * 1000 }),
    now: () => seconds * 1000,
  });
}

async function refused(promise: Promise<unknown>, code: string) {
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(error instanceof ProtoError, String(error));
    assert.equal(error.code, code, error.message);
    return true;
  });
}

describe("draft-ietf-webbotauth-httpsig-protocol-01 vectors", () => {
  test("the key's RFC 8037 thumbprint is the draft's keyid", () => {
    assert.equal(jwkThumbprint(createPublicKey(TEST_KEY)), TEST_THUMBPRINT);
  });

  test("dictionary form: the member named by the key parameter is covered, and the signature verifies", async () => {
    const request = {
      method: "GET",
      url: "https://example.com/",
      headers: {
        "signature-agent": `agent2="${AGENT_URL}"`,
        "signature-input":
          'sig2=("@authority" "signature-agent";key="agent2");created=1735689600;keyid="poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";alg="ed25519";expires=4889289600;nonce="n9p433xm+NJ3ph3upfBIGmsuwHw387YV7Q/F+6BSpGCVjYCqQw6rznNA8PVVLySrAWsv0hQtFioQb6E1YsauiA==";tag="web-bot-auth"',
        signature: "sig2=:RdNFx5Bj6au3YgAMQL/RzmUlZE8QZLIaXGRpw985hWnwPfMxT228NMk6ehRS1PSl4e8PhbNZACSanGdhEwYCCg==:",
      },
    };
    // Valid for a century: past the draft's recommended day, so the verifier must be told to allow it.
    const verifier = createWebBotAuthVerifier({
      keys: keysOf({ [AGENT_URL]: { [TEST_THUMBPRINT]: createPublicKey(TEST_KEY) } }),
      nonceStore: new MemoryNonceStore({ now: () => 1735689700_000 }),
      now: () => 1735689700_000,
      maxValiditySeconds: 4889289600 - 1735689600,
    });
    const agent = await verifier.verify(request);
    assert.equal(agent.keyid, TEST_THUMBPRINT);
    assert.equal(agent.signatureAgent, AGENT_URL);
    assert.equal(agent.signerOrigin, AGENT_URL);
    assert.equal(agent.did, encodeDidKey(rawPublicKey(createPublicKey(TEST_KEY))));
    assert.equal(agent.bindsRequest, false, "covers neither @method nor @target-uri");
    assert.deepEqual(
      signatureProfiles((name) => (request.headers as Record<string, string>)[name]),
      { proto: false, webBotAuth: true },
    );
    // The default verifier keeps the draft's one-day bound.
    await refused(verifierAt(1735689700).verify(request), "invalid_signature");
  });

  test("legacy string form verifies inside its hour and is expired_signature after", async () => {
    const request = {
      method: "GET",
      url: "https://example.com/",
      headers: {
        "signature-agent": `"${AGENT_URL}"`,
        "signature-input":
          'sig2=("@authority" "signature-agent");created=1735689600;keyid="poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";alg="ed25519";expires=1735693200;nonce="e8N7S2MFd/qrd6T2R3tdfAuuANngKI7LFtKYI/vowzk4lAZYadIX6wW25MwG7DCT9RUKAJ0qVkU0mEeLElW1qg==";tag="web-bot-auth"',
        signature: "sig2=:jdq0SqOwHdyHr9+r5jw3iYZH6aNGKijYp/EstF4RQTQdi5N5YYKrD+mCT1HA1nZDsi6nJKuHxUi/5Syp3rLWBA==:",
      },
    };
    assert.equal((await verifierAt(1735689700).verify(request)).keyid, TEST_THUMBPRINT);
    await refused(verifierAt(1735693200 + 61).verify(request), "expired_signature");
    // The same request twice is a replay: the nonce is remembered per Signature-Agent and key.
    const verifier = verifierAt(1735689700);
    await verifier.verify(request);
    await refused(verifier.verify(request), "replayed_nonce");
  });
});

describe("signing and verifying our own", () => {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const directory = "https://trust.test/.well-known/http-message-signatures-directory";
  const thumbprint = jwkThumbprint(publicKey);
  const NOW = 1_800_000_000;
  const keys = () => keysOf({ [directory]: { [thumbprint]: publicKey } });
  const received = (headers: Record<string, string>, body?: string) => ({
    method: "POST",
    url: "https://notes.test",
    target: "/notes?q=it's",
    headers,
    body,
  });

  for (const agentCoverage of ["field", "member"] as const) {
    test(`a signature covering the ${agentCoverage} binds method, target and body`, async () => {
      const signed = signWebBotAuth(
        { method: "post", url: "https://notes.test", target: "/notes?q=it's", body: '{"a":1}' },
        { privateKey, signatureAgent: directory, created: NOW, agentCoverage },
      );
      assert.equal(signed.keyid, thumbprint);
      const agent = await verifierAt(NOW, keys()).verify(received(signed.headers, '{"a":1}'));
      assert.equal(agent.bindsRequest, true);
      assert.equal(agent.did, encodeDidKey(rawPublicKey(publicKey)));
      await refused(verifierAt(NOW, keys()).verify(received(signed.headers, '{"a":2}')), "invalid_signature");
    });
  }

  test("refusals: wrong tag, unknown key, another authority, a lifetime over the bound", async () => {
    const signed = signWebBotAuth(
      { method: "GET", url: "https://notes.test/notes" },
      { privateKey, signatureAgent: directory, created: NOW },
    );
    const get = (headers: Record<string, string>, url = "https://notes.test") => ({
      method: "GET",
      url,
      target: "/notes",
      headers,
    });
    await verifierAt(NOW, keys()).verify(get(signed.headers));
    const retagged = signed.headers["signature-input"].replace('tag="web-bot-auth"', 'tag="other"');
    await refused(
      verifierAt(NOW, keys()).verify(get({ ...signed.headers, "signature-input": retagged })),
      "invalid_signature",
    );
    // Still a Web Bot Auth attempt, since it names a Signature-Agent: its verifier is the one to say why.
    const profiles = (headers: Record<string, string>) => signatureProfiles((name) => headers[name]);
    assert.deepEqual(profiles({ ...signed.headers, "signature-input": retagged }), { proto: false, webBotAuth: true });
    const { "signature-agent": _, ...anonymous } = signed.headers;
    assert.deepEqual(profiles({ ...anonymous, "signature-input": retagged }), { proto: false, webBotAuth: false });
    await refused(verifierAt(NOW, keysOf({})).verify(get(signed.headers)), "invalid_signature");
    await refused(verifierAt(NOW, keys()).verify(get(signed.headers, "https://other.test")), "invalid_signature");
    const long = signWebBotAuth(
      { method: "GET", url: "https://notes.test/notes" },
      { privateKey, signatureAgent: directory, created: NOW, validitySeconds: 2 * 86400 },
    );
    await refused(verifierAt(NOW, keys()).verify(get(long.headers)), "invalid_signature");
    const noAgent: Record<string, string> = { ...signed.headers };
    delete noAgent["signature-agent"];
    await refused(verifierAt(NOW, keys()).verify(get(noAgent)), "invalid_signature");
  });

  test("one request, two signatures: the proto verifier takes sig1, the Web Bot Auth verifier sig2", async () => {
    const did = encodeDidKey(rawPublicKey(publicKey));
    const headers = signProtoAndWebBotAuth(
      { method: "POST", url: "https://notes.test/notes?q=it's", body: "{}" },
      { keyid: did, privateKey, created: NOW },
      { signatureAgent: directory },
    );
    const request = { method: "POST", url: "https://notes.test/notes?q=it%27s", headers: { ...headers }, body: "{}" };
    const proto = createRequestVerifier({
      nonceStore: new MemoryNonceStore({ now: () => NOW * 1000 }),
      now: () => NOW * 1000,
    });
    assert.equal((await proto.verify(request)).keyid, did);
    const agent = await verifierAt(NOW, keys()).verify(request);
    assert.equal(agent.label, "sig2");
    assert.equal(agent.bindsRequest, true);
  });
});
