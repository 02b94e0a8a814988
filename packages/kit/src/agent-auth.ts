/**
 * Request authentication (upstream §5), implicit signup (§6.3), the attested_only gate (§9.2) and
 * attested sessions (§10.7): from a signed request to the account it acts for.
 */
import {
  ATTESTATION_HEADER,
  protoError,
  type RequestVerifier,
  rateLimitExceeded,
  signatureProfiles,
  type VerifiedRequest,
  type VerifiedSignedAgent,
  type WebBotAuthVerifier,
} from "@proto/protocol";
import type { AttestorRegistry, KitAttestation } from "./attestors.js";
import type { AgentContext, ResolvedOptions } from "./core.js";
import type { KitRequest } from "./http.js";
import type { RateLimiter } from "./rate-limit.js";
import { parseJsonObject } from "./request-body.js";
import { type AccountResource, accountExpiresAt, toAccountResource } from "./resource.js";
import { SignedAgentChallenge } from "./signed-agents.js";
import type { AccountRecord, AttestationUpdate, KitStore } from "./store/types.js";

export const RATE_WINDOW_SECONDS = 3600;

/** An agent's account once resolved (found, or created by this request). */
export interface ResolvedAccount {
  record: AccountRecord;
  account: AccountResource;
  created: boolean;
}

export interface AgentAuthenticatorDeps {
  verifier: RequestVerifier;
  /** Web Bot Auth callers; undefined when the service does not receive them. */
  webBotAuth: WebBotAuthVerifier | undefined;
  attestors: AttestorRegistry;
  store: KitStore;
  limiter: RateLimiter;
  options: ResolvedOptions;
  /** `billing.accepted_attestors`: named in the details of `attestation_required` (upstream §9.2). */
  acceptedAttestors: readonly string[];
  now: () => number;
}

export class AgentAuthenticator {
  readonly #deps: AgentAuthenticatorDeps;

  constructor(deps: AgentAuthenticatorDeps) {
    this.#deps = deps;
  }

  async authenticate(request: KitRequest, route: string, explicitSignup = false): Promise<AgentContext> {
    const { signature, signedAgent } = await this.#verifySignature(request);
    const did = signature.keyid;
    const jwt = request.headers.get(ATTESTATION_HEADER);
    const attestation = jwt === null ? undefined : await this.#deps.attestors.verify(jwt, did);
    const { record, account, created } = await this.#resolve(did, attestation, route, explicitSignup, false);
    const body = signature.body;
    return {
      did,
      account,
      record,
      created,
      attestation,
      signature,
      signedAgent,
      body,
      json: () => parseJsonObject(body),
    };
  }

  /**
   * The account of an agent that an OAuth access token (RFC 9068, with `act`) authenticates rather
   * than a signature: the attestor issued the token to that agent for its person, so the token
   * stands where an attestation would (the same person, the same signup rules, the same limits). It
   * carries no verification method, so the one an attestation recorded is kept.
   */
  async resolveTokenActor(did: string, evidence: KitAttestation, route: string): Promise<ResolvedAccount> {
    return this.#resolve(did, evidence, route, false, true);
  }

