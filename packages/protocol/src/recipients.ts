/**
 * Typed owner-invitation recipients. Each type has exactly one accepted spelling of a value, so two
 * recipients match when their canonical forms are equal and a canonical form can key storage.
 * Non-canonical input is normalised where the spec says how (e-mail), and rejected otherwise.
 */
import { parseDid } from "./did.js";

export const RECIPIENT_TYPES = ["email", "phone", "oidc", "did"] as const;

export type RecipientType = (typeof RECIPIENT_TYPES)[number];

export interface OidcIdentity {
  /** Opaque: compared byte for byte, so `https://a` and `https://a/` are different issuers. */
  issuer: string;
  sub: string;
}

export type Recipient =
  | { type: "email"; value: string }
  | { type: "phone"; value: string }
  | { type: "oidc"; value: OidcIdentity }
  | { type: "did"; value: string };

export type NormalizeResult =
  | { ok: true; recipient: Recipient }
  | {
      ok: false;
      reason: string;
      /** Set when `type` is a string this library does not know: a service answers `unsupported_recipient_type`. */
      unsupportedType?: boolean;
    };

/** RFC 5321 path limit. */
export const MAX_EMAIL_LENGTH = 254;
/** Raw input beyond this is refused before Unicode normalisation, which can be costly on huge strings. */
const MAX_RAW_EMAIL_LENGTH = 1024;
export const MAX_OIDC_ISSUER_LENGTH = 2048;
/** OpenID Connect Core §2: `sub` is at most 255 ASCII characters. */
export const MAX_OIDC_SUB_LENGTH = 255;
/** `+`, then at most 15 digits (E.164), plus slack so rejected values still get a precise reason. */
const MAX_RAW_PHONE_LENGTH = 64;

const E164 = /^\+[1-9][0-9]{1,14}$/;
// Whitespace, separators, control, format (invisible) and lone-surrogate characters have no place in an address.
const EMAIL_FORBIDDEN = /[\s\p{Z}\p{Cc}\p{Cf}\p{Cs}]/u;

type Outcome<T> = { ok: true; value: T } | { ok: false; reason: string };

export function isRecipientType(value: unknown): value is RecipientType {
  return typeof value === "string" && (RECIPIENT_TYPES as readonly string[]).includes(value);
}

/** Validates `{type, value}` and returns its canonical form. Never throws; unknown members are dropped. */
export function normalizeRecipient(input: unknown): NormalizeResult {
  if (typeof input !== "object" || input === null || Array.isArray(input)) {
    return { ok: false, reason: "recipient must be an object {type, value}" };
  }
  const { type, value } = input as Record<string, unknown>;
  if (typeof type !== "string") return { ok: false, reason: "recipient type must be a string" };
  if (!isRecipientType(type)) {
    return {
      ok: false,
      reason: `unsupported recipient type ${JSON.stringify(type.slice(0, 64))}`,
      unsupportedType: true,
    };
  }
  const outcome = normalizeValue(type, value);
  if (!outcome.ok) return outcome;
  return { ok: true, recipient: outcome.value };
}

function normalizeValue(type: RecipientType, value: unknown): Outcome<Recipient> {
  switch (type) {
    case "email":
      return tagged(type, normalizeEmail(value));
    case "phone":
      return tagged(type, normalizePhone(value));
    case "did":
      return tagged(type, normalizeDid(value));
    case "oidc": {
      const outcome = normalizeOidc(value);
      return outcome.ok ? { ok: true, value: { type, value: outcome.value } } : outcome;
    }
  }
}

function tagged(type: "email" | "phone" | "did", outcome: Outcome<string>): Outcome<Recipient> {
  return outcome.ok ? { ok: true, value: { type, value: outcome.value } } : outcome;
}

/** Both sides normalised, then compared; anything that does not normalise matches nothing. */
export function recipientsMatch(a: unknown, b: unknown): boolean {
  const left = normalizeRecipient(a);
  const right = normalizeRecipient(b);
  return left.ok && right.ok && keyOf(left.recipient) === keyOf(right.recipient);
}

export class RecipientError extends Error {
  override readonly name = "RecipientError";
}

/**
 * A stable string for storage and indexing, equal for exactly the recipients that match
 * (`email:alice@example.com`, `oidc:["https://issuer","sub"]`). Throws RecipientError on an invalid recipient.
 */
export function recipientKey(recipient: Recipient): string {
  const normalized = normalizeRecipient(recipient);
  if (!normalized.ok) throw new RecipientError(normalized.reason);
  return keyOf(normalized.recipient);
}

function keyOf(recipient: Recipient): string {
  // JSON keeps the two OIDC parts unambiguous whatever characters they contain.
  if (recipient.type === "oidc") return `oidc:${JSON.stringify([recipient.value.issuer, recipient.value.sub])}`;
  return `${recipient.type}:${recipient.value}`;
}

