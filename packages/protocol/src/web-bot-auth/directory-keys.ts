/**
 * The keys of a Web Bot Auth key directory (a JWK Set, RFC 7517 §5): only Ed25519 public keys are
 * kept, each by its RFC 7638 / RFC 8037 thumbprint, which is what a signature's `keyid` names.
 */
import { createHash, type KeyObject } from "node:crypto";
import { decodeBase64url, encodeBase64url } from "../base64url.js";
import { ED25519_KEY_LENGTH, publicKeyFromRaw, rawPublicKey } from "../ed25519.js";
import { KeyDirectoryError } from "./key-directory-error.js";

export interface DirectoryKey {
  publicKey: KeyObject;
  /** JWK `nbf`, seconds since the epoch. */
  notBefore: number | undefined;
  /** JWK `exp`, seconds since the epoch: the key is no longer valid from then on. */
  expiresAt: number | undefined;
}

export interface ParseOptions {
  maxKeys: number;
  /** At the well-known URI a `kid` must be the thumbprint; elsewhere it is any label. */
  kidMustBeThumbprint: boolean;
}

/** `alg` values that name Ed25519: the HTTP signature algorithm and the JOSE ones. */
const ED25519_ALGS = new Set(["ed25519", "EdDSA", "Ed25519"]);

function thumbprintOfX(x: string): string {
  // RFC 7638 §3.2 / RFC 8037 A.3: the required members in lexicographic order, no whitespace.
  const canonical = JSON.stringify({ crv: "Ed25519", kty: "OKP", x });
  return encodeBase64url(createHash("sha256").update(canonical, "utf8").digest());
}

/** The base64url SHA-256 JWK thumbprint of an Ed25519 key (a private key gives its public key's). */
export function jwkThumbprint(publicKey: KeyObject): string {
  if (publicKey.asymmetricKeyType !== "ed25519") throw new TypeError("jwkThumbprint supports Ed25519 keys only");
  return thumbprintOfX(encodeBase64url(rawPublicKey(publicKey)));
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function optionalTime(value: unknown): number | undefined | null {
  if (value === undefined) return undefined;
  return typeof value === "number" && Number.isFinite(value) ? value : null;
}

/** One entry of `keys`, or undefined when it is not a usable Ed25519 signing key. */
function readKey(entry: unknown, options: ParseOptions): [string, DirectoryKey] | undefined {
  if (!isRecord(entry) || entry.kty !== "OKP" || entry.crv !== "Ed25519") return undefined;
  // A directory that publishes private key material is broken; using its public half would hide that.
  if (entry.d !== undefined) return undefined;
  if (entry.use !== undefined && entry.use !== "sig") return undefined;
  if (entry.alg !== undefined && !(typeof entry.alg === "string" && ED25519_ALGS.has(entry.alg))) return undefined;
  if (typeof entry.x !== "string") return undefined;
  const raw = decodeBase64url(entry.x);
  if (raw === undefined || raw.length !== ED25519_KEY_LENGTH) return undefined;
  const notBefore = optionalTime(entry.nbf);
  const expiresAt = optionalTime(entry.exp);
  if (notBefore === null || expiresAt === null) return undefined;
  const thumbprint = thumbprintOfX(entry.x);
  if (entry.kid !== undefined) {
    if (typeof entry.kid !== "string") return undefined;
    if (options.kidMustBeThumbprint && entry.kid !== thumbprint) return undefined;
  }
  let publicKey: KeyObject;
  try {
    publicKey = publicKeyFromRaw(raw);
  } catch {
    return undefined;
  }
  return [thumbprint, { publicKey, notBefore, expiresAt }];
}

/**
 * Reads a directory body. The body as a whole must be a JSON object with a `keys` array of at most
 * `maxKeys` entries (else `malformed`); entries that are not usable Ed25519 keys are skipped, as the
 * draft asks verifiers to do with malformed entries. A key listed twice keeps its first entry.
 */
export function parseDirectoryKeys(body: Uint8Array, options: ParseOptions): Map<string, DirectoryKey> {
  let document: unknown;
  try {
    document = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(body));
  } catch {
    throw new KeyDirectoryError("malformed", "the key directory is not JSON");
  }
  if (!isRecord(document) || !Array.isArray(document.keys)) {
    throw new KeyDirectoryError("malformed", "the key directory has no keys array");
  }
  if (document.keys.length > options.maxKeys) {
    throw new KeyDirectoryError("malformed", `the key directory lists more than ${options.maxKeys} keys`);
  }
  const keys = new Map<string, DirectoryKey>();
  for (const entry of document.keys) {
    const key = readKey(entry, options);
    if (key !== undefined && !keys.has(key[0])) keys.set(key[0], key[1]);
  }
  return keys;
}

export function isKeyValidAt(key: DirectoryKey, nowSeconds: number): boolean {
  if (key.notBefore !== undefined && nowSeconds < key.notBefore) return false;
  return key.expiresAt === undefined || nowSeconds < key.expiresAt;
}

/** The keys valid at `nowSeconds`, by thumbprint. */
export function validKeys(keys: ReadonlyMap<string, DirectoryKey>, nowSeconds: number): Map<string, KeyObject> {
  const valid = new Map<string, KeyObject>();
  for (const [thumbprint, key] of keys) if (isKeyValidAt(key, nowSeconds)) valid.set(thumbprint, key.publicKey);
  return valid;
}
