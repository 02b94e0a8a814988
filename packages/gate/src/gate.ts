/**
 * The gate: a node:http server that answers the kit's own endpoints itself, verifies every agent
 * request with the kit (no second implementation of any check), and forwards what passes to the
 * one upstream application with the caller as `Proto-Gate-*` headers.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import proxyAddr from "@fastify/proxy-addr";
import {
  type AgentContext,
  type BearerContext,
  checkGuardOptions,
  createKit,
  type GuardOutcome,
  guardRequest,
  type Kit,
  type KitRequest,
  type KitResponse,
  type KitWebBotAuthOptions,
  type ProtectedResource,
  protoClientErrors,
  type RequireAgentOptions,
  toHeaders,
} from "@proto/kit";
import { attemptedProtocol, type NonceStore, ProtoError, protoError } from "@proto/protocol";
import type pino from "pino";
import type { GateConfig, GateRoute } from "./config-types.js";
import { errorAnswer, gateErrors } from "./errors.js";
import { type Identity, identityHeaders, signIdentity, stripIdentity } from "./identity.js";
import { matchRoute, underPrefix } from "./routes.js";
import { endToEnd, Upstream } from "./upstream.js";

/** Where a proxy in forward-auth mode asks about a request (`mode: auth`). */
export const AUTH_PATH = "/.proto-gate/auth";

/** What the gate decided about a request: forward it as `identity`, or answer `answer`. */
type Decision =
  | { answer: KitResponse }
  | { identity: Identity; body: Buffer | undefined | IncomingMessage; bearer: boolean };

/** Whether a request says it carries a body (the headers are all a forward-auth check sees). */
function declaresBody(headers: Headers): boolean {
  const length = headers.get("content-length");
  return (
    headers.has("transfer-encoding") || headers.has("content-digest") || (length !== null && length.trim() !== "0")
  );
}

/** Bodies of the kit's own endpoints (signup, invitations, claims): small JSON and forms. */
const KIT_ROUTE_BODY_BYTES = 64 * 1024;

export interface GateOptions {
  logger: pino.Logger;
  /** Replay store shared by replicas (RedisNonceStore); default in memory. */
  nonceStore?: NonceStore;
  /** Milliseconds since the epoch (tests move it). */
  now?: () => number;
  /** For the kit's fetches of attestor key sets and OpenID configuration (tests: a fetch trusting a test CA). */
  fetch?: typeof fetch;
  /**
   * How Web Bot Auth key directories are found (the kit's option): by default the SSRF-safe fetch,
   * public addresses only; tests and private networks name what else it may reach.
   */
  webBotAuth?: KitWebBotAuthOptions;
  /** Serve HTTPS itself (no TLS proxy in front): the certificate chain and key, PEM. */
  tls?: { cert: string; key: string };
}

export interface Gate {
  readonly server: Server;
  readonly kit: Kit;
  /** Stops taking requests, lets those in flight finish, then closes the store and connections. */
  close(): Promise<void>;
}

