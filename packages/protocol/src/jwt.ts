/**
 * Verification of a compact EdDSA JWT (RFC 7515, RFC 7519) with node:crypto, making every check
 * jose's `jwtVerify` makes for the options the attestation verifier used (algorithms `EdDSA`,
 * issuers, required claims, the current date): the JOSE header, `crit` and `b64` (RFC 7797),
 * `alg`, the key the key set names, the signature, then the claims set, `iss`, `nbf` and `exp`.
 * jose verifies through WebCrypto, which costs a thread-pool round trip per token; here the key
 * converted once is kept with the key the lookup returns.
 */
import { verify as ed25519Verify, KeyObject, webcrypto } from "node:crypto";
import type { FlattenedJWSInput, JWSHeaderParameters, JWTPayload } from "jose";
import { decodeBase64url } from "./base64url.js";
import { ED25519_SIGNATURE_LENGTH } from "./ed25519.js";
import type { KeyLookup } from "./key-set.js";

export class JwtError extends Error {
  override readonly name = "JwtError";
}

export interface JwtVerifyOptions {
  /** Accepted `iss` values. */
  issuers: readonly string[];
  /** Claims that must be present (own properties of the claims set). */
  requiredClaims: readonly string[];
  /** Unix seconds. */
  nowSeconds: number;
}

export interface VerifiedJwt {
  header: JWSHeaderParameters;
  payload: JWTPayload;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });
// Header parameters this verifier understands when `crit` lists them: only `b64` (RFC 7797).
const RECOGNISED_CRITICAL = new Set(["b64"]);

/** A JSON object as jose accepts it: a plain object, not an array or another class's instance. */
function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null || Object.prototype.toString.call(value) !== "[object Object]") {
    return false;
  }
  const prototype = Object.getPrototypeOf(value);
  return prototype === null || Object.getPrototypeOf(prototype) === null;
}

function decodeJsonObject(segment: string, what: string): Record<string, unknown> {
  const bytes = decodeBase64url(segment);
  let parsed: unknown;
  try {
    if (bytes === undefined) throw new Error("not base64url");
    parsed = JSON.parse(utf8.decode(bytes));
  } catch {
    throw new JwtError(`${what} is not base64url of UTF-8 JSON`);
  }
  if (!isPlainObject(parsed)) throw new JwtError(`${what} must be a JSON object`);
  return parsed;
}

/** RFC 7515 §4.1.11: every listed extension must be understood and present; `b64` only as true. */
function checkCritical(header: Record<string, unknown>): void {
  const crit = header.crit;
  if (crit === undefined) return;
  if (
    !Array.isArray(crit) ||
    crit.length === 0 ||
    crit.some((name) => typeof name !== "string" || name.length === 0) ||
    new Set(crit).size !== crit.length
  ) {
    throw new JwtError('"crit" must be an array of distinct non-empty strings');
  }
  for (const name of crit as string[]) {
    if (!RECOGNISED_CRITICAL.has(name)) throw new JwtError(`extension header parameter "${name}" is not recognised`);
    if (header[name] === undefined) throw new JwtError(`extension header parameter "${name}" is missing`);
  }
  if (crit.includes("b64")) {
    if (typeof header.b64 !== "boolean") throw new JwtError('"b64" must be a boolean');
    if (!header.b64) throw new JwtError("JWTs must not use an unencoded payload");
  }
}

const verificationKeys = new WeakMap<object, KeyObject>();

function isCryptoKey(key: object): key is webcrypto.CryptoKey {
  return (
    (key as { [Symbol.toStringTag]?: unknown })[Symbol.toStringTag] === "CryptoKey" ||
    key instanceof webcrypto.CryptoKey
  );
}

/**
 * The node:crypto key for what the lookup returned: an Ed25519 public key, usable for verifying.
 * Keys are immutable, so the checks and the conversion are done once per key.
 */
