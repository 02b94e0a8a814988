import fastifyCsrf from "@fastify/csrf-protection";
import fastifyFormbody from "@fastify/formbody";
import type { NonceStore } from "@proto/protocol";
import type { FastifyError, FastifyInstance, FastifyReply } from "fastify";
import type { Clock } from "../../platform/clock.js";
import { ApiError } from "../../platform/errors.js";
import { rateLimitHook, sendError, toApiError } from "../../platform/http.js";
import { clientProblem } from "../../platform/page-errors.js";
import { addressRateLimitKey, type RateLimiter } from "../../platform/rate-limit.js";
import { hashToken, randomToken } from "../../platform/tokens.js";
import type { ServiceDeclarations } from "../authority/service-declarations.js";
import type { KeyRing } from "../keys.js";
import type { TrustService } from "../service.js";
import type { TrustSettings } from "../settings.js";
import { sendConsentPage } from "../web/consent.js";
import { sendMessage } from "../web/layout.js";
import type { SessionManager } from "../web/session.js";
import { FetchRefused } from "./bounded-fetches.js";
import { ClientProblem, type ClientRegistry, type OAuthClient, redirectsOnlyToLoopback } from "./client-registry.js";
import * as consents from "./consents.js";
import { hasActiveGrant } from "./grants.js";
import { OAUTH_PATHS, PHISHING_RESISTANT, providerMetadata } from "./metadata.js";
import { OAuthError } from "./oauth-error.js";
import { parseResource, resourceAudience } from "./resource.js";
import { consentedScope, readableDeclaration, scopeChoices } from "./resource-permissions.js";
import { MAX_SCOPE_TOKENS, parseScope } from "./scope.js";
import { TokenEndpoint, type TokenRequest } from "./token-endpoint.js";

export const CODE_TTL_SECONDS = 120;
const PKCE_CHALLENGE = /^[A-Za-z0-9_-]{43}$/;

export interface OidcProviderDeps {
  service: TrustService;
  sessions: SessionManager;
  keys: KeyRing;
  clock: Clock;
  publicUrl: string;
  production: boolean;
  clients: ClientRegistry;
  /** Services' declared permissions: what a scope means, and a resource's defaults. */
  declarations: ServiceDeclarations;
  jtis: NonceStore;
  limiter: RateLimiter;
  settings: TrustSettings;
}

/** The provider's routes that a person's browser shows: their mistakes are pages. */
const PAGE_ROUTES = new Set(["/oidc/authorize", "/oidc/consent"]);

interface AuthorizeQuery {
  client_id?: unknown;
  redirect_uri?: unknown;
  response_type?: unknown;
  scope?: unknown;
  code_challenge?: unknown;
  code_challenge_method?: unknown;
  state?: unknown;
  nonce?: unknown;
  prompt?: unknown;
  max_age?: unknown;
  acr_values?: unknown;
  resource?: unknown;
}

/** An authorization request that passed every check. */
interface CheckedRequest {
  client: OAuthClient;
  redirectUri: string;
  state: string | undefined;
  codeChallenge: string;
  nonce: string | undefined;
  scope: string;
  /** The scope's tokens, as asked. */
  scopes: string[];
  /** RFC 8707: the resource the access token is for; absent in the id_token-only flow. */
  resource: string | undefined;
}

const shortField = { type: "string", maxLength: 2048 } as const;
/** A scope box of the consent form: `granted.0`, `granted.1`, ... (web/consent.ts). */
const GRANTED_FIELD = /^granted\.[0-9]{1,2}$/;
/** The consent form: the authorization request's fields, the CSRF token and the answer. */
const consentForm = {
  type: "object",
  properties: {
    _csrf: { type: "string", maxLength: 256 },
    decision: { type: "string", enum: ["allow", "deny"] },
    client_id: shortField,
    redirect_uri: shortField,
    response_type: shortField,
    scope: shortField,
    code_challenge: shortField,
    code_challenge_method: shortField,
    state: shortField,
    nonce: shortField,
    resource: shortField,
  },
  // The scopes the person left ticked, one field per box (a form field may not repeat).
  patternProperties: { [GRANTED_FIELD.source]: shortField },
  maxProperties: 16 + MAX_SCOPE_TOKENS,
  required: ["decision"],
} as const;

const registrationBody = { type: "object", maxProperties: 50 } as const;

/** The page of a refusal for too many requests from one address. */
function tooMany(reply: FastifyReply, retryAfterSeconds: number): FastifyReply {
  reply.header("retry-after", String(retryAfterSeconds));
  return sendMessage(reply, 429, "Too many attempts", `Please wait ${retryAfterSeconds} seconds and try again.`);
}

