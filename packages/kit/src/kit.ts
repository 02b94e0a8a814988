import {
  acceptSignature,
  appendChallenge,
  attemptedProtocol,
  createRequestVerifier,
  createWebBotAuthVerifier,
  DEFAULT_SKEW_SECONDS,
  type DiscoveryDocument,
  type DiscoveryPermissions,
  type FetchFunction,
  formatProtoChallenge,
  type KeyDirectoryOptions,
  MemoryNonceStore,
  type NonceStore,
  type ProtoError,
  type RawRequest,
  requestTargetOf,
  type SafeFetchConfig,
  type SignatureAgentKeys,
  signatureProfiles,
  type WebBotAuthVerifier,
} from "@proto/protocol";
import { introspectionHandler, keyRotationHandler, signupHandler } from "./accounts.js";
import { AgentAuthenticator, RATE_WINDOW_SECONDS } from "./agent-auth.js";
import { type AttestorConfig, AttestorRegistry } from "./attestors.js";
import { Authority, type AuthorityHolder, type SpendRequest, type SpendResult } from "./authority.js";
import { claimCompletionHandler, claimPageHandler, EMAIL_SIGNIN_PATH } from "./claim.js";
import { KitConfigError } from "./config-error.js";
import type { AgentContext, Handler, InvitationEvent, KitCore, ResolvedOptions } from "./core.js";
import { buildDiscoveryDocument, type DiscoveryInput } from "./discovery.js";
import { emailSignInHandler, InvitationMailer, outboxHandler } from "./email.js";
import { asProtoError, kitError } from "./errors.js";
import {
  DEFAULT_MAX_BODY_BYTES,
  errorResponse,
  fromFetchRequest,
  jsonResponse,
  type KitRequest,
  type KitResponse,
  toFetchResponse,
  toHeaders,
} from "./http.js";
import { invitationHandler } from "./invitation.js";
import { keyDirectorySource } from "./key-directories.js";
import type { KitMailOptions, OutboxEntry } from "./mailer.js";
import { advertiseMcp } from "./mcp-discovery.js";
import {
  type BearerAgent,
  type BearerContext,
  ProtectedResource,
  type ProtectedResourceOptions,
} from "./mcp-resource.js";
import {
  keyRekeyHandler,
  keyRevocationHandler,
  ownedAccountsHandler,
  type RekeyResult,
  type RevocationResult,
  rekeyAccount,
  revokeAccountKey,
  signInCallbackHandler,
  signInStartHandler,
  signOutHandler,
} from "./owner.js";
import { errorPage } from "./pages.js";
import { declaredPermissions } from "./permissions.js";
import { checkPublicUrl } from "./public-url.js";
import { MemoryRateLimiter, type RateLimiter, StoreRateLimiter } from "./rate-limit.js";
import { isForm } from "./request-body.js";
import { type AccountResource, toAccountResource } from "./resource.js";
import { type NewOwnerSession, type OwnerSession, OwnerSessions } from "./sessions.js";
import { AttestorSignIn } from "./signin.js";
import { openKitStore } from "./store/kysely-store.js";
import type { AccountRecord, KitStore } from "./store/types.js";
import { answeringOutages } from "./store-outages.js";

export type { AgentContext, InvitationEvent } from "./core.js";

export const DEFAULT_OWNER_PATH = "/proto/owner";
export const DEFAULT_INVITATION_TTL_SECONDS = 7 * 86400;
export const DEFAULT_OWNER_FRESHNESS_SECONDS = 300;
export const DEFAULT_OWNER_SESSION_TTL_SECONDS = 86400;
export const DEFAULT_EXTENDED_SESSION_SECONDS = 3600;

/** Attested sessions (feature `attested_session`): how long one presented attestation keeps an unclaimed account usable. */
export type AttestedSessionOptions =
  /** Until the attestation's own `exp` (at most 900 s). */
  | { mode: "strict" }
  /** Until `seconds` (900-86400, default 3600) after the latest presentation, and at least the `exp`. */
  | { mode: "extended"; seconds?: number };

