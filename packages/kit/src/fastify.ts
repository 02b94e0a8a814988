/**
 * The Fastify adapter. Fastify is not a dependency of the kit: only its types are used, and the
 * instance is the one you pass in.
 */
import { Readable } from "node:stream";
import { ProtoError, refuseBadHost, routerError, socketErrorResponder } from "@proto/protocol";
import type {
  FastifyInstance,
  FastifyPluginAsync,
  FastifyReply,
  FastifyRequest,
  HTTPMethods,
  onRequestAsyncHookHandler,
  preHandlerAsyncHookHandler,
  preParsingAsyncHookHandler,
  RouteHandlerMethod,
} from "fastify";
import { asProtoError, kitError } from "./errors.js";
import { checkGuardOptions, guardRequest, type RequireAgentOptions } from "./guard.js";
import { errorResponse, type KitRequest, type KitResponse, mergeChallenges, publicUrlFor, toHeaders } from "./http.js";
import type { AgentContext, Kit } from "./kit.js";
import type { BearerContext, ProtectedResource, ProtectedResourceOptions } from "./mcp-resource.js";
import { transportEnvelope } from "./node-server.js";
import type { SignedAgentIdentity } from "./signed-agents.js";

export type { RequireAgentOptions } from "./guard.js";

declare module "fastify" {
  interface FastifyRequest {
    /** The verified agent of the request (set by `requireAgent`), else null. */
    proto: AgentContext | null;
    /**
     * A caller identified by Web Bot Auth alone (no account), on routes whose `signedAgents` policy
     * is `allow`; else null.
     */
    signedAgent: SignedAgentIdentity | null;
    /** The caller of a protected resource (set by `requireBearer`, as `mcpRoute` does), else null. */
    bearer: BearerContext | null;
  }
}

const rawBodies = new WeakMap<object, Buffer>();

function send(reply: FastifyReply, response: KitResponse): FastifyReply {
  reply.code(response.status);
  for (const [name, value] of Object.entries(response.headers)) {
    if (name === "www-authenticate") {
      reply.header(name, mergeChallenges(reply.getHeader(name) as string | string[] | undefined, value));
    } else {
      reply.header(name, value);
    }
  }
  return reply.send(response.body ?? "");
}

function sendError(reply: FastifyReply, error: unknown, onUnexpected?: (error: unknown) => void): FastifyReply {
  const { error: protoErr, unexpected } = asProtoError(error);
  if (unexpected) onUnexpected?.(error);
  return send(reply, errorResponse(protoErr));
}

/** The kit's view of a Fastify request: the public URL and the exact body bytes. */
export function toKitRequest(kit: Kit, request: FastifyRequest): KitRequest {
  const captured = rawBodies.get(request.raw);
  const parsed = Buffer.isBuffer(request.body) ? request.body : undefined;
  const body = captured ?? parsed;
  return {
    method: request.method.toUpperCase(),
    url: publicUrlFor(kit.origin, request.url),
    target: request.raw.url ?? request.url,
    headers: toHeaders(request.headers as Record<string, string | string[] | undefined>),
    body: body === undefined || body.length === 0 ? undefined : body,
    // Fastify's `ip` honours its `trustProxy` setting.
    clientAddress: request.ip,
  };
}

/**
 * A `preParsing` hook that keeps the exact body bytes (signatures cover them) and hands the same
 * bytes on to Fastify's parsers. Add it where `requireAgent` guards routes with a body; `agentRoute`
 * does it for you.
 */
export const captureRawBody: preParsingAsyncHookHandler = async (request, _reply, payload) => {
  const limit = request.routeOptions.bodyLimit ?? 1024 * 1024;
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of payload as AsyncIterable<Buffer | string>) {
    const buffer = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
    total += buffer.length;
    if (total > limit) throw kitError("payload_too_large");
    chunks.push(buffer);
  }
  const body = Buffer.concat(chunks);
  rawBodies.set(request.raw, body);
  const stream = Readable.from(body.length === 0 ? [] : [body]) as Readable & { receivedEncodedLength?: number };
  stream.receivedEncodedLength = body.length;
  return stream;
};

/**
 * A `preHandler` that verifies the agent request (signature, replay, revocation, attestation,
 * account: implicit signup, expiry, rate limit, attested session) and sets `request.proto`; errors
 * are answered in the envelope. Routes with a body also need `captureRawBody` (see `agentRoute`).
 */
