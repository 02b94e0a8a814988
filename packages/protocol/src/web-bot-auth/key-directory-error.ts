/** How fetching a Web Bot Auth key directory can fail; every failure means "unverified". */
export type KeyDirectoryFailure =
  | "unreachable"
  | "redirect"
  | "http_status"
  | "too_large"
  | "media_type"
  | "malformed"
  | "unsigned"
  | "bad_signature";

/**
 * Messages never quote the response or name addresses: they may end up in a log line or an answer
 * to whoever sent the signed request, who chose the directory URL.
 */
export class KeyDirectoryError extends Error {
  readonly kind: KeyDirectoryFailure;
  /** Seconds until the directory is fetched again; set when the failure is cached. */
  readonly retryAfterSeconds?: number;

  constructor(
    kind: KeyDirectoryFailure,
    message: string,
    options: { retryAfterSeconds?: number; cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "KeyDirectoryError";
    this.kind = kind;
    if (options.retryAfterSeconds !== undefined) this.retryAfterSeconds = options.retryAfterSeconds;
  }
}
