import { createHmac, hkdfSync } from "node:crypto";
import type {} from "@fastify/cookie";
import type {} from "@fastify/csrf-protection";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import {
  AuthorizationResponseError,
  authorizationCodeGrant,
  buildAuthorizationUrl,
  ClientSecretBasic,
  ClientSecretPost,
  Configuration,
  type CustomFetch,
  calculatePKCECodeChallenge,
  customFetch,
  type DiscoveryRequestOptions,
  discovery,
  type IDToken,
  ResponseBodyError,
  randomNonce,
} from "openid-client";
import type { Clock } from "../../platform/clock.js";
import { isUniqueViolation } from "../../platform/database.js";
import type { EnvReader } from "../../platform/env.js";
import { html } from "../../platform/html.js";
import { addressRateLimitKey, type RateLimiter, type RateLimitRule } from "../../platform/rate-limit.js";
import { constantTimeEqual, hashToken, randomToken } from "../../platform/tokens.js";
import type { TrustService } from "../service.js";
import * as store from "../store.js";
import { sendMessage } from "./layout.js";
import { type SessionManager, safeNext } from "./session.js";
import type { SigninOption } from "./signin.js";

/**
 * Sign-in with an upstream OpenID provider (Authorization Code + PKCE, a confidential client).
 * The person is found again by the provider's issuer and subject: verification method `oauth`
 * with subject `JSON.stringify([iss, sub])`. From the account page it adds that verification to
 * the signed-in person instead (never to two people: nothing is merged).
 */

export interface UpstreamOidcConfig {
  /** The issuer identifier, exactly as configured (discovery checks the provider answers with it). */
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** Shown on the button: "Sign in with {name}". */
  name: string;
}

export const UPSTREAM_OIDC_ENV = {
  issuer: "TRUST_UPSTREAM_OIDC_ISSUER",
  clientId: "TRUST_UPSTREAM_OIDC_CLIENT_ID",
  clientSecret: "TRUST_UPSTREAM_OIDC_CLIENT_SECRET",
  name: "TRUST_UPSTREAM_OIDC_NAME",
} as const;

export const DEFAULT_UPSTREAM_NAME = "your identity provider";

/** Reads the upstream provider: issuer, client id and secret all set (enabled) or none (off). */
export function readUpstreamOidcConfig(reader: EnvReader): UpstreamOidcConfig | undefined {
  const issuer = reader.string(UPSTREAM_OIDC_ENV.issuer);
  const clientId = reader.string(UPSTREAM_OIDC_ENV.clientId);
  const clientSecret = reader.string(UPSTREAM_OIDC_ENV.clientSecret);
  const name = reader.string(UPSTREAM_OIDC_ENV.name);
  const required = { issuer, clientId, clientSecret } as const;
  const missing = (Object.keys(required) as (keyof typeof required)[])
    .filter((key) => required[key] === undefined)
    .map((key) => UPSTREAM_OIDC_ENV[key]);
  if (missing.length === 3) {
    if (name !== undefined) {
      reader.problem(
        `${UPSTREAM_OIDC_ENV.name} is set but upstream sign-in is off: also set ${missing.join(", ")}, or unset it`,
      );
    }
    return undefined;
  }
  if (issuer === undefined || clientId === undefined || clientSecret === undefined) {
    reader.problem(
      `upstream OpenID sign-in needs ${UPSTREAM_OIDC_ENV.issuer}, ${UPSTREAM_OIDC_ENV.clientId} and ${UPSTREAM_OIDC_ENV.clientSecret} together (all or none); missing: ${missing.join(", ")}`,
    );
    return undefined;
  }
  const valid = isHttpsIssuer(issuer);
  if (!valid) {
    reader.problem(
      `${UPSTREAM_OIDC_ENV.issuer} must be the provider's https issuer URL, without query, fragment or credentials (got ${JSON.stringify(issuer)})`,
    );
  }
  if (clientId.length > 512) reader.problem(`${UPSTREAM_OIDC_ENV.clientId} is too long (at most 512 characters)`);
  if (name !== undefined && name.length > 60) {
    reader.problem(`${UPSTREAM_OIDC_ENV.name} is the button label: at most 60 characters (got ${name.length})`);
  }
  // Kept exactly as written: discovery compares it with the issuer the provider names itself.
  return valid ? { issuer, clientId, clientSecret, name: name ?? DEFAULT_UPSTREAM_NAME } : undefined;
}

