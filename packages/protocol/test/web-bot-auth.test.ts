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
import { createWebBotAuthVerifier, type SignatureAgentKeys, signatureProfiles } from "../src/web-bot-auth/verify.js";

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
/** An origin in Signature-Agent names its well-known directory, which is what is looked up. */
const AGENT_DIRECTORY = `${AGENT_URL}/.well-known/http-message-signatures-directory`;

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

function verifierAt(
  seconds: number,
  keys: SignatureAgentKeys = keysOf({ [AGENT_DIRECTORY]: { [TEST_THUMBPRINT]: createPublicKey(TEST_KEY) } }),
) {
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
      keys: keysOf({ [AGENT_DIRECTORY]: { [TEST_THUMBPRINT]: createPublicKey(TEST_KEY) } }),
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

  for (const variant of [
    { agentCoverage: "member" },
    { agentCoverage: "field" },
    { signatureAgentForm: "string" },
  ] as const) {
    test(`a signature (${JSON.stringify(variant)}) binds method, target and body`, async () => {
      const signed = signWebBotAuth(
        { method: "post", url: "https://notes.test", target: "/notes?q=it's", body: '{"a":1}' },
        { privateKey, signatureAgent: directory, created: NOW, ...variant },
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

  test("the working group's form by default: the origin as a dictionary member, the signature covering only it; the older string on request", () => {
    const request = { method: "GET", url: "https://notes.test/notes" };
    const dictionary = signWebBotAuth(request, { privateKey, signatureAgent: directory, created: NOW });
    assert.equal(dictionary.headers["signature-agent"], 'sig1="https://trust.test"');
    assert.match(dictionary.headers["signature-input"], /^sig1=\([^)]* "signature-agent";key="sig1"\);/);
    const string = signWebBotAuth(request, {
      privateKey,
      signatureAgent: directory,
      created: NOW,
      signatureAgentForm: "string",
    });
    assert.equal(string.headers["signature-agent"], `"${directory}"`);
    assert.match(string.headers["signature-input"], /^sig1=\([^)]* "signature-agent"\);/);
    // A JWK Set elsewhere than the well-known path is named as such (-00's jwks_uri type).
    const elsewhere = signWebBotAuth(request, {
      privateKey,
      signatureAgent: "https://trust.test/keys.json",
      created: NOW,
    });
    assert.equal(elsewhere.headers["signature-agent"], 'sig1="https://trust.test/keys.json";type=jwks_uri');
    const both = signProtoAndWebBotAuth(
      request,
      { keyid: encodeDidKey(rawPublicKey(publicKey)), privateKey, created: NOW },
      { signatureAgent: directory },
    );
    assert.equal(both["signature-agent"], 'sig2="https://trust.test"');
    assert.match(both["signature-input"], /, sig2=\([^)]* "signature-agent";key="sig2"\);/);
  });

  test("typed members (-00): a directory is an origin, a jwks_uri the JWK Set; other types and parameters are refused", async () => {
    const elsewhere = "https://trust.test/keys.json";
    const typedKeys = () =>
      keysOf({ [directory]: { [thumbprint]: publicKey }, [elsewhere]: { [thumbprint]: publicKey } });
    const get = (headers: Record<string, string>) => ({
      method: "GET",
      url: "https://notes.test",
      target: "/n",
      headers,
    });
    // The signature covers the member, parameters included: rewriting one fails the signature, so
    // these show the refusals that come before the signature (and any fetch).
    const member = (value: string) => {
      const signed = signWebBotAuth(
        { method: "GET", url: "https://notes.test/n" },
        { privateKey, signatureAgent: directory, created: NOW },
      );
      return { ...signed.headers, "signature-agent": `sig1=${value}` };
    };
    const verify = (headers: Record<string, string>) => verifierAt(NOW, typedKeys()).verify(get(headers));
    await refused(verify(member('"https://trust.test";type=cimd')), "invalid_signature");
    await assert.rejects(verify(member('"https://trust.test";type=cimd')), /type must be directory or jwks_uri/);
    await assert.rejects(verify(member('"https://trust.test";via="x"')), /unknown parameter/);
    await assert.rejects(verify(member('"https://trust.test/keys.json";type=directory')), /must name an origin/);
    await assert.rejects(verify(member('"https://trust.test";type=jwks_uri')), /must name the JWK Set/);

    // A jwks_uri member as our signer sends it (a type=directory one: the interop tests, by dhensby's signer).
    const jwks = signWebBotAuth(
      { method: "GET", url: "https://notes.test/n" },
      { privateKey, signatureAgent: elsewhere, created: NOW },
    );
    const viaJwks = await verifierAt(NOW, typedKeys()).verify(get(jwks.headers));
    assert.equal(viaJwks.signatureAgent, elsewhere);
    assert.equal(viaJwks.signatureAgentForm, "dictionary");
  });

  test("nothing that could never verify is looked up: a keyid that is no thumbprint, a signature of the wrong length", async () => {
    const signed = signWebBotAuth(
      { method: "GET", url: "https://notes.test/n" },
      { privateKey, signatureAgent: directory, created: NOW },
    );
    const get = (headers: Record<string, string>) => ({
      method: "GET",
      url: "https://notes.test",
      target: "/n",
      headers,
    });
    const keys = keysOf({ [directory]: { [thumbprint]: publicKey } });
    const verifier = verifierAt(NOW, keys);
    const junkKeyid = signed.headers["signature-input"].replace(/keyid="[^"]+"/, 'keyid="junk"');
    await assert.rejects(verifier.verify(get({ ...signed.headers, "signature-input": junkKeyid })), /keyid must be/);
    const short = { ...signed.headers, signature: "sig1=:AAAA:" };
    await assert.rejects(verifier.verify(get(short)), /not Ed25519/);
    assert.deepEqual(keys.lookups, []);
    // The client a look-up is charged to reaches the key source.
    const seen: unknown[] = [];
    await verifierAt(NOW, {
      async lookup(_url: string, _thumbprint: string, context?: unknown) {
        seen.push(context);
        return publicKey;
      },
    }).verify(get(signed.headers), { client: "192.0.2.7" });
    assert.deepEqual(seen, [{ client: "192.0.2.7" }]);
  });

  test("two signatures, the first tagged otherwise: the one tagged web-bot-auth is verified", async () => {
    const other = generateKeyPairSync("ed25519");
    const first = signWebBotAuth(
      { method: "GET", url: "https://notes.test/n" },
      { privateKey: other.privateKey, signatureAgent: "https://elsewhere.test", created: NOW, label: "a" },
    );
    const second = signWebBotAuth(
      { method: "GET", url: "https://notes.test/n" },
      { privateKey, signatureAgent: directory, created: NOW, label: "b" },
    );
    const headers = {
      "signature-agent": `${first.headers["signature-agent"]}, ${second.headers["signature-agent"]}`,
      "signature-input": `${first.headers["signature-input"].replace('tag="web-bot-auth"', 'tag="other"')}, ${second.headers["signature-input"]}`,
      signature: `${first.headers.signature}, ${second.headers.signature}`,
    };
    const keys = keysOf({ [directory]: { [thumbprint]: publicKey } });
    const agent = await verifierAt(NOW, keys).verify({
      method: "GET",
      url: "https://notes.test",
      target: "/n",
      headers,
    });
    assert.equal(agent.label, "b");
    assert.equal(agent.keyid, thumbprint);
    assert.deepEqual(keys.lookups, [`${directory} ${thumbprint}`]);
  });
});
