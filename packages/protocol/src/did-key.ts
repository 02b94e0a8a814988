import type { KeyObject } from "node:crypto";
import { base58 } from "@scure/base";
import { ED25519_KEY_LENGTH, publicKeyFromRaw } from "./ed25519.js";

/** Multicodec code of an Ed25519 public key. */
const ED25519_PUB_CODEC = 0xed;
const PREFIX = "did:key:";
/** A did:key for Ed25519 is 56 characters; anything far longer is not one and is not decoded. */
const MAX_DID_KEY_LENGTH = 128;

export type DidKeyErrorCode =
  | "invalid_did"
  | "unsupported_multibase"
  | "invalid_base58"
  | "non_canonical_encoding"
  | "invalid_varint"
  | "unsupported_codec"
  | "invalid_key_length";

export class DidKeyError extends Error {
  override readonly name = "DidKeyError";
  constructor(
    readonly code: DidKeyErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export function encodeDidKey(publicKey: Uint8Array): string {
  if (publicKey.length !== ED25519_KEY_LENGTH) {
    throw new DidKeyError("invalid_key_length", "an Ed25519 public key is exactly 32 bytes");
  }
  const bytes = new Uint8Array(2 + ED25519_KEY_LENGTH);
  bytes[0] = 0xed;
  bytes[1] = 0x01;
  bytes.set(publicKey, 2);
  return `${PREFIX}z${base58.encode(bytes)}`;
}

/** Reads an unsigned LEB128 varint in its minimal form, as the multiformats spec requires. */
function readVarint(bytes: Uint8Array): { value: number; length: number } {
  let value = 0;
  for (let i = 0; i < bytes.length && i < 9; i++) {
    const byte = bytes[i] as number;
    value += (byte & 0x7f) * 2 ** (7 * i);
    if ((byte & 0x80) === 0) {
      if (byte === 0 && i > 0) throw new DidKeyError("invalid_varint", "multicodec varint is not minimally encoded");
      return { value, length: i + 1 };
    }
  }
  throw new DidKeyError("invalid_varint", "multicodec varint is truncated or too long");
}

/** Decodes an Ed25519 did:key to its 32 raw public-key bytes, rejecting every non-canonical form. */
export function decodeDidKey(did: string): Uint8Array {
  if (typeof did !== "string" || !did.startsWith(PREFIX) || did.length > MAX_DID_KEY_LENGTH) {
    throw new DidKeyError("invalid_did", "not a did:key identifier");
  }
  const multibase = did.slice(PREFIX.length);
  if (!multibase.startsWith("z")) {
    throw new DidKeyError("unsupported_multibase", "did:key must use the base58btc multibase prefix 'z'");
  }
  const encoded = multibase.slice(1);
  let bytes: Uint8Array;
  try {
    bytes = base58.decode(encoded);
  } catch {
    throw new DidKeyError("invalid_base58", "did:key payload is not valid base58btc");
  }
  if (encoded.length === 0 || base58.encode(bytes) !== encoded) {
    throw new DidKeyError("non_canonical_encoding", "did:key payload is not canonically encoded");
  }
  const codec = readVarint(bytes);
  if (codec.value !== ED25519_PUB_CODEC) {
    throw new DidKeyError("unsupported_codec", `multicodec 0x${codec.value.toString(16)} is not ed25519-pub (0xed)`);
  }
  const key = bytes.subarray(codec.length);
  if (key.length !== ED25519_KEY_LENGTH) {
    throw new DidKeyError("invalid_key_length", `Ed25519 key must be 32 bytes, found ${key.length}`);
  }
  return key;
}

export function isDidKey(did: string): boolean {
  try {
    decodeDidKey(did);
    return true;
  } catch {
    return false;
  }
}

const KEY_CACHE_LIMIT = 100_000;
const keyCache = new Map<string, KeyObject>();

/**
 * The verification key of an Ed25519 did:key. Importing a key costs more than verifying with it,
 * so keys are kept, up to a bound past which the oldest imported goes first: a key still in use
 * is imported again at most once per 100,000 others, cheaper than reordering on every hit.
 */
export function didKeyToPublicKey(did: string): KeyObject {
  const cached = keyCache.get(did);
  if (cached !== undefined) return cached;
  const key = publicKeyFromRaw(decodeDidKey(did));
  if (keyCache.size >= KEY_CACHE_LIMIT) {
    const oldest = keyCache.keys().next().value;
    if (oldest !== undefined) keyCache.delete(oldest);
  }
  keyCache.set(did, key);
  return key;
}