function verificationKey(key: unknown): KeyObject {
  if (typeof key !== "object" || key === null) throw new JwtError("the key set returned no key");
  const cached = verificationKeys.get(key);
  if (cached !== undefined) return cached;
  let keyObject: KeyObject;
  if (key instanceof KeyObject) {
    keyObject = key;
  } else if (isCryptoKey(key)) {
    if (key.algorithm.name !== "Ed25519" || !key.usages.includes("verify")) {
      throw new JwtError("the key set's key is not an Ed25519 verification key");
    }
    keyObject = KeyObject.from(key);
  } else {
    throw new JwtError("the key set returned neither a CryptoKey nor a KeyObject");
  }
  if (keyObject.type !== "public" || keyObject.asymmetricKeyType !== "ed25519") {
    throw new JwtError("the key set's key is not an Ed25519 public key");
  }
  verificationKeys.set(key, keyObject);
  return keyObject;
}

function numericDate(payload: JWTPayload, claim: "iat" | "nbf" | "exp"): number | undefined {
  const value = payload[claim];
  if (value !== undefined && typeof value !== "number") throw new JwtError(`"${claim}" claim must be a number`);
  return value;
}

/** Verifies a compact JWS signed with EdDSA (Ed25519) and its registered claims. */
export async function verifyEdDsaJwt(jwt: string, lookup: KeyLookup, options: JwtVerifyOptions): Promise<VerifiedJwt> {
  const parts = jwt.split(".");
  if (parts.length !== 3) throw new JwtError("not a compact JWS");
  const [encodedHeader = "", encodedPayload = "", encodedSignature = ""] = parts;
  const header = decodeJsonObject(encodedHeader, "the JOSE header");
  checkCritical(header);
  if (header.alg !== "EdDSA") throw new JwtError('"alg" must be "EdDSA"');
  if (header.typ !== undefined && header.typ !== "JWT") throw new JwtError('typ must be "JWT"');
  if (header.kid !== undefined && typeof header.kid !== "string") throw new JwtError('"kid" must be a string');
  const signature = decodeBase64url(encodedSignature);
  if (signature === undefined || signature.length !== ED25519_SIGNATURE_LENGTH) {
    throw new JwtError("the signature is not 64 bytes of base64url");
  }
  const payloadBytes = decodeBase64url(encodedPayload);
  if (payloadBytes === undefined) throw new JwtError("the payload is not base64url");

  const token: FlattenedJWSInput = { protected: encodedHeader, payload: encodedPayload, signature: encodedSignature };
  const key = verificationKey(await lookup(header as JWSHeaderParameters, token));
  // Both segments are base64url (checked above), so the signing input is ASCII.
  const signingInput = Buffer.from(`${encodedHeader}.${encodedPayload}`, "latin1");
  if (!ed25519Verify(null, signingInput, key, signature)) throw new JwtError("signature verification failed");

  let payload: unknown;
  try {
    payload = JSON.parse(utf8.decode(payloadBytes));
  } catch {
    throw new JwtError("the claims set is not UTF-8 JSON");
  }
  if (!isPlainObject(payload)) throw new JwtError("the claims set must be a JSON object");
  for (const claim of options.requiredClaims) {
    if (!Object.hasOwn(payload, claim)) throw new JwtError(`missing required "${claim}" claim`);
  }
  const claims = payload as JWTPayload;
  if (!options.issuers.includes(claims.iss as string)) throw new JwtError('unexpected "iss" claim value');
  numericDate(claims, "iat");
  const nbf = numericDate(claims, "nbf");
  if (nbf !== undefined && nbf > options.nowSeconds) throw new JwtError('"nbf" claim timestamp check failed');
  const exp = numericDate(claims, "exp");
  if (exp !== undefined && exp <= options.nowSeconds) throw new JwtError('"exp" claim timestamp check failed');
  return { header: header as JWSHeaderParameters, payload: claims };
}
