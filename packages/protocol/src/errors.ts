/** The error envelope every proto service answers with, and the reserved service-side codes. */

export interface ErrorEnvelope {
  error: {
    code: string;
    message: string;
    details?: Record<string, unknown>;
  };
}

export interface ReservedErrorSpec {
  /** The status the code is answered with. */
  status: number;
  /** Other statuses the spec allows for the same code, and when. */
  alternateStatus?: { status: number; when: string };
  message: string;
}

/** The reserved codes of services that accept attestations (spec `trust.md`, last table). */
export const RESERVED_ERRORS = {
  invalid_signature: { status: 401, message: "Signature verification failed" },
  expired_signature: { status: 401, message: "Signature has expired" },
  replayed_nonce: { status: 401, message: "Nonce has been seen before" },
  revoked_key: { status: 401, message: "Account key has been revoked" },
  invalid_attestation: { status: 401, message: "Attestation invalid" },
  attestation_required: { status: 401, message: "Attestation required" },
  malformed_request: { status: 400, message: "Malformed request" },
  unsupported_recipient_type: { status: 400, message: "Unsupported recipient type" },
  unknown_account: { status: 404, message: "Account not found" },
  invitation_not_found: {
    status: 404,
    alternateStatus: { status: 410, when: "the invitation was replaced by a newer one" },
    message: "Invitation not found",
  },
  invitation_expired: { status: 410, message: "Invitation has expired" },
  account_expired: { status: 410, message: "Account has expired" },
  already_claimed: { status: 409, message: "Account is already claimed" },
  not_claimed: { status: 409, message: "Account is not claimed" },
  owner_authentication_required: {
    status: 401,
    alternateStatus: {
      status: 403,
      when: "a session exists but does not own the account, or the identity fails the match",
    },
    message: "Owner authentication required",
  },
  owner_session_too_stale: { status: 403, message: "Owner session is too stale; please re-authenticate" },
  owner_binding_blocked: { status: 403, message: "Owner-binding operation blocked" },
  rate_limit_exceeded: { status: 429, message: "Rate limit exceeded" },
} as const satisfies Record<string, ReservedErrorSpec>;

export type ReservedErrorCode = keyof typeof RESERVED_ERRORS;

/**
 * The trust attestor's codes (spec `trust.md`, "Attestor envelope"), with `service_suspended` of
 * upstream §10.3.1: the person suspended this agent for the requested `aud` (other services are
 * unaffected) until they restore it.
 */
export const ATTESTOR_ERRORS = {
  invalid_request: { status: 400, message: "Invalid request" },
  invalid_signature: { status: 401, message: "Signature verification failed" },
  unauthorized: { status: 401, message: "Missing, invalid or unknown credential" },
  binding_revoked: { status: 403, message: "The person revoked this binding" },
  verification_required: { status: 403, message: "The person has no active verification method" },
  service_suspended: { status: 403, message: "The person suspended this agent for this service" },
  grant_revoked: { status: 403, message: "The person revoked this agent's grant for this service" },
  not_found: { status: 404, message: "Not found" },
  binding_expired: { status: 410, message: "The binding expired; link again" },
  link_request_expired: { status: 410, message: "The link request expired or was already retrieved" },
  rate_limited: { status: 429, message: "Rate limit exceeded" },
  internal_error: { status: 500, message: "Internal error" },
} as const satisfies Record<string, ReservedErrorSpec>;

export type AttestorErrorCode = keyof typeof ATTESTOR_ERRORS;

/**
 * Mint refusals that are final for the service asked for: no retry or re-signing changes them,
 * only the person (linking again, or restoring the service on the attestor's account page).
 */
export const FINAL_MINT_ERRORS: readonly AttestorErrorCode[] = [
  "binding_revoked",
  "binding_expired",
  "service_suspended",
  "grant_revoked",
];

export function isReservedErrorCode(code: string): code is ReservedErrorCode {
  return Object.hasOwn(RESERVED_ERRORS, code);
}

export interface ProtoErrorOptions {
  message?: string;
  details?: Record<string, unknown>;
  /** Overrides the status, for the codes whose spec allows a second one. */
  status?: number;
  /** Seconds to wait, sent as `Retry-After` (rate limits). */
  retryAfter?: number;
  cause?: unknown;
}

/** An error that carries its wire code and HTTP status, so any framework can answer with it. */
export class ProtoError extends Error {
  override readonly name = "ProtoError";
  readonly code: string;
  readonly status: number;
  readonly details: Record<string, unknown> | undefined;
  readonly retryAfter: number | undefined;

  constructor(
    code: string,
    status: number,
    message: string,
    options: Omit<ProtoErrorOptions, "message" | "status"> = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.status = status;
    this.details = options.details;
    this.retryAfter = options.retryAfter;
  }

  toEnvelope(): ErrorEnvelope {
    const error: ErrorEnvelope["error"] = { code: this.code, message: this.message };
    if (this.details !== undefined) error.details = this.details;
    return { error };
  }

  /** Response headers that belong with this error (`Retry-After`). */
  headers(): Record<string, string> {
    return this.retryAfter === undefined ? {} : { "retry-after": String(Math.max(1, Math.ceil(this.retryAfter))) };
  }
}

/** Builds the error for a reserved code with its spec status and default message. */
export function protoError(code: ReservedErrorCode, options: ProtoErrorOptions = {}): ProtoError {
  const spec: ReservedErrorSpec = RESERVED_ERRORS[code];
  const status = options.status ?? spec.status;
  if (status !== spec.status && status !== spec.alternateStatus?.status) {
    throw new RangeError(`${code} cannot be answered with status ${status}`);
  }
  return new ProtoError(code, status, options.message ?? spec.message, options);
}

export function errorEnvelope(code: string, message: string, details?: Record<string, unknown>): ErrorEnvelope {
  return details === undefined ? { error: { code, message } } : { error: { code, message, details } };
}

/** `invitation_not_found`: 404, or 410 when the token matched an invitation that was replaced. */
export function invitationNotFound(options: { replaced?: boolean; message?: string } = {}): ProtoError {
  return protoError("invitation_not_found", { status: options.replaced ? 410 : 404, ...pickMessage(options) });
}

/** `owner_authentication_required`: 401 without an owner session, 403 when the session fails the match. */
export function ownerAuthenticationRequired(options: { hasSession: boolean; message?: string }): ProtoError {
  return protoError("owner_authentication_required", {
    status: options.hasSession ? 403 : 401,
    ...pickMessage(options),
  });
}

export function rateLimitExceeded(retryAfterSeconds: number, message?: string): ProtoError {
  return protoError("rate_limit_exceeded", { retryAfter: retryAfterSeconds, ...pickMessage({ message }) });
}

function pickMessage(options: { message?: string | undefined }): { message?: string } {
  return options.message === undefined ? {} : { message: options.message };
}

/** Reads an error envelope from a parsed response body, or undefined when it is not one. */
export function parseErrorEnvelope(body: unknown): ErrorEnvelope | undefined {
  if (typeof body !== "object" || body === null) return undefined;
  const error = (body as { error?: unknown }).error;
  if (typeof error !== "object" || error === null) return undefined;
  const { code, message, details } = error as Record<string, unknown>;
  if (typeof code !== "string" || typeof message !== "string") return undefined;
  if (details !== undefined && (typeof details !== "object" || details === null || Array.isArray(details)))
    return undefined;
  return errorEnvelope(code, message, details as Record<string, unknown> | undefined);
}
