/** The SDK's signer (AgentIdentity.signRequest, through @proto/protocol) reproduces the shared vectors byte for byte. */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createRequestVerifier, MemoryNonceStore } from "@proto/protocol";
import { loadVectorFile, loadVectors } from "@proto/testkit";
import { AgentIdentity } from "../src/index.js";

interface SignatureVector {
  name: string;
  request: { method: string; target_uri: string; body: string | null };
  content_digest: string | null;
  covered_components: string[];
  signature_params: { created: number; expires: number; nonce: string; keyid: string; alg: string };
  canonical_signature_input: string;
  signature_hex: string;
  public_key_did: string;
}

interface Keypair {
  did_key: string;
  private_key_raw_hex: string;
}

const { vectors, skipReason } = loadVectors<SignatureVector>("signatures");
const keypair = loadVectorFile<Keypair>("keypair.json");

describe("SDK signer against the shared signature vectors", () => {
  if (skipReason !== undefined || keypair === undefined) {
    test("signature vectors", { skip: skipReason ?? "keypair.json not found in the vectors folder" }, () => {});
    return;
  }
  const identity = AgentIdentity.fromSeed(Buffer.from(keypair.private_key_raw_hex, "hex"));

  test("the vector key is the agent identity", () => {
    assert.equal(identity.did, keypair.did_key);
  });

  for (const { file, vector } of vectors) {
    test(`${file}: signature base, Signature-Input, Signature and Content-Digest`, async () => {
      assert.equal(vector.public_key_did, identity.did);
      const { created, expires, nonce } = vector.signature_params;
      const signed = identity.signRequest(
        { method: vector.request.method, url: vector.request.target_uri, body: vector.request.body },
        { created, expires, nonce },
      );
      assert.equal(signed.signatureBase, vector.canonical_signature_input);
      const signature = Buffer.from(vector.signature_hex, "hex").toString("base64");
      assert.equal(signed.headers.signature, `sig1=:${signature}:`);
      const components = vector.covered_components.map((c) => `"${c}"`).join(" ");
      assert.equal(
        signed.headers["signature-input"],
        `sig1=(${components});created=${created};expires=${expires};nonce="${nonce}";keyid="${identity.did}";alg="ed25519"`,
      );
      assert.equal(signed.headers["content-digest"], vector.content_digest ?? undefined);
      // And the protocol verifier accepts it at the vector's time.
      const verifier = createRequestVerifier({ nonceStore: new MemoryNonceStore(), now: () => created * 1000 });
      const verified = await verifier.verify({
        method: vector.request.method,
        url: vector.request.target_uri,
        headers: { ...signed.headers },
        body: vector.request.body,
      });
      assert.equal(verified.keyid, identity.did);
    });
  }
});