export interface KitOptions {
  /**
   * The public origin agents sign (`https://api.example.com`), whatever address the process listens
   * on. https: proto agents reach services over https only; an http URL is refused at start.
   */
  publicUrl: string;
  /**
   * Development and tests only: accept a plain-http `publicUrl` on this machine (localhost,
   * 127.0.0.0/8, [::1]), for browsers and tests. proto agents still cannot call it: they refuse
   * http services with `insecure_url`.
   */
  allowHttp?: boolean;
  /** The discovery document, or the parts to build it from (`buildDiscoveryDocument`). */
  discovery: DiscoveryInput | DiscoveryDocument;
  /**
   * The permissions an agent may be granted here, by name (`notes:read`), written into the
   * discovery document's `permissions` member; MCP resources publish the names in
   * `scopes_supported`. See docs/authority.md. Default: none declared (what services had before).
   */
  permissions?: DiscoveryPermissions;
  /** `sqlite:PATH`, `sqlite::memory:` or `postgres://...` (ignored when `store` is given). */
  database?: string;
  /** A store opened elsewhere (`openKitStore`, or your own `KitStore`). Not closed by `kit.close()`. */
  store?: KitStore;
  /** Accepted attestors by attestation issuer (`proto-trust`): their key set and `{trust_url}`. */
  attestors?: Record<string, AttestorConfig>;
  /** Create accounts on the first valid signed request (default true). Off: only `POST {accounts}` does. */
  implicitSignup?: boolean;
  /** With feature `attested_session`: the window one attestation keeps an unclaimed account usable (default strict). */
  attestedSession?: AttestedSessionOptions;
  /** How long a claim link works (default 7 days). */
  invitationTtlSeconds?: number;
  /** Owner-binding operations need an authentication this recent (60-300 s, default 300). */
  ownerFreshnessSeconds?: number;
  /** Lifetime of an owner session (default one day). */
  ownerSessionTtlSeconds?: number;
  /**
   * Owners sign in (and so claim agents) only with a phishing-resistant ceremony: the kit asks the
   * attestor for `acr` `phishing-resistant` (a passkey) and refuses an id_token without it
   * (default false: any sign-in the attestor accepts).
   */
  phishingResistantSignIn?: boolean;
  /** Per-route, per-DID hourly limit for claimed accounts (default: none). */
  claimedRateLimitPerHour?: number;
  /** The service in words on the kit's pages and mails ("Notes"); 1-60 characters. Default: the host of `publicUrl`. */
  serviceName?: string;
  /**
   * The service's own page where owners see their agents (a path, or a URL on `publicUrl`'s origin):
   * the page after a claim links there.
   */
  ownerPage?: string;
  /** Where the human-facing owner routes live (sign-in, callback, owned accounts); default `/proto/owner`. */
  ownerPath?: string;
  /** Replay store; share one (RedisNonceStore) across replicas. Default: in memory. */
  nonceStore?: NonceStore;
  /** Rate counters: `"store"` (the database, shared by replicas; default), `"memory"`, or your own. */
  rateLimiter?: "store" | "memory" | RateLimiter;
  /** Tolerated clock difference for signatures (default 60 s). */
  skewSeconds?: number;
  /** Largest request body (default 64 KiB); larger is 413 `payload_too_large`. */
  maxBodyBytes?: number;
  /** Milliseconds since the epoch; an injectable clock. */
  now?: () => number;
  /** The fetch key sets and the attestor's OpenID provider are reached with. */
  fetch?: FetchFunction;
  /**
   * Origins (`https://app.example.com`) an owner invitation's `redirect_url` may point to, besides
   * the kit's own origin; any other is 400 `malformed_request` (upstream §7.2).
   */
  redirectOrigins?: string[];
  /**
   * How the kit mails the links of `email` invitations (the e-mail ceremony): SMTP (`smtpUrl` +
   * `from`), your own `mailer`, or the `developmentOutbox`. Without it, `onInvitation` must deliver
   * them: a service that accepts `email` recipients and has neither does not start.
   */
  mail?: KitMailOptions;
  /**
   * Called after an owner invitation is staged, with its claim link (`mailed` says whether the kit
   * mailed it): deliver the link yourself when the kit does not, or just take note.
   */
  onInvitation?: (event: InvitationEvent) => void | Promise<void>;
  /** Unexpected errors (answered 500 `internal_error`). Default: `console.error`. */
  onError?: (error: unknown) => void;
  /**
   * Web Bot Auth callers (agents signing with `Signature-Agent` and a thumbprint `keyid`): how their
   * keys are found. `false` treats such requests as unsigned.
   */
  webBotAuth?: false | KitWebBotAuthOptions;
}

export interface KitWebBotAuthOptions {
  /**
   * Finds the key a `Signature-Agent` URL and thumbprint name. Default: the key directory it names,
   * through the SSRF-safe fetch (public addresses only, no redirects, bounded, cached).
   */
  keys?: SignatureAgentKeys;
  /** Settings of the default directory fetch: `allowPrivate`, `resolve` (development, tests), `ca`. */
  fetch?: Partial<SafeFetchConfig>;
  /** Cache and size bounds of the default directory client. */
  directory?: Omit<KeyDirectoryOptions, "fetcher" | "now">;
  /** Longest `expires - created` of a signed agent's signature (default one day, the draft's bound). */
  maxValiditySeconds?: number;
  /**
   * Key directories never seen before that the default source fetches per minute, whoever asks
   * (default 60); beyond it, 503 `kit_key_directories_busy` with `Retry-After`.
   */
  newDirectoriesPerMinute?: number;
  /**
   * Of those, how many one client (its address, an IPv6 client its /64) may cause per minute
   * (default 10); beyond it, 429 `rate_limit_exceeded` with `Retry-After`.
   */
  newDirectoriesPerClientPerMinute?: number;
}

export interface AuthenticateOptions {
  /** The rate-limit bucket of the route (default `METHOD /path`). */
  route?: string;
  /** The absolute URL the client signed, when the request's own URL is not on the public origin. */
  url?: string;
  /** The client's address (after your trusted proxies); see `HandleOptions.clientAddress`. */
  clientAddress?: string;
  /**
   * Permissions the caller must hold (declared in `permissions`): its grant's, else the defaults.
   * A missing one throws 403 `insufficient_permission`.
   */
  permissions?: string[];
}

