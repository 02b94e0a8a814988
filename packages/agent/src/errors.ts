/**
 * Typed errors of the SDK. Every error has a stable `code` and a `kind`; the CLI turns the kind
 * into its exit code and prints `code: message` on one line.
 */

/**
 * - `server`: a server answered with an error (its envelope's code), or with something that is not
 *   the protocol.
 * - `network`: the request did not complete (unreachable host, TLS failure, timeout, oversized response).
 * - `auth`: credentials or linkage: not linked, binding revoked or expired, suspended for one
 *   service, link request expired, signature refused, no directory session.
 * - `usage`: bad input or missing configuration.
 * - `keystore`: the local key file is missing, unsafe or unreadable.
 * - `incompatible`: a service's discovery document is invalid or not usable by a v0.1 agent.
 */
export type ErrorKind = "server" | "network" | "auth" | "usage" | "keystore" | "incompatible";

export class AgentError extends Error {
  override name = "AgentError";
  readonly kind: ErrorKind;
  readonly code: string;

  constructor(kind: ErrorKind, code: string, message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.kind = kind;
    this.code = code;
  }
}

/** Codes that mean "this agent is not (or no longer) allowed", whatever the status. */
const AUTH_CODES = new Set([
  "unauthorized",
  "forbidden",
  "invalid_signature",
  "expired_signature",
  "replayed_nonce",
  "revoked_key",
  "invalid_attestation",
  "attestation_required",
  "binding_revoked",
  "binding_expired",
  "service_suspended",
  "grant_revoked",
  "verification_required",
  "link_request_expired",
]);

export interface ServerErrorInit {
  status: number;
  code: string;
  message: string;
  /** The endpoint that answered (no query string). */
  url: string;
  retryAfter?: number | undefined;
  details?: Record<string, unknown> | undefined;
}

/** An error answer from a proto server: the envelope's `error.code` and `error.message`, the HTTP status. */
export class ServerError extends AgentError {
  override name = "ServerError";
  readonly status: number;
  readonly url: string;
  /** Seconds from the `Retry-After` header, when the server sent one. */
  readonly retryAfter: number | undefined;
  readonly details: Record<string, unknown> | undefined;

  constructor(init: ServerErrorInit) {
    super(
      AUTH_CODES.has(init.code) || init.status === 401 || init.status === 403 ? "auth" : "server",
      init.code,
      init.message,
    );
    this.status = init.status;
    this.url = init.url;
    this.retryAfter = init.retryAfter;
    this.details = init.details;
  }
}

/** An error answer from the trust attestor. */
export class AttestorError extends ServerError {
  override name = "AttestorError";
}

/** An error answer from the listing directory. */
export class DirectoryError extends ServerError {
  override name = "DirectoryError";
}

/** Codes: `unreachable`, `timeout`, `tls_error`, `response_too_large`, `redirect_refused`. */
export class NetworkError extends AgentError {
  override name = "NetworkError";
  /** The URL that could not be fetched. */
  readonly url: string;
  constructor(code: string, message: string, url: string, options?: { cause?: unknown }) {
    super("network", code, message, options);
    this.url = url;
  }
}

/** Codes: `no_key`, `unsafe_permissions`, `invalid_key_file`, `key_exists`. */
export class KeyStoreError extends AgentError {
  override name = "KeyStoreError";
  readonly path: string;
  constructor(code: string, message: string, path: string, options?: { cause?: unknown }) {
    super("keystore", code, message, options);
    this.path = path;
  }
}

/** Codes: `discovery_invalid` (not JSON, schema), `discovery_incompatible` (version, algorithms), `discovery_did_mismatch`. */
export class DiscoveryError extends AgentError {
  override name = "DiscoveryError";
  readonly url: string;
  /** Every problem found, readable. */
  readonly reasons: string[];
  constructor(code: string, url: string, reasons: string[]) {
    super("incompatible", code, `${url}: ${reasons.join("; ")}`);
    this.url = url;
    this.reasons = reasons;
  }
}

/**
 * An attestor's refusal to mint for a key it has no binding for, in words that name the command
 * which links it: the SDK's error and the CLI's line say the same.
 */
export function notLinkedMessage(attestorUrl: string): string {
  return `this agent's key is not linked to a person at ${attestorUrl}: run \`proto trust link --attestor ${attestorUrl}\` to link it`;
}

/** Bad input or missing configuration, found before anything is sent. */
export class UsageError extends AgentError {
  override name = "UsageError";
  constructor(code: string, message: string) {
    super("usage", code, message);
  }
}

/** Local linkage problems: not linked to a person, no directory session for a listing. */
export class AuthError extends AgentError {
  override name = "AuthError";
  constructor(code: string, message: string) {
    super("auth", code, message);
  }
}
