/**
 * The proto profile's signature read from a request's headers and checked against the profile's
 * rules (RFC 9421 profile in the trust spec): covered components exactly `@method`, `@target-uri`
 * and, with a body, `content-digest`; parameters `created` and `expires` (integers), `nonce` (a
 * string of 1 to 256 characters), `keyid` (a string), `alg` = "ed25519", and optionally `tag`.
 *
 * Two readers. `readSignerSpelling` matches the headers against the one spelling proto signers
 * (`signRequest`) write:
 *
 *   Signature-Input: <label>=("@method" "@target-uri" "content-digest");created=<int>;expires=<int>;nonce="<string>";keyid="<string>";alg="ed25519"
 *   Signature:       <label>=:<64 bytes in padded base64>:
 *
 * (without `"content-digest"` when there is no body), and gives undefined for anything else.
 * `readAnySpelling` reads everything else through the general structured-field parser, and words
 * every refusal. The first returns a signature only where the second would return the same one
 * (label, components, parameters, `@signature-params` text, signature bytes), so it changes no
 * outcome; it spares an ordinary request the general parser's maps, tokens and candidate list.
 */
import { ED25519_SIGNATURE_LENGTH } from "../ed25519.js";
import type { ComponentIdentifier } from "./components.js";
import type { CoveredComponent } from "./signature-base.js";
import { type CandidateSignature, invalid, MAX_SIGNATURE_HEADER_LENGTH, readSignatures } from "./signature-input.js";

const MAX_NONCE_LENGTH = 256;

/** A signature of the profile, read and checked against the profile's rules. */
export interface ProfileSignature {
  label: string;
  /** The covered components in `Signature-Input` order, each once, exactly the profile's set. */
  components: readonly CoveredComponent[];
  /** The inner list exactly as it must appear on the `@signature-params` line. */
  serialisedParams: string;
  signature: Uint8Array;
  created: number;
  expires: number;
  nonce: string;
  keyid: string;
}

const WITH_BODY: readonly CoveredComponent[] = ["@method", "@target-uri", "content-digest"];
const WITHOUT_BODY: readonly CoveredComponent[] = ["@method", "@target-uri"];
// The fixed stretches of the spelling, between the label and the values.
const LIST_WITH_BODY = '=("@method" "@target-uri" "content-digest");created=';
const LIST_WITHOUT_BODY = '=("@method" "@target-uri");created=';
const EXPIRES = ";expires=";
const NONCE = ';nonce="';
const KEYID = '";keyid="';
const ALG = '";alg="ed25519"';

const QUOTE = 0x22;
const COLON = 0x3a;
const EQUALS = 0x3d;

/** An Ed25519 signature in padded base64: 86 characters and "==". */
const SIGNATURE_BASE64_LENGTH = 88;

// Each base64 character's six bits (RFC 4648 §4), 64 for anything else.
const SEXTETS = new Uint8Array(128).fill(64);
const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
for (let i = 0; i < ALPHABET.length; i++) SEXTETS[ALPHABET.charCodeAt(i)] = i;

function sextet(text: string, at: number): number {
  const c = text.charCodeAt(at);
  return c < 128 ? (SEXTETS[c] as number) : 64;
}

/** Whether `literal` is written in `text` at `at` (a slice compares faster than `startsWith` does). */
function writtenAt(text: string, at: number, literal: string): boolean {
  return text.slice(at, at + literal.length) === literal;
}

/** Where an RFC 8941 key starting at 0 ends (0 when there is none). */
function keyEnd(text: string): number {
  const first = text.charCodeAt(0);
  if (!((first >= 0x61 && first <= 0x7a) || first === 0x2a)) return 0;
  let i = 1;
  for (; i < text.length; i++) {
    const c = text.charCodeAt(i);
    // lcalpha, DIGIT, "_", "-", ".", "*"
    if (
      !((c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39) || c === 0x5f || c === 0x2d || c === 0x2e || c === 0x2a)
    ) {
      break;
    }
  }
  return i;
}

/**
 * Where the digits starting at `start` end, when they are a non-negative integer as the serialiser
 * writes it (no leading zero, at most 15 digits, so exact in a double); -1 otherwise.
 */
function integerEnd(text: string, start: number): number {
  let i = start;
  for (; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x30 || c > 0x39) break;
  }
  const digits = i - start;
  return digits === 0 || digits > 15 || (digits > 1 && text.charCodeAt(start) === 0x30) ? -1 : i;
}

