/** The gate's own refusals, in the envelope every proto answer uses (`{"error":{"code","message"}}`). */
import { ProtoError } from "@proto/protocol";

export const UPSTREAM_RETRY_AFTER_SECONDS = 5;

export const gateErrors = {
  /** The application cannot be reached (refused, reset before answering): try again shortly. */
  upstreamUnavailable: () =>
    new ProtoError(
      "gate_upstream_unavailable",
      503,
      "the service behind the gate cannot be reached; try again shortly",
      {
        retryAfter: UPSTREAM_RETRY_AFTER_SECONDS,
      },
    ),
  /** The application accepted the request but sent no answer in time. */
  upstreamTimeout: (seconds: number) =>
    new ProtoError("gate_upstream_timeout", 504, `the service behind the gate did not answer within ${seconds} s`, {
      retryAfter: UPSTREAM_RETRY_AFTER_SECONDS,
    }),
  /** The application answered something that is not HTTP. */
  badUpstream: () =>
    new ProtoError("gate_bad_upstream", 502, "the service behind the gate sent an answer that is not valid HTTP", {
      retryAfter: UPSTREAM_RETRY_AFTER_SECONDS,
    }),
  notRouted: () => new ProtoError("not_found", 404, "no route of the gate takes this path and method"),
  bodyTooLarge: (max: number) =>
    new ProtoError("payload_too_large", 413, `the request body is larger than the gate accepts (${max} bytes)`),
  bodyUnreadable: () => new ProtoError("malformed_request", 400, "the request body could not be read"),
  upgradeRefused: () =>
    new ProtoError("malformed_request", 400, "the gate does not forward protocol upgrades (WebSocket)"),
  /** Forward-auth: the proxy does not pass bodies, so a signed body cannot be checked against its digest. */
  bodyUnverifiable: () =>
    new ProtoError(
      "gate_body_unverifiable",
      403,
      "this service checks agents in forward-auth mode, where the proxy passes no request body: a request with a body cannot be verified here",
    ),
  /** Forward-auth: the proxy's check request does not say which request it is about. */
  authCheckIncomplete: () =>
    new ProtoError(
      "malformed_request",
      400,
      "a forward-auth check names the request's method and path in X-Forwarded-Method and X-Forwarded-Uri (or X-Original-Method and X-Original-URI)",
    ),
  shuttingDown: () =>
    new ProtoError("service_unavailable", 503, "the gate is shutting down; try again", { retryAfter: 1 }),
};

/** Status, headers and body of an error answer. */
export function errorAnswer(error: ProtoError): { status: number; headers: Record<string, string>; body: string } {
  return {
    status: error.status,
    headers: { "content-type": "application/json; charset=utf-8", "cache-control": "no-store", ...error.headers() },
    body: JSON.stringify(error.toEnvelope()),
  };
}
