/**
 * Client mistakes a Node HTTP server meets before any route is known: what its parser refuses
 * (oversized headers, a duplicate Content-Length, broken framing), a request whose Host cannot
 * stand, and a router's refusals (a path that does not percent-decode, an over-long segment).
 * Servers and the service kit answer them in the error envelope like every other non-2xx, each
 * with its own code vocabulary: these functions say the status and the words, and write the
 * answer where only a socket is left.
 */
import { type IncomingMessage, type ServerResponse, STATUS_CODES } from "node:http";
import type { Socket } from "node:net";
import type { ErrorEnvelope } from "./errors.js";

export interface TransportError {
  status: number;
  message: string;
}

/** The status and message for an error code of node's HTTP parser (`clientError`). */
export function parserError(code: string | undefined): TransportError {
  switch (code) {
    case "HPE_HEADER_OVERFLOW":
      return { status: 431, message: "the request headers are too large" };
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return { status: 408, message: "the request took too long to arrive" };
    case "HPE_UNEXPECTED_CONTENT_LENGTH":
      return { status: 400, message: "the request has more than one Content-Length" };
    default:
      return { status: 400, message: "the request is not valid HTTP" };
  }
}

/** The status and message for a router error code (Fastify's `frameworkErrors`), or undefined. */
export function routerError(code: string | undefined): TransportError | undefined {
  switch (code) {
    case "FST_ERR_BAD_URL":
      return { status: 400, message: "the path is not validly percent-encoded" };
    case "FST_ERR_MAX_PARAM_LENGTH":
      return { status: 414, message: "a path segment is too long" };
    default:
      return undefined;
  }
}

/**
 * A `clientError` listener: the envelope `envelopeOf` makes, written on the raw socket, which then
 * closes (the stream can no longer be trusted). The error's raw packet holds the request's
 * headers, cookies and credentials included, so `log` is given only its code.
 */
/** How long a refused connection may linger for its answer to be read. */
const CLOSE_GRACE_MS = 2000;

export function socketErrorResponder(
  envelopeOf: (error: TransportError) => ErrorEnvelope,
  log?: (code: string | undefined, status: number) => void,
): (error: Error & { code?: string }, socket: Socket) => void {
  return (error, socket) => {
    if (error.code === "ECONNRESET" || socket.destroyed) return;
    const answer = parserError(error.code);
    log?.(error.code, answer.status);
    if (!socket.writable) {
      socket.destroy();
      return;
    }
    const body = JSON.stringify(envelopeOf(answer));
    // Ended, not destroyed: destroying right after the write can drop the answer (over TLS on
    // Node 26 the client got a reset instead). What the client still sends is read and dropped, so
    // closing with unread bytes does not reset the connection either; a client that never lets go
    // is cut off after a grace period.
    socket.on("data", () => undefined);
    socket.resume();
    socket.end(
      `HTTP/1.1 ${answer.status} ${STATUS_CODES[answer.status]}\r\n` +
        "Content-Type: application/json; charset=utf-8\r\n" +
        `Content-Length: ${Buffer.byteLength(body)}\r\n` +
        `Connection: close\r\n\r\n${body}`,
    );
    const grace = setTimeout(() => socket.destroy(), CLOSE_GRACE_MS);
    grace.unref();
    socket.once("close", () => clearTimeout(grace));
  };
}

/**
 * RFC 9112 §3.2's Host rule, minus the empty value: an http(s) target always has a host, and code
 * that rebuilds the URL from Host (an MCP transport does) fails on none. `host[:port]`, the host a
 * name (RFC 3986 reg-name), an IPv4 address or a bracketed IPv6 literal.
 */
const HOST_VALUE = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-._~!$&'()*+,;=%]+)(?::\d{0,5})?$/;

// The last Host value that passed: a server's requests nearly all name the same host, and the
// check runs on every request before any route (the template and URL parse cost as much as a
// cached read's own work). One string, replaced, never a growing set.
let lastGoodHost: string | undefined;

/** Why the request's Host cannot stand, or undefined when it can. */
function hostProblem(request: IncomingMessage): string | undefined {
  let lines = 0;
  const raw = request.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i] as string;
    // Only a four-letter name can be Host: the others are not lower-cased (a string each).
    if (name.length === 4 && (name === "Host" || name === "host" || name.toLowerCase() === "host")) lines++;
  }
  if (lines > 1) return "the request has more than one Host header";
  const host = request.headers.host;
  if (host === undefined) return request.httpVersion === "1.1" ? "an HTTP/1.1 request needs a Host header" : undefined;
  if (host === lastGoodHost) return undefined;
  if (!HOST_VALUE.test(host) || !URL.canParse(`http://${host}/`)) return "the Host header is not a host";
  lastGoodHost = host;
  return undefined;
}

/**
 * Answers a request whose Host cannot stand (RFC 9112 §3.2: 400) with the envelope and says true:
 * an HTTP/1.1 request without one, more than one, or one that is no `host[:port]`. Node's own check
 * (`requireHostHeader`) answers with an empty body, so a server that uses this turns that off.
 */
export function refuseBadHost(
  request: IncomingMessage,
  response: ServerResponse,
  envelopeOf: (error: TransportError) => ErrorEnvelope,
): boolean {
  const problem = hostProblem(request);
  if (problem === undefined) return false;
  refuseBeforeRouting(response, envelopeOf({ status: 400, message: problem }));
  return true;
}

/**
 * Answers 400 with `envelope` and closes the connection: for a request refused before any route
 * is chosen, whose framing or target the server does not trust to read on from.
 */
export function refuseBeforeRouting(response: ServerResponse, envelope: ErrorEnvelope): void {
  const body = JSON.stringify(envelope);
  response.shouldKeepAlive = false;
  response.writeHead(400, {
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(body),
    connection: "close",
  });
  response.end(body);
}