function digitsValue(text: string, start: number, end: number): number {
  let value = 0;
  for (let i = start; i < end; i++) value = value * 10 + (text.charCodeAt(i) - 0x30);
  return value;
}

/**
 * Where the sf-string content starting at `start` ends (at its closing quote), when it is printable
 * ASCII without escapes; -1 otherwise (an escape is the general reader's).
 */
function stringEnd(text: string, start: number): number {
  for (let i = start; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) return i;
    if (c < 0x20 || c > 0x7e || c === 0x5c) return -1;
  }
  return -1;
}

/**
 * The signature's bytes when `value` is exactly `label=:<64 bytes in padded base64>:`. Decoded
 * here as node's decoder decodes it (bits past the last byte ignored): a loop costs less than
 * checking the alphabet and then calling into node.
 */
function signatureBytes(value: string, label: string): Uint8Array | undefined {
  const start = label.length + 2;
  if (
    value.length !== start + SIGNATURE_BASE64_LENGTH + 1 ||
    value.charCodeAt(label.length) !== EQUALS ||
    value.charCodeAt(label.length + 1) !== COLON ||
    value.slice(0, label.length) !== label ||
    !writtenAt(value, value.length - 3, "==:")
  ) {
    return undefined;
  }
  // A Buffer (a slice of node's pool), not a small Uint8Array: V8 keeps those inside the object,
  // and node:crypto would have V8 move the bytes out (an allocation) to read them.
  const bytes = Buffer.allocUnsafe(ED25519_SIGNATURE_LENGTH);
  let at = start;
  let out = 0;
  // 21 groups of four characters make 63 bytes; two characters and "==" make the last.
  for (; out < 63; at += 4) {
    const a = sextet(value, at);
    const b = sextet(value, at + 1);
    const c = sextet(value, at + 2);
    const d = sextet(value, at + 3);
    if ((a | b | c | d) > 63) return undefined;
    bytes[out++] = (a << 2) | (b >> 4);
    bytes[out++] = ((b & 15) << 4) | (c >> 2);
    bytes[out++] = ((c & 3) << 6) | d;
  }
  const a = sextet(value, at);
  const b = sextet(value, at + 1);
  if ((a | b) > 63) return undefined;
  bytes[out] = (a << 2) | (b >> 4);
  return bytes;
}

// The keyid of the last signature read (see readSignerSpelling).
let lastKeyid = "";

/**
 * The profile signature of a request whose headers have the signer's spelling, or undefined (then
 * the general reader decides). `label`, when given, is the only label accepted.
 */
export function readSignerSpelling(
  input: string | undefined,
  signatureValue: string | undefined,
  hasBody: boolean,
  label: string | undefined,
): ProfileSignature | undefined {
  if (
    input === undefined ||
    signatureValue === undefined ||
    input.length > MAX_SIGNATURE_HEADER_LENGTH ||
    signatureValue.length > MAX_SIGNATURE_HEADER_LENGTH
  ) {
    return undefined;
  }
  const labelEnd = keyEnd(input);
  if (labelEnd === 0) return undefined;
  const chosen = input.slice(0, labelEnd);
  if (label !== undefined && label !== chosen) return undefined;
  const list = hasBody ? LIST_WITH_BODY : LIST_WITHOUT_BODY;
  if (!writtenAt(input, labelEnd, list)) return undefined;

  let pos = labelEnd + list.length;
  const createdEnd = integerEnd(input, pos);
  if (createdEnd === -1 || !writtenAt(input, createdEnd, EXPIRES)) return undefined;
  const created = digitsValue(input, pos, createdEnd);
  pos = createdEnd + EXPIRES.length;
  const expiresEnd = integerEnd(input, pos);
  if (expiresEnd === -1 || !writtenAt(input, expiresEnd, NONCE)) return undefined;
  const expires = digitsValue(input, pos, expiresEnd);
  pos = expiresEnd + NONCE.length;
  const nonceEnd = stringEnd(input, pos);
  if (nonceEnd === -1 || nonceEnd === pos || nonceEnd - pos > MAX_NONCE_LENGTH || !writtenAt(input, nonceEnd, KEYID)) {
    return undefined;
  }
  const nonce = input.slice(pos, nonceEnd);
  pos = nonceEnd + KEYID.length;
  // A client sends its keyid with every request: when it is the last one read, the characters
  // are known to be a plain string, and the same string object makes the key cache's and the
  // nonce store's look-ups cheap.
  let keyid = lastKeyid;
  let keyidEnd = pos + keyid.length;
  if (input.charCodeAt(keyidEnd) !== QUOTE || !writtenAt(input, pos, keyid)) {
    keyidEnd = stringEnd(input, pos);
    if (keyidEnd === -1) return undefined;
    keyid = input.slice(pos, keyidEnd);
  }
  // The member, and the header, end with the algorithm.
  if (input.length !== keyidEnd + ALG.length || !writtenAt(input, keyidEnd, ALG)) return undefined;
  lastKeyid = keyid;

  const signature = signatureBytes(signatureValue, chosen);
  if (signature === undefined) return undefined;
  return {
    label: chosen,
    components: hasBody ? WITH_BODY : WITHOUT_BODY,
    serialisedParams: input.slice(labelEnd + 1),
    signature,
    created,
    expires,
    nonce,
    keyid,
  };
}

