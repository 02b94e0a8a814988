/** Client of the listing directory: challenge, proof, submit, update, withdraw, reads. */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { AuthError, DirectoryError, type ServerErrorInit, UsageError } from "./errors.js";
import { errorFromResponse, HttpClient, type HttpOptions, isOk, normaliseBaseUrl, parseJson } from "./http.js";
import type { AgentStore, StoredSession } from "./store.js";

export const PROOF_PATH = "/.well-known/proto-registry-proof";

export interface Challenge {
  /** `ch_...`: publish exactly these bytes at `proof_url`. */
  challenge_token: string;
  proof_url: string;
  /** RFC 3339, 30 minutes after issuance. */
  expires_at: string;
}

export interface Session {
  service_did: string;
  /** `sess_...`: bearer credential for updating and withdrawing this listing. */
  session_token: string;
  /** RFC 3339, 7 days after issuance. */
  expires_at: string;
}

export type ListingStatus = "active" | "stale" | "deleted";

export interface Listing {
  service_did: string;
  discovery_url: string;
  discovery_doc: Record<string, unknown>;
  fetched_at: string;
  first_listed_at: string;
  updated_at: string;
  status: ListingStatus;
  tags: string[];
  title: string | null;
  description: string | null;
  _meta: Record<string, unknown>;
}

/** The fields a listing owner writes. */
export interface ListingFields {
  title?: string;
  description?: string;
  tags?: string[];
}

export interface ListQuery {
  /** Case-insensitive substring of title or description. */
  search?: string;
  /** Exact tag. */
  tag?: string;
  status?: ListingStatus;
  /** RFC 3339: listings updated at or after this time. */
  updated_since?: string;
  include_deleted?: boolean;
  /** Page size, 1-100 (server default 50). */
  limit?: number;
}

export interface ListingPage {
  listings: Listing[];
  next_cursor: string | null;
}

export interface SubmitResult {
  session: Session;
  /** True for a new listing (201), false for the re-challenge path (200). */
  created: boolean;
  /** Where the session token was saved (with a store). */
  sessionFile?: string;
}

export interface RegisterOptions extends ListingFields {
  discoveryUrl: string;
  /**
   * Publishes the proof: called with the challenge, must resolve once `proof_url` serves exactly
   * `challenge_token` (`writeProofFile` does it for a folder the host serves).
   */
  publish: (challenge: Challenge) => void | Promise<void>;
  signal?: AbortSignal;
}

export interface DirectoryClientOptions extends HttpOptions {
  /** `{registry_url}`, without `/v1`: `https://...` (`http://` only on localhost). */
  url: string;
  /** Keeps session tokens on disk (one 0600 file per listing); memory only without it. */
  store?: AgentStore;
}

const directoryError = (init: ServerErrorInit) => new DirectoryError(init);

/** `https://{host[:port]}/.well-known/proto` exactly (decisions §1); anything else is refused before any request. */
export function checkDiscoveryUrl(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UsageError("invalid_url", `${JSON.stringify(value)} is not an absolute URL`);
  }
  if (
    url.protocol !== "https:" ||
    url.pathname !== "/.well-known/proto" ||
    url.search !== "" ||
    url.hash !== "" ||
    url.username !== "" ||
    url.password !== ""
  ) {
    throw new UsageError(
      "invalid_url",
      `the discovery URL must be exactly https://{host[:port]}/.well-known/proto, got ${JSON.stringify(value)}`,
    );
  }
  return url.href;
}

/** Client-side checks of the writeable fields (the directory's limits), for a clear message. */
export function checkListingFields(fields: ListingFields): void {
  if (fields.title !== undefined && fields.title.length > 120) {
    throw new UsageError("invalid_field", "title must be at most 120 characters");
  }
  if (fields.description !== undefined && fields.description.length > 500) {
    throw new UsageError("invalid_field", "description must be at most 500 characters");
  }
  if (fields.tags !== undefined) {
    if (fields.tags.length > 20) throw new UsageError("invalid_field", "at most 20 tags");
    const long = fields.tags.find((tag) => tag.length > 40);
    if (long !== undefined)
      throw new UsageError("invalid_field", `tag ${JSON.stringify(long)} is longer than 40 characters`);
  }
}

