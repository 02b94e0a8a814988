/**
 * What a page tells a person about their request's mistake. Page routes answer every client
 * error (Fastify's 400/413/415, a failed CSRF check, a refused input) with an HTML page of the
 * same status; only a server failure is a 500.
 */
import { ApiError } from "./errors.js";

export interface PageProblem {
  status: number;
  title: string;
  message: string;
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
