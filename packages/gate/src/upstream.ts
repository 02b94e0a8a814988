/**
 * Forwarding to the application: one request out per request in, bodies and answers streamed both
 * ways, hop-by-hop fields dropped as RFC 9110 §7.6.1 says, and a failure of the application
 * answered in the envelope with `Retry-After` (502/503/504), never a hang.
 */
import {
  Agent as HttpAgent,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  type ServerResponse,
} from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { pipeline } from "node:stream";
import type { ProtoError } from "@proto/protocol";
import { errorAnswer, gateErrors } from "./errors.js";

/** Fields that describe one connection, never the message (RFC 9110 §7.6.1), plus the proxy ones. */
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "proxy-authorization",
  "proxy-authenticate",
]);

/** The end-to-end fields of a message: hop-by-hop ones and those its `Connection` names removed. */
export function endToEnd(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const named = new Set<string>();
  const connection = headers.connection;
  for (const value of Array.isArray(connection) ? connection : connection === undefined ? [] : [connection]) {
    for (const token of value.split(",")) named.add(token.trim().toLowerCase());
  }
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || named.has(name)) continue;
    out[name] = value;
  }
  return out;
}

export interface ForwardRequest {
  method: string;
  /** The request-target as received (path and query), appended to the upstream's base path. */
  target: string;
  headers: OutgoingHttpHeaders;
  /** The bytes already read and verified, or the request itself to stream from. */
  body: Buffer | undefined | IncomingMessage;
}

export interface UpstreamOptions {
  url: string;
  timeoutSeconds: number;
}

export class Upstream {
  readonly #url: URL;
  readonly #basePath: string;
  readonly #timeoutMs: number;
  readonly #agent: HttpAgent;
  readonly #request: typeof httpRequest;

  constructor(options: UpstreamOptions) {
    this.#url = new URL(options.url);
    this.#basePath = this.#url.pathname.replace(/\/$/, "");
    this.#timeoutMs = options.timeoutSeconds * 1000;
    const https = this.#url.protocol === "https:";
    // Kept-alive connections: a proxy that opens one per request pays a handshake each time.
    this.#agent = https
      ? new HttpsAgent({ keepAlive: true, maxFreeSockets: 64 })
      : new HttpAgent({ keepAlive: true, maxFreeSockets: 64 });
    this.#request = https ? (httpsRequest as typeof httpRequest) : httpRequest;
  }

  get origin(): string {
    return this.#url.origin;
  }

  /** Sends `request` on and streams the answer into `response`; failures are answered, never thrown. */
  forward(request: ForwardRequest, response: ServerResponse, onError: (error: Error) => void): void {
    let answered = false;
    const fail = (error: ProtoError, cause: Error) => {
      if (answered || response.headersSent) {
        // The answer had begun: all that is left is to cut it, so the client sees it incomplete.
        response.destroy(cause);
        return;
      }
      answered = true;
      onError(cause);
      const { status, headers, body } = errorAnswer(error);
      response.writeHead(status, { ...headers, "content-length": Buffer.byteLength(body) });
      response.end(body);
    };
    const outgoing = this.#request({
      protocol: this.#url.protocol,
      hostname: this.#url.hostname,
      port: this.#url.port,
      method: request.method,
      path: `${this.#basePath}${request.target}`,
      headers: request.headers,
      agent: this.#agent,
      // Until the status line: a stream may then be as slow as it likes.
      timeout: this.#timeoutMs,
    });
    outgoing.on("timeout", () => {
      if (!outgoing.headersSent || !answered)
        outgoing.destroy(Object.assign(new Error("upstream timeout"), { code: "GATE_TIMEOUT" }));
    });
    outgoing.on("error", (error: NodeJS.ErrnoException) => {
      if (error.code === "GATE_TIMEOUT") return fail(gateErrors.upstreamTimeout(this.#timeoutMs / 1000), error);
      if (error.code === "HPE_INVALID_CONSTANT" || error.code?.startsWith("HPE_"))
        return fail(gateErrors.badUpstream(), error);
      fail(gateErrors.upstreamUnavailable(), error);
    });
    outgoing.on("response", (answer) => {
      outgoing.setTimeout(0);
      answered = true;
      response.writeHead(answer.statusCode ?? 502, answer.statusMessage, endToEnd(answer.headers));
      // Event streams and long polls: the status and headers go out now, not with the first bytes.
      response.flushHeaders();
      pipeline(answer, response, (error) => {
        if (error) outgoing.destroy();
      });
    });
    // The client went away: nobody is left to read the answer.
    response.on("close", () => {
      if (!response.writableFinished) outgoing.destroy();
    });
    const body = request.body;
    if (body === undefined) outgoing.end();
    else if (Buffer.isBuffer(body)) outgoing.end(body);
    else {
      pipeline(body, outgoing, (error) => {
        if (error) outgoing.destroy(error);
      });
    }
  }

  close(): void {
    this.#agent.destroy();
  }
}
