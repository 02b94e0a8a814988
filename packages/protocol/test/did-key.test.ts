import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { loadVectorFile } from "@proto/testkit";
import { base58 } from "@scure/base";
import { DidKeyError, decodeDidKey, didKeyToPublicKey, encodeDidKey, isDidKey } from "../src/did-key.js";
import type { Keypair } from "./helpers.js";

const keypair = loadVectorFile<Keypair>("keypair.json");
const KEY = new Uint8Array(32).fill(7);

function didFromBytes(bytes: number[] | Uint8Array): string {
  return `did:key:z${base58.encode(Uint8Array.from(bytes))}`;
}

function rejects(did: string, code: DidKeyError["code"]) {
  assert.throws(
    () => decodeDidKey(did),
    (e: unknown) => e instanceof DidKeyError && e.code === code,
    `${did} should fail with ${code}`,
  );
}

describe("did:key", () => {
  test("the published test key encodes and decodes", { skip: keypair ? false : "reference vectors not found" }, () => {
    const raw = Buffer.from(keypair!.public_key_raw_hex, "hex");
    assert.equal(encodeDidKey(raw), keypair!.did_key);
    assert.deepEqual(Buffer.from(decodeDidKey(keypair!.did_key)), raw);
  });

  test("round-trips any 32-byte key", () => {
    const did = encodeDidKey(KEY);
    assert.match(did, /^did:key:z6Mk/);
    assert.deepEqual(decodeDidKey(did), KEY);
    assert.ok(isDidKey(did));
  });

  test("rejects what is not a did:key", () => {
    rejects("did:web:example.com", "invalid_did");
    rejects("", "invalid_did");
    rejects(`did:key:z${"1".repeat(200)}`, "invalid_did");
  });

  test("requires the base58btc multibase prefix", () => {
    const did = encodeDidKey(KEY);
    rejects(did.replace("did:key:z", "did:key:m"), "unsupported_multibase");
    rejects(did.replace("did:key:z", "did:key:"), "unsupported_multibase");
  });

  test("rejects characters outside the base58 alphabet", () => {
    rejects(`${encodeDidKey(KEY)}0`, "invalid_base58");
    rejects(`${encodeDidKey(KEY)}#frag`, "invalid_base58");
    rejects("did:key:z", "non_canonical_encoding");
  });

  test("rejects a non-canonical base58 spelling (extra leading zero byte)", () => {
    const did = didFromBytes([0, 0xed, 0x01, ...KEY]);
    assert.throws(() => decodeDidKey(did), DidKeyError);
  });

  test("reads the multicodec as a minimal unsigned varint", () => {
    rejects(didFromBytes([0xed, 0x81, 0x00, ...KEY]), "invalid_varint");
    rejects(didFromBytes([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]), "invalid_varint");
  });

  test("accepts only the ed25519-pub codec", () => {
    rejects(didFromBytes([0xec, 0x01, ...KEY]), "unsupported_codec");
    rejects(didFromBytes([0xe7, 0x01, ...KEY, 0]), "unsupported_codec");
    rejects(didFromBytes([0xed, ...KEY]), "unsupported_codec");
  });

  test("requires exactly 32 key bytes", () => {
    rejects(didFromBytes([0xed, 0x01, ...KEY.subarray(1)]), "invalid_key_length");
    rejects(didFromBytes([0xed, 0x01, ...KEY, 1]), "invalid_key_length");
    assert.throws(() => encodeDidKey(new Uint8Array(31)), DidKeyError);
  });

  test("resolves a verification key and caches it", () => {
    const did = encodeDidKey(KEY);
    const key = didKeyToPublicKey(did);
    assert.equal(key.asymmetricKeyType, "ed25519");
    assert.equal(didKeyToPublicKey(did), key);
  });
});
