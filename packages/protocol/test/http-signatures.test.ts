import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { loadVectorFile, loadVectors } from "@proto/testkit";
import { encodeDidKey } from "../src/did-key.js";
import { ProtoError } from "../src/errors.js";
import { contentDigest } from "../src/http-signatures/content-digest.js";
import { signatureHeaderPair, signFetchRequest, signMessage, signRequest } from "../src/http-signatures/sign.js";
import { fetchTargetUri } from "../src/http-signatures/target-uri.js";
import { createRequestVerifier } from "../src/http-signatures/verify.js";
import { MemoryNonceStore } from "../src/nonce-store.js";
import { type Keypair, newAgent, type SignatureVector, vectorHeaders } from "./helpers.js";

const { vectors, skipReason } = loadVectors<SignatureVector>("signatures");
const keypair = loadVectorFile<Keypair>("keypair.json");

function verifierWith(nowSeconds: number, extra: Partial<Parameters<typeof createRequestVerifier>[0]> = {}) {
  return createRequestVerifier({
    nonceStore: new MemoryNonceStore({ now: () => nowSeconds * 1000 }),
    now: () => nowSeconds * 1000,
    ...extra,
  });
}

async function rejectsWith(promise: Promise<unknown>, code: string, status = 401) {
  await assert.rejects(promise, (e: unknown) => {
    assert.ok(e instanceof ProtoError, `expected ProtoError, got ${String(e)}`);
    assert.equal(e.code, code, e.message);
    assert.equal(e.status, status);
    return true;
  });
}