/**
 * Writes `DIR/.well-known/proto-registry-proof` with exactly the token bytes (no newline), for a
 * folder the service host serves as its web root. Returns the file's path.
 */
export function writeProofFile(dir: string, token: string): string {
  const folder = join(dir, ".well-known");
  mkdirSync(folder, { recursive: true });
  const path = join(folder, "proto-registry-proof");
  writeFileSync(path, token, { encoding: "utf8", mode: 0o644 });
  return path;
}

/** What to publish by hand, as lines of text. */
export function proofInstructions(challenge: Challenge): string[] {
  return [
    `Publish the challenge token at ${challenge.proof_url}`,
    "(HTTP 200, Content-Type: text/plain, the body exactly these bytes, no trailing newline):",
    "",
    `  ${challenge.challenge_token}`,
    "",
    `For example: printf '%s' '${challenge.challenge_token}' > .well-known/proto-registry-proof (in the web root)`,
    `The challenge expires at ${challenge.expires_at}.`,
  ];
}

export class DirectoryClient {
  /** `{registry_url}`, normalised. */
  readonly url: string;
  readonly #http: HttpClient;
  readonly #store: AgentStore | undefined;
  readonly #sessions = new Map<string, StoredSession>();

  constructor(options: DirectoryClientOptions) {
    this.url = normaliseBaseUrl(options.url, "directory");
    this.#http = new HttpClient(options);
    this.#store = options.store;
  }