function isHttpsIssuer(value: string): boolean {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return false;
  }
  return url.protocol === "https:" && !url.search && !url.hash && !url.username && !url.password;
}

/** How long a started upstream sign-in can be completed. */
export const UPSTREAM_STATE_TTL_SECONDS = 10 * 60;
/** Seconds an HTTP request to the provider may take. */
const UPSTREAM_TIMEOUT_SECONDS = 10;
/** Provider metadata is discovered on first use and refreshed this often (kept if the refresh fails). */
const METADATA_REFRESH_MS = 60 * 60 * 1000;

export interface UpstreamLimits {
  start: RateLimitRule;
  callback: RateLimitRule;
}

export const DEFAULT_UPSTREAM_LIMITS: UpstreamLimits = {
  start: { name: "trust.upstream_start", limit: 30, windowSeconds: 60 },
  // Only a callback that consumes a state started here reaches the provider; the rest is cheap.
  callback: { name: "trust.upstream_callback", limit: 60, windowSeconds: 60 },
};

export const UPSTREAM_PATHS = {
  start: "/signin/oidc/start",
  add: "/signin/oidc/add",
  callback: "/signin/oidc/callback",
} as const;

/** The fetch openid-client uses to reach the provider (tests: one trusting their CA). */
export type UpstreamFetch = CustomFetch;

export interface UpstreamSigninDeps {
  config: UpstreamOidcConfig;
  clock: Clock;
  publicUrl: string;
  /** The PKCE verifiers and state tags are keyed by a key derived from it (not the pseudonym key). */
  keyEncryptionKey: Buffer;
  /** Tests only (a test CA); never set from configuration. */
  fetch?: UpstreamFetch | undefined;
}

const SIGNIN_STATE = /^s\.([A-Za-z0-9_-]{43})$/;
const ADD_STATE = /^a\.([A-Za-z0-9_-]{43})\.([A-Za-z0-9_-]{32})$/;

type Intent = { mode: "signin" } | { mode: "add"; random: string; tag: string };

function parseState(state: string): Intent | undefined {
  if (SIGNIN_STATE.test(state)) return { mode: "signin" };
  const add = ADD_STATE.exec(state);
  if (add !== null) return { mode: "add", random: add[1] as string, tag: add[2] as string };
  return undefined;
}

/**
 * The upstream provider as this attestor's client: discovery on first use (cached, single
 * flight; a failure is not cached, so the provider being down never breaks anything else), and
 * the values derived from the server secret.
 */
export class UpstreamSignin {
  readonly config: UpstreamOidcConfig;
  /** The attestor's `{trust_url}`: a sign-in only continues on its origin. */
  readonly publicUrl: string;
  readonly redirectUri: string;
  readonly #deps: UpstreamSigninDeps;
  readonly #key: Buffer;
  #cached: { configuration: Configuration; at: number } | undefined;
  #pending: Promise<Configuration> | undefined;

