/** An OAuth error answered as RFC 6749 §5.2 JSON (`error`, `error_description`). */
export class OAuthError extends Error {
  constructor(
    readonly error: string,
    readonly description: string,
    readonly status = 400,
    readonly headers: Record<string, string> = {},
  ) {
    super(description);
  }
}
