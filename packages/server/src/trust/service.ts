import { createHmac, sign as ed25519Sign, verify as ed25519Verify } from "node:crypto";
import {
  ATTESTOR_ERRORS,
  type AuthorityGrant,
  createRequestVerifier,
  decodeBase64url,
  decodeDidKey,
  type GrantClaims,
  hasUnsafeUrlCharacter,
  isDidSyntax,
  type NonceStore,
  normalizeRecipient,
  publicKeyFromRaw,
  type RawRequest,
  type RequestVerifier,
  readGrantClaims,
  VERIFICATION_METHODS,
  type VerificationMethod,
  type VerifiedRequest,
} from "@proto/protocol";
import type { Clock } from "../platform/clock.js";
import { Coalescer } from "../platform/coalesce.js";
import type { Database } from "../platform/database.js";
import { isUniqueViolation } from "../platform/database.js";
import { DependencyUnavailable } from "../platform/dependency.js";
import { ApiError, invalidRequest, notFound, rateLimited, unauthorized } from "../platform/errors.js";
import { addressRateLimitKey, type RateLimiter, type RateLimitRule, rateLimitKey } from "../platform/rate-limit.js";
import { randomToken } from "../platform/tokens.js";
import { findGrant, type Grant, grantsOfBindings, moveGrants } from "./authority/grants.js";
import type { KeyRing, SigningKey } from "./keys.js";
import type { BindingRow, BindingServiceRow, TrustSchema } from "./migrations.js";
import type { CountedNonceStore } from "./replay-store.js";
import type { TrustSettings } from "./settings.js";
import * as store from "./store.js";
import { type DirectoryKey, directoryKeyOf, isPublishable, wbaDirectoryUrl } from "./web-bot-auth.js";

export const ATTESTATION_ISSUER = "proto-trust";

export interface LinkStartInput {
  agent_did: string;
  agent_pubkey_b64: string;
  agent_label?: string | undefined;
  callback_url?: string | undefined;
}

export interface LinkStarted {
  req_id: string;
  link_url: string;
  poll_url: string;
  expires_in: number;
}

export type LinkPollResult =
  | { state: "pending"; phase: "awaiting_signin" | "awaiting_confirm" }
  | { state: "confirmed"; binding_id: string; binding_token_expires_at: number };

export interface Minted {
  jwt: string;
  expires_at: number;
  verification: VerificationMethod;
  binding_expires_at: number;
}

/**
 * How stale a (binding, aud) pair's recorded last use may grow before a mint writes it again.
 * An agent mints for a service about once a token lifetime; writing every mint would double the
 * mint's writes for a date the account page shows to the minute anyway.
 */
export const SERVICE_USE_REFRESH_MS = 10 * 60 * 1000;

/** The account page lists this many services per agent (suspended ones first); a count says the rest. */
export const SERVICES_SHOWN_PER_BINDING = 50;

/** Final for that service until the person restores it; other services are unaffected. */
/**
 * The per-binding daily limit's fixed window at `now` (windows aligned on `floor(now / window)`,
 * as the rate limiter's): its index, and the whole seconds until it ends.
 */
function dailyWindow(rule: RateLimitRule, now: number): { day: number; secondsLeft: number } {
  const windowMs = rule.windowSeconds * 1000;
  const day = Math.floor(now / windowMs);
  return { day, secondsLeft: Math.max(1, Math.ceil(((day + 1) * windowMs - now) / 1000)) };
}

function verificationRequired(): ApiError {
  return new ApiError(403, "verification_required", "the person has no active verification method");
}

function serviceSuspended(aud: string, publicUrl: string): ApiError {
  return new ApiError(
    ATTESTOR_ERRORS.service_suspended.status,
    "service_suspended",
    `the person who linked this agent suspended it for ${aud}; they can restore it on ${publicUrl}/account`,
  );
}

const linkExpired = () =>
  new ApiError(410, "link_request_expired", "the link request has expired or was already retrieved");
const seconds = (ms: number) => Math.floor(ms / 1000);
const MINT_BATCHES_IN_FLIGHT = 2;
const MAX_MINT_BATCH = 64;

/**
 * An EdDSA compact JWS (JWT) signed with node:crypto: the same bytes jose's `SignJWT` produces for
 * this header and these claims (base64url JSON, Ed25519 being deterministic), without its
 * per-token cost, which on Node 20 (WebCrypto: key normalisation, then a thread-pool job and a
 * promise per signature) was about as much again as the signature itself. `header` is the
 * encoded protected header.
 */
