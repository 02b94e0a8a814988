import { createHash, timingSafeEqual } from "node:crypto";
import fastifyCsrf from "@fastify/csrf-protection";
import fastifyFormbody from "@fastify/formbody";
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { SignJWT } from "jose";
import type { Clock } from "../../platform/clock.js";
import { ApiError } from "../../platform/errors.js";
import { sendError, toApiError } from "../../platform/http.js";
import { clientProblem } from "../../platform/page-errors.js";
import { hashToken, randomToken } from "../../platform/tokens.js";
import type { KeyRing } from "../keys.js";
import type { TrustService } from "../service.js";
import { sendConsentPage } from "../web/consent.js";
import { sendMessage } from "../web/layout.js";
import type { SessionManager } from "../web/session.js";
import type { OidcClient } from "./clients.js";
import * as consents from "./consents.js";

export const CODE_TTL_SECONDS = 120;
export const ID_TOKEN_TTL_SECONDS = 300;
const PKCE_CHALLENGE = /^[A-Za-z0-9_-]{43}$/;
const PKCE_VERIFIER = /^[A-Za-z0-9\-._~]{43,128}$/;

export interface OidcProviderDeps {
  service: TrustService;
  sessions: SessionManager;
  keys: KeyRing;
  clock: Clock;
  publicUrl: string;
  clients: OidcClient[];
}

/** The `acr` of a session whose person signed in with a passkey (upstream proposal 0001). */
export const PHISHING_RESISTANT = "phishing-resistant";

/**
 * How the person signed in, as the id_token's `amr` (RFC 8176 where it has a value: a passkey is
 * a hardware-bound key used after user verification) and `acr` when that is phishing-resistant.
 */
export function authenticationClaims(method: string | null): { amr?: string[]; acr?: string } {
  if (method === "passkey") return { amr: ["hwk", "user"], acr: PHISHING_RESISTANT };
  if (method === null) return {};
  return { amr: [method] };
}

export function openidConfiguration(trustUrl: string) {
  return {
    issuer: trustUrl,
    authorization_endpoint: `${trustUrl}/oidc/authorize`,
    token_endpoint: `${trustUrl}/oidc/token`,
    jwks_uri: `${trustUrl}/.well-known/jwks.json`,
    scopes_supported: ["openid"],
    response_types_supported: ["code"],
    grant_types_supported: ["authorization_code"],
    subject_types_supported: ["pairwise"],
    id_token_signing_alg_values_supported: ["EdDSA"],
    code_challenge_methods_supported: ["S256"],
    token_endpoint_auth_methods_supported: ["none"],
    claims_supported: ["iss", "sub", "aud", "exp", "iat", "nonce"],
    acr_values_supported: [PHISHING_RESISTANT],
  };
}

/** The provider's routes that a person's browser shows: their mistakes are pages. */
const PAGE_ROUTES = new Set(["/oidc/authorize", "/oidc/consent"]);

class OAuthError extends Error {
  constructor(
    readonly error: string,
    readonly description: string,
    readonly status = 400,
  ) {
    super(description);
  }
}

interface AuthorizeQuery {
  client_id?: string;
  redirect_uri?: string;
  response_type?: string;
  scope?: string;
  code_challenge?: string;
  code_challenge_method?: string;
  state?: string;
  nonce?: string;
  prompt?: string;
  max_age?: string;
  acr_values?: string;
}

/** An authorization request that passed every check. */
interface CheckedRequest {
  client: OidcClient;
  redirectUri: string;
  state: string | undefined;
  codeChallenge: string;
  nonce: string | undefined;
  scope: string;
}

const shortField = { type: "string", maxLength: 2048 } as const;
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
  },
  required: ["decision"],
} as const;

type TokenBody = Partial<Record<"grant_type" | "code" | "code_verifier" | "client_id" | "redirect_uri", unknown>>;

function s256(verifier: string): string {
  return createHash("sha256").update(verifier, "ascii").digest("base64url");
}

function redirectWith(reply: FastifyReply, redirectUri: string, params: Record<string, string | undefined>) {
  const url = new URL(redirectUri);
  for (const [key, value] of Object.entries(params)) if (value !== undefined) url.searchParams.set(key, value);
  return reply.header("cache-control", "no-store").redirect(url.href, 302);
}

