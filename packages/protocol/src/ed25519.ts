import { createPrivateKey, createPublicKey, type KeyObject } from "node:crypto";

// DER prefixes of SubjectPublicKeyInfo and PKCS#8 for Ed25519 (RFC 8410): importing through DER
// is the cheapest way to turn 32 raw bytes into a KeyObject.
const SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");
const PKCS8_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");

export const ED25519_KEY_LENGTH = 32;
export const ED25519_SIGNATURE_LENGTH = 64;

export function publicKeyFromRaw(raw: Uint8Array): KeyObject {
  if (raw.length !== ED25519_KEY_LENGTH) throw new TypeError("Ed25519 public key must be 32 bytes");
  return createPublicKey({ key: Buffer.concat([SPKI_PREFIX, raw]), format: "der", type: "spki" });
}

export function privateKeyFromSeed(seed: Uint8Array): KeyObject {
  if (seed.length !== ED25519_KEY_LENGTH) throw new TypeError("Ed25519 seed must be 32 bytes");
  return createPrivateKey({ key: Buffer.concat([PKCS8_PREFIX, seed]), format: "der", type: "pkcs8" });
}

export function rawPublicKey(key: KeyObject): Uint8Array {
  const publicKey = key.type === "private" ? createPublicKey(key) : key;
  const der = publicKey.export({ format: "der", type: "spki" });
  return new Uint8Array(der.subarray(SPKI_PREFIX.length));
}

export function seedOfPrivateKey(key: KeyObject): Uint8Array {
  const der = key.export({ format: "der", type: "pkcs8" });
  return new Uint8Array(der.subarray(PKCS8_PREFIX.length));
}