const PARAM_NAMES = new Set(["created", "expires", "nonce", "keyid", "alg", "tag"]);
const PLAIN_COMPONENTS = ["@method", "@target-uri"];
const BODY_COMPONENTS = ["@method", "@target-uri", "content-digest"];

function checkComponents(items: readonly ComponentIdentifier[], hasBody: boolean): void {
  const expected = hasBody ? BODY_COMPONENTS : PLAIN_COMPONENTS;
  // Each expected name once: a bit per name.
  let seen = 0;
  for (const [name, params] of items) {
    if (typeof name !== "string" || params.size > 0) throw invalid("covered components must be plain names");
    const index = expected.indexOf(name);
    if (index === -1 || (seen & (1 << index)) !== 0) {
      throw invalid(`covered component ${String(name)} is not allowed here`);
    }
    seen |= 1 << index;
  }
  if (seen !== (1 << expected.length) - 1) {
    throw invalid(`covered components must be exactly ${expected.join(", ")}`);
  }
}

function chooseCandidate(candidates: CandidateSignature[], label: string | undefined): CandidateSignature {
  if (label !== undefined) {
    const chosen = candidates.find((c) => c.label === label);
    if (chosen === undefined) throw invalid(`no signature labelled ${label}`);
    return chosen;
  }
  const chosen =
    candidates.find((c) => {
      const keyid = c.params.get("keyid");
      return typeof keyid === "string" && keyid.startsWith("did:key:");
    }) ?? candidates[0];
  if (chosen === undefined) throw invalid("no labelled signature with a matching Signature-Input");
  return chosen;
}

/**
 * The profile signature however its headers are spelled; throws `invalid_signature`, saying why,
 * when they carry none that keeps the profile's rules. `label`, when given, is the one to read.
 */
export function readAnySpelling(
  header: (name: string) => string | undefined,
  hasBody: boolean,
  label: string | undefined,
): ProfileSignature {
  const candidate = chooseCandidate(readSignatures(header), label);
  const params = candidate.params;
  for (const name of params.keys()) {
    if (!PARAM_NAMES.has(name)) throw invalid(`signature parameter ${name} is not allowed`);
  }
  const created = params.get("created");
  const expires = params.get("expires");
  const nonce = params.get("nonce");
  const keyid = params.get("keyid");
  const alg = params.get("alg");
  if (!Number.isInteger(created) || !Number.isInteger(expires)) throw invalid("created and expires must be integers");
  if (typeof nonce !== "string" || nonce.length === 0 || nonce.length > MAX_NONCE_LENGTH) {
    throw invalid("nonce must be a non-empty string");
  }
  if (typeof keyid !== "string") throw invalid("keyid must be a string");
  if (alg !== "ed25519") throw invalid('alg must be "ed25519"');
  checkComponents(candidate.components, hasBody);
  return {
    label: candidate.label,
    // checkComponents has made each a plain name of the profile.
    components: candidate.components.map(([name]) => name as CoveredComponent),
    serialisedParams: candidate.serialisedParams,
    signature: candidate.signature,
    created: created as number,
    expires: expires as number,
    nonce,
    keyid,
  };
}

/** The request's profile signature, read by the cheaper reader that can. */
export function readProfileSignature(
  header: (name: string) => string | undefined,
  hasBody: boolean,
  label: string | undefined,
): ProfileSignature {
  return (
    readSignerSpelling(header("signature-input"), header("signature"), hasBody, label) ??
    readAnySpelling(header, hasBody, label)
  );
}