async function signJwt(header: string, claims: object, privateKey: SigningKey["privateKey"]): Promise<string> {
  const input = `${header}.${Buffer.from(JSON.stringify(claims), "utf8").toString("base64url")}`;
  const sig = await new Promise<Buffer>((res, rej) =>
    ed25519Sign(null, Buffer.from(input, "ascii"), privateKey, (e, r) => (e ? rej(e) : res(r))),
  );
  return `${input}.${sig.toString("base64url")}`;
}

/** `payment` > `oauth` > `email` (decisions §5). */
export function strongestMethod(methods: readonly string[]): VerificationMethod | undefined {
  for (const method of [...VERIFICATION_METHODS].reverse()) if (methods.includes(method)) return method;
  return undefined;
}

/**
 * A loopback callback (spec: `127.0.0.1` or `localhost`): `http` to one of them, nothing else.
 * Control characters and backslashes are refused outright: the parser would strip or reinterpret
 * them, and the URL the browser is sent to must be the one the agent's owner could read.
 */
export function checkCallbackUrl(value: string): string {
  if (hasUnsafeUrlCharacter(value)) {
    throw invalidRequest("callback_url must not contain control characters or backslashes");
  }
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw invalidRequest("callback_url must be an absolute URL");
  }
  if (url.protocol !== "http:" || (url.hostname !== "127.0.0.1" && url.hostname !== "localhost")) {
    throw invalidRequest("callback_url must be http://127.0.0.1 or http://localhost (loopback only)");
  }
  if (url.username !== "" || url.password !== "" || url.hash !== "") {
    throw invalidRequest("callback_url must not carry credentials or a fragment");
  }
  return url.href;
}

export interface TrustServiceDeps {
  database: Database<TrustSchema>;
  clock: Clock;
  keys: KeyRing;
  limiter: RateLimiter;
  nonceStore: NonceStore;
  /**
   * A nonce store for one token request that counts the client's rate limit (`rule`, `key`) with
   * the nonce, in one round trip where they live in Redis (ReplayStore.counting).
   */
  countingNonces(rule: RateLimitRule, key: string): CountedNonceStore;
  /** Told about each request a limit the service counts itself (the daily one) refuses. */
  onRateLimited(rule: RateLimitRule): void;
  pseudonymKey: Buffer;
  publicUrl: string;
  settings: TrustSettings;
}

/** The attestor's agent-facing rules, free of HTTP. */
export class TrustService {
  readonly #deps: TrustServiceDeps;
  readonly #verifier: RequestVerifier;
  /** The encoded protected header of the key that signed last (it changes only on rotation). */
  #header: { kid: string; encoded: string } | undefined;
  readonly tokenUrl: string;
  readonly #mintBatches: Coalescer<store.MintInput, store.MintRecord | undefined> | undefined;