export interface HandleOptions {
  /**
   * The request-target exactly as received, when the runtime still has it (a Fetch `Request` holds
   * only the serialised URL, which rewrites `'` in a query, say). It must name the request's own URL.
   */
  target?: string;
  /**
   * The client's address (after your trusted proxies): what new Web Bot Auth key directories are
   * charged to. Without it they count against the process's bound only.
   */
  clientAddress?: string;
}

export interface KitRoute {
  method: "GET" | "POST";
  path: string;
}

/** A mounted route: its handler, and how it answers an error (JSON, or a page for people). */
interface MountedRoute {
  handler: Handler;
  refuse(error: unknown, request: { headers: Headers }): KitResponse;
}

/** An allow-list entry: an http(s) origin, exactly. */
function allowedOrigin(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new KitConfigError("redirectOrigins", `redirectOrigins: ${value} is not an origin (https://host[:port])`);
  }
  if ((url.protocol !== "https:" && url.protocol !== "http:") || url.origin !== value.replace(/\/$/, "")) {
    throw new KitConfigError("redirectOrigins", `redirectOrigins: ${value} is not an origin (https://host[:port])`);
  }
  return url.origin;
}

/**
 * Whether a request came with a body, from its headers alone (a refusal may come before the body
 * is read): then the signature it is asked for must cover `content-digest`, whether or not it sent one.
 */
function hasBody(headers: Headers): boolean {
  const length = headers.get("content-length");
  return (
    headers.has("content-digest") || headers.has("transfer-encoding") || (length !== null && length.trim() !== "0")
  );
}

function serviceName(value: string | undefined, publicUrl: URL): string {
  if (value === undefined) return publicUrl.host;
  const trimmed = value.trim();
  if (trimmed.length === 0 || trimmed.length > 60)
    throw new KitConfigError("serviceName", "serviceName must be 1 to 60 characters");
  return trimmed;
}

/** A path on the service, or a URL on its origin (kept as given); nothing that leaves the service. */
function ownerPage(value: string | undefined, origin: string): string | undefined {
  if (value === undefined) return undefined;
  const url = URL.canParse(value, origin) ? new URL(value, origin) : undefined;
  if (url?.origin !== origin) throw new KitConfigError("ownerPage", `ownerPage must be a path or a URL on ${origin}`);
  return `${url.pathname}${url.search}`;
}

function checkRange(name: string, value: number, min: number, max: number): number {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new KitConfigError(name, `${name} must be an integer from ${min} to ${max}`);
  }
  return value;
}

/**
 * The framework-agnostic core of the kit: it resolves the options, owns the parts (store, verifier,
 * sessions, sign-in) and routes requests to the endpoint modules, one per upstream section:
 * `agent-auth` (§5, §6.3, §10.7), `accounts` (§6.4, §6.5, §8.1), `invitation` (§7.2-7.3), `claim`
 * (§7.4), `email` (the e-mail ceremony, §7.7.1, §12.6) and `owner` (§7.5, §8.2, §8.4). Create it with `createKit`; mount it with `createService`
 * (Fastify; `@proto/kit/express` and `@proto/kit/hono` have their own) or `kit.handle` (Fetch API).
 */
export class Kit {
  readonly discovery: DiscoveryDocument;
  /** The permissions the service declares, by name (empty when it declares none). */
  readonly permissions: Readonly<DiscoveryPermissions>;
  readonly serviceDid: string;
  /** The public origin (`https://api.example.com`). */
  readonly origin: string;
  readonly ownerPath: string;
  readonly store: KitStore;
  readonly attestors: AttestorRegistry;
  readonly sessions: OwnerSessions;
  readonly signIn: AttestorSignIn;
  readonly #authenticator: AgentAuthenticator;
  readonly #authority: Authority;
  readonly #core: KitCore;
  readonly #mail: InvitationMailer | undefined;
  readonly #now: () => number;
  readonly #options: ResolvedOptions;
  readonly #onError: (error: unknown) => void;
  readonly #ownsStore: boolean;
  readonly #routes = new Map<string, MountedRoute>();
  readonly #skewSeconds: number;
  readonly #timer: NodeJS.Timeout;