  /** `POST /v1/listings/challenge`. */
  async challenge(discoveryUrl: string, signal?: AbortSignal): Promise<Challenge> {
    const body = (await this.#json("POST", "/v1/listings/challenge", {
      body: { discovery_url: checkDiscoveryUrl(discoveryUrl) },
      signal,
    })) as Partial<Challenge>;
    if (typeof body.challenge_token !== "string" || typeof body.proof_url !== "string") {
      throw this.#invalid("the challenge answer lacks challenge_token or proof_url");
    }
    return { challenge_token: body.challenge_token, proof_url: body.proof_url, expires_at: String(body.expires_at) };
  }

  /** `POST /v1/listings`: the directory fetches the proof and the document; the session is saved. */
  async submit(
    input: ListingFields & { discoveryUrl: string; challengeToken: string },
    signal?: AbortSignal,
  ): Promise<SubmitResult> {
    const discoveryUrl = checkDiscoveryUrl(input.discoveryUrl);
    const fields = pickFields(input);
    checkListingFields(fields);
    const { status, body } = await this.#exchange("POST", "/v1/listings", {
      body: { discovery_url: discoveryUrl, challenge_token: input.challengeToken, ...fields },
      signal,
    });
    const session = body as Partial<Session>;
    if (typeof session.service_did !== "string" || typeof session.session_token !== "string") {
      throw this.#invalid("the submit answer lacks service_did or session_token");
    }
    const result: Session = {
      service_did: session.service_did,
      session_token: session.session_token,
      expires_at: String(session.expires_at),
    };
    const stored: StoredSession = {
      directory_url: this.url,
      ...result,
      discovery_url: discoveryUrl,
      saved_at: new Date().toISOString(),
    };
    this.#sessions.set(result.service_did, stored);
    const sessionFile = this.#store?.saveSession(stored);
    return { session: result, created: status === 201, ...(sessionFile ? { sessionFile } : {}) };
  }

  /** Challenge, publish (through the callback), submit. */
  async register(options: RegisterOptions): Promise<SubmitResult> {
    const discoveryUrl = checkDiscoveryUrl(options.discoveryUrl);
    const fields = pickFields(options);
    checkListingFields(fields);
    const challenge = await this.challenge(discoveryUrl, options.signal);
    await options.publish(challenge);
    return this.submit({ discoveryUrl, challengeToken: challenge.challenge_token, ...fields }, options.signal);
  }

  /** `PATCH /v1/listings/{did}` with the saved (or given) session token. */
  async update(
    serviceDid: string,
    fields: ListingFields,
    options: { sessionToken?: string; signal?: AbortSignal } = {},
  ): Promise<Listing> {
    const patch = pickFields(fields);
    if (Object.keys(patch).length === 0) {
      throw new UsageError("nothing_to_update", "give at least one of title, description or tags");
    }
    checkListingFields(patch);
    const token = options.sessionToken ?? this.#sessionToken(serviceDid);
    return (await this.#json("PATCH", listingPath(serviceDid), {
      body: patch,
      token,
      signal: options.signal,
    })) as Listing;
  }

  /** `DELETE /v1/listings/{did}`; the saved session is forgotten (the directory revokes it). */
  async withdraw(serviceDid: string, options: { sessionToken?: string; signal?: AbortSignal } = {}): Promise<void> {
    const token = options.sessionToken ?? this.#sessionToken(serviceDid);
    await this.#exchange("DELETE", listingPath(serviceDid), { token, signal: options.signal });
    this.#sessions.delete(serviceDid);
    this.#store?.deleteSession(this.url, serviceDid);
  }

  /** `GET /v1/listings/{did}` (a withdrawn listing still reads, with status `deleted`). */
  async get(serviceDid: string, signal?: AbortSignal): Promise<Listing> {
    return (await this.#json("GET", listingPath(serviceDid), { signal })) as Listing;
  }

  /** One page of `GET /v1/listings`. */
  async listPage(query: ListQuery = {}, cursor?: string | null, signal?: AbortSignal): Promise<ListingPage> {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(query)) {
      if (value !== undefined) params.set(name, String(value));
    }
    if (cursor) params.set("cursor", cursor);
    const search = params.toString();
    const body = (await this.#json("GET", `/v1/listings${search ? `?${search}` : ""}`, {
      signal,
    })) as Partial<ListingPage>;
    if (!Array.isArray(body.listings)) throw this.#invalid("the list answer has no listings array");
    return { listings: body.listings, next_cursor: typeof body.next_cursor === "string" ? body.next_cursor : null };
  }

  /** Every listing matching `query`, following `next_cursor` page by page. */
  async *list(query: ListQuery = {}, signal?: AbortSignal): AsyncGenerator<Listing, void, undefined> {
    let cursor: string | null = null;
    do {
      const page: ListingPage = await this.listPage(query, cursor, signal);
      yield* page.listings;
      cursor = page.next_cursor;
    } while (cursor !== null);
  }

  /** The saved session of a listing, when there is one. */
  session(serviceDid: string): StoredSession | undefined {
    return this.#sessions.get(serviceDid) ?? this.#store?.getSession(this.url, serviceDid);
  }

  #sessionToken(serviceDid: string): string {
    const session = this.session(serviceDid);
    if (session === undefined) {
      throw new AuthError(
        "no_session",
        `no session token for ${serviceDid} at ${this.url}: register it again from its host (a new challenge issues a new session)`,
      );
    }
    return session.session_token;
  }

  async #exchange(
    method: string,
    path: string,
    options: { body?: unknown; token?: string; signal?: AbortSignal | undefined },
  ): Promise<{ status: number; body: unknown }> {
    const url = `${this.url}${path}`;
    const headers: Record<string, string> = { accept: "application/json" };
    if (options.body !== undefined) headers["content-type"] = "application/json";
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
    const response = await this.#http.request(url, {
      method,
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      signal: options.signal,
    });
    if (!isOk(response.status)) throw errorFromResponse(response, directoryError);
    if (response.status === 204 || response.body.length === 0) return { status: response.status, body: undefined };
    return { status: response.status, body: parseJson(response, directoryError) };
  }

  async #json(
    method: string,
    path: string,
    options: { body?: unknown; token?: string; signal?: AbortSignal | undefined },
  ): Promise<unknown> {
    const { body } = await this.#exchange(method, path, options);
    if (typeof body !== "object" || body === null)
      throw this.#invalid(`${method} ${path} answered without a JSON object`);
    return body;
  }

  #invalid(message: string): DirectoryError {
    return new DirectoryError({
      status: 200,
      code: "invalid_response",
      message: `${this.url}: ${message}`,
      url: this.url,
    });
  }
}

function listingPath(did: string): string {
  return `/v1/listings/${encodeURIComponent(did)}`;
}

function pickFields(fields: ListingFields): ListingFields {
  const picked: ListingFields = {};
  if (fields.title !== undefined) picked.title = fields.title;
  if (fields.description !== undefined) picked.description = fields.description;
  if (fields.tags !== undefined) picked.tags = fields.tags;
  return picked;
}