export function requireAgent(kit: Kit, given: RequireAgentOptions = {}): preHandlerAsyncHookHandler {
  const options = checkGuardOptions(kit, given, "requireAgent");
  return async function protoRequireAgent(request, reply) {
    const headers = toHeaders(request.headers as Record<string, string | string[] | undefined>);
    const route = options.route ?? `${request.method} ${request.routeOptions.url ?? request.url}`;
    const outcome = await guardRequest(kit, headers, route, options, () => {
      // An empty body is captured as empty: only a body that skipped the hook is a wiring mistake.
      if (!rawBodies.has(request.raw) && request.body !== undefined && request.body !== null) {
        throw new Error("requireAgent: the raw body was not captured; add captureRawBody as a preParsing hook");
      }
      return toKitRequest(kit, request);
    });
    if (!outcome.pass) return send(reply, outcome.response);
    request.proto = outcome.proto;
    request.signedAgent = outcome.signedAgent;
  };
}

/** Route options for an agent-only route: `app.post("/notes", agentRoute(kit), handler)`. */
export function agentRoute(kit: Kit, options: RequireAgentOptions = {}) {
  return { preParsing: captureRawBody, preHandler: requireAgent(kit, options) };
}

/**
 * Options for `Fastify({...})` so that what is refused before any route is known (oversized
 * headers, broken framing, a duplicate Content-Length, a path that does not percent-decode, an
 * over-long segment) is answered in the error envelope like everything else, not in Fastify's or
 * node's own format. With `https`, put `requireHostHeader: false` in the https options too;
 * `createService` then answers a request without Host itself.
 */
export function protoServerOptions() {
  return {
    http: { requireHostHeader: false },
    clientErrorHandler: socketErrorResponder(transportEnvelope),
    frameworkErrors: (error: Error & { code?: string }, request: FastifyRequest, reply: FastifyReply) => {
      const refused = routerError(error.code);
      if (refused === undefined) {
        request.log.error({ code: error.code }, "proto kit: router failed");
        return sendError(reply, kitError("internal_error"));
      }
      return sendError(reply, new ProtoError("malformed_request", refused.status, refused.message));
    },
  };
}

export interface CreateServiceOptions {
  /** Log unexpected errors through Fastify's logger (default true). */
  log?: boolean;
}

/**
 * The Fastify plugin of the kit: mounts `/.well-known/proto` and every endpoint named by the
 * discovery document (accounts, `accounts/me`, owner invitation, key rotation, claim page, claim
 * completion, owner re-key and revocation) plus the owner routes (`{ownerPath}/signin`,
 * `/callback`, `/signout`, `/accounts`, the e-mail sign-in `/email-signin`, and with
 * `mail.developmentOutbox` the `/dev/outbox` page). It also decorates `request.proto` for `requireAgent`.
 * Register it once, at the root: `await app.register(createService(kit))`.
 */
export function createService(kit: Kit, options: CreateServiceOptions = {}): FastifyPluginAsync {
  const plugin: FastifyPluginAsync = async (app: FastifyInstance) => {
    if (!app.hasRequestDecorator("proto")) app.decorateRequest("proto", null);
    if (!app.hasRequestDecorator("signedAgent")) app.decorateRequest("signedAgent", null);
    // With `protoServerOptions()` node leaves a missing Host to the application: refused here, with
    // a repeated one or one that is no host, for every route of the application registered after
    // the kit (an MCP transport rebuilds the request's URL from it).
    app.addHook("onRequest", async (request, reply) => {
      if (refuseBadHost(request.raw, reply.raw, transportEnvelope)) reply.hijack();
    });
    await app.register(async (routes) => {
      // Kit routes read the exact bytes themselves, whatever the content type.
      routes.removeAllContentTypeParsers();
      routes.addContentTypeParser("*", { parseAs: "buffer" }, (_request, body, done) => done(null, body));
      // Errors before the kit's handler (a body too large or unreadable) answer in the route's
      // format: the envelope, or a page on the routes people use.
      routes.setErrorHandler((error, request, reply) => {
        const headers = toHeaders(request.headers as Record<string, string | string[] | undefined>);
        const refuse = (refusal: unknown) =>
          send(
            reply,
            kit.routeErrorResponse(request.method, request.routeOptions.url ?? request.url, refusal, { headers }),
          );
        if (error instanceof ProtoError) return refuse(error);
        const status = (error as { statusCode?: number }).statusCode ?? 500;
        if (status === 413) return refuse(kitError("payload_too_large"));
        if (status >= 400 && status < 500) {
          return refuse(new ProtoError("malformed_request", 400, (error as Error).message));
        }
        if (options.log !== false) request.log.error({ err: error }, "proto kit: unexpected error");
        return refuse(kitError("internal_error"));
      });
      for (const route of kit.routes) {
        routes.route({
          method: route.method === "GET" ? ["GET", "HEAD"] : route.method,
          url: route.path,
          bodyLimit: kit.maxBodyBytes,
          handler: async (request, reply) => send(reply, await kit.dispatch(toKitRequest(kit, request))),
        });
      }
    });
  };
  // Like fastify-plugin: the request decoration belongs to the application, not to a child scope.
  (plugin as unknown as Record<symbol, unknown>)[Symbol.for("skip-override")] = true;
  return plugin;
}