  /** @internal use `createKit`. */
  constructor(options: KitOptions, givenStore: KitStore, ownsStore: boolean) {
    // Every part below reaches the store through this: a database outage is 503, not 500.
    const store = answeringOutages(givenStore);
    const publicUrl = checkPublicUrl(options.publicUrl, options.allowHttp === true);
    this.origin = publicUrl.origin;
    this.#now = options.now ?? Date.now;
    const attestorConfig = options.attestors ?? {};
    const permissions = declaredPermissions(options.permissions, options.discovery);
    const discoveryInput =
      permissions === undefined ? options.discovery : { ...options.discovery, permissions: { ...permissions } };
    const discovery = buildDiscoveryDocument(discoveryInput as DiscoveryInput, {
      publicUrl: this.origin,
      acceptedAttestors: Object.keys(attestorConfig),
    });
    this.discovery = discovery;
    this.permissions = permissions ?? Object.freeze({ ...discovery.permissions });
    this.serviceDid = discovery.service_did;
    const mode = discovery.billing?.unclaimed_mode ?? "attested_only";
    const accepted = discovery.billing?.accepted_attestors ?? [];
    if (mode === "attested_only" && accepted.length === 0) {
      throw new KitConfigError(
        "attestors",
        "unclaimed_mode attested_only needs at least one accepted attestor (attestors and billing.accepted_attestors)",
      );
    }
    this.store = store;
    this.#ownsStore = ownsStore;
    this.attestors = new AttestorRegistry(attestorConfig, {
      serviceDid: this.serviceDid,
      accepted,
      now: this.#now,
      fetch: options.fetch,
    });
    this.#authority = new Authority({
      permissions: this.permissions,
      serviceDid: this.serviceDid,
      store,
      now: this.#now,
      attestorUrl: (issuer) => this.attestors.get(issuer)?.url,
    });
    const features = discovery.features ?? [];
    const session = options.attestedSession ?? { mode: "strict" };
    this.#options = {
      implicitSignup: options.implicitSignup ?? true,
      mode,
      attestedSession: features.includes("attested_session")
        ? {
            mode: session.mode,
            seconds:
              session.mode === "extended"
                ? checkRange("attestedSession.seconds", session.seconds ?? DEFAULT_EXTENDED_SESSION_SECONDS, 900, 86400)
                : 0,
          }
        : undefined,
      invitationTtlSeconds: checkRange(
        "invitationTtlSeconds",
        options.invitationTtlSeconds ?? DEFAULT_INVITATION_TTL_SECONDS,
        60,
        90 * 86400,
      ),
      freshnessSeconds: checkRange(
        "ownerFreshnessSeconds",
        options.ownerFreshnessSeconds ?? DEFAULT_OWNER_FRESHNESS_SECONDS,
        60,
        300,
      ),
      unclaimedLimit: discovery.limits?.unclaimed_rate_limit_per_hour,
      claimedLimit: options.claimedRateLimitPerHour,
      ttlSeconds: discovery.limits?.unclaimed_ttl_seconds,
      recipientTypes: discovery.recipient_types ?? ["email"],
      maxBodyBytes: options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES,
      redirectOrigins: [this.origin, ...(options.redirectOrigins ?? []).map((origin) => allowedOrigin(origin))],
      serviceName: serviceName(options.serviceName, publicUrl),
      ownerPage: ownerPage(options.ownerPage, this.origin),
    };
    this.#skewSeconds = options.skewSeconds ?? DEFAULT_SKEW_SECONDS;
    const nonceStore = options.nonceStore ?? new MemoryNonceStore({ now: this.#now });
    const verifier = createRequestVerifier({
      nonceStore,
      now: this.#now,
      isRevoked: (did) => this.store.isRevoked(did),
      maxBodyBytes: this.#options.maxBodyBytes,
      ...(options.skewSeconds === undefined ? {} : { skewSeconds: options.skewSeconds }),
    });
    const limiterOption = options.rateLimiter ?? "store";
    const limiter =
      limiterOption === "store"
        ? new StoreRateLimiter(store)
        : limiterOption === "memory"
          ? new MemoryRateLimiter()
          : limiterOption;
    this.#authenticator = new AgentAuthenticator({
      verifier,
      webBotAuth: this.#webBotAuthVerifier(options.webBotAuth, nonceStore, options.skewSeconds),
      attestors: this.attestors,
      store,
      limiter,
      options: this.#options,
      acceptedAttestors: accepted,
      now: this.#now,
    });
    const onError = options.onError ?? ((error: unknown) => console.error("proto kit:", error));
    this.#onError = onError;
    if (
      this.#options.recipientTypes.includes("email") &&
      options.mail === undefined &&
      options.onInvitation === undefined
    ) {
      throw new KitConfigError(
        "mail",
        "recipient type email needs a way to reach the person: configure mail (smtpUrl + from, a mailer, or developmentOutbox) or onInvitation",
      );
    }
    this.#mail =
      options.mail === undefined
        ? undefined
        : InvitationMailer.fromOptions(options.mail, {
            origin: this.origin,
            claimPage: discovery.endpoints.claim_page,
            serviceName: this.#options.serviceName,
            limiter,
            now: this.#now,
            onError,
          });
    this.ownerPath = (options.ownerPath ?? DEFAULT_OWNER_PATH).replace(/\/+$/, "");
    if (!this.ownerPath.startsWith("/")) throw new KitConfigError("ownerPath", "ownerPath must start with /");
    const secure = publicUrl.protocol === "https:";
    this.sessions = new OwnerSessions(store, {
      cookieName: "proto_owner",
      ttlSeconds: options.ownerSessionTtlSeconds ?? DEFAULT_OWNER_SESSION_TTL_SECONDS,
      secure,
      now: this.#now,
      canonicalIssuer: (issuer) => this.attestors.canonicalIssuer(issuer),
    });
    this.signIn = new AttestorSignIn({
      registry: this.attestors,
      store,
      sessions: this.sessions,
      serviceDid: this.serviceDid,
      redirectUri: `${this.origin}${this.ownerPath}/callback`,
      cookiePath: this.ownerPath,
      secure,
      now: this.#now,
      fetch: options.fetch,
      phishingResistant: options.phishingResistantSignIn ?? false,
    });
    this.#core = {
      discovery,
      origin: this.origin,
      ownerPath: this.ownerPath,
      store,
      attestors: this.attestors,
      sessions: this.sessions,
      signIn: this.signIn,
      options: this.#options,
      now: this.#now,
      onError,
      onInvitation: options.onInvitation,
      mail: this.#mail,
      authenticate: (request, route, explicitSignup) =>
        this.#authenticator.authenticate(request, route, explicitSignup),
      accountResource: (record) => this.accountResource(record),
      errorResponse: (error, request) => this.errorResponse(error, request),
      errorPage: (error, request) => this.#errorPage(error, request),
    };
    this.#mountRoutes();
    this.#timer = setInterval(() => {
      this.purgeExpired().catch((error: unknown) => this.#onError(error));
    }, 600_000);
    this.#timer.unref();
  }

  /** The OpenID redirect URI to register at the attestor (`TRUST_OIDC_CLIENTS`). */
  get redirectUri(): string {
    return this.signIn.redirectUri;
  }

  /** The largest request body the kit reads (bytes). */
  get maxBodyBytes(): number {
    return this.#options.maxBodyBytes;
  }

  /** Every route the kit answers (for framework adapters). */
  get routes(): KitRoute[] {
    return [...this.#routes.keys()].map((key) => {
      const [method, path] = key.split(" ", 2) as ["GET" | "POST", string];
      return { method, path };
    });
  }

  // ---------------------------------------------------------------- agent requests

  /**
   * Verifies an agent request and resolves its account: the framework-agnostic middleware.
   * Accepts a Fetch `Request` (its body is read from a clone) or a raw request with the absolute
   * public URL and the exact body bytes. Throws a `ProtoError` (answer it with `kit.errorToResponse(error, request)`).
   */
  async authenticate(request: Request | RawRequest, options: AuthenticateOptions = {}): Promise<AgentContext> {
    let kitRequest: KitRequest;
    if (request instanceof Request) {
      kitRequest = await fromFetchRequest(request.clone(), this.origin, this.#options.maxBodyBytes);
      if (options.url !== undefined) {
        kitRequest.url = new URL(options.url);
        kitRequest.target = exactTarget(options.url, kitRequest.url);
      }
    } else {
      const body = request.body;
      const exact = options.url ?? request.url;
      const url = new URL(exact);
      kitRequest = {
        method: request.method.toUpperCase(),
        url,
        target: options.url === undefined && request.target !== undefined ? request.target : exactTarget(exact, url),
        headers: toHeaders(request.headers as Headers | Record<string, string | string[] | undefined>),
        body: body === undefined || body === null ? undefined : typeof body === "string" ? Buffer.from(body) : body,
      };
    }
    if (options.clientAddress !== undefined) kitRequest.clientAddress = options.clientAddress;
    const route = options.route ?? `${kitRequest.method} ${kitRequest.url.pathname}`;
    const permissions = this.routePermissions(options.permissions, `kit.authenticate (${route})`);
    const context = await this.authenticateRequest(kitRequest, route);
    this.requirePermissions(context, permissions);
    return context;
  }

  /** `authenticate` over the kit's own request shape (what adapters call). */
  async authenticateRequest(request: KitRequest, route: string, explicitSignup = false): Promise<AgentContext> {
    return this.#authenticator.authenticate(request, route, explicitSignup);
  }

  // ---------------------------------------------------------------- bounded authority

  /**
   * The permissions a caller holds (docs/authority.md): its token's grant when it carries one, else
   * the declared default permissions (so also for a request without an attestation, or an anonymous
   * caller). A person's MCP client holds the scopes the person consented to.
   */
  heldPermissions(context: AgentContext | BearerContext | null): string[] {
    return [...this.#authority.held(context === null ? undefined : holderOf(context))];
  }

  /** Throws 403 `insufficient_permission` (naming the missing ones) unless the caller holds every one of `permissions`. */
  requirePermissions(context: AgentContext | BearerContext | null, permissions: readonly string[]): void {
    if (permissions.length > 0) this.#authority.require(context === null ? undefined : holderOf(context), permissions);
  }

  /**
   * Spends under the agent's grant (docs/authority.md): the spending permission must be granted
   * with a spend limit; `per_transaction`, then `per_period` for the current calendar period,
   * counted atomically; the same `reference` again answers the first spend. Throws 403
   * `insufficient_permission` or `spend_limit_exceeded` (with `details.remaining`), 409
   * `kit_spend_reference_reused`, 400 `malformed_request` for an amount, currency or reference out
   * of bounds.
   */
  async spend(context: AgentContext | BearerAgent, request: SpendRequest): Promise<SpendResult> {
    const holder = holderOf(context);
    const did = "kind" in context ? context.agentDid : context.did;
    return this.#authority.spend({ ...holder, did, accountId: context.record.id }, request);
  }

  /**
   * @internal A route's `permissions`, checked when the route is defined (adapters call it): each
   * must be declared, else a `KitConfigError` naming `where`.
   */
  routePermissions(permissions: readonly string[] | undefined, where: string): readonly string[] {
    return this.#authority.routePermissions(permissions, where);
  }

  // ---------------------------------------------------------------- protected resources (MCP)

  /**
   * An OAuth protected resource of this service (an MCP endpoint at `path`): RFC 9728 metadata
   * naming the accepted attestors as its authorization servers, and the offline check of the RFC 9068
   * access tokens they issue, whose agents land in the accounts their signed requests use. Mount it
   * with `mcpRoute` (Fastify), or its `handleMetadata`, `authenticate` and `errorToResponse`.
   * The discovery document names it as the service's MCP endpoint (`mcp`) unless it names one
   * already or `advertise` is false.
   */
  protectedResource(options: ProtectedResourceOptions): ProtectedResource {
    const resource = new ProtectedResource(
      {
        origin: this.origin,
        serviceDid: this.serviceDid,
        serviceName: this.#options.serviceName,
        permissionNames: Object.keys(this.permissions),
        attestors: this.attestors,
        store: this.store,
        skewSeconds: this.#skewSeconds,
        now: this.#now,
        resolveAgent: (did, evidence, route) => this.#authenticator.resolveTokenActor(did, evidence, route),
        accountResource: (record) => this.accountResource(record),
        canonicalIdentity: (input) => this.sessions.canonicalIdentity(input),
        errorResponse: (error, request) => this.errorResponse(error, request),
      },
      options,
    );
    if (options.advertise !== false) advertiseMcp(this.discovery, resource);
    return resource;
  }

  // ---------------------------------------------------------------- owner sessions

  /** The owner session of a request (cookie), if any. */
  async ownerSession(
    request: Request | Headers | Record<string, string | string[] | undefined>,
  ): Promise<OwnerSession | undefined> {
    const headers = request instanceof Request ? request.headers : toHeaders(request);
    return this.sessions.fromHeaders(headers);
  }

  /**
   * Starts an owner session for identities the service verified itself (its own e-mail login, say).
   * Answers the `Set-Cookie` value to send. Without `authenticatedAt` the session never passes the
   * freshness check of owner-binding operations.
   */
  async createOwnerSession(
    input: NewOwnerSession,
  ): Promise<{ token: string; setCookie: string; session: OwnerSession }> {
    return this.sessions.create(input);
  }

  /**
   * Owner re-key (upstream §8.2) for a service's own pages: what `POST {key_rekey}` does, for a
   * session the service already holds. Throws a `ProtoError` with the upstream code.
   */
  async rekeyAccount(session: OwnerSession, currentDid: string, newDid: string): Promise<RekeyResult> {
    return rekeyAccount(this.#core, session, currentDid, newDid);
  }

  /** Owner revocation (upstream §8.4) for a service's own pages: what `POST {key_revocation}` does. */
  async revokeAccountKey(
    session: OwnerSession,
    target: { account_id: string } | { agent_did: string },
  ): Promise<RevocationResult> {
    return revokeAccountKey(this.#core, session, target);
  }

  /** The account resource of a stored account, now. */
  accountResource(record: AccountRecord): AccountResource {
    return toAccountResource(record, this.#now(), this.#options.ttlSeconds);
  }

  // ---------------------------------------------------------------- routing

  /**
   * The kit's endpoints as a Fetch handler: answers a `Response`, or `undefined` when the request is
   * not for one of them (let your framework continue).
   */
  async handle(request: Request, options: HandleOptions = {}): Promise<Response | undefined> {
    const { pathname } = new URL(request.url);
    const route = this.#route(request.method.toUpperCase(), pathname);
    if (route === undefined) return undefined;
    let kitRequest: KitRequest;
    try {
      kitRequest = await fromFetchRequest(request, this.origin, this.#options.maxBodyBytes);
    } catch (error) {
      return toFetchResponse(route.refuse(error, request));
    }
    if (options.target !== undefined) kitRequest.target = options.target;
    if (options.clientAddress !== undefined) kitRequest.clientAddress = options.clientAddress;
    return toFetchResponse(await this.dispatch(kitRequest));
  }

  /** Whether the kit answers `METHOD pathname` (adapters hand everything else on to the application). */
  hasRoute(method: string, pathname: string): boolean {
    return this.#route(method.toUpperCase(), pathname) !== undefined;
  }

  /** Runs the kit route for a request in the kit's own shape; 404 `not_found` when there is none. */
  async dispatch(request: KitRequest): Promise<KitResponse> {
    const route = this.#route(request.method, request.url.pathname);
    if (route === undefined) return errorResponse(kitError("not_found"));
    return route.handler(request);
  }

  /**
   * The answer to an error of a kit route raised before its handler ran (a body over
   * `maxBodyBytes`, one that cannot be read), in the route's format: the envelope, or an HTML page
   * on the routes people use (the claim page's forms, sign-in). `path` may be the route's pattern.
   */
  routeErrorResponse(method: string, path: string, error: unknown, request: { headers: Headers }): KitResponse {
    const route = this.#route(method.toUpperCase(), path);
    return route === undefined ? this.errorResponse(error, request) : route.refuse(error, request);
  }

  /** The route of a path: exact, or a route whose last segment is the `:token` parameter. */
  #route(method: string, pathname: string): MountedRoute | undefined {
    const verb = method === "HEAD" ? "GET" : method;
    const exact = this.#routes.get(`${verb} ${pathname}`);
    if (exact !== undefined) return exact;
    const slash = pathname.lastIndexOf("/");
    if (slash <= 0 || slash === pathname.length - 1) return undefined;
    return this.#routes.get(`${verb} ${pathname.slice(0, slash)}/:token`);
  }

  /**
   * The error envelope for anything thrown (unexpected errors become 500 `internal_error` and are
   * reported), with the `Proto` challenge on a 401 (upstream §5.7): pass the request so that the
   * challenge names the error only when the request attempted the protocol.
   */
  #webBotAuthVerifier(
    options: false | KitWebBotAuthOptions | undefined,
    nonceStore: NonceStore,
    skewSeconds: number | undefined,
  ): WebBotAuthVerifier | undefined {
    if (options === false) return undefined;
    const keys =
      options?.keys ??
      keyDirectorySource({
        now: this.#now,
        ...(options?.fetch === undefined ? {} : { fetch: options.fetch }),
        ...(options?.directory === undefined ? {} : { directory: options.directory }),
        ...(options?.newDirectoriesPerMinute === undefined
          ? {}
          : { newDirectoriesPerMinute: options.newDirectoriesPerMinute }),
        ...(options?.newDirectoriesPerClientPerMinute === undefined
          ? {}
          : { newDirectoriesPerClientPerMinute: options.newDirectoriesPerClientPerMinute }),
      });
    return createWebBotAuthVerifier({
      keys,
      nonceStore,
      now: this.#now,
      isRevoked: (did) => this.store.isRevoked(did),
      ...(skewSeconds === undefined ? {} : { skewSeconds }),
      ...(options?.maxValiditySeconds === undefined ? {} : { maxValiditySeconds: options.maxValiditySeconds }),
    });
  }

  errorResponse(error: unknown, request?: { headers: Headers }): KitResponse {
    const { error: protoErr, unexpected } = asProtoError(error);
    if (unexpected) this.#onError(error);
    return this.#challenged(errorResponse(protoErr), protoErr, request);
  }

  /** `errorResponse` as a Fetch `Response`. */
  errorToResponse(error: unknown, request?: { headers: Headers }): Response {
    return toFetchResponse(this.errorResponse(error, request));
  }

  #challenged(response: KitResponse, error: ProtoError, request: { headers: Headers } | undefined): KitResponse {
    if (response.status === 403 && error.code === "insufficient_permission") {
      // What to ask the person for, and where: the agent reads it without parsing the body.
      const details = error.details ?? {};
      const challenge = formatProtoChallenge({
        discovery: `${this.origin}/.well-known/proto`,
        realm: this.serviceDid,
        error: error.code,
        permissions: Array.isArray(details.missing) ? details.missing.map(String) : [],
        ...(typeof details.attestor === "string" ? { attestor: details.attestor } : {}),
      });
      const headers = { ...response.headers };
      headers["www-authenticate"] = appendChallenge(headers["www-authenticate"], challenge);
      return { ...response, headers };
    }
    if (response.status !== 401) return response;
    const attempted = request !== undefined && attemptedProtocol(request.headers);
    const challenge = formatProtoChallenge({
      discovery: `${this.origin}/.well-known/proto`,
      realm: this.serviceDid,
      ...(attempted ? { error: error.code } : {}),
      ...(error.code === "attestation_required" || error.code === "invalid_attestation"
        ? { attestors: this.discovery.billing?.accepted_attestors ?? [] }
        : {}),
      ...(error.code === "owner_authentication_required"
        ? { ownerLogin: `${this.origin}${this.ownerPath}/signin` }
        : {}),
    });
    const headers = { ...response.headers };
    headers["www-authenticate"] = appendChallenge(headers["www-authenticate"], challenge);
    // A Web Bot Auth caller learns which signatures would do (RFC 9421 §5), as a CDN would tell it.
    if (
      attempted &&
      request !== undefined &&
      signatureProfiles((name) => request.headers.get(name) ?? undefined).webBotAuth
    ) {
      headers["accept-signature"] = acceptSignature(hasBody(request.headers));
    }
    return { ...response, headers };
  }

  #json(handler: Handler): MountedRoute {
    return this.#guarded(handler, (error, request) => this.errorResponse(error, request));
  }

  #page(handler: Handler, title?: string): MountedRoute {
    return this.#guarded(handler, (error, request) => this.#errorPage(error, request, title));
  }

  /** A route whose errors, thrown or refused before it runs, answer in its own format. */
  #guarded(handler: Handler, refuse: MountedRoute["refuse"]): MountedRoute {
    return {
      refuse,
      handler: async (request) => {
        try {
          return await handler(request);
        } catch (error) {
          return refuse(error, request);
        }
      },
    };
  }

  #errorPage(error: unknown, request: { headers: Headers }, title?: string): KitResponse {
    const { error: protoErr, unexpected } = asProtoError(error);
    if (unexpected) this.#onError(error);
    const page = errorPage(protoErr.status, protoErr.code, protoErr.message, title, this.#options.serviceName);
    return this.#challenged({ ...page, headers: { ...page.headers, ...protoErr.headers() } }, protoErr, request);
  }

  #mountRoutes(): void {
    const core = this.#core;
    const endpoints = this.discovery.endpoints;
    const add = (method: "GET" | "POST", path: string, route: MountedRoute) => {
      const key = `${method} ${path}`;
      if (this.#routes.has(key)) throw new Error(`two kit routes at ${key}`);
      this.#routes.set(key, route);
    };
    add(
      "GET",
      "/.well-known/proto",
      this.#json(async () =>
        jsonResponse(200, this.discovery, {
          "cache-control": "public, max-age=300",
          "access-control-allow-origin": "*",
        }),
      ),
    );
    add("POST", endpoints.accounts, this.#json(signupHandler(core)));
    add("GET", `${endpoints.accounts}/me`, this.#json(introspectionHandler(core)));
    add("POST", endpoints.owner_invitation, this.#json(invitationHandler(core)));
    if (endpoints.key_rotation !== undefined) add("POST", endpoints.key_rotation, this.#json(keyRotationHandler(core)));
    const claimPage = new URL(endpoints.claim_page);
    const owner = this.ownerPath;
    if (claimPage.origin === this.origin) {
      add("GET", claimPage.pathname, this.#page(claimPageHandler(core)));
      // The e-mail ceremony's button on that page.
      add("POST", `${owner}${EMAIL_SIGNIN_PATH}`, this.#page(emailSignInHandler(core), "This link cannot be used"));
    }
    // Answers in the request's own format (JSON, or a page for the claim page's form).
    add("POST", `${endpoints.claim_completion}/:token`, {
      handler: claimCompletionHandler(core),
      refuse: (error, request) =>
        isForm(request.headers) ? this.#errorPage(error, request) : this.errorResponse(error, request),
    });
    add("GET", `${owner}/signin`, this.#page(signInStartHandler(core), "Sign-in failed"));
    add("GET", `${owner}/callback`, this.#page(signInCallbackHandler(core), "Sign-in failed"));
    add("POST", `${owner}/signout`, this.#json(signOutHandler(core)));
    add("GET", `${owner}/accounts`, this.#json(ownedAccountsHandler(core)));
    // Owner re-key and revocation (upstream §8.2, §8.4): owner session only, advertised in discovery.
    if (endpoints.key_rekey !== undefined) add("POST", endpoints.key_rekey, this.#json(keyRekeyHandler(core)));
    if (endpoints.key_revocation !== undefined) {
      add("POST", endpoints.key_revocation, this.#json(keyRevocationHandler(core)));
    }
    // Development only (never in production: `createKit` refuses the option there).
    const outbox = this.#mail?.outbox;
    if (outbox !== undefined)
      add("GET", `${owner}/dev/outbox`, this.#page(outboxHandler(outbox, this.#options.serviceName), "Outbox"));
  }

  /** The development outbox's mails, newest first (`mail.developmentOutbox`); undefined without it. */
  get outbox(): readonly OutboxEntry[] | undefined {
    return this.#mail?.outbox?.entries;
  }

  // ---------------------------------------------------------------- housekeeping

  /** Deletes expired sessions, sign-in requests and old rate counters (also runs every 10 minutes). */
  async purgeExpired(): Promise<void> {
    const now = this.#now();
    await this.store.purgeExpired(now, now - 2 * RATE_WINDOW_SECONDS * 1000);
  }

  async close(): Promise<void> {
    clearInterval(this.#timer);
    await this.#mail?.close();
    if (this.#ownsStore) await this.store.close();
  }
}

/** The grant a caller's token carried, and its attestor: what bounded authority decides on. */
function holderOf(context: AgentContext | BearerContext): AuthorityHolder {
  if (!("kind" in context)) {
    return { grant: context.attestation?.grant, issuer: context.attestation?.canonicalIssuer };
  }
  if (context.kind === "agent") return { grant: context.grant, issuer: context.issuer };
  return { grant: undefined, issuer: context.issuer, consented: context.scopes };
}

/** Creates the kit: opens (and migrates) the store unless one is given, builds and validates the discovery document. */
export async function createKit(options: KitOptions): Promise<Kit> {
  // Before the store is opened: a kit no agent could call never touches the database.
  checkPublicUrl(options.publicUrl, options.allowHttp === true);
  if (options.store !== undefined) return new Kit(options, options.store, false);
  if (options.database === undefined) {
    throw new KitConfigError("database", "createKit needs database (sqlite:PATH or postgres://...) or store");
  }
  const store = await openKitStore(options.database);
  try {
    return new Kit(options, store, true);
  } catch (error) {
    await store.close();
    throw error;
  }
}

/** The request-target of a URL as the caller spelled it; its parsed form only when it cannot be split. */
function exactTarget(spelled: string, parsed: URL): string {
  try {
    return requestTargetOf(spelled);
  } catch {
    return `${parsed.pathname}${parsed.search}`;
  }
}