// Every vector and every rejection, with Ed25519 on the event loop and on the thread pool.
for (const offloadVerification of [false, true]) {
  const mode = offloadVerification ? " (verification on the thread pool)" : "";
  const verifierAt: typeof verifierWith = (nowSeconds, extra = {}) =>
    verifierWith(nowSeconds, { offloadVerification, ...extra });

  describe(`RFC 9421 vectors${mode}`, { skip: skipReason ?? (keypair ? false : "keypair.json not found") }, () => {
    for (const { file, vector } of vectors) {
      test(`${file}: the signer reproduces the base and signature byte for byte`, () => {
        const p = vector.signature_params;
        const signed = signRequest(
          { method: vector.request.method, url: vector.request.target_uri, body: vector.request.body },
          {
            keyid: p.keyid,
            privateKey: Buffer.from(keypair!.private_key_raw_hex, "hex"),
            created: p.created,
            expires: p.expires,
            nonce: p.nonce,
          },
        );
        assert.equal(signed.signatureBase, vector.canonical_signature_input);
        assert.deepEqual(signed.headers, vectorHeaders(vector));
        assert.equal(vector.public_key_did, keypair!.did_key);
      });

      test(`${file}: the verifier accepts it, raw and as a Fetch Request`, async () => {
        const now = vector.signature_params.created + 1;
        const raw = {
          method: vector.request.method,
          url: vector.request.target_uri,
          headers: vectorHeaders(vector),
          body: vector.request.body,
        };
        const result = await verifierAt(now).verify(raw);
        assert.equal(result.keyid, vector.public_key_did);
        assert.equal(result.nonce, vector.signature_params.nonce);

        const request = new Request(vector.request.target_uri, {
          method: vector.request.method,
          headers: vectorHeaders(vector),
          ...(vector.request.body === null ? {} : { body: vector.request.body }),
        });
        const fromFetch = await verifierAt(now).verify(request);
        assert.equal(fromFetch.keyid, vector.public_key_did);
        assert.equal(await request.text(), vector.request.body ?? "", "the body is still readable by the app");
      });
    }
  });

  describe(`verifier rejections${mode}`, () => {
    const agent = newAgent();
    const NOW = 1_800_000_000;
    const URL_ = "https://svc.example/v1/things";

    function signed(
      overrides: Partial<Parameters<typeof signRequest>[1]> = {},
      body: string | null = '{"a":1}',
      method = "POST",
    ) {
      const s = signRequest(
        { method, url: URL_, body },
        { keyid: agent.did, privateKey: agent.privateKey, created: NOW, ...overrides },
      );
      return { method, url: URL_, headers: { ...s.headers } as Record<string, string>, body };
    }

    test("a correct request passes and reports the signer", async () => {
      const result = await verifierAt(NOW).verify(signed());
      assert.equal(result.keyid, agent.did);
      assert.equal(new TextDecoder().decode(result.body), '{"a":1}');
    });

    test("unsigned and unparsable requests are invalid_signature", async () => {
      await rejectsWith(verifierAt(NOW).verify({ method: "GET", url: URL_, headers: {} }), "invalid_signature");
      const req = signed();
      req.headers["signature-input"] = "sig1=(((";
      await rejectsWith(verifierAt(NOW).verify(req), "invalid_signature");
      const req2 = signed();
      req2.headers.signature = "sig1=:not base64:";
      await rejectsWith(verifierAt(NOW).verify(req2), "invalid_signature");
    });

    test("a tampered body fails the digest, a tampered digest fails the signature", async () => {
      const req = signed();
      await rejectsWith(verifierAt(NOW).verify({ ...req, body: '{"a":2}' }), "invalid_signature");
      const req2 = signed();
      req2.headers["content-digest"] = contentDigest(new TextEncoder().encode('{"a":2}'));
      await rejectsWith(verifierAt(NOW).verify({ ...req2, body: '{"a":2}' }), "invalid_signature");
      const req3 = signed();
      delete req3.headers["content-digest"];
      await rejectsWith(verifierAt(NOW).verify(req3), "invalid_signature");
    });

    test("another method or URL does not verify", async () => {
      await rejectsWith(verifierAt(NOW).verify({ ...signed(), method: "PUT" }), "invalid_signature");
      await rejectsWith(
        verifierAt(NOW).verify({ ...signed(), url: "https://svc.example/v1/other" }),
        "invalid_signature",
      );
      await rejectsWith(
        verifierAt(NOW).verify(signed(), { url: "https://evil.example/v1/things" }),
        "invalid_signature",
      );
    });

    test("content-digest must be covered exactly when there is a body", async () => {
      const withBody = signed();
      withBody.headers["signature-input"] = withBody.headers["signature-input"]!.replace(' "content-digest"', "");
      await rejectsWith(verifierAt(NOW).verify(withBody), "invalid_signature");
      const noBody = signed({}, null, "GET");
      noBody.headers["signature-input"] = noBody.headers["signature-input"]!.replace(
        '"@target-uri"',
        '"@target-uri" "content-digest"',
      );
      await rejectsWith(verifierAt(NOW).verify(noBody), "invalid_signature");
      const extra = signed({}, null, "GET");
      extra.headers["signature-input"] = extra.headers["signature-input"]!.replace(
        '"@target-uri"',
        '"@target-uri" "@authority"',
      );
      await rejectsWith(verifierAt(NOW).verify(extra), "invalid_signature");
      const missing = signed({}, null, "GET");
      missing.headers["signature-input"] = missing.headers["signature-input"]!.replace(' "@target-uri"', "");
      await rejectsWith(verifierAt(NOW).verify(missing), "invalid_signature");
    });

    test("a good signature that also covers components the request carries is invalid_signature", async () => {
      // Upstream's conformance document: "reject requests with extra or missing components". The
      // signature below is correct over what it covers; only the covered set is wrong.
      const signedOver = (components: string[], method: string, body: string | null) => {
        const digest = body === null ? undefined : contentDigest(new TextEncoder().encode(body));
        const sent: Record<string, string> = {
          ...(body === null ? {} : { "content-type": "application/json" }),
          ...(digest === undefined ? {} : { "content-digest": digest }),
        };
        const signature = signMessage(
          { method, targetUri: fetchTargetUri(URL_), header: (name) => sent[name] },
          components.map((name) => [name, new Map()]),
          [
            ["created", NOW],
            ["expires", NOW + 60],
            ["nonce", `n-${components.join("-")}`],
            ["keyid", agent.did],
            ["alg", "ed25519"],
          ],
          agent.privateKey,
          "sig1",
        );
        return { method, url: URL_, headers: { ...sent, ...signatureHeaderPair([signature]) }, body };
      };
      const refused = async (request: ReturnType<typeof signedOver>, component: string) => {
        await assert.rejects(verifierAt(NOW).verify(request), (e: unknown) => {
          assert.ok(e instanceof ProtoError);
          assert.equal(e.code, "invalid_signature");
          assert.equal(e.status, 401);
          assert.match(e.message, new RegExp(`covered component ${component} is not allowed`));
          return true;
        });
      };
      // Built the same way with exactly the profile's components, it verifies.
      assert.equal(
        (await verifierAt(NOW).verify(signedOver(["@method", "@target-uri", "content-digest"], "POST", '{"a":1}')))
          .keyid,
        agent.did,
      );
      await refused(
        signedOver(["@method", "@target-uri", "content-digest", "content-type"], "POST", '{"a":1}'),
        "content-type",
      );
      await refused(signedOver(["@method", "@target-uri", "@authority"], "GET", null), "@authority");
    });

    test("every parameter is required, and alg must be ed25519", async () => {
      for (const param of ["created", "expires", "nonce", "keyid", "alg"]) {
        const req = signed();
        req.headers["signature-input"] = req.headers["signature-input"]!.replace(new RegExp(`;${param}=[^;]*`), "");
        await rejectsWith(verifierAt(NOW).verify(req), "invalid_signature");
      }
      const req = signed();
      req.headers["signature-input"] = req.headers["signature-input"]!.replace(
        'alg="ed25519"',
        'alg="ecdsa-p256-sha256"',
      );
      await rejectsWith(verifierAt(NOW).verify(req), "invalid_signature");
      const unknown = signed();
      unknown.headers["signature-input"] += ';foo="bar"';
      await rejectsWith(verifierAt(NOW).verify(unknown), "invalid_signature");
    });

    test("keyid must be a did:key", async () => {
      const s = signed({ keyid: "did:web:svc.example" });
      await rejectsWith(verifierAt(NOW).verify(s), "invalid_signature");
    });

    test("a signature by another key than keyid names fails", async () => {
      const other = newAgent();
      const s = signed({ privateKey: other.privateKey });
      await rejectsWith(verifierAt(NOW).verify(s), "invalid_signature");
    });

    test("validity longer than 300 s is invalid; exactly 300 s passes", async () => {
      await rejectsWith(verifierAt(NOW).verify(signed({ expires: NOW + 301 })), "invalid_signature");
      await rejectsWith(verifierAt(NOW).verify(signed({ expires: NOW - 1 })), "invalid_signature");
      const ok = await verifierAt(NOW).verify(signed({ expires: NOW + 300 }));
      assert.equal(ok.expires, NOW + 300);
    });

    test("expires must come after created: equal is 401 invalid_signature, one second later passes", async () => {
      const same = signed({ expires: NOW });
      await rejectsWith(verifierAt(NOW).verify(same), "invalid_signature");
      await assert.rejects(verifierAt(NOW).verify(same), /expires must follow created/);
      const oneSecond = await verifierAt(NOW).verify(signed({ expires: NOW + 1 }));
      assert.equal(oneSecond.expires, NOW + 1);
    });

    test("the time window honours the configured skew", async () => {
      await rejectsWith(verifierAt(NOW - 61).verify(signed()), "invalid_signature");
      assert.ok(await verifierAt(NOW - 60).verify(signed()));
      assert.ok(await verifierAt(NOW + 60 + 60).verify(signed()));
      await rejectsWith(verifierAt(NOW + 60 + 61).verify(signed()), "expired_signature");
      await rejectsWith(verifierAt(NOW + 70, { skewSeconds: 5 }).verify(signed()), "expired_signature");
    });

    test("replays are caught per (keyid, nonce)", async () => {
      const verifier = verifierAt(NOW);
      const req = signed({ nonce: "n-1" });
      await verifier.verify(req);
      await rejectsWith(verifier.verify(req), "replayed_nonce");
      const other = newAgent();
      const s = signRequest(
        { method: "POST", url: URL_, body: '{"a":1}' },
        { keyid: other.did, privateKey: other.privateKey, created: NOW, nonce: "n-1" },
      );
      assert.ok(await verifier.verify({ method: "POST", url: URL_, headers: { ...s.headers }, body: '{"a":1}' }));
    });

    test("a failed signature does not burn its nonce", async () => {
      const verifier = verifierAt(NOW);
      const req = signed({ nonce: "n-2" });
      await rejectsWith(verifier.verify({ ...req, body: '{"a":9}' }), "invalid_signature");
      assert.ok(await verifier.verify(req));
    });

    test("revocation is checked before the signature", async () => {
      const checked: string[] = [];
      const verifier = verifierAt(NOW, {
        isRevoked: (keyid) => {
          checked.push(keyid);
          return keyid === agent.did;
        },
      });
      const req = signed();
      req.headers.signature = `sig1=:${Buffer.alloc(64).toString("base64")}:`;
      await rejectsWith(verifier.verify(req), "revoked_key");
      assert.deepEqual(checked, [agent.did]);
    });

    test("signs and verifies Fetch API requests", async () => {
      const request = await signFetchRequest(new Request(URL_, { method: "POST", body: '{"x":true}' }), {
        keyid: agent.did,
        privateKey: agent.privateKey,
        created: NOW,
      });
      assert.ok(request.headers.get("content-digest")?.startsWith("sha-256=:"));
      const result = await verifierAt(NOW).verify(request);
      assert.equal(result.keyid, agent.did);
      assert.equal(await request.text(), '{"x":true}');
      const get = await signFetchRequest(new Request(URL_), {
        keyid: agent.did,
        privateKey: agent.privateKey,
        created: NOW,
      });
      assert.equal(get.headers.get("content-digest"), null);
      assert.ok(await verifierAt(NOW).verify(get));
    });

    test("the label is chosen or the first is used", async () => {
      const s = signRequest(
        { method: "GET", url: URL_ },
        { keyid: agent.did, privateKey: agent.privateKey, created: NOW, label: "proto" },
      );
      const req = { method: "GET", url: URL_, headers: { ...s.headers } };
      assert.equal((await verifierAt(NOW).verify(req)).label, "proto");
      await rejectsWith(verifierAt(NOW, { label: "sig1" }).verify(req), "invalid_signature");
    });

    test("oversized headers are refused before parsing", async () => {
      const req = signed();
      req.headers["signature-input"] = `sig1=("@method");nonce="${"a".repeat(9000)}"`;
      await rejectsWith(verifierAt(NOW).verify(req), "invalid_signature");
    });

    test("the default nonce is random and the default clock is used", () => {
      const a = signRequest(
        { method: "GET", url: URL_ },
        { keyid: encodeDidKey(new Uint8Array(32)), privateKey: agent.privateKey },
      );
      const b = signRequest(
        { method: "GET", url: URL_ },
        { keyid: encodeDidKey(new Uint8Array(32)), privateKey: agent.privateKey },
      );
      assert.notEqual(a.params.nonce, b.params.nonce);
      assert.ok(Math.abs(a.params.created - Date.now() / 1000) < 5);
      assert.equal(a.params.expires - a.params.created, 60);
    });
  });
}

describe("verifier limits and URL form", () => {
  const agent = newAgent();
  const NOW = 1_800_000_000;
  test("a Fetch body over the cap is 413 payload_too_large, streamed or declared", async () => {
    const verifier = createRequestVerifier({
      nonceStore: new MemoryNonceStore(),
      now: () => NOW * 1000,
      maxBodyBytes: 1024,
    });
    const big = "x".repeat(2048);
    const request = await signFetchRequest(new Request("https://svc.example/a", { method: "POST", body: big }), {
      keyid: agent.did,
      privateKey: agent.privateKey,
      created: NOW,
    });
    await rejectsWith(verifier.verify(request), "payload_too_large", 413);
  });

  test("a fragment is not part of the signed target", async () => {
    const signed = signRequest(
      { method: "GET", url: "https://svc.example/a#frag" },
      { keyid: agent.did, privateKey: agent.privateKey, created: NOW },
    );
    assert.ok(signed.signatureBase.includes("https://svc.example/a\n"));
    const result = await verifierWith(NOW).verify({
      method: "GET",
      url: "https://svc.example/a",
      headers: signed.headers,
    });
    assert.equal(result.keyid, agent.did);
  });
});
