/**
 * Client mistakes answered before a route is known, in the error envelope like every other
 * non-2xx: what node's HTTP parser refuses (oversized headers, a duplicate Content-Length, broken
 * framing), an HTTP/1.1 request without Host, and what Fastify's router refuses (a path that does
 * not percent-decode, a parameter over maxParamLength).
 */
import { type IncomingMessage, type ServerResponse, STATUS_CODES } from "node:http";
import type { Socket } from "node:net";
import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from "fastify";
import { ApiError } from "./errors.js";

function envelope(error: ApiError): string {
  return JSON.stringify(error.toEnvelope());
}

/** The answer to an error node's HTTP parser raised (`clientError`). */
export function parserError(code: string | undefined): ApiError {
  switch (code) {
    case "HPE_HEADER_OVERFLOW":
      return new ApiError(431, "invalid_request", "the request headers are too large");
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return new ApiError(408, "invalid_request", "the request took too long to arrive");
    case "HPE_UNEXPECTED_CONTENT_LENGTH":
      return new ApiError(400, "invalid_request", "the request has more than one Content-Length");
    default:
      return new ApiError(400, "invalid_request", "the request is not valid HTTP");
  }
}

/**
 * Fastify's `clientErrorHandler`: the envelope written on the raw socket, which then closes (the
 * stream can no longer be trusted). The error's raw packet holds the request's headers, cookies
 * and credentials included, so only its code is logged.
 */
export function clientErrorHandler(log: () => FastifyBaseLogger) {
  return (error: Error & { code?: string }, socket: Socket): void => {
    if (error.code === "ECONNRESET" || socket.destroyed) return;
    const apiError = parserError(error.code);
    log().debug({ code: error.code, status: apiError.status }, "client error");
    if (socket.writable) {
      const body = envelope(apiError);
      socket.write(
        `HTTP/1.1 ${apiError.status} ${STATUS_CODES[apiError.status]}\r\n` +
          "Content-Type: application/json; charset=utf-8\r\n" +
          `Content-Length: ${Buffer.byteLength(body)}\r\n` +
          `Connection: close\r\n\r\n${body}`,
      );
    }
    socket.destroy();
  };
}

/**
 * Answers an HTTP/1.1 request without a Host header (RFC 9112 §3.2: 400) and says true; node's own
 * check (`requireHostHeader`) answers with an empty body, so the server turns it off for this one.
 */
export function refuseMissingHost(request: IncomingMessage, response: ServerResponse): boolean {
  if (request.httpVersion !== "1.1" || request.headers.host !== undefined) return false;
  const body = envelope(new ApiError(400, "invalid_request", "an HTTP/1.1 request needs a Host header"));
  response.shouldKeepAlive = false;
  response.writeHead(400, {
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(body),
    connection: "close",
  });
  response.end(body);
  return true;
}

/** Fastify's `frameworkErrors`: what its router refuses, before any route is chosen. */
export function frameworkErrorHandler(
  send: (reply: FastifyReply, error: ApiError) => FastifyReply,
): (error: Error & { code?: string }, request: FastifyRequest, reply: FastifyReply) => void {
  return (error, request, reply) => {
    switch (error.code) {
      case "FST_ERR_BAD_URL":
        send(reply, new ApiError(400, "invalid_request", "the path is not validly percent-encoded"));
        return;
      case "FST_ERR_MAX_PARAM_LENGTH":
        send(reply, new ApiError(414, "invalid_request", "a path segment is too long"));
        return;
      default:
        request.log.error({ code: error.code }, "router failed");
        send(reply, new ApiError(500, "internal_error", "an unexpected error occurred"));
    }
  };
}