export async function createGate(config: GateConfig, options: GateOptions): Promise<Gate> {
  const kit = await createKit({
    publicUrl: config.service.publicUrl,
    allowHttp: config.service.allowHttp,
    ...(config.service.name === undefined ? {} : { serviceName: config.service.name }),
    database: config.store.database,
    permissions: config.permissions,
    discovery: {
      service_did: config.service.did,
      recipient_types: config.service.recipientTypes,
      billing: {
        unclaimed_mode: config.service.unclaimedMode,
        accepted_attestors: Object.keys(config.attestors),
      },
      features: ["attestation", "key_rotation"],
    },
    attestors: Object.fromEntries(
      Object.entries(config.attestors).map(([name, attestor]) => [
        name,
        { url: attestor.url, ...(attestor.displayName === undefined ? {} : { displayName: attestor.displayName }) },
      ]),
    ),
    maxBodyBytes: config.limits.maxBodyBytes,
    ...(config.mail === undefined ? {} : { mail: { smtpUrl: config.mail.smtpUrl, from: config.mail.from } }),
    ...(options.nonceStore === undefined ? {} : { nonceStore: options.nonceStore }),
    ...(options.now === undefined ? {} : { now: options.now }),
    ...(options.fetch === undefined ? {} : { fetch: options.fetch }),
    ...(options.webBotAuth === undefined ? {} : { webBotAuth: options.webBotAuth }),
    onError: (error) => options.logger.error({ err: error }, "unexpected error"),
  });
  const resources = config.mcp.map((entry) => ({
    path: entry.path,
    resource: kit.protectedResource({ path: entry.path, scopes: entry.scopes }),
  }));
  const upstream = new Upstream(config.upstream);
  const trust = proxyAddr.compile(config.trustedProxies);
  let closing = false;

  const handler = new GateHandler(config, kit, resources, upstream, options, (request) => proxyAddr(request, trust));
  const listener = (request: IncomingMessage, response: ServerResponse) => {
    if (closing) return send(response, errorAnswer(gateErrors.shuttingDown()));
    handler.handle(request, response).catch((error: unknown) => {
      options.logger.error({ err: error }, "request failed");
      if (!response.headersSent)
        send(response, errorAnswer(new ProtoError("internal_error", 500, "an unexpected error occurred")));
      else response.destroy();
    });
  };
  const server: Server =
    options.tls === undefined
      ? createServer({ requireHostHeader: false }, listener)
      : createHttpsServer({ requireHostHeader: false, ...options.tls }, listener);
  protoClientErrors(server);
  // WebSocket and other upgrades are not forwarded (yet): refused in the envelope, not dropped.
  server.on("upgrade", (_request: IncomingMessage, socket) => {
    const { body } = errorAnswer(gateErrors.upgradeRefused());
    socket.end(
      `HTTP/1.1 400 Bad Request\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
    );
  });

  return {
    server,
    kit,
    async close() {
      closing = true;
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      });
      upstream.close();
      await kit.close();
    },
  };
}

interface MountedResource {
  path: string;
  resource: ProtectedResource;
}

function send(
  response: ServerResponse,
  answer: { status: number; headers: Record<string, string | string[]>; body: string | undefined },
): void {
  const body = answer.body ?? "";
  response.writeHead(answer.status, { ...answer.headers, "content-length": Buffer.byteLength(body) });
  response.end(body);
}

/** Reads the whole body, at most `max` bytes (413 beyond, declared or sent). */
function readBody(request: IncomingMessage, max: number): Promise<Buffer | undefined> {
  const declared = Number(request.headers["content-length"] ?? "0");
  if (Number.isFinite(declared) && declared > max) return Promise.reject(gateErrors.bodyTooLarge(max));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let total = 0;
    request.on("data", (chunk: Buffer) => {
      total += chunk.length;
      if (total > max) {
        request.removeAllListeners("data");
        request.resume();
        reject(gateErrors.bodyTooLarge(max));
        return;
      }
      chunks.push(chunk);
    });
    request.on("end", () => resolve(total === 0 ? undefined : Buffer.concat(chunks, total)));
    request.on("error", () => reject(gateErrors.bodyUnreadable()));
  });
}

class GateHandler {
  /** Each route's guard options, checked once at start (an undeclared permission fails here). */
  readonly #guards = new Map<GateRoute, RequireAgentOptions>();
  /** `X-Forwarded-Proto` and `-Host`: the public URL's, the same for every request. */
  readonly #publicProto: string;
  readonly #publicHost: string;

  constructor(
    readonly config: GateConfig,
    readonly kit: Kit,
    readonly resources: MountedResource[],
    readonly upstream: Upstream,
    readonly options: GateOptions,
    readonly clientIp: (request: IncomingMessage) => string,
  ) {
    const publicUrl = new URL(kit.origin);
    this.#publicProto = publicUrl.protocol.slice(0, -1);
    this.#publicHost = publicUrl.host;
    for (const route of config.routes) {
      this.#guards.set(route, checkGuardOptions(kit, guardOptions(route), `routes (line ${route.line})`));
    }
  }

  async handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    // Before anything reads them: only the gate speaks in this family.
    stripIdentity(request.headers);
    const target = request.url ?? "/";
    const method = (request.method ?? "GET").toUpperCase();
    const url = new URL(target, this.kit.origin);
    const path = url.pathname;
    const headers = toHeaders(request.headers as Record<string, string | string[] | undefined>);

    if (this.config.mode === "auth" && path === AUTH_PATH) return this.#authCheck(request, response, headers);
    if (this.kit.hasRoute(method, path)) return this.#kitRoute(request, response, method, target, url, headers);
    for (const { resource } of this.resources) {
      const metadata = resource.metadataResponse(method, path);
      if (metadata !== undefined) return send(response, metadata);
    }
    // In forward-auth mode the proxy sends the gate only its own endpoints and the checks.
    if (this.config.mode === "auth") return send(response, errorAnswer(gateErrors.notRouted()));
    const decision = await this.#decide(method, target, url, headers, request, true);
    if ("answer" in decision) return send(response, decision.answer);
    if (decision.bearer) request.headers.authorization = undefined;
    return this.#forward(request, response, method, target, decision.identity, decision.body);
  }

  /**
   * Who the caller of `METHOD target` is, or the answer that refuses it: the MCP paths' bearer
   * check, else the first route's access rule and the kit's guard. `streamable`: the body may be
   * left unread for the application (proxy mode) when nothing needs it verified.
   */
  async #decide(
    method: string,
    target: string,
    url: URL,
    headers: Headers,
    request: IncomingMessage,
    streamable: boolean,
  ): Promise<Decision> {
    const path = url.pathname;
    const mcp = this.resources.find((entry) => underPrefix(path, entry.path));
    if (mcp !== undefined) {
      try {
        const caller = await mcp.resource.authenticate({ method, headers });
        // The token is addressed to the gate's resource: the application is not its audience, and an
        // MCP server must not receive a token passed through (MCP authorization, "token passthrough").
        return { identity: this.#bearerIdentity(caller), body: request, bearer: true };
      } catch (error) {
        return { answer: mcp.resource.errorResponse(error, { headers }) };
      }
    }
    const route = matchRoute(this.config.routes, method, path);
    if (route === undefined) return { answer: errorAnswer(gateErrors.notRouted()) };
    if (route.access === "open" || (route.access === "optional" && !attemptedProtocol(headers))) {
      return { identity: { caller: "anonymous", via: "none" }, body: request, bearer: false };
    }
    let body: Buffer | undefined;
    if (streamable) {
      try {
        body = await readBody(request, this.config.limits.maxBodyBytes);
      } catch (error) {
        return { answer: this.#refusal(error, headers) };
      }
    } else if (declaresBody(headers)) {
      return { answer: this.kit.errorResponse(gateErrors.bodyUnverifiable(), { headers }) };
    }
    const kitRequest: KitRequest = { method, url, target, headers, body, clientAddress: this.clientIp(request) };
    const outcome = await guardRequest(
      this.kit,
      headers,
      `${method} ${route.path}`,
      this.#guards.get(route) ?? {},
      () => kitRequest,
    );
    if (!outcome.pass) return { answer: outcome.response };
    if (route.access === "attested" && outcome.proto?.attestation === undefined) {
      const refusal = protoError("attestation_required", {
        details: { accepted_attestors: Object.keys(this.config.attestors) },
      });
      return { answer: this.kit.errorResponse(refusal, { headers }) };
    }
    return { identity: this.#identity(outcome), body, bearer: false };
  }

  /**
   * Forward-auth (`mode: auth`): nginx `auth_request`, Caddy `forward_auth` and Traefik
   * `forwardAuth` ask here about a request they hold, naming its method and request-target in
   * `X-Forwarded-Method`/`X-Forwarded-Uri` (Caddy, Traefik) or `X-Original-Method`/`X-Original-URI`
   * (nginx, set in its recipe). The answer is 200 with the identity headers for the proxy to copy
   * onto the request, or the refusal the agent must see. None of these proxies passes the body, so
   * a request that has one cannot be verified: 403 `gate_body_unverifiable`.
   */
  async #authCheck(request: IncomingMessage, response: ServerResponse, headers: Headers): Promise<void> {
    const method = (headers.get("x-forwarded-method") ?? headers.get("x-original-method") ?? "").toUpperCase();
    const target = headers.get("x-forwarded-uri") ?? headers.get("x-original-uri") ?? "";
    if (!/^[A-Z]{1,20}$/.test(method) || !target.startsWith("/")) {
      return send(response, errorAnswer(gateErrors.authCheckIncomplete()));
    }
    const url = new URL(target, this.kit.origin);
    // The check's own request has no body; the original's is declared by its headers, copied here.
    request.resume();
    const decision = await this.#decide(method, target, url, headers, request, false);
    if ("answer" in decision) return send(response, decision.answer);
    const added = identityHeaders(decision.identity);
    if (this.config.identitySecret !== undefined) {
      added["proto-gate-signature"] = signIdentity(
        this.config.identitySecret,
        method,
        target,
        added,
        this.#nowSeconds(),
      );
    }
    send(response, { status: 200, headers: { ...added, "cache-control": "no-store" }, body: "" });
  }

  #nowSeconds(): number {
    return Math.floor((this.options.now?.() ?? Date.now()) / 1000);
  }

  async #kitRoute(
    request: IncomingMessage,
    response: ServerResponse,
    method: string,
    target: string,
    url: URL,
    headers: Headers,
  ): Promise<void> {
    let body: Buffer | undefined;
    try {
      body = await readBody(request, KIT_ROUTE_BODY_BYTES);
    } catch (error) {
      return send(response, this.kit.routeErrorResponse(method, url.pathname, error, { headers }));
    }
    send(
      response,
      await this.kit.dispatch({ method, url, target, headers, body, clientAddress: this.clientIp(request) }),
    );
  }

  #identity(outcome: Extract<GuardOutcome, { pass: true }>): Identity {
    const agent: AgentContext | null = outcome.proto;
    if (agent !== null) {
      const attestation = agent.attestation;
      const webBotAuth = agent.signedAgent !== undefined;
      return {
        caller: "agent",
        via: `${webBotAuth ? "web-bot-auth" : "signature"}${attestation === undefined ? "" : "+attestation"}`,
        account: agent.account.account_id,
        accountState: agent.account.state,
        agentDid: agent.did,
        ownerSubject: agent.account.owner?.user_id ?? undefined,
        attestor: attestation?.canonicalIssuer,
        personSubject: attestation?.subH,
        verification: attestation?.verification,
        permissions: this.kit.heldPermissions(agent).join(" "),
        grant: attestation?.grant?.id,
        signatureAgent: agent.signedAgent?.signatureAgent,
      };
    }
    if (outcome.signedAgent !== null) {
      return {
        caller: "signed-agent",
        via: "web-bot-auth",
        agentDid: outcome.signedAgent.did,
        signatureAgent: outcome.signedAgent.signatureAgent,
      };
    }
    return { caller: "anonymous", via: "none", permissions: this.kit.heldPermissions(null).join(" ") };
  }

  #bearerIdentity(caller: BearerContext): Identity {
    const common = {
      via: "bearer",
      attestor: caller.issuer,
      personSubject: caller.subject,
      permissions: caller.scopes.join(" "),
    };
    if (caller.kind === "person") return { caller: "person", ...common };
    return {
      caller: "agent",
      ...common,
      account: caller.account.account_id,
      accountState: caller.account.state,
      agentDid: caller.agentDid,
      ownerSubject: caller.account.owner?.user_id ?? undefined,
      grant: caller.grant?.id,
    };
  }

  #refusal(error: unknown, headers: Headers): KitResponse {
    if (error instanceof ProtoError) return errorAnswer(error);
    return this.kit.errorResponse(error, { headers });
  }

  #forward(
    request: IncomingMessage,
    response: ServerResponse,
    method: string,
    target: string,
    identity: Identity,
    body: Buffer | undefined | IncomingMessage,
  ): void {
    const headers = endToEnd(request.headers);
    const added = identityHeaders(identity);
    Object.assign(headers, added);
    if (this.config.identitySecret !== undefined) {
      headers["proto-gate-signature"] = signIdentity(
        this.config.identitySecret,
        method,
        target,
        added,
        this.#nowSeconds(),
      );
    }
    // The client as the trusted proxies name it, alone: what it wrote itself is not passed on.
    headers["x-forwarded-for"] = this.clientIp(request);
    headers["x-forwarded-proto"] = this.#publicProto;
    headers["x-forwarded-host"] = this.#publicHost;
    if (Buffer.isBuffer(body) || body === undefined) {
      delete headers["content-length"];
      if (body !== undefined) headers["content-length"] = String(body.length);
    }
    const started = performance.now();
    response.on("finish", () => {
      this.options.logger.info(
        {
          method,
          path: target.split("?", 1)[0],
          status: response.statusCode,
          account: identity.account,
          caller: identity.caller,
          ms: Math.round((performance.now() - started) * 10) / 10,
        },
        "forwarded",
      );
    });
    this.upstream.forward({ method, target, headers, body }, response, (error) =>
      this.options.logger.warn(
        { err: { message: error.message, code: (error as NodeJS.ErrnoException).code } },
        "upstream failed",
      ),
    );
  }
}

function guardOptions(route: GateRoute): RequireAgentOptions {
  return {
    optional: route.access === "optional",
    ...(route.signedAgents === undefined ? {} : { signedAgents: route.signedAgents }),
    ...(route.permissions.length === 0 ? {} : { permissions: route.permissions }),
  };
}
