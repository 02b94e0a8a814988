import { generateKeyPairSync } from "node:crypto";
import { encodeDidKey } from "../src/did-key.js";
import { rawPublicKey } from "../src/ed25519.js";

/** A fresh agent identity for tests that need a key other than the published vector key. */
export function newAgent() {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  return { privateKey, did: encodeDidKey(rawPublicKey(publicKey)) };
}

export interface SignatureVector {
  name: string;
  request: { method: string; target_uri: string; body: string | null };
  content_digest: string | null;
  covered_components: string[];
  signature_params: { created: number; expires: number; nonce: string; keyid: string; alg: string };
  canonical_signature_input: string;
  signature_hex: string;
  public_key_did: string;
  verifier_now_unix_seconds?: number;
  expected_outcome?: { type: "accept" } | { type: "reject"; code: string; status: number };
  extra_setup?: { kind: string; other_keyid: string };
}

export interface Keypair {
  did_key: string;
  private_key_raw_hex: string;
  public_key_raw_hex: string;
}

/** The headers a client following the vector would send. */
export function vectorHeaders(v: SignatureVector): Record<string, string> {
  const params = v.signature_params;
  const components = v.covered_components.map((c) => `"${c}"`).join(" ");
  const headers: Record<string, string> = {
    "signature-input": `sig1=(${components});created=${params.created};expires=${params.expires};nonce="${params.nonce}";keyid="${params.keyid}";alg="${params.alg}"`,
    signature: `sig1=:${Buffer.from(v.signature_hex, "hex").toString("base64")}:`,
  };
  if (v.content_digest !== null) headers["content-digest"] = v.content_digest;
  return headers;
}
