/** Client of the trust attestor: the link flow, attestation minting, the per-audience token cache. */
import { encodeBase64url, isDidSyntax } from "@proto/protocol";
import { type AttestationSource, accepts, issuerOf, notAccepted, tokenNotAccepted } from "./accepted.js";
import {
  type Approval,
  type ApprovalRequestOptions,
  approvalBody,
  type HeldGrant,
  readApproval,
  readHeldGrant,
} from "./approvals.js";
import { AttestorError, notLinkedMessage, type ServerErrorInit, UsageError } from "./errors.js";
import {
  errorFromResponse,
  HttpClient,
  type HttpOptions,
  type HttpResponse,
  isOk,
  normaliseBaseUrl,
  parseJson,
} from "./http.js";
import type { AgentIdentity } from "./identity.js";
import type { AgentStore, BindingRecord } from "./store.js";
import { type CachedToken, TokenCache } from "./token-cache.js";

export interface LinkRequest {
  /** `lr_...`. */
  req_id: string;
  /** The page the person opens to confirm. */
  link_url: string;
  poll_url: string;
  /** Seconds (1800). */
  expires_in: number;
}

export type LinkPhase = "awaiting_signin" | "awaiting_confirm";

export type LinkPollResult =
  | { state: "pending"; phase?: LinkPhase }
  | { state: "confirmed"; binding_id: string; binding_expires_at: number };

export interface LinkStartOptions {
  /** Shown on the confirmation page; at most 80 characters. */
  label?: string;
  /** A loopback URL (`http://127.0.0.1:PORT/...`) the link page redirects to after confirmation. */
  callbackUrl?: string;
  signal?: AbortSignal;
}

export interface LinkPollOptions {
  signal?: AbortSignal;
  /** Called after every pending answer, before waiting. */
  onPending?: (info: { phase: LinkPhase | undefined; attempt: number }) => void;
  /** First wait between polls (default 1000 ms); it grows by 250 ms per poll up to `maxDelayMs`. */
  minDelayMs?: number;
  /** Longest wait between polls (default 2000 ms). */
  maxDelayMs?: number;
}

export interface Attestation {
  aud: string;
  jwt: string;
  /** The token's `iss`: what a service must list in `billing.accepted_attestors` to take it. */
  iss?: string;
  /** `{trust_url}` of the attestor that minted it. */
  attestor_url: string;
  /** Unix seconds. */
  expires_at: number;
  verification: string;
  /** True when it came from the cache rather than a mint. */
  cached: boolean;
  /** The binding's new inactivity deadline (Unix seconds); only on a fresh mint. */
  binding_expires_at?: number;
}

export interface AttestorClientOptions extends HttpOptions {
  /** `{trust_url}`: `https://...` (`http://` only on localhost). */
  url: string;
  identity: AgentIdentity;
  /** Keeps the binding record and the token cache on disk; memory only without it. */
  store?: AgentStore;
  /** Defaults to a cache persisted in `store` (or in memory). */
  tokenCache?: TokenCache;
  /** Milliseconds since the epoch; used for signatures and the cache. */
  now?: () => number;
  /** How the poll loop waits; injectable for tests. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

export interface WaitForApprovalOptions {
  /** Seconds between polls (default: what the attestor answered, else 3). */
  interval?: number;
  signal?: AbortSignal;
  /** Called after every pending answer, before waiting. */
  onPoll?: (info: { approval: Approval; attempt: number }) => void;
  /** The service the approval is for, when this client did not ask for it: its cached token is dropped once approved. */
  aud?: string;
}

const DEFAULT_APPROVAL_INTERVAL = 3;
/** Approvals this client asked for, remembered for their service; a long-running process keeps the latest. */
const MAX_REMEMBERED_APPROVALS = 100;

/** Codes after which cached tokens and the stored binding no longer hold. */
const BINDING_GONE: Record<string, BindingRecord["state"]> = {
  binding_revoked: "revoked",
  binding_expired: "expired",
};

export class AttestorClient implements AttestationSource {
  /** `{trust_url}`, normalised (no trailing slash). */
  readonly url: string;
  readonly identity: AgentIdentity;
  readonly tokenCache: TokenCache;
  readonly #http: HttpClient;
  readonly #store: AgentStore | undefined;
  readonly #now: () => number;
  readonly #sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  #binding: BindingRecord | undefined;
  /** Approval id to its service's DID: whose cached token an approval makes stale. */
  readonly #approvalAudiences = new Map<string, string>();