function fail<T>(reason: string): Outcome<T> {
  return { ok: false, reason };
}

function normalizeEmail(value: unknown): Outcome<string> {
  if (typeof value !== "string") return fail("email must be a string");
  if (value.length > MAX_RAW_EMAIL_LENGTH) return fail(`email is longer than ${MAX_EMAIL_LENGTH} characters`);
  const email = value.normalize("NFKC").toLowerCase();
  if (EMAIL_FORBIDDEN.test(email)) return fail("email contains whitespace or control characters");
  if ([...email].length > MAX_EMAIL_LENGTH) return fail(`email is longer than ${MAX_EMAIL_LENGTH} characters`);
  const parts = email.split("@");
  if (parts.length !== 2) return fail("email must contain exactly one @");
  const [local, domain] = parts as [string, string];
  if (local === "") return fail("email has an empty local part");
  if (!isPlausibleDomain(domain)) return fail("email domain is not a domain name");
  return { ok: true, value: email };
}

function isPlausibleDomain(domain: string): boolean {
  return domain !== "" && domain.split(".").every((label) => label !== "");
}

function normalizePhone(value: unknown): Outcome<string> {
  if (typeof value !== "string") return fail("phone must be a string");
  if (value.length > MAX_RAW_PHONE_LENGTH) return fail("phone is not E.164 (too long)");
  if (E164.test(value)) return { ok: true, value };
  return fail(phoneProblem(value));
}

/** The most useful explanation for a value that is not E.164, in the order a person would fix it. */
function phoneProblem(value: string): string {
  if (/;|ext|x/i.test(value)) return "phone contains E.164 extension syntax";
  if (!value.startsWith("+")) return "phone is not E.164 (missing leading +)";
  if (/[^+0-9]/.test(value)) return "phone contains characters other than + and 0-9";
  if (value.lastIndexOf("+") > 0) return "phone is not E.164 (+ may only lead)";
  if (value.startsWith("+0")) return "phone is not E.164 (country code cannot start with 0)";
  return "phone is not E.164 (2 to 15 digits after +)";
}

function normalizeOidc(value: unknown): Outcome<OidcIdentity> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return fail("oidc value must be an object {issuer, sub}");
  }
  const { issuer, sub } = value as Record<string, unknown>;
  if (typeof issuer !== "string" || issuer === "") return fail("oidc issuer must be a non-empty string");
  if (issuer.length > MAX_OIDC_ISSUER_LENGTH)
    return fail(`oidc issuer is longer than ${MAX_OIDC_ISSUER_LENGTH} characters`);
  if (issuer.includes("#")) return fail("oidc issuer contains fragment");
  if (issuer.includes("?")) return fail("oidc issuer contains query");
  if (typeof sub !== "string" || sub === "") return fail("oidc sub must be a non-empty string");
  if (sub.length > MAX_OIDC_SUB_LENGTH) return fail(`oidc sub is longer than ${MAX_OIDC_SUB_LENGTH} characters`);
  return { ok: true, value: { issuer, sub } };
}

function normalizeDid(value: unknown): Outcome<string> {
  const parsed = parseDid(value);
  if (!parsed.ok) return parsed;
  if (parsed.did.method === "key") return { ok: true, value: parsed.did.did };
  const problem = didWebCanonicalProblem(parsed.did.did);
  return problem === undefined ? { ok: true, value: parsed.did.did } : fail(problem);
}

/**
 * A did:web recipient is compared as written, so only its canonical spelling is accepted: lowercase
 * host, port separator written `%3A`, and nothing else percent-encoded that has a literal form.
 * Lowercasing for the sender would hide a mistake in the address they were given.
 */
function didWebCanonicalProblem(did: string): string | undefined {
  const [host, ...path] = did.slice("did:web:".length).split(":") as [string, ...string[]];
  if (/[A-Z]/.test(host.replace(PCT_ENCODED, ""))) return "did:web host MUST be lowercase";
  if (!/^[a-z0-9.-]+(?:%3A[0-9]+)?$/.test(host)) {
    return "did:web host is not canonical (only the port separator is percent-encoded, as %3A)";
  }
  if (!path.every(isCanonicalSegment)) {
    return "did:web path is not canonical (percent-encode only what has no literal form, with uppercase hex)";
  }
  return undefined;
}

const PCT_ENCODED = /%[0-9A-Fa-f]{2}/g;

function isCanonicalSegment(segment: string): boolean {
  for (const [encoded] of segment.matchAll(PCT_ENCODED)) {
    const byte = String.fromCharCode(Number.parseInt(encoded.slice(1), 16));
    if (encoded !== encoded.toUpperCase() || /^[A-Za-z0-9._-]$/.test(byte)) return false;
  }
  return true;
}
