import {
  ATTESTATION_HEADER,
  createRequestVerifier,
  type DiscoveryDocument,
  type FetchFunction,
  invitationNotFound,
  isDidKey,
  MemoryNonceStore,
  type NonceStore,
  ownerAuthenticationRequired,
  protoError,
  type RawRequest,
  type Recipient,
  type RequestVerifier,
  rateLimitExceeded,
  recipientKey,
  sameOriginPath,
  type UnclaimedMode,
  type VerifiedRequest,
} from "@proto/protocol";
import { type AttestorConfig, AttestorRegistry, type KitAttestation } from "./attestors.js";
import { buildDiscoveryDocument, type DiscoveryInput } from "./discovery.js";
import { asProtoError, kitError } from "./errors.js";
import {
  DEFAULT_MAX_BODY_BYTES,
  errorResponse,
  fromFetchRequest,
  jsonResponse,
  type KitRequest,
  type KitResponse,
  redirectResponse,
  toFetchResponse,
  toHeaders,
} from "./http.js";
import { claimedPage, claimPage, errorPage } from "./pages.js";
import { MemoryRateLimiter, type RateLimiter, StoreRateLimiter } from "./rate-limit.js";
import { type AccountResource, accountExpiresAt, toAccountResource } from "./resource.js";
import { identityKeys, type NewOwnerSession, type OwnerSession, OwnerSessions } from "./sessions.js";
import { AttestorSignIn } from "./signin.js";
import { openKitStore } from "./store/kysely-store.js";
import type { AccountRecord, AttestationUpdate, KitStore, PersonRecord } from "./store/types.js";
import { hashToken, isoTime, randomToken, safeEqual } from "./util.js";

export const DEFAULT_OWNER_PATH = "/proto/owner";
export const DEFAULT_INVITATION_TTL_SECONDS = 7 * 86400;
export const DEFAULT_OWNER_FRESHNESS_SECONDS = 300;
export const DEFAULT_OWNER_SESSION_TTL_SECONDS = 86400;
export const DEFAULT_EXTENDED_SESSION_SECONDS = 3600;
const RATE_WINDOW_SECONDS = 3600;
const MAX_CLAIM_TOKEN_LENGTH = 256;

/** Attested sessions (feature `attested_session`): how long one presented attestation keeps an unclaimed account usable. */
export type AttestedSessionOptions =
  /** Until the attestation's own `exp` (at most 900 s). */
  | { mode: "strict" }
  /** Until `seconds` (900-86400, default 3600) after the latest presentation, and at least the `exp`. */
  | { mode: "extended"; seconds?: number };

export interface KitOptions {
  /** The public origin agents sign (`https://api.example.com`), whatever address the process listens on. */
  publicUrl: string;
  /** The discovery document, or the parts to build it from (`buildDiscoveryDocument`). */
  discovery: DiscoveryInput | DiscoveryDocument;
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
  /** Per-route, per-DID hourly limit for claimed accounts (default: none). */
  claimedRateLimitPerHour?: number;
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
  /** Called after an owner invitation is staged: deliver the claim link to the recipient if you wish. */
  onInvitation?: (event: InvitationEvent) => void | Promise<void>;
  /** Unexpected errors (answered 500 `internal_error`). Default: `console.error`. */
  onError?: (error: unknown) => void;
}

export interface InvitationEvent {
  account: AccountResource;
  recipient: Recipient;
  claimUrl: string;
  token: string;
  expiresAt: string;
}

/** What a verified agent request carries. */
export interface AgentContext {
  did: string;
  account: AccountResource;
  record: AccountRecord;
  /** True when this request created the account (implicit or explicit signup). */
  created: boolean;
  attestation: KitAttestation | undefined;
  signature: VerifiedRequest;
  /** The verified body bytes (undefined without a body). */
  body: Uint8Array | undefined;
  /** The body as a JSON object; throws `malformed_request`. */
  json(): Record<string, unknown>;
}

export interface AuthenticateOptions {
  /** The rate-limit bucket of the route (default `METHOD /path`). */
  route?: string;
  /** The absolute URL the client signed, when the request's own URL is not on the public origin. */
  url?: string;
}

export interface KitRoute {
  method: "GET" | "POST";
  path: string;
}