  constructor(deps: TrustServiceDeps) {
    this.#deps = deps;
    this.#mintBatches =
      deps.database.engine === "postgres"
        ? new Coalescer({
            run: (mints) => store.recordMints(this.#db, mints),
            key: (mint) => mint.agentDid,
            // A few of the pool's connections: the rest stay free for every other query.
            maxInFlight: MINT_BATCHES_IN_FLIGHT,
            maxBatch: MAX_MINT_BATCH,
          })
        : undefined;
    this.tokenUrl = `${deps.publicUrl}/v1/token`;
    // The token endpoint is the attestor's hot path: its verifications run on the thread pool, so
    // that one process mints on more than one core (see signJwt).
    this.#verifier = createRequestVerifier({
      nonceStore: deps.nonceStore,
      now: () => deps.clock.now(),
      offloadVerification: true,
    });
  }

  /**
   * store.recordMint, one statement per mint; on PostgreSQL the mints that arrive while earlier
   * ones are out share a statement (store.recordMints), so the database commits once for many.
   */
  #recordMint(mint: store.MintInput): Promise<store.MintRecord | undefined> {
    if (this.#mintBatches === undefined) return store.recordMint(this.#db, mint);
    return this.#mintBatches.call(mint);
  }

  get #db() {
    return this.#deps.database.db;
  }

  get database(): Database<TrustSchema> {
    return this.#deps.database;
  }

  #now(): number {
    return this.#deps.clock.now();
  }

  /** The pairwise pseudonym of a human for one audience (decisions §4). */
  pseudonym(humanId: string, audience: string): string {
    return createHmac("sha256", this.#deps.pseudonymKey).update(`${humanId}:${audience}`).digest("base64url");
  }

  async linkStart(input: LinkStartInput): Promise<LinkStarted> {
    if (!isDidSyntax(input.agent_did)) throw invalidRequest("agent_did must be a did:key or did:web DID");
    const publicKey = decodeBase64url(input.agent_pubkey_b64);
    if (publicKey === undefined || publicKey.length !== 32) {
      throw invalidRequest("agent_pubkey_b64 must be a 32-byte Ed25519 key in base64url without padding");
    }
    if (input.agent_did.startsWith("did:key:")) {
      const fromDid = decodeDidKey(input.agent_did);
      if (Buffer.compare(Buffer.from(fromDid), Buffer.from(publicKey)) !== 0) {
        throw invalidRequest("agent_did does not derive from agent_pubkey_b64");
      }
    }
    const callbackUrl = input.callback_url === undefined ? null : checkCallbackUrl(input.callback_url);
    const decision = await this.#deps.limiter.hit(
      this.#deps.settings.rateLimits.linkStartPerAgent,
      rateLimitKey("agent", input.agent_did),
    );
    if (!decision.allowed) throw rateLimited(decision.retryAfterSeconds, "too many link requests for this agent");
    const now = this.#now();
    const id = randomToken("lr_", 16);
    await store.insertLinkRequest(this.#db, {
      id,
      agent_did: input.agent_did,
      agent_pubkey: input.agent_pubkey_b64,
      agent_label: input.agent_label ?? null,
      callback_url: callbackUrl,
      created_at: now,
      expires_at: now + this.#deps.settings.linkTtlSeconds * 1000,
      phase: "awaiting_signin",
      state: "pending",
      binding_id: null,
      human_id: null,
      resolved_at: null,
    });
    return {
      req_id: id,
      link_url: `${this.#deps.publicUrl}/link?req=${encodeURIComponent(id)}`,
      poll_url: `${this.#deps.publicUrl}/v1/link/poll`,
      expires_in: this.#deps.settings.linkTtlSeconds,
    };
  }

  async linkPoll(reqId: string, signatureB64: string): Promise<LinkPollResult> {
    const request = await store.findLinkRequest(this.#db, reqId);
    if (request === undefined) throw notFound("no such link request");
    const signature = decodeBase64url(signatureB64);
    const key = decodeBase64url(request.agent_pubkey);
    if (
      signature === undefined ||
      signature.length !== 64 ||
      key === undefined ||
      !ed25519Verify(null, Buffer.from(reqId, "utf8"), publicKeyFromRaw(key), signature)
    ) {
      throw new ApiError(401, "invalid_signature", "the signature over req_id does not verify with the agent key");
    }
    if (request.state === "confirmed") {
      if (!(await store.transitionLinkRequest(this.#db, reqId, "confirmed", { state: "retrieved" })))
        throw linkExpired();
      const binding = request.binding_id === null ? undefined : await store.findBinding(this.#db, request.binding_id);
      if (binding === undefined) throw linkExpired();
      return { state: "confirmed", binding_id: binding.id, binding_token_expires_at: seconds(binding.expires_at) };
    }
    if (request.state !== "pending" || request.expires_at <= this.#now()) throw linkExpired();
    return { state: "pending", phase: request.phase === "awaiting_confirm" ? "awaiting_confirm" : "awaiting_signin" };
  }

  /** The human opened the link page: the phase hint moves on. */
  async markLinkOpened(reqId: string): Promise<void> {
    await store.markLinkOpened(this.#db, reqId);
  }

  async findOrCreateHuman(method: string, subject: string): Promise<string> {
    return this.#db.transaction().execute(async (trx) => {
      const existing = await store.findVerification(trx, method, subject);
      const now = this.#now();
      if (existing !== undefined) {
        await store.upsertVerification(trx, existing.human_id, method, subject, now);
        return existing.human_id;
      }
      const id = randomToken("hum_", 16);
      await store.insertHuman(trx, id, now);
      await store.upsertVerification(trx, id, method, subject, now);
      return id;
    });
  }

  async humanByEmail(email: string): Promise<string | undefined> {
    const subject = canonicalEmail(email);
    return (await store.findVerification(this.#db, "email", subject))?.human_id;
  }

  async findOrCreateHumanByEmail(email: string): Promise<string> {
    return this.findOrCreateHuman("email", canonicalEmail(email));
  }

  /**
   * A human confirms a link request: the agent DID gets a binding to them (decisions §2: one live
   * binding per agent DID; the same human re-linking replaces theirs; a lapsed binding of anyone
   * gives way).
   */
  async confirmLink(reqId: string, humanId: string): Promise<{ binding_id: string; callback_url: string | null }> {
    try {
      return await this.#db.transaction().execute(async (trx) => {
        const request = await store.findLinkRequest(trx, reqId);
        const now = this.#now();
        if (request === undefined) throw notFound("no such link request");
        if (request.state !== "pending" || request.expires_at <= now) throw linkExpired();
        const live = await store.liveBindingForAgent(trx, request.agent_did);
        if (live !== undefined) {
          if (live.human_id !== humanId && live.expires_at > now) {
            throw new ApiError(409, "agent_already_bound", "this agent is already linked to another person");
          }
          await store.revokeBinding(trx, live.id, now);
        }
        const binding: BindingRow = {
          id: randomToken("bnd_", 16),
          human_id: humanId,
          agent_did: request.agent_did,
          agent_label: request.agent_label,
          created_at: now,
          last_mint_at: null,
          expires_at: now + this.#deps.settings.bindingInactivitySeconds * 1000,
          revoked_at: null,
          // The same key and the same person: a published key stays published, in its place.
          wba_published_at: live !== undefined && live.human_id === humanId ? live.wba_published_at : null,
          mint_day: 0,
          mint_day_count: 0,
          has_grants: 0,
        };
        await store.insertBinding(trx, binding);
        // The same person re-linking: the services and suspensions carry over to the new binding.
        if (live !== undefined && live.human_id === humanId) {
          await store.copyServices(trx, live.id, binding.id);
          await moveGrants(trx, live.id, binding.id);
        }
        const moved = await store.transitionLinkRequest(trx, reqId, "pending", {
          state: "confirmed",
          binding_id: binding.id,
          human_id: humanId,
          resolved_at: now,
        });
        if (!moved) throw linkExpired();
        return { binding_id: binding.id, callback_url: request.callback_url };
      });
    } catch (error) {
      if (isUniqueViolation(error)) {
        throw new ApiError(409, "agent_already_bound", "this agent is already linked to another person");
      }
      throw error;
    }
  }

  async declineLink(reqId: string): Promise<void> {
    await store.transitionLinkRequest(this.#db, reqId, "pending", { state: "declined", resolved_at: this.#now() });
  }

  /**
   * `POST /v1/token`: a signed request from an agent, from the address `clientIp`, becomes an
   * attestation for `aud`. On the way: one Redis round trip at most (the address's rate limit and
   * the nonce, together) and one SQL statement (recordMint), unless something is refused.
   */
  async mint(request: RawRequest, clientIp: string): Promise<Minted> {
    const rules = this.#deps.settings.rateLimits;
    const client = addressRateLimitKey(clientIp);
    const nonces = this.#deps.countingNonces(rules.token, client);
    let verified: VerifiedRequest;
    try {
      verified = await this.#verifier.verify(request, { url: this.tokenUrl, nonceStore: nonces });
    } catch (error) {
      // Refused before its nonce was looked at: the attempt still counts against the address.
      if (!nonces.counted()) {
        const decision = await this.#deps.limiter.hit(rules.token, client);
        if (!decision.allowed) throw rateLimited(decision.retryAfterSeconds);
      }
      throw error;
    }
    const agentDid = verified.keyid;
    let body: unknown;
    try {
      body = JSON.parse(Buffer.from(verified.body ?? new Uint8Array()).toString("utf8"));
    } catch {
      throw invalidRequest("the body must be a JSON object with aud");
    }
    const aud = (body as { aud?: unknown } | null)?.aud;
    if (typeof aud !== "string" || aud.length > 2048 || !/^did:(web|key):.+/.test(aud) || !isDidSyntax(aud)) {
      throw invalidRequest("aud must be the destination service DID (did:web: or did:key:)");
    }
    const now = this.#now();
    const { minted, verification, bindingExpiresAt } = await this.#recordUse(agentDid, aud, now);
    await this.#deps.keys.fresh();
    const key = this.#deps.keys.signingKey();
    const iat = seconds(now);
    const exp = iat + this.#deps.settings.attestationTtlSeconds;
    if (this.#header?.kid !== key.kid) {
      const header = JSON.stringify({ alg: "EdDSA", typ: "JWT", kid: key.kid });
      this.#header = { kid: key.kid, encoded: Buffer.from(header, "utf8").toString("base64url") };
    }
    const jwt = await signJwt(
      this.#header.encoded,
      {
        iss: ATTESTATION_ISSUER,
        aud,
        sub: agentDid,
        sub_h: this.pseudonym(minted.human_id, aud),
        iat,
        exp,
        verification,
        ...(minted.grant_claims === null ? {} : (JSON.parse(minted.grant_claims) as GrantClaims)),
      },
      key.privateKey,
    );
    return { jwt, expires_at: exp, verification, binding_expires_at: seconds(bindingExpiresAt) };
  }

  /**
   * One use of an agent's binding for `aud`, checked and counted as a mint is: the binding is
   * active, its person verified, the service not suspended, the daily limit not reached. Throws
   * the contract's error for the first check that fails.
   */
  async #recordUse(agentDid: string, aud: string, now: number) {
    const daily = this.#deps.settings.rateLimits.tokenPerBinding;
    const { day } = dailyWindow(daily, now);
    const bindingExpiresAt = now + this.#deps.settings.bindingInactivitySeconds * 1000;
    const minted = await this.#recordMint({
      agentDid,
      aud,
      now,
      expiresAt: bindingExpiresAt,
      day,
      dailyLimit: daily.limit,
    });
    if (minted === undefined) throw await this.#whyNoMint(agentDid, aud, now);
    const verification = strongestMethod(minted.methods);
    if (verification === undefined) throw verificationRequired();
    if (minted.service_last_mint_at === null || now - minted.service_last_mint_at >= SERVICE_USE_REFRESH_MS) {
      await store.recordServiceUse(this.#db, minted.id, aud, now);
    }
    return { minted, verification, bindingExpiresAt };
  }

  /**
   * An agent that proved its key outside `/v1/token` (the OAuth JWT-bearer grant) acting for its
   * person toward `aud`: the same rules and counts as a mint. Answers the person, how they are
   * verified, and the binding's grant for `aud` in force (undefined without one).
   */
  async authorizeAgent(
    agentDid: string,
    aud: string,
  ): Promise<{ humanId: string; verification: string; grant: AuthorityGrant | undefined }> {
    const { minted, verification } = await this.#recordUse(agentDid, aud, this.#now());
    const grant =
      minted.grant_claims === null
        ? undefined
        : readGrantClaims(JSON.parse(minted.grant_claims) as Record<string, unknown>);
    return { humanId: minted.human_id, verification, grant };
  }

  /**
   * A request an agent signed with its key (RFC 9421, as `POST /v1/token`) to `path` of the
   * attestor: answers the agent's DID and its JSON body (undefined without one). Each attempt
   * counts against `rule` for the address, the refused ones too.
   */
  async verifyAgentRequest(
    request: RawRequest,
    path: string,
    clientIp: string,
    rule: RateLimitRule,
  ): Promise<{ agentDid: string; body: unknown }> {
    const client = addressRateLimitKey(clientIp);
    const nonces = this.#deps.countingNonces(rule, client);
    let verified: VerifiedRequest;
    try {
      verified = await this.#verifier.verify(request, { url: `${this.#deps.publicUrl}${path}`, nonceStore: nonces });
    } catch (error) {
      if (!nonces.counted()) {
        const decision = await this.#deps.limiter.hit(rule, client);
        if (!decision.allowed) throw rateLimited(decision.retryAfterSeconds);
      }
      throw error;
    }
    if (verified.body === undefined || verified.body.length === 0) return { agentDid: verified.keyid, body: undefined };
    try {
      return { agentDid: verified.keyid, body: JSON.parse(Buffer.from(verified.body).toString("utf8")) as unknown };
    } catch {
      throw invalidRequest("the body must be JSON");
    }
  }

  /**
   * The agent's binding in force: its latest, when not revoked or lapsed. Throws the contract's
   * error otherwise (401 unauthorized when never linked, 403 binding_revoked, 410 binding_expired).
   */
  async bindingInForce(agentDid: string): Promise<BindingRow> {
    const binding = await store.latestBindingForAgent(this.#db, agentDid);
    if (binding === undefined) throw unauthorized("this agent is not linked to a person; run the link flow");
    if (binding.revoked_at !== null) throw new ApiError(403, "binding_revoked", "the person revoked this binding");
    if (binding.expires_at <= this.#now()) throw new ApiError(410, "binding_expired", "the binding lapsed; link again");
    return binding;
  }

  /** `GET /v1/grants`: what the agent's person granted it, service by service. */
  async agentGrants(agentDid: string): Promise<Grant[]> {
    const binding = await this.bindingInForce(agentDid);
    return grantsOfBindings(this.#db, [binding.id]);
  }

  /**
   * Why an agent that proved its key cannot mint for `aud` (recordMint recorded nothing): the
   * error of the first check its binding fails, in the contract's order.
   */
  async #whyNoMint(agentDid: string, aud: string, now: number): Promise<Error> {
    const context = await store.mintContext(this.#db, agentDid, aud);
    if (context === undefined) return unauthorized("this agent is not linked to a person; run the link flow");
    const { binding, service } = context;
    if (binding.revoked_at !== null) return new ApiError(403, "binding_revoked", "the person revoked this binding");
    if (binding.expires_at <= now) return new ApiError(410, "binding_expired", "the binding lapsed; link again");
    if (strongestMethod(context.methods) === undefined) return verificationRequired();
    if (service?.suspended_at != null) return serviceSuspended(aud, this.#deps.publicUrl);
    if ((await findGrant(this.#db, binding.id, aud))?.revokedAt != null) {
      return new ApiError(403, "grant_revoked", "the person revoked this agent's grant for this service");
    }
    const daily = this.#deps.settings.rateLimits.tokenPerBinding;
    const { day, secondsLeft } = dailyWindow(daily, now);
    if (binding.mint_day === day && binding.mint_day_count >= daily.limit) {
      this.#deps.onRateLimited(daily);
      return rateLimited(secondsLeft, "the daily token limit of this binding is reached");
    }
    // It could mint a moment ago, and cannot now; it can again by the time it retries.
    return new DependencyUnavailable("database", "the binding changed while minting; retry", 1);
  }

  /** Revokes a binding on behalf of its human; answers the revocation time. */
  async revokeBinding(bindingId: string, humanId: string | undefined): Promise<{ ok: true; revoked_at: string }> {
    const binding = await store.findBinding(this.#db, bindingId);
    if (binding === undefined || (humanId !== undefined && binding.human_id !== humanId)) {
      throw notFound("no such binding");
    }
    const now = this.#now();
    if (binding.revoked_at === null) await store.revokeBinding(this.#db, bindingId, now);
    return { ok: true, revoked_at: new Date(binding.revoked_at ?? now).toISOString() };
  }

  /**
   * Suspends (`suspended` true) or restores one service of one of the person's live bindings
   * (`humanId` undefined: any person's, for the test hook). Idempotent: answers the pair's state,
   * changed or not. Unknown to this person, revoked, or a service the binding never minted for: 404.
   */
  async setServiceSuspended(
    bindingId: string,
    humanId: string | undefined,
    aud: string,
    suspended: boolean,
  ): Promise<{ binding_id: string; aud: string; suspended_at: number | null }> {
    const binding = await store.findBinding(this.#db, bindingId);
    if (
      binding === undefined ||
      (humanId !== undefined && binding.human_id !== humanId) ||
      binding.revoked_at !== null
    ) {
      throw notFound("no such binding");
    }
    await store.setServiceSuspension(this.#db, bindingId, aud, suspended ? this.#now() : null);
    const row = await store.findServiceUse(this.#db, bindingId, aud);
    if (row === undefined) throw notFound("this agent has not used that service");
    return { binding_id: bindingId, aud, suspended_at: row.suspended_at };
  }

  /** `{trust_url}/.well-known/http-message-signatures-directory`: what agents put in `Signature-Agent`. */
  get wbaDirectoryUrl(): string {
    return wbaDirectoryUrl(this.#deps.publicUrl);
  }

  /**
   * Publishes (`published` true) or withdraws one of the person's live bindings' agent key in the
   * Web Bot Auth directory (`humanId` undefined: any person's, for the test hook). Idempotent:
   * answers the binding's state, changed or not. Unknown to this person or revoked: 404. Only a
   * `did:key` agent's key can be published (400), and only while the binding has not lapsed (410,
   * as its mint would be).
   */
  async setWbaPublished(
    bindingId: string,
    humanId: string | undefined,
    published: boolean,
  ): Promise<{ binding_id: string; wba_published_at: number | null }> {
    const binding = await store.findBinding(this.#db, bindingId);
    if (
      binding === undefined ||
      (humanId !== undefined && binding.human_id !== humanId) ||
      binding.revoked_at !== null
    ) {
      throw notFound("no such binding");
    }
    const now = this.#now();
    if (published && !isPublishable(binding.agent_did)) {
      throw invalidRequest("only a did:key agent's key can be published for Web Bot Auth");
    }
    if (published && binding.expires_at <= now) {
      throw new ApiError(410, "binding_expired", "the binding lapsed; link the agent again before publishing its key");
    }
    await store.setWbaPublication(this.#db, bindingId, published ? now : null);
    const after = await store.findBinding(this.#db, bindingId);
    if (after === undefined || after.revoked_at !== null) throw notFound("no such binding");
    return { binding_id: bindingId, wba_published_at: after.wba_published_at };
  }

  /**
   * The Web Bot Auth directory's keys: the most recently published first, at most
   * `wbaDirectoryMaxKeys`; `truncated` when more were published (the oldest are left out).
   */
  async wbaDirectory(): Promise<{ keys: DirectoryKey[]; truncated: boolean }> {
    const limit = this.#deps.settings.wbaDirectoryMaxKeys;
    const rows = await store.publishedAgents(this.#db, this.#now(), limit + 1);
    const keys: DirectoryKey[] = [];
    for (const row of rows.slice(0, limit)) {
      const key = directoryKeyOf(row.agent_did);
      if (key !== undefined) keys.push(key);
    }
    return { keys, truncated: rows.length > limit };
  }

  /** What the account page shows: methods in force and every binding, newest first. */
  async accountOf(humanId: string) {
    const verifications = await this.#db
      .selectFrom("trust_verifications")
      .select(["method", "subject", "created_at"])
      .where("human_id", "=", humanId)
      .where("revoked_at", "is", null)
      .orderBy("created_at")
      .execute();
    const bindings = await this.#db
      .selectFrom("trust_bindings")
      .selectAll()
      .where("human_id", "=", humanId)
      .orderBy("created_at", "desc")
      .limit(200)
      .execute();
    const live = bindings.filter((b) => b.revoked_at === null).map((b) => b.id);
    const services = new Map<string, { rows: BindingServiceRow[]; total: number }>();
    for (const row of await store.servicesOfBindings(this.#db, live, SERVICES_SHOWN_PER_BINDING)) {
      const entry = services.get(row.binding_id) ?? { rows: [], total: row.total };
      entry.rows.push(row);
      services.set(row.binding_id, entry);
    }
    return {
      now: this.#now(),
      services,
      verifications: verifications.map((v) => ({
        method: v.method,
        created_at: v.created_at,
        // The address is the person's own; provider and payment references are not shown.
        label: v.method === "email" ? v.subject : undefined,
      })),
      bindings,
    };
  }

  /** Test hook: the binding lapses now. */
  async expireBinding(bindingId: string): Promise<void> {
    if (!(await store.setBindingExpiry(this.#db, bindingId, this.#now() - 1000))) throw notFound("no such binding");
  }

  /** Test hook: the person loses every verification method. */
  async clearVerifications(email: string): Promise<void> {
    const humanId = await this.humanByEmail(email);
    if (humanId === undefined) throw notFound("no such person");
    await store.revokeVerifications(this.#db, humanId, this.#now());
  }

  async purgeExpired(): Promise<void> {
    await store.deleteOldLinkRequests(this.#db, this.#now() - 7 * 86400 * 1000);
  }
}

export function canonicalEmail(email: string): string {
  const result = normalizeRecipient({ type: "email", value: email });
  if (!result.ok) throw invalidRequest(`email: ${result.reason}`);
  return result.recipient.value as string;
}
