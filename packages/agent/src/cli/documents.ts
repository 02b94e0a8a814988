/**
 * The CLI's JSON documents: every time is an ISO 8601 string (UTC), whatever the SDK keeps
 * (its records count Unix seconds, as `trust.json` and the token cache do on disk).
 */
import type { Attestation } from "../attestor.js";
import type { BindingRecord } from "../store.js";

/** Unix seconds as ISO 8601; 0 (no deadline reported) as null. */
export function isoTime(unixSeconds: number): string | null {
  return unixSeconds === 0 ? null : new Date(unixSeconds * 1000).toISOString();
}

export function bindingDocument(binding: BindingRecord) {
  const { verification_seen_at: seen, ...rest } = binding;
  return {
    ...rest,
    binding_expires_at: isoTime(binding.binding_expires_at),
    ...(seen === undefined ? {} : { verification_seen_at: isoTime(seen) }),
  };
}

/** `sub_h`: the pairwise pseudonym the token gives the person for this audience (unverified read). */
export function subjectOf(jwt: string): string | null {
  try {
    const claims = JSON.parse(Buffer.from(jwt.split(".")[1] ?? "", "base64url").toString("utf8")) as {
      sub_h?: unknown;
    };
    return typeof claims.sub_h === "string" ? claims.sub_h : null;
  } catch {
    return null;
  }
}

export function attestationDocument(token: Attestation) {
  const { binding_expires_at: deadline, ...rest } = token;
  return {
    ...rest,
    sub_h: subjectOf(token.jwt),
    expires_at: isoTime(token.expires_at),
    ...(deadline === undefined ? {} : { binding_expires_at: isoTime(deadline) }),
  };
}
