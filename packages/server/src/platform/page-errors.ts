/**
 * What a page tells a person about their request's mistake. Page routes answer every client
 * error (Fastify's 400/413/415, a failed CSRF check, a refused input) with an HTML page of the
 * same status; only a server failure is a 500.
 */
import { ApiError } from "./errors.js";
import { InputRuleError } from "./input-rules.js";

export interface PageProblem {
  status: number;
  title: string;
  message: string;
  /** Sent as `Retry-After` (an outage). */
  retryAfterSeconds?: number;
}

interface AnyError {
  statusCode?: number;
  code?: string;
  validation?: unknown;
}

/** The page for a 4xx error, or undefined when the error is the server's own failure. */
export function clientProblem(error: AnyError): PageProblem | undefined {
  const status = error.statusCode ?? (error.validation === undefined ? 500 : 400);
  if (status < 400 || status >= 500) return undefined;
  if (error.code?.startsWith("FST_CSRF")) {
    return { status: 403, title: "This form has expired", message: "Go back, reload the page and try again." };
  }
  if (error instanceof InputRuleError) {
    return {
      status,
      title: "This address does not work",
      message: `It was changed or garbled on the way: ${error.message}. Start again from the page you came from.`,
    };
  }
  if (error instanceof ApiError) return { status, title: "Something is not right", message: error.message };
  switch (status) {
    case 413:
      return { status, title: "Too much was sent", message: "The form was larger than this page accepts." };
    case 415:
      return {
        status,
        title: "This form could not be read",
        message: "It was sent in a format this page does not accept. Go back and submit the form again.",
      };
    default:
      return { status, title: "Something is not right", message: "The request could not be understood." };
  }
}

/**
 * The page for an error a person can do something about: a dependency outage (503, retry later;
 * `outageError` is the server's `app.outageError`) or a client mistake (4xx). Undefined for the
 * server's own failures.
 */
export function pageProblem(
  error: AnyError,
  outageError: (error: unknown) => ApiError | undefined,
): PageProblem | undefined {
  const outage = outageError(error);
  if (outage !== undefined) {
    return {
      status: 503,
      title: "Temporarily unavailable",
      message: "This service cannot reach its storage right now. Try again in a few seconds.",
      ...(outage.retryAfterSeconds === undefined ? {} : { retryAfterSeconds: outage.retryAfterSeconds }),
    };
  }
  return clientProblem(error);
}