type Handler = (request: KitRequest) => Promise<KitResponse>;

interface ResolvedOptions {
  implicitSignup: boolean;
  mode: UnclaimedMode;
  attestedSession: { mode: "strict" | "extended"; seconds: number } | undefined;
  invitationTtlSeconds: number;
  freshnessSeconds: number;
  unclaimedLimit: number | undefined;
  claimedLimit: number | undefined;
  ttlSeconds: number | undefined;
  recipientTypes: readonly string[];
  maxBodyBytes: number;
}

function parseJsonObject(body: Uint8Array | undefined): Record<string, unknown> {
  if (body === undefined || body.byteLength === 0)
    throw protoError("malformed_request", { message: "a JSON body is required" });
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(body).toString("utf8"));
  } catch {
    throw protoError("malformed_request", { message: "body is not valid JSON" });
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw protoError("malformed_request", { message: "body must be a JSON object" });
  }
  return value as Record<string, unknown>;
}

function isJson(headers: Headers): boolean {
  return /^application\/([a-z0-9.+-]*\+)?json\s*(;|$)/i.test(headers.get("content-type") ?? "");
}

function isForm(headers: Headers): boolean {
  return /^application\/x-www-form-urlencoded\s*(;|$)/i.test(headers.get("content-type") ?? "");
}

function requireDidKey(value: unknown, field: string): string {
  if (typeof value !== "string") throw protoError("malformed_request", { message: `${field} is required` });
  if (!isDidKey(value)) throw protoError("malformed_request", { message: `${field} must be an Ed25519 did:key` });
  return value;
}

function checkRange(name: string, value: number, min: number, max: number): number {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new RangeError(`${name} must be an integer from ${min} to ${max}`);
  }
  return value;
}

/**
 * The framework-agnostic core of the kit: request verification, the account lifecycle, owner
 * invitations and claims, sign-in with the attestor, and the discovery document. Create it with
 * `createKit`; mount it with `createService` (Fastify) or `kit.handle` (Fetch API).
 */
export class Kit {
  readonly discovery: DiscoveryDocument;
  readonly serviceDid: string;
  /** The public origin (`https://api.example.com`). */
  readonly origin: string;
  readonly ownerPath: string;
  readonly store: KitStore;
  readonly attestors: AttestorRegistry;
  readonly sessions: OwnerSessions;
  readonly signIn: AttestorSignIn;
  readonly #verifier: RequestVerifier;
  readonly #limiter: RateLimiter;
  readonly #now: () => number;
  readonly #options: ResolvedOptions;
  readonly #onInvitation: KitOptions["onInvitation"];
  readonly #onError: (error: unknown) => void;
  readonly #ownsStore: boolean;
  readonly #routes = new Map<string, Handler>();
  readonly #claimPagePath: string | undefined;
  readonly #timer: NodeJS.Timeout;

