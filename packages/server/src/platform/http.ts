import { createServer } from "node:http";
import proxyAddr from "@fastify/proxy-addr";
import { ProtoError } from "@proto/protocol";
import Ajv from "ajv";
import addFormats from "ajv-formats";
import Fastify, {
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  LogController,
} from "fastify";
import type { LogLevel } from "./config.js";
import { asDependencyUnavailable, type Dependency, SERVICE_UNAVAILABLE } from "./dependency.js";
import { ApiError } from "./errors.js";
import { FastPath, type FastRoute } from "./fast-path.js";
import { controlPatternMessage, registerInputRules } from "./input-rules.js";
import { redactUrl, serializeRequest } from "./log-redaction.js";
import type { RequestObserver } from "./metrics.js";
import { proxyTrust } from "./proxy-trust.js";
import type { RateLimitDecision, RateLimiter, RateLimitRule } from "./rate-limit.js";
import { addressRateLimitKey } from "./rate-limit.js";
import { clientErrorHandler, frameworkErrorHandler, refuseBadHost } from "./raw-errors.js";
import { tuneV8ForServing } from "./v8-flags.js";

/** Fastify's default: longer than the usual proxy's idle timeout, so the proxy closes first. */
const KEEP_ALIVE_TIMEOUT_MS = 72_000;

/** Every JSON endpoint refuses bodies over 64 KiB (decisions: both services). */
export const BODY_LIMIT_BYTES = 64 * 1024;

export interface HttpOptions {
  logLevel: LogLevel;
  /** The peers whose `X-Forwarded-For` is read, and how many of them at most (0: no cap). */
  trustedProxies: readonly string[];
  trustedProxyHops: number;
  /** Log destination; standard output when absent. */
  logStream?: NodeJS.WritableStream;
  /** Told about every response: method, route pattern, status, seconds (the service's metrics). */
  metrics?: RequestObserver;
  /** Told about every request that failed because a dependency is away (answered 503). */
  onDependencyFailure?: (dependency: Dependency, error: unknown) => void;
}

function sendError(reply: FastifyReply, error: ApiError): FastifyReply {
  if (error.retryAfterSeconds !== undefined) {
    reply.header("retry-after", String(Math.max(1, Math.ceil(error.retryAfterSeconds))));
  }
  return reply.code(error.status).type("application/json; charset=utf-8").send(error.toEnvelope());
}