  /** From a verified caller to its account: implicit signup, `attested_only`, expiry, rate limit, attested session. */
  async #resolve(
    did: string,
    attestation: KitAttestation | undefined,
    route: string,
    explicitSignup: boolean,
    fromToken: boolean,
  ): Promise<ResolvedAccount> {
    const { store, options } = this.#deps;
    const now = this.#deps.now();
    let record = await store.findAccountByDid(did);
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
        throw this.#attestationRequired(
          attestation === undefined ? "signup" : "no_verified_human",
          attestation === undefined
            ? "signup needs a Proto-Attestation from an accepted attestor"
            : "the attestation asserts no verified human",
        );
      }
      await this.#rateLimit(route, did, options.unclaimedLimit, now);
      const person =
        attestation?.subH === undefined
          ? undefined
          : await store.upsertPerson(attestation.canonicalIssuer, attestation.subH, now);
      ({ account: record, created } = await store.createAccount({
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
        record = await this.#renewAttestation(record, attestation, now, fromToken);
      } else if (this.#sessionEnforced() && !(record.attestedUntil !== undefined && record.attestedUntil > now)) {
        throw this.#attestationRequired(
          "attested_session_lapsed",
          "the attested session lapsed; present a fresh Proto-Attestation",
        );
      }
    }
    return { record, created, account: toAccountResource(record, now, options.ttlSeconds) };
  }

  /**
   * The proto profile's signature; or, when the request carries only a Web Bot Auth one, that: it
   * acts for the did:key of its key only with an attestation and when it binds the request as the
   * proto profile does. Otherwise the caller is a signed agent, which the route decides about.
   */
  async #verifySignature(
    request: KitRequest,
  ): Promise<{ signature: VerifiedRequest; signedAgent: VerifiedSignedAgent | undefined }> {
    const raw = {
      method: request.method,
      url: request.url.origin,
      target: request.target,
      headers: request.headers,
      body: request.body,
    };
    const webBotAuth = this.#deps.webBotAuth;
    const header = (name: string) => request.headers.get(name) ?? undefined;
    const profiles = signatureProfiles(header);
    if (webBotAuth === undefined || profiles.proto || !profiles.webBotAuth) {
      return { signature: await this.#deps.verifier.verify(raw), signedAgent: undefined };
    }
    const agent = await webBotAuth.verify(raw, { client: request.clientAddress });
    if (!request.headers.has(ATTESTATION_HEADER)) throw new SignedAgentChallenge(agent, request.body !== undefined);
    if (!agent.bindsRequest) {
      throw protoError("invalid_signature", {
        message:
          "to act for an account with a Proto-Attestation, a Web Bot Auth signature must cover @method, @target-uri and (with a body) content-digest, carry a nonce and last at most 300 s",
      });
    }
    const signature: VerifiedRequest = {
      keyid: agent.did,
      created: agent.created,
      expires: agent.expires,
      nonce: agent.nonce ?? "",
      label: agent.label,
      body: agent.body,
    };
    return { signature, signedAgent: agent };
  }

  /** Upstream §10.7: on an `attested_only` service the window applies to every account, claimed or not. */
  #sessionEnforced(): boolean {
    const options = this.#deps.options;
    return options.attestedSession !== undefined && options.mode === "attested_only";
  }

  /** `attestation_required`, naming the attestation it needs in `details` (upstream §9.2). */
  #attestationRequired(reason: string, message: string) {
    return protoError("attestation_required", {
      message,
      details: {
        reason,
        attestation: { header: "Proto-Attestation", accepted_attestors: [...this.#deps.acceptedAttestors] },
      },
    });
  }

  #attestationUpdate(attestation: KitAttestation, now: number): AttestationUpdate {
    const exp = attestation.expiresAt * 1000;
    const session = this.#deps.options.attestedSession;
    const until = session?.mode === "extended" ? Math.max(exp, now + session.seconds * 1000) : exp;
    return { issuer: attestation.canonicalIssuer, verification: attestation.verification, at: now, until };
  }

  async #renewAttestation(
    record: AccountRecord,
    attestation: KitAttestation,
    now: number,
    fromToken: boolean,
  ): Promise<AccountRecord> {
    const store = this.#deps.store;
    const update = this.#attestationUpdate(attestation, now);
    if (fromToken) update.verification = record.attestedVerification;
    const extended = this.#deps.options.attestedSession?.mode === "extended";
    const needsPerson = record.personId === undefined && attestation.subH !== undefined;
    const previous = record.attestedUntil ?? 0;
    // One write per new attestation (strict), at most one a minute while re-presenting (extended).
    if (!needsPerson && update.until <= previous + (extended ? 60_000 : 0)) return record;
    const person =
      needsPerson && attestation.subH !== undefined
        ? await store.upsertPerson(attestation.canonicalIssuer, attestation.subH, now)
        : undefined;
    const until = Math.max(update.until, previous);
    await store.recordAttestation(record.id, person?.id, { ...update, until });
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
    const decision = await this.#deps.limiter.hit(`${route}\n${did}`, limit, RATE_WINDOW_SECONDS, now);
    if (!decision.allowed) {
      throw rateLimitExceeded(decision.retryAfterSeconds, `at most ${limit} requests an hour on this route`);
    }
  }
}
