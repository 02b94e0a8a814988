/**
 * Routes answered before Fastify's router. For the hottest reads the work is one lookup and one
 * write, and Fastify's per-request machinery (request and reply objects, hook chain, promise
 * steps) costs more than the work itself. A fast route answers only the requests it fully
 * understands and declines everything else (other methods, query strings, paths that need
 * decoding, a server shutting down), which then reaches Fastify, where the same route is
 * registered with its schema: both produce the same status, headers and bytes.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { performance } from "node:perf_hooks";
import type { FastifyBaseLogger } from "fastify";
import { ApiError } from "./errors.js";
import { redactUrl } from "./log-redaction.js";
import type { RequestObserver } from "./metrics.js";

export interface FastAnswer {
  status: number;
  /** Lower-case header names; content-length is added unless it is there already. */
  headers: Record<string, string>;
  body: string;
}

export interface FastRoute {
  /** The route pattern, as Fastify knows it: the metrics label. */
  readonly pattern: string;
  /**
   * Undefined declines the request (Fastify takes it). An answer may be a promise; an ApiError
   * thrown or rejected becomes its envelope, anything else a logged 500. `clientIp` is for a
   * route that takes the request: asking it for every request would read forwarded headers for
   * requests the fast path never answers.
   */
  answer(
    request: IncomingMessage,
    clientIp: (request: IncomingMessage) => string,
  ): FastAnswer | Promise<FastAnswer> | undefined;
}

export interface FastPathContext {
  /** The client address, by the same trusted-proxy rule as Fastify's `request.ip`. */
  clientIp(request: IncomingMessage): string;
  metrics: RequestObserver | undefined;
  log(): FastifyBaseLogger;
  /** The 503 of an error that says a dependency is away (see createHttpServer). */
  outageError(error: unknown): ApiError | undefined;
}

/** An error answered by a fast route: the envelope and headers the platform's error handler sends. */
export function fastError(error: ApiError, headers: Record<string, string> = {}): FastAnswer {
  const answer: FastAnswer = {
    status: error.status,
    headers: { ...headers, "content-type": "application/json; charset=utf-8" },
    body: JSON.stringify(error.toEnvelope()),
  };
  if (error.retryAfterSeconds !== undefined) {
    answer.headers["retry-after"] = String(Math.max(1, Math.ceil(error.retryAfterSeconds)));
  }
  return answer;
}

export class FastPath {
  readonly #routes: FastRoute[] = [];
  readonly #context: FastPathContext;
  #closing = false;

  constructor(context: FastPathContext) {
    this.#context = context;
  }

  add(route: FastRoute): void {
    this.#routes.push(route);
  }

  /** From now on every request goes to Fastify, which closes kept-alive connections as it drains. */
  close(): void {
    this.#closing = true;
  }

  /** True when a fast route took the request. */
  handle(request: IncomingMessage, response: ServerResponse): boolean {
    if (this.#closing || this.#routes.length === 0) return false;
    const started = performance.now();
    for (const route of this.#routes) {
      let answer: FastAnswer | Promise<FastAnswer> | undefined;
      try {
        answer = route.answer(request, this.#context.clientIp);
      } catch (error) {
        answer = this.#failure(error, request);
      }
      if (answer === undefined) continue;
      if (answer instanceof Promise) {
        answer.then(
          (value) => this.#send(route, request, response, value, started),
          (error: unknown) => this.#send(route, request, response, this.#failure(error, request), started),
        );
      } else {
        this.#send(route, request, response, answer, started);
      }
      return true;
    }
    return false;
  }

  #failure(error: unknown, request: IncomingMessage): FastAnswer {
    if (error instanceof ApiError) return fastError(error);
    const outage = this.#context.outageError(error);
    if (outage !== undefined) return fastError(outage);
    this.#context.log().error({ err: error, method: request.method, url: redactUrl(request.url) }, "request failed");
    return fastError(new ApiError(500, "internal_error", "an unexpected error occurred"));
  }

  #send(route: FastRoute, request: IncomingMessage, response: ServerResponse, answer: FastAnswer, started: number) {
    if (answer.status === 304) {
      // Not Modified has no body, and a Content-Length would have to be the 200's (RFC 9110 §8.6).
      response.writeHead(304, answer.headers);
      response.end();
    } else {
      const headers = answer.headers;
      response.writeHead(
        answer.status,
        headers["content-length"] !== undefined
          ? headers
          : { ...headers, "content-length": String(Buffer.byteLength(answer.body)) },
      );
      response.end(answer.body);
    }
    this.#context.metrics?.observeRequest(
      request.method ?? "GET",
      route.pattern,
      answer.status,
      (performance.now() - started) / 1000,
    );
  }
}