  /** @internal use `createKit`. */
  constructor(options: KitOptions, store: KitStore, ownsStore: boolean) {
    const publicUrl = new URL(options.publicUrl);
    this.origin = publicUrl.origin;
    this.#now = options.now ?? Date.now;
    const attestorConfig = options.attestors ?? {};
    const discovery = buildDiscoveryDocument(options.discovery as DiscoveryInput, {
      publicUrl: this.origin,
      acceptedAttestors: Object.keys(attestorConfig),
    });
    this.discovery = discovery;
    this.serviceDid = discovery.service_did;
    const mode = discovery.billing?.unclaimed_mode ?? "attested_only";
    const accepted = discovery.billing?.accepted_attestors ?? [];
    if (mode === "attested_only" && accepted.length === 0) {
      throw new Error(
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
    };
    this.#verifier = createRequestVerifier({
      nonceStore: options.nonceStore ?? new MemoryNonceStore({ now: this.#now }),
      now: this.#now,
      isRevoked: (did) => this.store.isRevoked(did),
      maxBodyBytes: this.#options.maxBodyBytes,
      ...(options.skewSeconds === undefined ? {} : { skewSeconds: options.skewSeconds }),
    });
    const limiter = options.rateLimiter ?? "store";
    this.#limiter =
      limiter === "store" ? new StoreRateLimiter(store) : limiter === "memory" ? new MemoryRateLimiter() : limiter;
    this.#onInvitation = options.onInvitation;
    this.#onError = options.onError ?? ((error) => console.error("proto kit:", error));
    this.ownerPath = (options.ownerPath ?? DEFAULT_OWNER_PATH).replace(/\/+$/, "");
    if (!this.ownerPath.startsWith("/")) throw new Error("ownerPath must start with /");
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
    });
    const claimPage = new URL(discovery.endpoints.claim_page);
    this.#claimPagePath = claimPage.origin === this.origin ? claimPage.pathname : undefined;
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
   * public URL and the exact body bytes. Throws a `ProtoError` (answer it with `errorToResponse`).
   */
  async authenticate(request: Request | RawRequest, options: AuthenticateOptions = {}): Promise<AgentContext> {
    let kitRequest: KitRequest;
    if (request instanceof Request) {
      kitRequest = await fromFetchRequest(request.clone(), this.origin, this.#options.maxBodyBytes);
      if (options.url !== undefined) kitRequest.url = new URL(options.url);
    } else {
      const body = request.body;
      kitRequest = {
        method: request.method.toUpperCase(),
        url: new URL(options.url ?? request.url),
        headers: toHeaders(request.headers as Headers | Record<string, string | string[] | undefined>),
        body: body === undefined || body === null ? undefined : typeof body === "string" ? Buffer.from(body) : body,
      };
    }
    return this.authenticateRequest(kitRequest, options.route ?? `${kitRequest.method} ${kitRequest.url.pathname}`);
  }

  /** `authenticate` over the kit's own request shape (what adapters call). */
  async authenticateRequest(request: KitRequest, route: string, explicitSignup = false): Promise<AgentContext> {
    const signature = await this.#verifier.verify({
      method: request.method,
      url: request.url.href,
      headers: request.headers,
      body: request.body,
    });
    const did = signature.keyid;
    const jwt = request.headers.get(ATTESTATION_HEADER);
    const attestation = jwt === null ? undefined : await this.attestors.verify(jwt, did);
    const now = this.#now();
    const options = this.#options;
    let record = await this.store.findAccountByDid(did);
    let created = false;
    if (record === undefined) {
      if (options.mode === "denied" || (!explicitSignup && !options.implicitSignup)) {
        throw protoError("unknown_account", {
          message:
            options.mode === "denied"
              ? "this service does not accept unclaimed signups"
              : "no account for this DID; sign up first",
        });
      }
      // attested_only: refused before any state change (no account, no person, no counter).
      if (options.mode === "attested_only" && (attestation === undefined || attestation.subH === undefined)) {
        throw protoError("attestation_required", {
          message:
            attestation === undefined
              ? "signup needs a Proto-Attestation from an accepted attestor"
              : "the attestation asserts no verified human",
        });
      }
      await this.#rateLimit(route, did, options.unclaimedLimit, now);
      const person =
        attestation?.subH === undefined
          ? undefined
          : await this.store.upsertPerson(attestation.canonicalIssuer, attestation.subH, now);
      ({ account: record, created } = await this.store.createAccount({
        did,
        now,
        personId: person?.id,
        attestation: attestation === undefined ? undefined : this.#attestationUpdate(attestation, now),
      }));
    } else {
      const expiresAt = accountExpiresAt(record, options.ttlSeconds);
      if (expiresAt !== undefined && now >= expiresAt) {
        throw protoError("account_expired", { message: "this unclaimed account expired" });
      }
      const claimed = record.claimedAt !== undefined;
      await this.#rateLimit(route, did, claimed ? options.claimedLimit : options.unclaimedLimit, now);
      if (attestation !== undefined) {
        record = await this.#renewAttestation(record, attestation, now);
      } else if (this.#sessionEnforced(record) && !(record.attestedUntil !== undefined && record.attestedUntil > now)) {
        throw protoError("attestation_required", {
          message: "the attested session lapsed; present a fresh Proto-Attestation",
        });
      }
    }
    const account = toAccountResource(record, now, options.ttlSeconds);
    const body = signature.body;
    return {
      did,
      account,
      record,
      created,
      attestation,
      signature,
      body,
      json: () => parseJsonObject(body),
    };
  }

  #sessionEnforced(record: AccountRecord): boolean {
    return (
      this.#options.attestedSession !== undefined &&
      this.#options.mode === "attested_only" &&
      record.claimedAt === undefined
    );
  }

  #attestationUpdate(attestation: KitAttestation, now: number): AttestationUpdate {
    const exp = attestation.expiresAt * 1000;
    const session = this.#options.attestedSession;
    const until = session?.mode === "extended" ? Math.max(exp, now + session.seconds * 1000) : exp;
    return { issuer: attestation.canonicalIssuer, verification: attestation.verification, at: now, until };
  }

  async #renewAttestation(record: AccountRecord, attestation: KitAttestation, now: number): Promise<AccountRecord> {
    const update = this.#attestationUpdate(attestation, now);
    const extended = this.#options.attestedSession?.mode === "extended";
    const needsPerson = record.personId === undefined && attestation.subH !== undefined;
    const previous = record.attestedUntil ?? 0;
    // One write per new attestation (strict), at most one a minute while re-presenting (extended).
    if (!needsPerson && update.until <= previous + (extended ? 60_000 : 0)) return record;
    const person =
      needsPerson && attestation.subH !== undefined
        ? await this.store.upsertPerson(attestation.canonicalIssuer, attestation.subH, now)
        : undefined;
    const until = Math.max(update.until, previous);
    await this.store.recordAttestation(record.id, person?.id, { ...update, until });
    return {
      ...record,
      personId: record.personId ?? person?.id,
      attestedIssuer: update.issuer,
      attestedVerification: update.verification,
      attestedAt: update.at,
      attestedUntil: until,
    };
  }

  async #rateLimit(route: string, did: string, limit: number | undefined, now: number): Promise<void> {
    if (limit === undefined) return;
    const decision = await this.#limiter.hit(`${route}\n${did}`, limit, RATE_WINDOW_SECONDS, now);
    if (!decision.allowed) {
      throw rateLimitExceeded(decision.retryAfterSeconds, `at most ${limit} requests an hour on this route`);
    }
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

  /** The account resource of a stored account, now. */
  accountResource(record: AccountRecord): AccountResource {
    return toAccountResource(record, this.#now(), this.#options.ttlSeconds);
  }

  // ---------------------------------------------------------------- routing

  /**
   * The kit's endpoints as a Fetch handler: answers a `Response`, or `undefined` when the request is
   * not for one of them (let your framework continue).
   */
  async handle(request: Request): Promise<Response | undefined> {
    const method = request.method.toUpperCase();
    const { pathname } = new URL(request.url);
    const handler = this.#routes.get(`${method === "HEAD" ? "GET" : method} ${pathname}`);
    if (handler === undefined) return undefined;
    let kitRequest: KitRequest;
    try {
      kitRequest = await fromFetchRequest(request, this.origin, this.#options.maxBodyBytes);
    } catch (error) {
      return toFetchResponse(this.#errorResponse(error));
    }
    return toFetchResponse(await this.dispatch(kitRequest));
  }

  /** Runs the kit route for a request in the kit's own shape; 404 `not_found` when there is none. */
  async dispatch(request: KitRequest): Promise<KitResponse> {
    const method = request.method === "HEAD" ? "GET" : request.method;
    const handler = this.#routes.get(`${method} ${request.url.pathname}`);
    if (handler === undefined) return errorResponse(kitError("not_found"));
    return handler(request);
  }

  #errorResponse(error: unknown): KitResponse {
    const { error: protoErr, unexpected } = asProtoError(error);
    if (unexpected) this.#onError(error);
    return errorResponse(protoErr);
  }

  #json(handler: Handler): Handler {
    return async (request) => {
      try {
        return await handler(request);
      } catch (error) {
        return this.#errorResponse(error);
      }
    };
  }

  #page(handler: Handler, title?: string): Handler {
    return async (request) => {
      try {
        return await handler(request);
      } catch (error) {
        const { error: protoErr, unexpected } = asProtoError(error);
        if (unexpected) this.#onError(error);
        return errorPage(protoErr.status, protoErr.code, protoErr.message, title);
      }
    };
  }

  #mountRoutes(): void {
    const endpoints = this.discovery.endpoints;
    const add = (method: "GET" | "POST", path: string, handler: Handler) => {
      const key = `${method} ${path}`;
      if (this.#routes.has(key)) throw new Error(`two kit routes at ${key}`);
      this.#routes.set(key, handler);
    };
    add("GET", "/.well-known/proto", async () =>
      jsonResponse(200, this.discovery, {
        "cache-control": "public, max-age=300",
        "access-control-allow-origin": "*",
      }),
    );
    add(
      "POST",
      endpoints.accounts,
      this.#json((r) => this.#signup(r)),
    );
    add(
      "GET",
      `${endpoints.accounts}/me`,
      this.#json((r) => this.#me(r)),
    );
    add(
      "POST",
      endpoints.owner_invitation,
      this.#json((r) => this.#invite(r)),
    );
    if (endpoints.key_rotation !== undefined)
      add(
        "POST",
        endpoints.key_rotation,
        this.#json((r) => this.#rotate(r)),
      );
    if (this.#claimPagePath !== undefined)
      add(
        "GET",
        this.#claimPagePath,
        this.#page((r) => this.#claimPage(r)),
      );
    add("POST", endpoints.claim_completion, (r) => this.#claimCompletion(r));
    const owner = this.ownerPath;
    add(
      "GET",
      `${owner}/signin`,
      this.#page((r) => this.#signInStart(r), "Sign-in failed"),
    );
    add(
      "GET",
      `${owner}/callback`,
      this.#page((r) => this.#signInCallback(r), "Sign-in failed"),
    );
    add(
      "POST",
      `${owner}/signout`,
      this.#json((r) => this.#signOut(r)),
    );
    add(
      "GET",
      `${owner}/accounts`,
      this.#json((r) => this.#ownedAccounts(r)),
    );
    add(
      "POST",
      `${owner}/accounts/revoke`,
      this.#json((r) => this.#ownerRevoke(r)),
    );
    add(
      "POST",
      `${owner}/accounts/rekey`,
      this.#json((r) => this.#ownerRekey(r)),
    );
  }

  // ---------------------------------------------------------------- agent endpoints

  async #signup(request: KitRequest): Promise<KitResponse> {
    const context = await this.authenticateRequest(request, "accounts.signup", true);
    return jsonResponse(context.created ? 201 : 200, { account: context.account });
  }

  async #me(request: KitRequest): Promise<KitResponse> {
    const context = await this.authenticateRequest(request, "accounts.me");
    return jsonResponse(200, { account: context.account });
  }

  async #invite(request: KitRequest): Promise<KitResponse> {
    const context = await this.authenticateRequest(request, "owner_invitation");
    const body = context.json();
    const raw = body.recipient;
    if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
      throw protoError("malformed_request", { message: "recipient {type, value} is required" });
    }
    const type = (raw as Record<string, unknown>).type;
    if (typeof type !== "string") throw protoError("malformed_request", { message: "recipient.type must be a string" });
    if (!this.#options.recipientTypes.includes(type)) {
      throw protoError("unsupported_recipient_type", {
        message: `this service accepts recipients of type ${this.#options.recipientTypes.join(", ")}`,
      });
    }
    let recipient: Recipient;
    try {
      recipient = this.sessions.canonicalIdentity(raw);
    } catch (error) {
      throw protoError("malformed_request", {
        message: (error as Error).message.replace(/^invalid identity: /, "recipient: "),
      });
    }
    if (context.record.claimedAt !== undefined) throw protoError("already_claimed");
    const now = this.#now();
    const token = randomToken("clm_");
    const invitation = await this.store.replaceInvitation({
      accountId: context.record.id,
      tokenHash: hashToken(token),
      recipient,
      recipientKey: recipientKey(recipient),
      now,
      expiresAt: now + this.#options.invitationTtlSeconds * 1000,
    });
    const record: AccountRecord = { ...context.record, invitation };
    const account = toAccountResource(record, now, this.#options.ttlSeconds);
    const claimUrl = new URL(this.discovery.endpoints.claim_page);
    claimUrl.searchParams.set("token", token);
    const expiresAt = isoTime(invitation.expiresAt);
    if (this.#onInvitation !== undefined) {
      try {
        await this.#onInvitation({ account, recipient, claimUrl: claimUrl.href, token, expiresAt });
      } catch (error) {
        this.#onError(error);
      }
    }
    return jsonResponse(201, {
      invitation: { recipient, claim_url: claimUrl.href, claim_token: token, expires_at: expiresAt },
      account,
    });
  }

  async #rotate(request: KitRequest): Promise<KitResponse> {
    const context = await this.authenticateRequest(request, "key_rotation");
    if (context.record.claimedAt !== undefined) {
      throw protoError("owner_binding_blocked", {
        message: "the account is claimed: only its owner can rotate the key",
      });
    }
    const newDid = requireDidKey(context.json().new_account_did, "new_account_did");
    if (newDid === context.did)
      throw protoError("malformed_request", { message: "new_account_did is the current DID" });
    const outcome = await this.store.rotateKey({
      accountId: context.record.id,
      fromDid: context.did,
      toDid: newDid,
      now: this.#now(),
      reason: "rotated",
      unclaimedOnly: true,
    });
    if (outcome === "did_in_use") throw kitError("kit_did_in_use");
    if (outcome === "stale")
      throw protoError("owner_binding_blocked", { message: "the account was claimed meanwhile" });
    return jsonResponse(200, { account: await this.#reload(context.record.id) });
  }

  async #reload(accountId: string): Promise<AccountResource> {
    const record = await this.store.findAccountById(accountId);
    if (record === undefined) throw new Error("account vanished");
    return this.accountResource(record);
  }

  // ---------------------------------------------------------------- claim

  /** The invitation a claim token names, checked in the order clients can act on. */
  async #claimable(token: unknown): Promise<{
    account: AccountRecord;
    invitationId: string;
    recipientKey: string;
    recipient: Recipient;
    expiresAt: number;
  }> {
    if (typeof token !== "string" || token.length === 0) {
      throw protoError("malformed_request", { message: "token is required" });
    }
    if (token.length > MAX_CLAIM_TOKEN_LENGTH) throw invitationNotFound();
    const invitation = await this.store.findInvitationByTokenHash(hashToken(token));
    if (invitation === undefined) throw invitationNotFound();
    const account = await this.store.findAccountById(invitation.accountId);
    if (account === undefined) throw invitationNotFound();
    if (account.claimedAt !== undefined) throw protoError("already_claimed");
    const now = this.#now();
    const accountExpiry = accountExpiresAt(account, this.#options.ttlSeconds);
    if (accountExpiry !== undefined && now >= accountExpiry) {
      throw protoError("account_expired", { message: "this unclaimed account expired" });
    }
    if (invitation.status === "replaced") {
      throw protoError("invitation_expired", { message: "this invitation was replaced by a newer one" });
    }
    if (invitation.status !== "pending" || invitation.expiresAt <= now) {
      throw protoError("invitation_expired", { message: "this invitation expired" });
    }
    return {
      account,
      invitationId: invitation.id,
      recipientKey: invitation.recipientKey,
      recipient: invitation.recipient,
      expiresAt: invitation.expiresAt,
    };
  }

  async #claimPage(request: KitRequest): Promise<KitResponse> {
    const token = request.url.searchParams.get("token") ?? "";
    if (token.length === 0) throw invitationNotFound({ message: "the claim link has no token" });
    const claim = await this.#claimable(token);
    const session = await this.sessions.fromHeaders(request.headers);
    const here = `${request.url.pathname}${request.url.search}`;
    return claimPage({
      agentDid: claim.account.did,
      recipient: claim.recipient,
      expiresAt: isoTime(claim.expiresAt),
      token,
      completionPath: this.discovery.endpoints.claim_completion,
      session:
        session === undefined
          ? undefined
          : { csrf: session.csrf, identities: session.identities.map((identity) => recipientKey(identity)) },
      signInLinks: this.attestors.signInAttestors().map((attestor) => ({
        label: attestor.url ?? attestor.name,
        href: `${this.ownerPath}/signin?${new URLSearchParams({ attestor: attestor.name, return_to: here })}`,
      })),
    });
  }

  async #claimCompletion(request: KitRequest): Promise<KitResponse> {
    const form = isForm(request.headers);
    try {
      let token: unknown;
      let csrf: string | undefined;
      if (form) {
        const params = new URLSearchParams(Buffer.from(request.body ?? new Uint8Array()).toString("utf8"));
        token = params.get("token") ?? undefined;
        csrf = params.get("csrf") ?? undefined;
      } else {
        if (!isJson(request.headers)) {
          throw protoError("malformed_request", { message: "send JSON (application/json) or a form" });
        }
        token = parseJsonObject(request.body).token;
      }
      const claim = await this.#claimable(token);
      const session = await this.sessions.fromHeaders(request.headers);
      if (session === undefined) {
        throw ownerAuthenticationRequired({ hasSession: false, message: "sign in to claim this account" });
      }
      // A form post must carry the session's form token (cross-site forms cannot read it).
      if (form && (csrf === undefined || !safeEqual(csrf, session.csrf))) throw kitError("kit_csrf");
      if (!this.sessions.isFresh(session, this.#options.freshnessSeconds)) {
        throw protoError("owner_session_too_stale", {
          message: `sign in again: claiming needs an authentication within ${this.#options.freshnessSeconds} seconds`,
        });
      }
      if (!identityKeys(session).has(claim.recipientKey)) {
        throw ownerAuthenticationRequired({
          hasSession: true,
          message: "you are signed in as someone other than the invitation's recipient",
        });
      }
      const now = this.#now();
      const claimed = await this.store.claim({
        invitationId: claim.invitationId,
        accountId: claim.account.id,
        ownerKey: claim.recipientKey,
        ownerRecipient: claim.recipient,
        ownerPersonId: session.personId,
        now,
      });
      if (!claimed) {
        // Lost a race with a replacement, an expiry or another claim: report what holds now.
        await this.#claimable(token);
        throw protoError("already_claimed");
      }
      const account = await this.#reload(claim.account.id);
      return form ? claimedPage(account.did) : jsonResponse(200, { account });
    } catch (error) {
      const { error: protoErr, unexpected } = asProtoError(error);
      if (unexpected) this.#onError(error);
      return form ? errorPage(protoErr.status, protoErr.code, protoErr.message) : errorResponse(protoErr);
    }
  }

  // ---------------------------------------------------------------- sign-in and owner endpoints

  async #signInStart(request: KitRequest): Promise<KitResponse> {
    const params = request.url.searchParams;
    const candidates = this.attestors.signInAttestors();
    const name = params.get("attestor") ?? (candidates.length === 1 ? candidates[0]?.name : undefined);
    if (name === undefined) throw kitError("kit_unknown_attestor", "say which attestor to sign in with (attestor=...)");
    const returnTo = this.#returnTo(params.get("return_to"));
    const { location, setCookie } = await this.signIn.start(name, returnTo);
    return redirectResponse(location, [setCookie]);
  }

  async #signInCallback(request: KitRequest): Promise<KitResponse> {
    const result = await this.signIn.complete(request.url, request.headers);
    // Checked again on the way out: a row written by an older kit was held to a weaker rule.
    return redirectResponse(this.#returnTo(result.returnTo), result.setCookies);
  }

  /** Where a sign-in returns: a path on this service's origin, else the owned accounts. */
  #returnTo(value: string | null): string {
    return sameOriginPath(value, this.origin) ?? `${this.ownerPath}/accounts`;
  }

  async #signOut(request: KitRequest): Promise<KitResponse> {
    const session = await this.sessions.fromHeaders(request.headers);
    const cookie = session === undefined ? this.sessions.clearCookie() : await this.sessions.destroy(session);
    return jsonResponse(200, { ok: true }, { "set-cookie": [cookie] });
  }

  async #requireSession(request: KitRequest): Promise<OwnerSession> {
    const session = await this.sessions.fromHeaders(request.headers);
    if (session === undefined) throw ownerAuthenticationRequired({ hasSession: false, message: "sign in first" });
    return session;
  }

  async #ownedAccounts(request: KitRequest): Promise<KitResponse> {
    const session = await this.#requireSession(request);
    const person: PersonRecord | undefined =
      session.personId === undefined ? undefined : await this.store.findPerson(session.personId);
    const keys = identityKeys(session);
    const records = await this.store.listAccountsForPerson(session.personId, [...keys]);
    const accounts = records.map((record) => ({
      ...this.accountResource(record),
      relation: this.#owns(session, keys, record) ? "owner" : "attested",
    }));
    return jsonResponse(200, {
      person:
        person === undefined
          ? null
          : { id: person.id, issuer: person.issuer, subject: person.subject, created_at: isoTime(person.createdAt) },
      identities: session.identities,
      authenticated_at: session.authenticatedAt === undefined ? null : isoTime(session.authenticatedAt),
      accounts,
    });
  }

  #owns(session: OwnerSession, keys: Set<string>, record: AccountRecord): boolean {
    if (record.claimedAt === undefined) return false;
    if (record.ownerPersonId !== undefined && record.ownerPersonId === session.personId) return true;
    return record.ownerKey !== undefined && keys.has(record.ownerKey);
  }

  /** Owner-binding operations: a session (401), a CLAIMED account (409), its owner (403), fresh (403). */
  async #ownerOperation(
    request: KitRequest,
  ): Promise<{ session: OwnerSession; record: AccountRecord; body: Record<string, unknown> }> {
    const session = await this.#requireSession(request);
    if (!isJson(request.headers)) {
      throw protoError("malformed_request", { message: "owner operations take a JSON body (application/json)" });
    }
    const body = parseJsonObject(request.body);
    const did = requireDidKey(body.did, "did");
    const record = await this.store.findAccountByDid(did);
    if (record === undefined) {
      throw ownerAuthenticationRequired({ hasSession: true, message: "you do not own an account with this DID" });
    }
    if (record.claimedAt === undefined) throw protoError("not_claimed", { message: "the account has no owner yet" });
    if (!this.#owns(session, identityKeys(session), record)) {
      throw ownerAuthenticationRequired({ hasSession: true, message: "you do not own this account" });
    }
    if (!this.sessions.isFresh(session, this.#options.freshnessSeconds)) {
      throw protoError("owner_session_too_stale", {
        message: `sign in again: this operation needs an authentication within ${this.#options.freshnessSeconds} seconds`,
      });
    }
    return { session, record, body };
  }

  async #ownerRevoke(request: KitRequest): Promise<KitResponse> {
    const { record } = await this.#ownerOperation(request);
    if (record.keyRevokedAt === undefined) {
      await this.store.revokeKey({ accountId: record.id, did: record.did, now: this.#now(), reason: "owner_revoked" });
    }
    return jsonResponse(200, { account: await this.#reload(record.id) });
  }

  async #ownerRekey(request: KitRequest): Promise<KitResponse> {
    const { record, body } = await this.#ownerOperation(request);
    const newDid = requireDidKey(body.new_account_did, "new_account_did");
    if (newDid === record.did) throw protoError("malformed_request", { message: "new_account_did is the current DID" });
    const outcome = await this.store.rotateKey({
      accountId: record.id,
      fromDid: record.did,
      toDid: newDid,
      now: this.#now(),
      reason: "owner_rekeyed",
      unclaimedOnly: false,
    });
    if (outcome === "did_in_use") throw kitError("kit_did_in_use");
    if (outcome === "stale") throw kitError("kit_did_in_use", "the account's key changed meanwhile; reload");
    return jsonResponse(200, { account: await this.#reload(record.id) });
  }

  // ---------------------------------------------------------------- housekeeping

  /** Deletes expired sessions, sign-in requests and old rate counters (also runs every 10 minutes). */
  async purgeExpired(): Promise<void> {
    const now = this.#now();
    await this.store.purgeExpired(now, now - 2 * RATE_WINDOW_SECONDS * 1000);
  }

  async close(): Promise<void> {
    clearInterval(this.#timer);
    if (this.#ownsStore) await this.store.close();
  }
}

/** Creates the kit: opens (and migrates) the store unless one is given, builds and validates the discovery document. */
export async function createKit(options: KitOptions): Promise<Kit> {
  if (options.store !== undefined) return new Kit(options, options.store, false);
  if (options.database === undefined) throw new Error("createKit needs database (a URL) or store");
  const store = await openKitStore(options.database);
  try {
    return new Kit(options, store, true);
  } catch (error) {
    await store.close();
    throw error;
  }
}

/** A `ProtoError` (or anything thrown) as a Fetch `Response` in the error envelope. */
export function errorToResponse(error: unknown): Response {
  return toFetchResponse(errorResponse(asProtoError(error).error));
}