/**
 * The page of a fetch refused by its bounds (an address asking for too many, or every slot busy),
 * naming what could not be looked up.
 */
function refusedPage(reply: FastifyReply, error: FetchRefused, what: string): FastifyReply {
  if (error.status === 429) return tooMany(reply, error.retryAfterSeconds);
  reply.header("retry-after", String(error.retryAfterSeconds));
  return sendMessage(
    reply,
    503,
    "Temporarily unavailable",
    `${what} could not be looked up right now. Try again in ${error.retryAfterSeconds} seconds.`,
  );
}

/** A single string parameter; a repeated one (an array) is not one. */
const single = (value: unknown): string | undefined => (typeof value === "string" ? value : undefined);

/** The OpenID provider of spec `trust.md`, and the OAuth authorization server of MCP clients. */
export async function oidcProvider(app: FastifyInstance, deps: OidcProviderDeps): Promise<void> {
  const { service, sessions, clock, publicUrl, clients } = deps;
  const db = service.database.db;
  const metadata = JSON.stringify(providerMetadata(publicUrl));
  const tokens = new TokenEndpoint({
    service,
    keys: deps.keys,
    clock,
    publicUrl,
    production: deps.production,
    clients,
    declarations: deps.declarations,
    jtis: deps.jtis,
    limiter: deps.limiter,
    settings: deps.settings,
  });
  // Token requests are form-encoded (RFC 6749 §4.1.3), which is what relying-party libraries send;
  // the human pages' form parser lives in their own scope, so this scope needs its own.
  await app.register(fastifyFormbody, { bodyLimit: 64 * 1024 });
  // The consent form is protected like the pages' forms (web/plugin.ts): the same secret cookie,
  // so a token made by either scope is valid in the other.
  await app.register(fastifyCsrf, {
    cookieKey: sessions.csrfCookieName,
    cookieOpts: { path: "/", sameSite: "lax", httpOnly: true, secure: sessions.secure, signed: false },
    getToken: (request) => (request.body as { _csrf?: string } | undefined)?._csrf,
  });

  // One document, two names: OpenID discovery, and RFC 8414 metadata that MCP clients look for.
  // Read endpoints like the key set, so under the same per-address read limit (the contract's
  // "all other read endpoints").
  const readLimit = rateLimitHook(deps.limiter, deps.settings.rateLimits.read);
  for (const path of ["/.well-known/openid-configuration", "/.well-known/oauth-authorization-server"]) {
    app.get(path, { onRequest: readLimit }, async (_request, reply) =>
      reply
        .header("cache-control", "public, max-age=300")
        .header("access-control-allow-origin", "*")
        .type("application/json; charset=utf-8")
        .send(metadata),
    );
  }

  // Browser-based clients (MCP inspectors, web apps) call the token and registration endpoints
  // from their own origin; neither reads cookies, so any origin may.
  for (const path of [OAUTH_PATHS.token, OAUTH_PATHS.registration]) {
    app.options(path, async (_request, reply) =>
      reply
        .code(204)
        .header("access-control-allow-origin", "*")
        .header("access-control-allow-methods", "POST")
        .header("access-control-allow-headers", "content-type, authorization, mcp-protocol-version")
        .header("access-control-max-age", "600")
        .send(),
    );
  }

  // OAuth endpoints (`/oidc/*`) answer with OAuth error JSON, never the service envelope; the
  // authorization endpoint is a page in a browser, whose mistakes are pages like its own refusals.
  // The discovery document is no OAuth endpoint: the envelope.
  app.setErrorHandler((error: FastifyError, request, reply) => {
    reply.header("cache-control", "no-store");
    if (!request.routeOptions.url?.startsWith("/oidc/")) {
      const apiError = app.outageError(error) ?? toApiError(error);
      if (apiError.status >= 500) request.log.error({ err: error }, "request failed");
      return sendError(reply, apiError);
    }
    reply.header("access-control-allow-origin", "*");
    if (error instanceof OAuthError) {
      return reply
        .code(error.status)
        .headers(error.headers)
        .send({ error: error.error, error_description: error.description });
    }
    const outage = app.outageError(error);
    if (outage !== undefined) {
      return reply
        .code(503)
        .header("retry-after", String(outage.retryAfterSeconds))
        .send({ error: "temporarily_unavailable", error_description: outage.message });
    }
    const problem = clientProblem(error);
    if (problem !== undefined && PAGE_ROUTES.has(request.routeOptions.url ?? "")) {
      return sendMessage(reply, problem.status, problem.title, problem.message);
    }
    if (problem !== undefined) {
      const description = error instanceof ApiError ? error.message : "the request could not be read";
      return reply.code(400).send({ error: "invalid_request", error_description: description });
    }
    request.log.error({ err: error }, "oidc request failed");
    return reply.code(500).send({ error: "server_error", error_description: "an unexpected error occurred" });
  });

  /** Back to the client; RFC 9207: every authorization response names the issuer. */
  function redirectWith(reply: FastifyReply, redirectUri: string, params: Record<string, string | undefined>) {
    const url = new URL(redirectUri);
    for (const [key, value] of Object.entries(params)) if (value !== undefined) url.searchParams.set(key, value);
    url.searchParams.set("iss", publicUrl);
    return reply.header("cache-control", "no-store").redirect(url.href, 302);
  }

  /**
   * Checks an authorization request. A request that names no known client and redirect URI is
   * answered with a page (there is nowhere safe to send it); any other mistake goes back to the
   * client as an OAuth error.
   */
  async function checkRequest(
    q: AuthorizeQuery,
    address: string,
    reply: FastifyReply,
  ): Promise<CheckedRequest | FastifyReply> {
    const clientId = single(q.client_id);
    let client: OAuthClient | undefined;
    try {
      client = clientId === undefined || clientId.length > 2048 ? undefined : await clients.find(clientId, address);
    } catch (error) {
      if (error instanceof FetchRefused) return refusedPage(reply, error, "The application");
      if (!(error instanceof ClientProblem)) throw error;
      return sendMessage(
        reply,
        400,
        "Unknown application",
        `The application could not be identified: ${error.message}.`,
      );
    }
    if (client === undefined) {
      return sendMessage(reply, 400, "Unknown application", "The application that sent you here is not registered.");
    }
    const redirectUri = single(q.redirect_uri);
    // Exact string comparison (OAuth 2.1 §2.3.1): one character off is another address.
    if (redirectUri === undefined || !client.redirect_uris.includes(redirectUri)) {
      return sendMessage(
        reply,
        400,
        "Invalid redirect",
        "The application asked to return to an address it has not registered.",
      );
    }
    const rawState = single(q.state);
    const state = rawState !== undefined && rawState.length <= 1024 ? rawState : undefined;
    const fail = (error: string, description: string) =>
      redirectWith(reply, redirectUri, { error, error_description: description, state });
    if (single(q.response_type) !== "code") return fail("unsupported_response_type", "response_type must be code");
    const scope = parseScope(single(q.scope) ?? "");
    if (scope === undefined) return fail("invalid_scope", "scope is malformed");
    let resource: string | undefined;
    if (q.resource !== undefined) {
      resource = parseResource(single(q.resource), deps.production);
      if (resource === undefined) {
        return fail("invalid_target", "resource must be one absolute https URI without a fragment");
      }
    }
    // Without `openid` this is a plain OAuth request, for an access token to a resource (MCP).
    if (!scope.includes("openid") && resource === undefined) {
      return fail("invalid_target", "resource is required (RFC 8707), or scope must include openid");
    }
    if (single(q.code_challenge_method) !== "S256") {
      return fail("invalid_request", "PKCE with code_challenge_method S256 is required");
    }
    const codeChallenge = single(q.code_challenge);
    if (codeChallenge === undefined || !PKCE_CHALLENGE.test(codeChallenge)) {
      return fail("invalid_request", "code_challenge must be a S256 PKCE challenge");
    }
    const nonce = single(q.nonce);
    if (q.nonce !== undefined && (nonce === undefined || nonce.length > 1024)) {
      return fail("invalid_request", "nonce is too long");
    }
    return { client, redirectUri, state, codeChallenge, nonce, scope: scope.join(" "), scopes: scope, resource };
  }

  /** Issues a code for the signed-in person and sends the browser back to the client with it. */
  async function issueCode(
    reply: FastifyReply,
    checked: CheckedRequest,
    session: { humanId: string; authAt: number; authMethod: string },
  ) {
    const code = randomToken("", 32);
    const now = clock.now();
    await db
      .insertInto("trust_oidc_codes")
      .values({
        code_hash: hashToken(code),
        client_id: checked.client.client_id,
        redirect_uri: checked.redirectUri,
        code_challenge: checked.codeChallenge,
        nonce: checked.nonce ?? null,
        human_id: session.humanId,
        auth_at: session.authAt,
        auth_method: session.authMethod,
        scope: checked.scope,
        resource: checked.resource ?? null,
        created_at: now,
        expires_at: now + CODE_TTL_SECONDS * 1000,
        used_at: null,
        grant_id: null,
      })
      .execute();
    return redirectWith(reply, checked.redirectUri, { code, state: checked.state });
  }

  /** The request's own parameters, carried through the consent form unchanged. */
  function carried(checked: CheckedRequest): Record<string, string> {
    const fields: Record<string, string | undefined> = {
      client_id: checked.client.client_id,
      redirect_uri: checked.redirectUri,
      response_type: "code",
      scope: checked.scope,
      code_challenge: checked.codeChallenge,
      code_challenge_method: "S256",
      state: checked.state,
      nonce: checked.nonce,
      resource: checked.resource,
    };
    return Object.fromEntries(Object.entries(fields).filter((e): e is [string, string] => e[1] !== undefined));
  }

  /**
   * Whether the person already allowed this: the client (id_token flow), or the client for the
   * resource with every scope now asked for (a wider request asks again: consent never widens).
   */
  function allowedBefore(humanId: string, checked: CheckedRequest): Promise<boolean> {
    if (checked.resource === undefined) return consents.hasConsent(db, humanId, checked.client.client_id);
    return hasActiveGrant(db, humanId, checked.client.client_id, checked.resource, checked.scopes, clock.now());
  }

  app.get<{ Querystring: AuthorizeQuery }>(OAUTH_PATHS.authorization, async (request, reply) => {
    const limit = await deps.limiter.hit(deps.settings.rateLimits.oauthAuthorize, addressRateLimitKey(request.ip));
    if (!limit.allowed) return tooMany(reply, limit.retryAfterSeconds);
    const q = request.query;
    const checked = await checkRequest(q, request.ip, reply);
    if (!("client" in checked)) return checked;
    const fail = (error: string, description: string) =>
      redirectWith(reply, checked.redirectUri, { error, error_description: description, state: checked.state });
    const session = await sessions.current(request);
    const maxAgeValue = single(q.max_age);
    const maxAge = maxAgeValue === undefined ? undefined : Number(maxAgeValue);
    const stale =
      session !== undefined &&
      maxAge !== undefined &&
      Number.isFinite(maxAge) &&
      clock.now() - session.authAt > maxAge * 1000;
    const prompts = single(q.prompt)?.split(" ") ?? [];
    // A client that asks for a phishing-resistant sign-in gets one: a person signed in otherwise
    // is asked for their passkey (and stays signed in meanwhile).
    const wantsPasskey = single(q.acr_values)?.split(" ").includes(PHISHING_RESISTANT) ?? false;
    const unmet = session !== undefined && wantsPasskey && session.authMethod !== "passkey";
    if (session === undefined || stale || prompts.includes("login") || unmet) {
      if (prompts.includes("none")) {
        return unmet && !stale
          ? fail("interaction_required", "the person must sign in with a passkey")
          : fail("login_required", "the person is not signed in");
      }
      // Resume here after sign-in; `prompt=login` is dropped so the fresh session is accepted.
      const resume = new URLSearchParams(carried(checked));
      for (const name of ["max_age", "acr_values"] as const) {
        const value = single(q[name]);
        if (value !== undefined) resume.set(name, value);
      }
      if (session !== undefined && !unmet) await sessions.signOut(request, reply);
      const next = encodeURIComponent(`${OAUTH_PATHS.authorization}?${resume.toString()}`);
      return reply.redirect(`/signin?next=${next}${wantsPasskey ? "&passkey=required" : ""}`, 303);
    }
    if (!prompts.includes("consent") && (await allowedBefore(session.humanId, checked))) {
      if (checked.resource === undefined) {
        await consents.touchConsent(db, session.humanId, checked.client.client_id, clock.now());
      }
      return issueCode(reply, checked, session);
    }
    if (prompts.includes("none")) return fail("consent_required", "the person has not allowed this client yet");
    let scopes: ReturnType<typeof scopeChoices> | undefined;
    if (checked.resource !== undefined) {
      try {
        const declaration = await readableDeclaration(deps.declarations, checked.resource, request.ip);
        scopes = scopeChoices(checked.scopes, declaration, session.authMethod === "passkey");
      } catch (error) {
        if (error instanceof FetchRefused) return refusedPage(reply, error, "The service's permissions");
        throw error;
      }
    }
    const audience =
      checked.resource === undefined
        ? (checked.client.service_did ?? checked.client.client_id)
        : resourceAudience(checked.resource);
    return sendConsentPage(reply, {
      csrf: reply.generateCsrf(),
      client: {
        name: checked.client.client_name,
        id: checked.client.client_id,
        serviceDid: checked.client.service_did,
        registered: checked.client.source === "registered",
        loopbackOnly: redirectsOnlyToLoopback(checked.client),
      },
      resource: checked.resource,
      scopes,
      // Back to this very request once signed in with a passkey, as for `acr_values` above.
      passkeySignIn: `/signin?next=${encodeURIComponent(`${OAUTH_PATHS.authorization}?${new URLSearchParams(carried(checked))}`)}&passkey=required`,
      pseudonym: service.pseudonym(session.humanId, audience),
      redirectUri: checked.redirectUri,
      request: carried(checked),
    });
  });

  // The consent page's answer. The request is checked again (the form is the person's browser
  // talking, and a registered redirect URI is the only place an answer may go).
  app.post<{ Body: AuthorizeQuery & { decision?: string } & Record<string, unknown> }>(
    OAUTH_PATHS.consent,
    {
      schema: { body: consentForm, consumes: ["application/x-www-form-urlencoded"] },
      preHandler: app.csrfProtection,
    },
    async (request, reply) => {
      const checked = await checkRequest(request.body, request.ip, reply);
      if (!("client" in checked)) return checked;
      const session = await sessions.current(request);
      if (session === undefined) {
        const resume = new URLSearchParams(carried(checked));
        return reply.redirect(
          `/signin?next=${encodeURIComponent(`${OAUTH_PATHS.authorization}?${resume.toString()}`)}`,
          303,
        );
      }
      if (request.body.decision !== "allow") {
        // RFC 6749 §4.1.2.1: the resource owner denied the request.
        return redirectWith(reply, checked.redirectUri, {
          error: "access_denied",
          error_description: "the person did not allow the sign-in",
          state: checked.state,
        });
      }
      // An access request's consent is the grant made when its code is redeemed (listed and
      // revocable on the account page), of the scopes the person left ticked; a sign-in's is
      // remembered per client.
      if (checked.resource !== undefined) {
        let declaration: Awaited<ReturnType<typeof readableDeclaration>>;
        try {
          declaration = await readableDeclaration(deps.declarations, checked.resource, request.ip);
        } catch (error) {
          if (error instanceof FetchRefused) return refusedPage(reply, error, "The service's permissions");
          throw error;
        }
        const ticked = Object.entries(request.body)
          .filter(([name, value]) => GRANTED_FIELD.test(name) && typeof value === "string")
          .map(([, value]) => value as string);
        const scope = consentedScope(checked.scopes, ticked, declaration, session.authMethod === "passkey").join(" ");
        return issueCode(reply, { ...checked, scope }, session);
      }
      await consents.grantConsent(
        db,
        session.humanId,
        checked.client.client_id,
        checked.client.service_did ?? checked.client.client_id,
        clock.now(),
      );
      return issueCode(reply, checked, session);
    },
  );

  app.post<{ Body: TokenRequest }>(OAUTH_PATHS.token, async (request, reply) => {
    reply.header("cache-control", "no-store").header("pragma", "no-cache").header("access-control-allow-origin", "*");
    const body = (typeof request.body === "object" && request.body !== null ? request.body : {}) as TokenRequest;
    return tokens.exchange(body, request.ip);
  });

  app.get(OAUTH_PATHS.token, async (_request, reply) =>
    reply.code(405).header("allow", "POST").send({ error: "invalid_request", error_description: "use POST" }),
  );

  // RFC 7591 dynamic registration: public clients only, limited per address.
  app.post<{ Body: Record<string, unknown> }>(
    OAUTH_PATHS.registration,
    { schema: { body: registrationBody }, bodyLimit: 16 * 1024 },
    async (request, reply) => {
      reply.header("cache-control", "no-store").header("access-control-allow-origin", "*");
      const decision = await deps.limiter.hit(deps.settings.rateLimits.oauthRegister, addressRateLimitKey(request.ip));
      if (!decision.allowed) {
        throw new OAuthError("slow_down", "too many registrations from this address", 429, {
          "retry-after": String(decision.retryAfterSeconds),
        });
      }
      let registered: Awaited<ReturnType<ClientRegistry["register"]>>;
      try {
        registered = await clients.register(request.body ?? {});
      } catch (error) {
        if (!(error instanceof ClientProblem)) throw error;
        const code = /redirect/i.test(error.message) ? "invalid_redirect_uri" : "invalid_client_metadata";
        throw new OAuthError(code, error.message);
      }
      return reply.code(201).send({
        client_id: registered.client_id,
        client_id_issued_at: registered.issuedAt,
        client_name: registered.client_name,
        redirect_uris: registered.redirect_uris,
        token_endpoint_auth_method: "none",
        grant_types: ["authorization_code", "refresh_token"],
        response_types: ["code"],
      });
    },
  );
}