  constructor(options: AttestorClientOptions) {
    this.url = normaliseBaseUrl(options.url, "attestor");
    this.identity = options.identity;
    this.#http = new HttpClient(options);
    this.#store = options.store;
    this.#now = options.now ?? Date.now;
    this.#sleep = options.sleep ?? sleep;
    this.tokenCache =
      options.tokenCache ??
      new TokenCache({
        now: this.#now,
        ...(options.store ? { persistence: options.store.tokenPersistence() } : {}),
      });
  }

  /** `POST /v1/link/start`: opens a link request the person confirms at `link_url`. */
  async linkStart(options: LinkStartOptions = {}): Promise<LinkRequest> {
    if (options.label !== undefined && options.label.length > 80) {
      throw new UsageError("invalid_label", "the agent label must be at most 80 characters");
    }
    const body = await this.#post(
      "/v1/link/start",
      {
        agent_did: this.identity.did,
        agent_pubkey_b64: this.identity.publicKeyB64,
        ...(options.label === undefined ? {} : { agent_label: options.label }),
        ...(options.callbackUrl === undefined ? {} : { callback_url: options.callbackUrl }),
      },
      options.signal,
    );
    const { req_id, link_url, poll_url, expires_in } = body as Partial<LinkRequest>;
    if (typeof req_id !== "string" || typeof link_url !== "string" || typeof expires_in !== "number") {
      throw this.#invalid("the link start answer lacks req_id, link_url or expires_in");
    }
    return {
      req_id,
      link_url,
      poll_url: typeof poll_url === "string" ? poll_url : `${this.url}/v1/link/poll`,
      expires_in,
    };
  }

  /**
   * One `POST /v1/link/poll`, signed over `req_id`. A confirmed answer is delivered exactly once by
   * the attestor, so it is saved as the binding record at once. Throws `AttestorError`
   * `link_request_expired` (410) when the request expired or was already retrieved.
   */
  async pollOnce(reqId: string, signal?: AbortSignal): Promise<LinkPollResult> {
    const body = (await this.#post(
      "/v1/link/poll",
      { req_id: reqId, sig_b64: encodeBase64url(this.identity.signBytes(reqId)) },
      signal,
    )) as Record<string, unknown>;
    if (body.state === "pending") {
      const phase = body.phase === "awaiting_signin" || body.phase === "awaiting_confirm" ? body.phase : undefined;
      return phase === undefined ? { state: "pending" } : { state: "pending", phase };
    }
    if (body.state === "confirmed" && typeof body.binding_id === "string") {
      const expiresAt = Number(body.binding_token_expires_at ?? body.binding_expires_at);
      if (!Number.isFinite(expiresAt)) throw this.#invalid("the confirmed poll answer lacks binding_token_expires_at");
      const nowIso = new Date(this.#now()).toISOString();
      // Linking again replaces the binding; the attestor's iss stays what was learned.
      const iss = this.#binding?.iss;
      this.#saveBinding({
        attestor_url: this.url,
        agent_did: this.identity.did,
        binding_id: body.binding_id,
        binding_expires_at: expiresAt,
        ...(iss === undefined ? {} : { iss }),
        state: "active",
        linked_at: nowIso,
        updated_at: nowIso,
      });
      // A new binding may belong to another person: tokens minted under the old one are stale.
      this.tokenCache.delete(this.url, this.identity.did);
      return { state: "confirmed", binding_id: body.binding_id, binding_expires_at: expiresAt };
    }
    throw this.#invalid(`unexpected link poll state ${JSON.stringify(body.state)}`);
  }

  /**
   * Polls until the person confirms (1-2 s between polls; a 429 waits its `Retry-After`), and
   * returns the binding record. Stops with the attestor's error on a 410 (`link_request_expired`)
   * or any other error, and with the signal's reason when aborted.
   */
  async linkPoll(reqId: string, options: LinkPollOptions = {}): Promise<BindingRecord> {
    const min = Math.max(1000, options.minDelayMs ?? 1000);
    const max = Math.max(min, options.maxDelayMs ?? 2000);
    for (let attempt = 1; ; attempt++) {
      options.signal?.throwIfAborted();
      let result: LinkPollResult;
      try {
        result = await this.pollOnce(reqId, options.signal);
      } catch (error) {
        if (error instanceof AttestorError && error.status === 429) {
          await this.#sleep(Math.min(60_000, Math.max(max, (error.retryAfter ?? 0) * 1000)), options.signal);
          continue;
        }
        throw error;
      }
      if (result.state === "confirmed") return this.binding() as BindingRecord;
      options.onPending?.({ phase: result.phase, attempt });
      await this.#sleep(Math.min(max, min + 250 * (attempt - 1)), options.signal);
    }
  }

  /**
   * `POST {trust_url}/v1/token`, signed (RFC 9421) over exactly `{trust_url}/v1/token`: a fresh
   * attestation for `aud`, cached; the binding's new deadline and the token's `iss` recorded.
   * Refusals are final: `binding_revoked` and `binding_expired` for every service (cached tokens
   * dropped, the binding's state recorded), `service_suspended` for `aud` only (its cached token
   * dropped; the person restores it on the attestor's `/account`).
   */
  async mint(aud: string, signal?: AbortSignal): Promise<Attestation> {
    if (!isDidSyntax(aud)) {
      throw new UsageError(
        "invalid_aud",
        `the audience must be a service DID (did:web or did:key), got ${JSON.stringify(aud)}`,
      );
    }
    const response = await this.#signed("POST", "/v1/token", { aud }, signal, aud);
    const minted = parseJson(response, attestorError) as Record<string, unknown>;
    const { jwt, expires_at, verification } = minted;
    const binding_expires_at = minted.binding_expires_at ?? minted.binding_token_expires_at;
    if (typeof jwt !== "string" || typeof expires_at !== "number" || typeof verification !== "string") {
      throw this.#invalid("the token answer lacks jwt, expires_at or verification");
    }
    const iss = issuerOf(jwt);
    const nowMs = this.#now();
    const token: CachedToken = {
      attestor_url: this.url,
      agent_did: this.identity.did,
      aud,
      jwt,
      expires_at,
      verification,
      minted_at: Math.floor(nowMs / 1000),
    };
    this.tokenCache.set(token);
    const record = this.binding();
    if (typeof binding_expires_at === "number" || record !== undefined) {
      // The first token teaches the attestor's iss (upstream keeps it with the binding).
      this.#saveBinding({
        attestor_url: this.url,
        agent_did: this.identity.did,
        binding_id: record?.binding_id ?? null,
        linked_at: record?.linked_at ?? null,
        binding_expires_at:
          typeof binding_expires_at === "number" ? binding_expires_at : (record?.binding_expires_at ?? 0),
        ...(iss === undefined ? {} : { iss }),
        state: "active",
        verification,
        verification_seen_at: Math.floor(nowMs / 1000),
        updated_at: new Date(nowMs).toISOString(),
      });
    }
    return {
      aud,
      jwt,
      ...(iss === undefined ? {} : { iss }),
      attestor_url: this.url,
      expires_at,
      verification,
      cached: false,
      ...(typeof binding_expires_at === "number" ? { binding_expires_at } : {}),
    };
  }

  /** A token for `aud` from the cache when it has more than 60 s left, else a fresh mint. */
  async token(aud: string, options: { fresh?: boolean; signal?: AbortSignal } = {}): Promise<Attestation> {
    if (!options.fresh) {
      const cached = this.tokenCache.get(this.url, this.identity.did, aud);
      if (cached !== undefined) {
        const iss = issuerOf(cached.jwt);
        return {
          aud,
          jwt: cached.jwt,
          ...(iss === undefined ? {} : { iss }),
          attestor_url: this.url,
          expires_at: cached.expires_at,
          verification: cached.verification,
          cached: true,
        };
      }
    }
    return this.mint(aud, options.signal);
  }

  /**
   * A token for the service `aud` when its `iss` is one `accepted` lists (`undefined`: any): when
   * this attestor's iss is known and not listed, it fails (`attestor_not_accepted`) without
   * minting; a token whose iss is not listed is never returned.
   */
  async attestationFor(
    aud: string,
    accepted: readonly string[] | undefined,
    options: { fresh?: boolean; signal?: AbortSignal } = {},
  ): Promise<Attestation> {
    const known = this.binding()?.iss;
    if (accepted !== undefined && known !== undefined && !accepted.includes(known)) {
      throw notAccepted(aud, accepted, [{ attestor_url: this.url, iss: known }]);
    }
    const token = await this.token(aud, options);
    if (accepted !== undefined && !accepts(accepted, token.iss)) {
      throw tokenNotAccepted(aud, accepted, this.url, token.iss);
    }
    return token;
  }

  /**
   * `GET {trust_url}/v1/grants`, signed: what the agent's person granted it, one grant per
   * service. Entries not of the contract's shape are left out.
   */
  async listGrants(signal?: AbortSignal): Promise<HeldGrant[]> {
    const body = parseJson(await this.#signed("GET", "/v1/grants", undefined, signal), attestorError) as {
      grants?: unknown;
    };
    if (!Array.isArray(body.grants)) throw this.#invalid("the grants answer has no grants array");
    return body.grants.flatMap((entry) => readHeldGrant(entry) ?? []);
  }

  /**
   * `POST {trust_url}/v1/approvals`, signed: asks the person to widen the grant for `aud` (more
   * permissions, higher spend limits), in the agent's words (`reason`). Answers the pending
   * approval with the page the person opens (`url`) and the poll interval.
   */
  async requestApproval(options: ApprovalRequestOptions): Promise<Approval> {
    const body = approvalBody(options);
    const response = await this.#signed("POST", "/v1/approvals", body, options.signal, options.aud);
    const approval = readApproval(parseJson(response, attestorError));
    if (approval?.url === undefined)
      throw this.#invalid("the approval answer lacks approval_id, approval_url or status");
    this.#approvalAudiences.set(approval.id, options.aud);
    if (this.#approvalAudiences.size > MAX_REMEMBERED_APPROVALS) {
      const [oldest] = this.#approvalAudiences.keys();
      if (oldest !== undefined) this.#approvalAudiences.delete(oldest);
    }
    return approval;
  }

  /**
   * `GET {trust_url}/v1/approvals/{id}`, signed: where the approval stands. Once approved, the
   * cached token for its service (when this client asked for it, or `aud` names it) is dropped:
   * the next one is minted with the widened grant.
   */
  async approval(id: string, options: { aud?: string; signal?: AbortSignal } = {}): Promise<Approval> {
    if (!/^[A-Za-z0-9_-]{1,128}$/.test(id)) {
      throw new UsageError("invalid_argument", `${JSON.stringify(id)} is not an approval id`);
    }
    const response = await this.#signed("GET", `/v1/approvals/${id}`, undefined, options.signal);
    const approval = readApproval(parseJson(response, attestorError));
    if (approval === undefined) throw this.#invalid("the approval answer lacks approval_id, status or expires_at");
    const aud = options.aud ?? this.#approvalAudiences.get(id);
    if (approval.status === "approved" && aud !== undefined) this.tokenCache.delete(this.url, this.identity.did, aud);
    return approval;
  }

  /**
   * Polls the approval every `interval` seconds (default: what the attestor answered, else 3; a
   * 429 waits its `Retry-After`) until it is no longer pending, and answers it: `approved`,
   * `declined` or `expired`. Stops with the signal's reason when aborted.
   */
  async waitForApproval(id: string, options: WaitForApprovalOptions = {}): Promise<Approval> {
    let interval = options.interval ?? DEFAULT_APPROVAL_INTERVAL;
    for (let attempt = 1; ; attempt++) {
      options.signal?.throwIfAborted();
      let approval: Approval;
      try {
        approval = await this.approval(id, {
          ...(options.aud === undefined ? {} : { aud: options.aud }),
          ...(options.signal === undefined ? {} : { signal: options.signal }),
        });
      } catch (error) {
        if (error instanceof AttestorError && error.status === 429) {
          await this.#sleep(Math.min(60_000, Math.max(interval, error.retryAfter ?? 0) * 1000), options.signal);
          continue;
        }
        throw error;
      }
      if (approval.status !== "pending") return approval;
      if (options.interval === undefined && approval.interval !== undefined) interval = approval.interval;
      options.onPoll?.({ approval, attempt });
      await this.#sleep(Math.min(60, Math.max(1, interval)) * 1000, options.signal);
    }
  }

  /** The binding record of this agent at this attestor (from the store when there is one). */
  binding(): BindingRecord | undefined {
    return this.#store?.getBinding(this.url, this.identity.did) ?? this.#binding;
  }

  /** The attestor's public key set (`GET /.well-known/jwks.json`). */
  async keySet(signal?: AbortSignal): Promise<{ keys: Record<string, unknown>[] }> {
    const url = `${this.url}/.well-known/jwks.json`;
    const response = await this.#http.request(url, { method: "GET", headers: { accept: "application/json" }, signal });
    if (!isOk(response.status)) throw errorFromResponse(response, attestorError);
    const body = parseJson(response, attestorError) as { keys?: unknown };
    if (!Array.isArray(body.keys)) throw this.#invalid("the key set has no keys array");
    return body as { keys: Record<string, unknown>[] };
  }

  /**
   * A request signed with the agent's key (RFC 9421) over exactly `{trust_url}{path}`, as the mint
   * is. Refusals throw, and those about the binding are recorded as the mint records them:
   * `binding_revoked` and `binding_expired` drop cached tokens and mark the binding;
   * `service_suspended` and `grant_revoked` (for `aud`) drop that service's token; `unauthorized` names the command
   * that links the key.
   */
  async #signed(
    method: "GET" | "POST",
    path: string,
    payload: unknown,
    signal: AbortSignal | undefined,
    aud?: string,
  ): Promise<HttpResponse> {
    const url = `${this.url}${path}`;
    const body = payload === undefined ? undefined : JSON.stringify(payload);
    const signed = this.identity.signRequest({ method, url, body }, { now: this.#now });
    const response = await this.#http.request(url, {
      method,
      headers: {
        ...(body === undefined ? {} : { "content-type": "application/json" }),
        accept: "application/json",
        ...signed.headers,
      },
      body,
      signal,
    });
    if (isOk(response.status)) return response;
    const error = errorFromResponse(response, attestorError);
    if ((error.code === "service_suspended" || error.code === "grant_revoked") && aud !== undefined) {
      // Final for this service only: its cached token goes, the binding and other services stay.
      this.tokenCache.delete(this.url, this.identity.did, aud);
      throw error.code === "service_suspended"
        ? suspendedError(error, aud, this.url)
        : withMessage(
            error,
            `the person who linked this agent revoked its grant for the service ${aud}; no attestation for that service until they approve again on ${this.url}/account (other services are not affected)`,
          );
    }
    // The attestor's own words ("run the link flow") do not say how; the command does.
    if (error.code === "unauthorized" && error.status === 401) throw withMessage(error, notLinkedMessage(this.url));
    const gone = BINDING_GONE[error.code];
    if (gone !== undefined) {
      this.tokenCache.delete(this.url, this.identity.did);
      const record = this.binding();
      if (record !== undefined) {
        this.#saveBinding({ ...record, state: gone, updated_at: new Date(this.#now()).toISOString() });
      }
    }
    throw error;
  }

  #saveBinding(record: BindingRecord): void {
    this.#binding = record;
    this.#store?.saveBinding(record);
  }

  async #post(path: string, payload: unknown, signal: AbortSignal | undefined): Promise<unknown> {
    const url = `${this.url}${path}`;
    const response = await this.#http.request(url, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json" },
      body: JSON.stringify(payload),
      signal,
    });
    if (!isOk(response.status)) throw errorFromResponse(response, attestorError);
    return parseJson(response, attestorError);
  }

  #invalid(message: string): AttestorError {
    return new AttestorError({
      status: 200,
      code: "invalid_response",
      message: `${this.url}: ${message}`,
      url: this.url,
    });
  }
}

const attestorError = (init: ServerErrorInit) => new AttestorError(init);

/**
 * `service_suspended` in words that say which service and what the person can do, whatever the
 * attestor's own message said (upstream §10.3.1: the person restores it on the attestor's
 * account page).
 */
function suspendedError(error: AttestorError, aud: string, attestorUrl: string): AttestorError {
  return withMessage(
    error,
    `the person who linked this agent suspended it for the service ${aud}; no attestation for that service until they restore it on ${attestorUrl}/account (other services are not affected)`,
  );
}

/** The same refusal (status, code, Retry-After, details) in other words. */
function withMessage(error: AttestorError, message: string): AttestorError {
  return new AttestorError({
    status: error.status,
    code: error.code,
    message,
    url: error.url,
    retryAfter: error.retryAfter,
    details: error.details,
  });
}

/** Waits `ms`, or rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