/** The OpenID provider of spec `trust.md`: Authorization Code with PKCE (S256), public clients. */
export async function oidcProvider(app: FastifyInstance, deps: OidcProviderDeps): Promise<void> {
  const { service, sessions, keys, clock, publicUrl } = deps;
  const db = service.database.db;
  const clients = new Map(deps.clients.map((c) => [c.client_id, c]));
  const configuration = JSON.stringify(openidConfiguration(publicUrl));
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

  app.get("/.well-known/openid-configuration", async (_request, reply) =>
    reply
      .header("cache-control", "public, max-age=300")
      .header("access-control-allow-origin", "*")
      .type("application/json; charset=utf-8")
      .send(configuration),
  );

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
    if (error instanceof OAuthError) {
      return reply.code(error.status).send({ error: error.error, error_description: error.description });
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

  /**
   * Checks an authorization request. A request that names no registered client and redirect URI
   * is answered with a page (there is nowhere safe to send it); any other mistake goes back to
   * the client as an OAuth error.
   */
  function checkRequest(q: AuthorizeQuery, reply: FastifyReply): CheckedRequest | FastifyReply {
    const client = typeof q.client_id === "string" ? clients.get(q.client_id) : undefined;
    if (client === undefined) {
      return sendMessage(reply, 400, "Unknown application", "The application that sent you here is not registered.");
    }
    if (typeof q.redirect_uri !== "string" || !client.redirect_uris.includes(q.redirect_uri)) {
      return sendMessage(
        reply,
        400,
        "Invalid redirect",
        "The application asked to return to an address it has not registered.",
      );
    }
    const redirectUri = q.redirect_uri;
    const state = typeof q.state === "string" && q.state.length <= 1024 ? q.state : undefined;
    const fail = (error: string, description: string) =>
      redirectWith(reply, redirectUri, { error, error_description: description, state });
    if (q.response_type !== "code") return fail("unsupported_response_type", "response_type must be code");
    if (typeof q.scope !== "string" || !q.scope.split(" ").includes("openid")) {
      return fail("invalid_scope", "scope must include openid");
    }
    if (q.code_challenge_method !== "S256")
      return fail("invalid_request", "PKCE with code_challenge_method S256 is required");
    if (typeof q.code_challenge !== "string" || !PKCE_CHALLENGE.test(q.code_challenge)) {
      return fail("invalid_request", "code_challenge must be a S256 PKCE challenge");
    }
    if (q.nonce !== undefined && (typeof q.nonce !== "string" || q.nonce.length > 1024)) {
      return fail("invalid_request", "nonce is too long");
    }
    return { client, redirectUri, state, codeChallenge: q.code_challenge, nonce: q.nonce, scope: q.scope };
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
        created_at: now,
        expires_at: now + CODE_TTL_SECONDS * 1000,
        used_at: null,
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
    };
    return Object.fromEntries(Object.entries(fields).filter((e): e is [string, string] => e[1] !== undefined));
  }

  app.get<{ Querystring: AuthorizeQuery }>("/oidc/authorize", async (request, reply) => {
    const q = request.query;
    const checked = checkRequest(q, reply);
    if (!("client" in checked)) return checked;
    const fail = (error: string, description: string) =>
      redirectWith(reply, checked.redirectUri, { error, error_description: description, state: checked.state });
    const session = await sessions.current(request);
    const maxAge = q.max_age === undefined ? undefined : Number(q.max_age);
    const stale =
      session !== undefined &&
      maxAge !== undefined &&
      Number.isFinite(maxAge) &&
      clock.now() - session.authAt > maxAge * 1000;
    const prompts = typeof q.prompt === "string" ? q.prompt.split(" ") : [];
    // A client that asks for a phishing-resistant sign-in gets one: a person signed in otherwise
    // is asked for their passkey (and stays signed in meanwhile).
    const wantsPasskey = typeof q.acr_values === "string" && q.acr_values.split(" ").includes(PHISHING_RESISTANT);
    const unmet = session !== undefined && wantsPasskey && session.authMethod !== "passkey";
    if (session === undefined || stale || prompts.includes("login") || unmet) {
      if (prompts.includes("none")) {
        return unmet && !stale
          ? fail("interaction_required", "the person must sign in with a passkey")
          : fail("login_required", "the person is not signed in");
      }
      // Resume here after sign-in; `prompt=login` is dropped so the fresh session is accepted.
      const resume = new URLSearchParams(request.query as Record<string, string>);
      resume.delete("prompt");
      if (session !== undefined && !unmet) await sessions.signOut(request, reply);
      const next = encodeURIComponent(`/oidc/authorize?${resume.toString()}`);
      return reply.redirect(`/signin?next=${next}${wantsPasskey ? "&passkey=required" : ""}`, 303);
    }
    const allowed = await consents.hasConsent(db, session.humanId, checked.client.client_id);
    if (allowed && !prompts.includes("consent")) {
      await consents.touchConsent(db, session.humanId, checked.client.client_id, clock.now());
      return issueCode(reply, checked, session);
    }
    if (prompts.includes("none")) return fail("consent_required", "the person has not allowed this client yet");
    return sendConsentPage(reply, {
      csrf: reply.generateCsrf(),
      serviceDid: checked.client.service_did,
      pseudonym: service.pseudonym(session.humanId, checked.client.service_did),
      redirectUri: checked.redirectUri,
      request: carried(checked),
    });
  });

  // The consent page's answer. The request is checked again (the form is the person's browser
  // talking, and a registered redirect URI is the only place an answer may go).
  app.post<{ Body: AuthorizeQuery & { decision?: string } }>(
    "/oidc/consent",
    {
      schema: { body: consentForm, consumes: ["application/x-www-form-urlencoded"] },
      preHandler: app.csrfProtection,
    },
    async (request, reply) => {
      const checked = checkRequest(request.body, reply);
      if (!("client" in checked)) return checked;
      const session = await sessions.current(request);
      if (session === undefined) {
        const resume = new URLSearchParams(carried(checked));
        return reply.redirect(`/signin?next=${encodeURIComponent(`/oidc/authorize?${resume.toString()}`)}`, 303);
      }
      if (request.body.decision !== "allow") {
        // RFC 6749 §4.1.2.1: the resource owner denied the request.
        return redirectWith(reply, checked.redirectUri, {
          error: "access_denied",
          error_description: "the person did not allow the sign-in",
          state: checked.state,
        });
      }
      await consents.grantConsent(
        db,
        session.humanId,
        checked.client.client_id,
        checked.client.service_did,
        clock.now(),
      );
      return issueCode(reply, checked, session);
    },
  );

  app.post<{ Body: TokenBody }>("/oidc/token", async (request: FastifyRequest<{ Body: TokenBody }>, reply) => {
    reply.header("cache-control", "no-store").header("pragma", "no-cache");
    const body = (typeof request.body === "object" && request.body !== null ? request.body : {}) as TokenBody;
    const field = (name: keyof TokenBody) => {
      const value = body[name];
      if (typeof value !== "string" || value.length === 0 || value.length > 2048) {
        throw new OAuthError("invalid_request", `${name} is required`);
      }
      return value;
    };
    const grantType = field("grant_type");
    if (grantType !== "authorization_code") throw new OAuthError("unsupported_grant_type", "only authorization_code");
    const clientId = field("client_id");
    const code = field("code");
    // Every code here was issued with a S256 challenge, so a request without its verifier is
    // malformed (invalid_request, RFC 6749 5.2) and, checked before redemption, burns no code.
    const verifier = field("code_verifier");
    const redirectUri = field("redirect_uri");
    const client = clients.get(clientId);
    if (client === undefined) throw new OAuthError("invalid_client", "unknown client", 401);
    const now = clock.now();
    const hash = hashToken(code);
    // One atomic update redeems the code: of two concurrent redemptions exactly one gets a token.
    const redeemed = await db
      .updateTable("trust_oidc_codes")
      .set({ used_at: now })
      .where("code_hash", "=", hash)
      .where("used_at", "is", null)
      .where("expires_at", ">", now)
      .executeTakeFirst();
    if (Number(redeemed.numUpdatedRows) !== 1)
      throw new OAuthError("invalid_grant", "the code is invalid, expired or used");
    const row = await db
      .selectFrom("trust_oidc_codes")
      .selectAll()
      .where("code_hash", "=", hash)
      .executeTakeFirstOrThrow();
    if (row.client_id !== clientId || row.redirect_uri !== redirectUri) {
      throw new OAuthError("invalid_grant", "the code was issued to another client or redirect_uri");
    }
    const expected = Buffer.from(row.code_challenge);
    const actual = Buffer.from(PKCE_VERIFIER.test(verifier) ? s256(verifier) : "");
    if (expected.length !== actual.length || !timingSafeEqual(expected, actual)) {
      throw new OAuthError("invalid_grant", "code_verifier does not match the code_challenge");
    }
    await keys.fresh();
    const key = keys.signingKey();
    const iat = Math.floor(now / 1000);
    const claims: Record<string, unknown> = {
      iss: publicUrl,
      aud: client.service_did,
      sub: service.pseudonym(row.human_id, client.service_did),
      iat,
      exp: iat + ID_TOKEN_TTL_SECONDS,
    };
    if (row.nonce !== null) claims.nonce = row.nonce;
    Object.assign(claims, authenticationClaims(row.auth_method));
    const idToken = await new SignJWT(claims)
      .setProtectedHeader({ alg: "EdDSA", typ: "JWT", kid: key.kid })
      .sign(key.privateKey);
    return {
      // The spec's response is the id_token; a bearer access token is included because OAuth
      // clients require one, and it grants nothing here (there is no userinfo or API behind it).
      access_token: randomToken("", 32),
      id_token: idToken,
      token_type: "Bearer",
      expires_in: ID_TOKEN_TTL_SECONDS,
    };
  });

  app.get("/oidc/token", async (_request, reply) =>
    reply.code(405).header("allow", "POST").send({ error: "invalid_request", error_description: "use POST" }),
  );
}
