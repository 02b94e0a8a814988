/**
 * Client mistakes answered before a route is known, in the error envelope like every other
 * non-2xx: what node's HTTP parser refuses (oversized headers, a duplicate Content-Length, broken
 * framing), a request whose Host cannot stand, and what Fastify's router refuses (a path that does
 * not percent-decode, a parameter over maxParamLength).
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import {
  refuseBadHost as refuseBadHostWith,
  routerError,
  socketErrorResponder,
  type TransportError,
} from "@proto/protocol";
import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from "fastify";
import { ApiError } from "./errors.js";

const asApiError = ({ status, message }: TransportError) => new ApiError(status, "invalid_request", message);
const envelopeOf = (error: TransportError) => asApiError(error).toEnvelope();

/** Fastify's `clientErrorHandler`: the envelope on the raw socket, only the error's code logged. */
export function clientErrorHandler(log: () => FastifyBaseLogger) {
  return socketErrorResponder(envelopeOf, (code, status) => log().debug({ code, status }, "client error"));
}

/** A request whose Host cannot stand (none on HTTP/1.1, two, or no host): 400 in the envelope. */
export function refuseBadHost(request: IncomingMessage, response: ServerResponse): boolean {
  return refuseBadHostWith(request, response, envelopeOf);
}

/** Fastify's `frameworkErrors`: what its router refuses, before any route is chosen. */
export function frameworkErrorHandler(
  send: (reply: FastifyReply, error: ApiError) => FastifyReply,
): (error: Error & { code?: string }, request: FastifyRequest, reply: FastifyReply) => void {
  return (error, request, reply) => {
    const refused = routerError(error.code);
    if (refused !== undefined) {
      send(reply, asApiError(refused));
      return;
    }
    request.log.error({ code: error.code }, "router failed");
    send(reply, new ApiError(500, "internal_error", "an unexpected error occurred"));
  };
}