/** Fastify's own errors, in the spec's vocabulary. */
function fromFastifyError(error: FastifyError): ApiError {
  if (error.validation !== undefined) {
    const first = error.validation[0];
    const where = error.validationContext ?? "request";
    const path = first?.instancePath ? first.instancePath.replace(/^\//, "").replace(/\//g, ".") : "";
    const reason = (first?.keyword === "pattern" && controlPatternMessage(first.params.pattern)) || first?.message;
    const message = `${where}${path ? `.${path}` : ""} ${reason ?? "is invalid"}`;
    return new ApiError(400, "invalid_request", message, {
      errors: error.validation.map((v) => ({
        path: v.instancePath,
        message: v.message ?? "is invalid",
        params: v.params,
      })),
    });
  }
  switch (error.code) {
    case "FST_ERR_CTP_BODY_TOO_LARGE":
      return new ApiError(413, "payload_too_large", `request bodies are limited to ${BODY_LIMIT_BYTES} bytes`);
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
      return new ApiError(400, "invalid_request", "the body must be application/json");
    case "FST_ERR_CTP_EMPTY_JSON_BODY":
      return new ApiError(400, "invalid_request", "the JSON body is empty");
    case "FST_ERR_CTP_INVALID_JSON_BODY":
      return new ApiError(400, "invalid_request", "the body is not valid JSON");
  }
  const status = error.statusCode ?? 500;
  if (error instanceof SyntaxError && status === 400) {
    return new ApiError(400, "invalid_request", "the body is not valid JSON");
  }
  if (status === 404) return new ApiError(404, "not_found", "not found");
  if (status === 413) return new ApiError(413, "payload_too_large", "the request is too large");
  if (status >= 400 && status < 500) return new ApiError(status, "invalid_request", error.message);
  return new ApiError(500, "internal_error", "an unexpected error occurred");
}

/** Any error a route raises, as the envelope's error. */
export function toApiError(error: FastifyError): ApiError {
  if (error instanceof ApiError) return error;
  if (error instanceof ProtoError) {
    return new ApiError(error.status, error.code, error.message, error.details, error.retryAfter);
  }
  return fromFastifyError(error);
}

/**
 * A Fastify instance with the platform's behaviour: the error envelope on every non-2xx (unknown
 * routes, bad JSON, oversized bodies, validation), redacted structured logs, client IP through
 * the listed trusted proxies.
 */
export function createHttpServer(options: HttpOptions): FastifyInstance {
  tuneV8ForServing();
  const trustProxy = proxyTrust(options.trustedProxies, options.trustedProxyHops);
  const outageError = outageErrors(options.onDependencyFailure);
  const fastPath = new FastPath({
    outageError,
    clientIp:
      options.trustedProxies.length === 0
        ? (request) => request.socket.remoteAddress ?? ""
        : (request) => proxyAddr(request, trustProxy),
    metrics: options.metrics,
    log: () => app.log,
  });
  const app: FastifyInstance = Fastify({
    logger: {
      level: options.logLevel,
      redact: {
        paths: ["req.headers.authorization", "req.headers.cookie", 'res.headers["set-cookie"]'],
        censor: "[redacted]",
      },
      serializers: { req: serializeRequest },
      ...(options.logStream ? { stream: options.logStream } : {}),
    },
    bodyLimit: BODY_LIMIT_BYTES,
    // The client address is read from X-Forwarded-For through the listed proxies only.
    trustProxy,
    logController: new LogController({ disableRequestLogging: true }),
    // Requests that reach a closing server on a kept-alive connection are served (with
    // `Connection: close`): Fastify's own 503 would carry a body outside the error envelope.
    return503OnClosing: false,
    routerOptions: { maxParamLength: 2048 },
    // The server Fastify would make, with the fast routes (see fast-path.ts) ahead of its router.
    keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
    // Client mistakes found before any route is chosen still answer with the envelope.
    clientErrorHandler: clientErrorHandler(() => app.log),
    frameworkErrors: frameworkErrorHandler(sendError),
    serverFactory: (handler) => {
      const server = createServer({ requireHostHeader: false }, (request, response) => {
        if (refuseBadHost(request, response)) return;
        if (!fastPath.handle(request, response)) handler(request, response);
      });
      server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS;
      return server;
    },
  });
  fastPaths.set(app.server, fastPath);
  registerInputRules(app);
  app.addHook("preClose", (done) => {
    fastPath.close();
    done();
  });

  // Query strings and path parameters are text and are coerced to the schema's types; JSON bodies
  // are validated exactly as sent, so `"title": 42` or `"tags": [1]` is invalid, never "42".
  const ajvFor = (coerceTypes: boolean) => {
    const ajv = new Ajv.default({
      coerceTypes,
      useDefaults: true,
      removeAdditional: false,
      allErrors: false,
      strict: false,
    });
    addFormats.default(ajv);
    return ajv;
  };
  const exact = ajvFor(false);
  const coercing = ajvFor(true);
  app.setValidatorCompiler(({ schema, httpPart }) =>
    (httpPart === "body" ? exact : coercing).compile(schema as Record<string, unknown>),
  );
  // Response schemas document the API (OpenAPI); they never reshape what a handler sends, so a
  // field missing from a schema is still sent and nothing relies on a schema to strip data.
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));

  app.decorate("outageError", outageError);
  app.setErrorHandler((error: FastifyError, request, reply) => {
    const apiError =
      error instanceof ApiError || error instanceof ProtoError
        ? toApiError(error)
        : (outageError(error) ?? toApiError(error));
    // Outages are logged once, when they start and end (DependencyMonitor), not per request.
    if (apiError.status >= 500 && apiError.code !== SERVICE_UNAVAILABLE) {
      request.log.error({ err: error }, "request failed");
    }
    return sendError(reply, apiError);
  });
  app.setNotFoundHandler((request, reply) =>
    sendError(reply, new ApiError(404, "not_found", `no route for ${request.method} ${request.url.split("?")[0]}`)),
  );
  // One access-log line per request, at debug unless it failed, so busy read paths stay cheap.
  // Metrics are labelled with the route pattern, never the raw URL (unbounded, and may carry ids).
  const metrics = options.metrics;
  app.addHook("onResponse", (request, reply, done) => {
    const entry = {
      method: request.method,
      url: redactUrl(request.url),
      status: reply.statusCode,
      ms: reply.elapsedTime,
    };
    if (reply.statusCode >= 500 && reply.statusCode !== 503) request.log.error(entry, "request");
    else request.log.debug(entry, "request");
    metrics?.observeRequest(request.method, request.routeOptions.url, reply.statusCode, reply.elapsedTime / 1000);
    done();
  });
  return app;
}

declare module "fastify" {
  interface FastifyInstance {
    /**
     * The 503 `service_unavailable` of an error that says a dependency is away (database, Redis),
     * undefined for any other error; the service's outage tracking is told. Page error handlers
     * use it to answer an outage as one too.
     */
    outageError(error: unknown): ApiError | undefined;
  }
}

function outageErrors(onFailure: HttpOptions["onDependencyFailure"]) {
  return (error: unknown): ApiError | undefined => {
    const outage = asDependencyUnavailable(error);
    if (outage === undefined) return undefined;
    if (!outage.answered) onFailure?.(outage.dependency, error);
    return new ApiError(503, SERVICE_UNAVAILABLE, outage.message, undefined, outage.retryAfterSeconds);
  };
}

// By the http server, which every plugin's encapsulated instance shares with the root.
const fastPaths = new WeakMap<object, FastPath>();

/**
 * Answers `route` ahead of Fastify's router on a server made by `createHttpServer`. The same
 * route must also be registered with Fastify: it takes what the fast route declines.
 */
export function addFastRoute(app: FastifyInstance, route: FastRoute): void {
  const fastPath = fastPaths.get(app.server);
  if (fastPath === undefined) throw new Error("addFastRoute needs a server made by createHttpServer");
  fastPath.add(route);
}

/** The 429 of a denied hit. */
export function rateLimitError(decision: RateLimitDecision): ApiError {
  return new ApiError(429, "rate_limited", "too many requests; retry later", undefined, decision.retryAfterSeconds);
}

/** A hook that spends one unit of `rule` for the client's IP, answering 429 when it is empty. */
export function rateLimitHook(limiter: RateLimiter, rule: RateLimitRule) {
  return async (request: FastifyRequest): Promise<void> => {
    const decision = await limiter.hit(rule, addressRateLimitKey(request.ip));
    if (!decision.allowed) throw rateLimitError(decision);
  };
}

/** Sends an ApiError from code paths outside the handler chain. */
export { sendError };