  constructor(deps: UpstreamSigninDeps) {
    this.#deps = deps;
    this.config = deps.config;
    this.publicUrl = deps.publicUrl;
    this.redirectUri = `${deps.publicUrl}${UPSTREAM_PATHS.callback}`;
    this.#key = Buffer.from(
      hkdfSync("sha256", deps.keyEncryptionKey, Buffer.alloc(0), "proto-trust upstream-oidc v1", 32),
    );
  }

  get signinOption(): SigninOption {
    return { label: this.config.name, path: UPSTREAM_PATHS.start };
  }

  get accountAction(): { label: string; path: string } {
    return { label: `Add sign-in with ${this.config.name}`, path: UPSTREAM_PATHS.add };
  }

  /** PKCE `code_verifier` of a state: never stored, re-derived at the callback (43 characters). */
  codeVerifier(state: string): string {
    return createHmac("sha256", this.#key).update(`pkce\0${state}`).digest("base64url");
  }

  /** Binds an "add to my account" state to the person who started it. */
  addTag(random: string, humanId: string): string {
    return createHmac("sha256", this.#key).update(`add\0${random}\0${humanId}`).digest("base64url").slice(0, 32);
  }

  async configuration(): Promise<Configuration> {
    const cached = this.#cached;
    if (cached !== undefined && this.#deps.clock.now() - cached.at < METADATA_REFRESH_MS) return cached.configuration;
    this.#pending ??= this.#discover()
      .then((configuration) => {
        this.#cached = { configuration, at: this.#deps.clock.now() };
        return configuration;
      })
      .finally(() => {
        this.#pending = undefined;
      });
    try {
      return await this.#pending;
    } catch (error) {
      if (cached !== undefined) return cached.configuration;
      throw error;
    }
  }

  async #discover(): Promise<Configuration> {
    const { issuer, clientId, clientSecret } = this.config;
    const fetch = this.#deps.fetch;
    const options: DiscoveryRequestOptions = {
      timeout: UPSTREAM_TIMEOUT_SECONDS,
      ...(fetch === undefined ? {} : { [customFetch]: fetch }),
    };
    const configuration = await discovery(
      new URL(issuer),
      clientId,
      clientSecret,
      ClientSecretBasic(clientSecret),
      options,
    );
    // client_secret_basic is the OAuth default; use client_secret_post where only that is offered.
    const methods = configuration.serverMetadata().token_endpoint_auth_methods_supported;
    if (methods === undefined || methods.includes("client_secret_basic") || !methods.includes("client_secret_post")) {
      return configuration;
    }
    const post = new Configuration(
      configuration.serverMetadata(),
      clientId,
      clientSecret,
      ClientSecretPost(clientSecret),
    );
    post.timeout = UPSTREAM_TIMEOUT_SECONDS;
    if (fetch !== undefined) post[customFetch] = fetch;
    return post;
  }
}

function unavailable(reply: FastifyReply, name: string): FastifyReply {
  return sendMessage(
    reply,
    502,
    `${name} cannot be reached`,
    "Signing in with it does not work at the moment. Try again in a few minutes, or sign in with your e-mail address.",
    html`<p><a class="button" href="/signin">Back to sign-in</a></p>`,
  );
}

function attemptInvalid(reply: FastifyReply, status: number, title: string, message: string): FastifyReply {
  return sendMessage(reply, status, title, message, html`<p><a class="button" href="/signin">Sign in again</a></p>`);
}

function tooMany(reply: FastifyReply, retryAfter: number): FastifyReply {
  reply.header("retry-after", String(retryAfter));
  return sendMessage(reply, 429, "Too many attempts", `Please wait ${retryAfter} seconds and try again.`);
}

/** What the provider said, for the log: never the stack, never shown to the person. */
function describe(error: unknown): Record<string, unknown> {
  if (error instanceof AuthorizationResponseError || error instanceof ResponseBodyError) {
    return { error: error.error, description: error.error_description, message: error.message };
  }
  if (error instanceof Error) {
    const cause = (error as { cause?: unknown }).cause;
    return {
      name: error.name,
      code: (error as { code?: unknown }).code,
      message: error.message,
      cause: cause instanceof Error ? cause.message : undefined,
    };
  }
  return { message: String(error) };
}

export interface UpstreamPluginOptions {
  upstream: UpstreamSignin;
  service: TrustService;
  sessions: SessionManager;
  limiter: RateLimiter;
  clock: Clock;
  limits?: UpstreamLimits;
}

export interface UpstreamWiring {
  upstream: UpstreamSignin;
  /** The button on the sign-in page. */
  signinOption: SigninOption;
  /** The button on the account page: add this sign-in to the signed-in person. */
  accountAction: { label: string; path: string };
  /** Registered inside the human pages' scope (forms, CSRF, HTML error pages). */
  pages(app: FastifyInstance): Promise<void>;
}

/** Upstream sign-in as configured, or undefined when `TRUST_UPSTREAM_OIDC_*` is not set. */
export function upstreamWiring(
  config: UpstreamOidcConfig | undefined,
  deps: Omit<UpstreamSigninDeps, "config"> & Omit<UpstreamPluginOptions, "upstream">,
): UpstreamWiring | undefined {
  if (config === undefined) return undefined;
  const upstream = new UpstreamSignin({
    config,
    clock: deps.clock,
    publicUrl: deps.publicUrl,
    keyEncryptionKey: deps.keyEncryptionKey,
    fetch: deps.fetch,
  });
  return {
    upstream,
    signinOption: upstream.signinOption,
    accountAction: upstream.accountAction,
    async pages(app) {
      await app.register(upstreamSigninPlugin, {
        upstream,
        service: deps.service,
        sessions: deps.sessions,
        limiter: deps.limiter,
        clock: deps.clock,
        ...(deps.limits === undefined ? {} : { limits: deps.limits }),
      });
    },
  };
}

/**
 * `GET /signin/oidc/start?next=`, `POST /signin/oidc/add` (account page, CSRF-protected) and
 * `GET /signin/oidc/callback`. The state travels to the provider and back; its hash is stored
 * with the nonce and `next`, and the state itself sits in an HttpOnly cookie so a callback only
 * works in the browser that started it (no login CSRF, no planting someone's identity).
 */
export async function upstreamSigninPlugin(app: FastifyInstance, deps: UpstreamPluginOptions): Promise<void> {
  const { upstream, service, sessions, limiter, clock } = deps;
  const limits = deps.limits ?? DEFAULT_UPSTREAM_LIMITS;
  const db = service.database.db;
  const name = upstream.config.name;
  const secure = sessions.secure;
  const stateCookie = secure ? "__Host-proto_upstream" : "proto_upstream";
  if (!app.hasDecorator("csrfProtection")) throw new Error("upstream sign-in pages belong in the human pages' scope");
  const cookieOptions = { path: "/", httpOnly: true, sameSite: "lax", secure } as const;
  let lastPurge = 0;

  async function begin(
    request: FastifyRequest,
    reply: FastifyReply,
    intent: { mode: "signin"; next: string } | { mode: "add"; humanId: string },
  ): Promise<FastifyReply> {
    const limit = await limiter.hit(limits.start, addressRateLimitKey(request.ip));
    if (!limit.allowed) return tooMany(reply, limit.retryAfterSeconds);
    let configuration: Configuration;
    try {
      configuration = await upstream.configuration();
    } catch (error) {
      request.log.warn({ upstream: describe(error) }, "upstream OpenID provider discovery failed");
      return unavailable(reply, name);
    }
    const random = randomToken("", 32);
    const state = intent.mode === "add" ? `a.${random}.${upstream.addTag(random, intent.humanId)}` : `s.${random}`;
    const nonce = randomNonce();
    const now = clock.now();
    if (now - lastPurge > 60_000) {
      lastPurge = now;
      await db
        .deleteFrom("trust_upstream_states")
        .where("expires_at", "<", now - 3600_000)
        .execute();
    }
    await db
      .insertInto("trust_upstream_states")
      .values({
        state_hash: hashToken(state),
        nonce,
        next: intent.mode === "add" ? "/account" : intent.next,
        created_at: now,
        expires_at: now + UPSTREAM_STATE_TTL_SECONDS * 1000,
        used_at: null,
      })
      .execute();
    const target = buildAuthorizationUrl(configuration, {
      redirect_uri: upstream.redirectUri,
      scope: "openid",
      state,
      nonce,
      code_challenge: await calculatePKCECodeChallenge(upstream.codeVerifier(state)),
      code_challenge_method: "S256",
    });
    reply.setCookie(stateCookie, state, { ...cookieOptions, maxAge: UPSTREAM_STATE_TTL_SECONDS });
    return reply.header("cache-control", "no-store").redirect(target.href, 303);
  }

  app.get<{ Querystring: { next?: string } }>(UPSTREAM_PATHS.start, async (request, reply) =>
    begin(request, reply, { mode: "signin", next: safeNext(request.query.next, upstream.publicUrl) }),
  );

  app.post(UPSTREAM_PATHS.add, { preHandler: app.csrfProtection }, async (request, reply) => {
    const session = await sessions.current(request);
    if (session === undefined) return reply.redirect("/signin?next=%2Faccount", 303);
    return begin(request, reply, { mode: "add", humanId: session.humanId });
  });

  app.get<{ Querystring: Record<string, unknown> }>(UPSTREAM_PATHS.callback, async (request, reply) => {
    reply.header("cache-control", "no-store");
    const limit = await limiter.hit(limits.callback, addressRateLimitKey(request.ip));
    if (!limit.allowed) return tooMany(reply, limit.retryAfterSeconds);
    const state = typeof request.query.state === "string" ? request.query.state : "";
    const started = request.cookies[stateCookie];
    if (started !== undefined) reply.clearCookie(stateCookie, cookieOptions);
    const intent = parseState(state);
    if (intent === undefined || started === undefined || !constantTimeEqual(started, state)) {
      return attemptInvalid(
        reply,
        400,
        "This sign-in did not start here",
        `The answer from ${name} does not belong to a sign-in started in this browser. Start again from the sign-in page.`,
      );
    }

    // Single use by one atomic update: a replayed or late answer finds nothing to consume.
    const now = clock.now();
    const stateHash = hashToken(state);
    const consumed = await db
      .updateTable("trust_upstream_states")
      .set({ used_at: now })
      .where("state_hash", "=", stateHash)
      .where("used_at", "is", null)
      .where("expires_at", ">", now)
      .executeTakeFirst();
    if (Number(consumed.numUpdatedRows) !== 1) {
      return attemptInvalid(
        reply,
        410,
        "This sign-in has expired",
        `A sign-in with ${name} must be finished within ${UPSTREAM_STATE_TTL_SECONDS / 60} minutes and works once. Start again.`,
      );
    }
    const row = await db
      .selectFrom("trust_upstream_states")
      .select(["nonce", "next"])
      .where("state_hash", "=", stateHash)
      .executeTakeFirstOrThrow();

    let configuration: Configuration;
    try {
      configuration = await upstream.configuration();
    } catch (error) {
      request.log.warn({ upstream: describe(error) }, "upstream OpenID provider discovery failed");
      return unavailable(reply, name);
    }
    const query = request.url.indexOf("?");
    const currentUrl = new URL(upstream.redirectUri);
    currentUrl.search = query === -1 ? "" : request.url.slice(query);
    let claims: IDToken | undefined;
    try {
      const tokens = await authorizationCodeGrant(configuration, currentUrl, {
        pkceCodeVerifier: upstream.codeVerifier(state),
        expectedState: state,
        expectedNonce: row.nonce,
        idTokenExpected: true,
      });
      claims = tokens.claims();
    } catch (error) {
      request.log.warn({ upstream: describe(error) }, "upstream OpenID sign-in failed");
      if (error instanceof AuthorizationResponseError) {
        return attemptInvalid(
          reply,
          400,
          "Sign-in was not completed",
          `${name} did not sign you in${/^[a-z_]{1,64}$/.test(error.error) ? ` (${error.error})` : ""}. Start again, or sign in with your e-mail address.`,
        );
      }
      if (error instanceof ResponseBodyError) {
        return attemptInvalid(
          reply,
          400,
          "Sign-in failed",
          `${name} did not confirm this sign-in. Start again, or sign in with your e-mail address.`,
        );
      }
      return attemptInvalid(
        reply,
        502,
        "Sign-in failed",
        `The answer from ${name} could not be verified. Start again, or sign in with your e-mail address.`,
      );
    }
    const iss = claims?.iss;
    const sub = claims?.sub;
    if (
      typeof iss !== "string" ||
      typeof sub !== "string" ||
      sub.length === 0 ||
      sub.length > 255 ||
      iss.length > 2048
    ) {
      request.log.warn("upstream id_token without a usable iss/sub");
      return attemptInvalid(reply, 502, "Sign-in failed", `${name} did not say who you are. Start again.`);
    }
    const subject = JSON.stringify([iss, sub]);

    if (intent.mode === "signin") {
      const humanId = await service.findOrCreateHuman("oauth", subject);
      await sessions.signIn(request, reply, humanId, "oauth");
      return reply.redirect(safeNext(row.next, upstream.publicUrl), 303);
    }

    // Adding to the account of whoever started it, who must still be signed in here.
    const session = await sessions.current(request);
    if (session === undefined || !constantTimeEqual(intent.tag, upstream.addTag(intent.random, session.humanId))) {
      return attemptInvalid(
        reply,
        403,
        "Sign in again",
        `You are no longer signed in as the person who asked to add ${name}. Sign in and try again from your account page.`,
      );
    }
    const outcome = await addVerification(session.humanId, subject);
    if (outcome === "taken") {
      return sendMessage(
        reply,
        409,
        "This sign-in is already in use",
        `That ${name} account already signs in to another account here, so it was not added to yours. Nothing was changed. To use that other account, sign out and sign in with ${name}.`,
        html`<p><a class="button" href="/account">Back to your account</a></p>`,
      );
    }
    return reply.redirect("/account", 303);
  });

  async function addVerification(humanId: string, subject: string): Promise<"added" | "taken"> {
    const attempt = () =>
      db.transaction().execute(async (trx) => {
        const existing = await store.findVerification(trx, "oauth", subject);
        if (existing !== undefined && existing.human_id !== humanId) return "taken" as const;
        await store.upsertVerification(trx, humanId, "oauth", subject, clock.now());
        return "added" as const;
      });
    try {
      return await attempt();
    } catch (error) {
      // Someone else recorded the same identity at the same moment: decide again on what won.
      if (isUniqueViolation(error)) return attempt();
      throw error;
    }
  }
}
