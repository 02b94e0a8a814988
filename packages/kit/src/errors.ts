import { type KeySetUnavailableError, ProtoError, RESERVED_ERRORS, type ReservedErrorCode } from "@proto/protocol";

export interface KitErrorUse {
  /** The statuses the kit answers the code with (the first is the spec's default). */
  statuses: number[];
  /** Where the kit produces it. */
  situations: string[];
}

/**
 * Every reserved service-side code (spec `trust.md`, last table), with the statuses the kit
 * answers it with and the situations that produce it. Tests reach each of them with real requests.
 */
export const KIT_ERRORS = {
  invalid_signature: {
    statuses: [401],
    situations: [
      "an agent endpoint or guarded route without a valid RFC 9421 signature (missing, bad digest, bad key)",
    ],
  },
  expired_signature: { statuses: [401], situations: ["the signature's expires + 60 s skew is in the past"] },
  replayed_nonce: { statuses: [401], situations: ["the (keyid, nonce) pair was already accepted"] },
  revoked_key: {
    statuses: [401],
    situations: ["a request signed by a DID that was rotated away (agent or owner) or revoked by the owner"],
  },
  invalid_attestation: {
    statuses: [401],
    situations: [
      "a Proto-Attestation header that does not verify: signature, audience, subject, expiry, or an issuer not accepted",
    ],
  },
  attestation_required: {
    statuses: [401],
    situations: [
      "signup on an attested_only service without an attestation (or with one asserting no human); no account is created",
      "an unclaimed account's attested session lapsed (feature attested_session) and the request carries no attestation",
    ],
  },
  malformed_request: {
    statuses: [400],
    situations: ["invalid JSON, a missing or mistyped field, a recipient value that does not normalise, a bad DID"],
  },
  unsupported_recipient_type: {
    statuses: [400],
    situations: ["owner invitation whose recipient type is not in the document's recipient_types (default: email)"],
  },
  unknown_account: {
    statuses: [404],
    situations: [
      "a signed request from an unknown DID when implicit signup is off (or unclaimed_mode is denied)",
      "owner re-key or revocation naming no account",
    ],
  },
  invitation_not_found: {
    statuses: [404],
    situations: [
      "claim page or claim completion with a token that matches no invitation (a replaced token answers invitation_expired)",
    ],
  },
  invitation_expired: {
    statuses: [410],
    situations: ["claim with a token past its TTL, or one atomically replaced by a newer invitation"],
  },
  account_expired: {
    statuses: [410],
    situations: ["any request for an unclaimed account older than limits.unclaimed_ttl_seconds; claiming it too"],
  },
  already_claimed: {
    statuses: [409],
    situations: [
      "owner invitation for a CLAIMED account; claim completion for an account that is already CLAIMED",
      "owner re-key to a DID already used by an account or revoked",
    ],
  },
  not_claimed: {
    statuses: [409],
    situations: ["an owner operation (re-key, revoke) on an account that is not CLAIMED"],
  },
  owner_authentication_required: {
    statuses: [401, 403],
    situations: [
      "401: claim completion or an owner operation without an owner session",
      "403: the session's identities do not match the invitation recipient, or the session does not own the account",
    ],
  },
  owner_session_too_stale: {
    statuses: [403],
    situations: [
      "claim completion or an owner operation with a session authenticated longer ago than the freshness window (or never)",
    ],
  },
  owner_binding_blocked: {
    statuses: [403],
    situations: ["agent-signed key rotation after the account is CLAIMED"],
  },
  rate_limit_exceeded: {
    statuses: [429],
    situations: [
      "the per-route, per-DID hourly bucket is exhausted (limits.unclaimed_rate_limit_per_hour for unclaimed accounts); Retry-After set",
      "an e-mail invitation to an address that got mail.perRecipientPerHour invitation mails within the hour; Retry-After set",
    ],
  },
} as const satisfies Record<ReservedErrorCode, KitErrorUse>;

/** Service-specific codes of the kit (prefixed `kit_`), plus the platform's generic ones. */
export const KIT_SPECIFIC_ERRORS = {
  kit_did_in_use: { status: 409, message: "The new DID is already used by an account or revoked" },
  kit_signin_failed: { status: 400, message: "Sign-in failed; start again" },
  kit_unknown_attestor: { status: 400, message: "Unknown attestor" },
  kit_csrf: { status: 403, message: "Form token missing or wrong; reload the page" },
  kit_link_used: {
    status: 410,
    message:
      "This e-mail link was already used to sign in, and it works only once. If that was you, go on in the window where you used it; otherwise ask the agent for a new invitation.",
  },
  kit_mail_unavailable: { status: 503, message: "The invitation mail could not be sent; try again later" },
  kit_store_unavailable: {
    status: 503,
    message: "This service cannot reach its database right now; nothing was changed, try again shortly",
  },
  kit_attestor_unavailable: {
    status: 503,
    message: "The attestor cannot be reached to check this request's credentials; try again shortly",
  },
  kit_signature_required: {
    status: 403,
    message:
      "A Web Bot Auth signature identifies the agent, but this route acts for an account: sign with the proto profile (keyid a did:key), or send a Proto-Attestation with a Web Bot Auth signature that covers @method, @target-uri and content-digest and carries a nonce",
  },
  kit_signed_agent_refused: { status: 403, message: "This route does not serve signed agents" },
  kit_key_directories_busy: {
    status: 503,
    message: "This service fetched as many new Web Bot Auth key directories as it may this minute; try again shortly",
  },
  kit_token_required: {
    status: 401,
    message: "This resource needs an OAuth access token: Authorization: Bearer <token>",
  },
  kit_spend_reference_reused: {
    status: 409,
    message: "This spend reference was used for another spend; a new spend needs a new reference",
  },
  // RFC 6750 §3.1's codes, for protected resources (`mcp-resource.ts`).
  invalid_token: { status: 401, message: "The access token is invalid, expired or not for this resource" },
  insufficient_scope: { status: 403, message: "The access token lacks a scope this resource needs" },
  payload_too_large: { status: 413, message: "Request body is too large" },
  not_found: { status: 404, message: "Not found" },
  internal_error: { status: 500, message: "Internal error" },
} as const;

export type KitSpecificErrorCode = keyof typeof KIT_SPECIFIC_ERRORS;

export function kitError(
  code: KitSpecificErrorCode,
  message?: string,
  options: { retryAfter?: number; cause?: unknown } = {},
): ProtoError {
  const spec = KIT_SPECIFIC_ERRORS[code];
  return new ProtoError(code, spec.status, message ?? spec.message, options);
}

/**
 * An attestor's key set that cannot be fetched: 503 with `Retry-After`. The message stays the
 * kit's own: the key set's address and the fetch's failure are the operator's business.
 */
export function attestorUnavailable(error: KeySetUnavailableError): ProtoError {
  return kitError("kit_attestor_unavailable", undefined, { retryAfter: error.retryAfterSeconds, cause: error });
}

/** Any thrown value as a ProtoError (unexpected ones become 500 `internal_error`). */
export function asProtoError(error: unknown): { error: ProtoError; unexpected: boolean } {
  if (error instanceof ProtoError) return { error, unexpected: false };
  return { error: kitError("internal_error"), unexpected: true };
}

/** The statuses allowed for a reserved code by the spec (for checks in tests and tooling). */
export function specStatuses(code: ReservedErrorCode): number[] {
  const spec = RESERVED_ERRORS[code] as { status: number; alternateStatus?: { status: number } };
  return spec.alternateStatus === undefined ? [spec.status] : [spec.status, spec.alternateStatus.status];
}