/**
 * An `onRequest` hook that admits only a valid bearer access token for `resource` and sets
 * `request.bearer`: it runs before the body is read, so a refused request costs no parsing.
 * Refusals answer in the envelope with the `Bearer` (and, on a 401, `Proto`) challenges.
 */
export function requireBearer(resource: ProtectedResource): onRequestAsyncHookHandler {
  return async function protoRequireBearer(request, reply) {
    const headers = toHeaders(request.headers as Record<string, string | string[] | undefined>);
    try {
      request.bearer = await resource.authenticate({ method: request.method, headers });
    } catch (error) {
      return send(reply, resource.errorResponse(error, { headers }));
    }
  };
}

/** Serves the resource's RFC 9728 metadata at each of its `metadataPaths` (GET, HEAD, CORS preflight). */
export function serveResourceMetadata(app: FastifyInstance, resource: ProtectedResource): void {
  for (const path of resource.metadataPaths) {
    app.route({
      method: ["GET", "HEAD", "OPTIONS"],
      url: path,
      handler: async (request, reply) => {
        const answer = resource.metadataResponse(request.method, path);
        return send(reply, answer ?? errorResponse(kitError("not_found")));
      },
    });
  }
}

export interface McpRouteOptions extends ProtectedResourceOptions {
  /** The methods of the endpoint (default the Streamable HTTP transport's: POST, GET, DELETE). */
  methods?: HTTPMethods[];
  /**
   * Answer browsers' CORS preflights and let pages of any origin read the answers (default true):
   * browser-based MCP clients need it, and a bearer token is no ambient credential.
   */
  cors?: boolean;
}

/**
 * An MCP endpoint protected by the attestors' access tokens, in one call: the resource's metadata
 * (`/.well-known/oauth-protected-resource{path}`, and at the root) and `path` for every method of
 * the transport, guarded by `requireBearer`; the handler reads `request.bearer`. Answers the
 * `ProtectedResource` (its `resource` URL is what clients ask tokens for).
 */
export function mcpRoute(
  app: FastifyInstance,
  kit: Kit,
  options: McpRouteOptions,
  handler: RouteHandlerMethod,
): ProtectedResource {
  const { methods = ["POST", "GET", "DELETE"], cors = true, ...resourceOptions } = options;
  const resource = kit.protectedResource(resourceOptions);
  if (!app.hasRequestDecorator("bearer")) app.decorateRequest("bearer", null);
  serveResourceMetadata(app, resource);
  const corsHeaders = Object.entries(resource.corsHeaders());
  // On the raw response, before the bearer check: every answer carries them, its refusals (a page
  // must read the challenge) and a handler's that hijacks the reply (as MCP transports do).
  const allowOrigins: onRequestAsyncHookHandler = async (_request, reply) => {
    for (const [name, value] of corsHeaders) reply.raw.setHeader(name, value);
  };
  app.route({
    method: methods,
    url: resource.path,
    onRequest: cors ? [allowOrigins, requireBearer(resource)] : requireBearer(resource),
    handler,
  });
  if (cors && !methods.includes("OPTIONS")) {
    app.options(resource.path, async (_request, reply) => send(reply, resource.preflightResponse(methods)));
  }
  return resource;
}
