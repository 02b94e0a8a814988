/**
 * The error both services answer with: a code from the spec's tables, the HTTP status the spec
 * ties to it, and a message for people. Domain code throws it; the HTTP layer renders it.
 */
export class ApiError extends Error {
  override readonly name = "ApiError";
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details?: Record<string, unknown>,
    /** Seconds to wait, sent as `Retry-After`. */
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
  }

  /** Fastify's name for the status, so handlers that read it see the same number. */
  get statusCode(): number {
    return this.status;
  }

  toEnvelope(): { error: { code: string; message: string; details?: Record<string, unknown> } } {
    return this.details === undefined
      ? { error: { code: this.code, message: this.message } }
      : { error: { code: this.code, message: this.message, details: this.details } };
  }
}

export const invalidRequest = (message: string, details?: Record<string, unknown>) =>
  new ApiError(400, "invalid_request", message, details);
export const unauthorized = (message = "a valid credential is required") => new ApiError(401, "unauthorized", message);
export const forbidden = (message: string) => new ApiError(403, "forbidden", message);
export const notFound = (message = "not found") => new ApiError(404, "not_found", message);
export const conflict = (message: string) => new ApiError(409, "conflict", message);
export const rateLimited = (retryAfterSeconds: number, message = "too many requests; retry later") =>
  new ApiError(429, "rate_limited", message, undefined, retryAfterSeconds);
export const internalError = () => new ApiError(500, "internal_error", "an unexpected error occurred");
