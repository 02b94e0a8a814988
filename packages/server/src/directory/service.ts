import { didWebMismatch, SafeFetchError, type SafeResponse, validateDiscoveryDocument } from "@proto/protocol";
import type { Clock } from "../platform/clock.js";
import type { Database } from "../platform/database.js";
import { isUniqueViolation } from "../platform/database.js";
import { ApiError, conflict, forbidden, notFound, rateLimited, unauthorized } from "../platform/errors.js";
import { constantTimeEqual, hashToken, randomToken } from "../platform/tokens.js";
import { type CacheVersion, ListingBodyCache, type StoredBody, storedBody } from "./body-cache.js";
import { decodeCursor, encodeCursor, type Position } from "./cursor.js";
import { type DiscoveryLocation, parseDiscoveryUrl } from "./discovery-url.js";
import { LISTING_STATUSES, type Listing, type ListingStatus, listingBody, rfc3339, toListing } from "./listing.js";
import type { DirectorySchema, ListingRow } from "./migrations.js";
import type { DirectorySettings } from "./settings.js";
import * as store from "./store.js";

export interface Fetcher {
  get(url: string, options?: { accept?: string; signal?: AbortSignal }): Promise<SafeResponse>;
}

export interface ChallengeIssued {
  challenge_token: string;
  proof_url: string;
  expires_at: string;
}

export interface SessionIssued {
  service_did: string;
  session_token: string;
  expires_at: string;
}

export interface Submission {
  discovery_url: string;
  challenge_token: string;
  title?: string | undefined;
  description?: string | undefined;
  tags?: string[] | undefined;
}

export interface ListingPatch {
  title?: string | null;
  description?: string | null;
  tags?: string[];
}

export interface ListRequest {
  cursor?: string | undefined;
  limit: number;
  search?: string | undefined;
  tag?: string | undefined;
  updatedSince?: number | undefined;
  status?: ListingStatus | undefined;
  includeDeleted: boolean;
}

export interface ListPage {
  /** Each listing already serialised. */
  bodies: string[];
  nextCursor: string | null;
}

export interface RevalidationCounts {
  checked: number;
  succeeded: number;
  failed: number;
  became_stale: number;
  deleted: number;
}

const err = (status: number, code: string, message: string, details?: Record<string, unknown>) =>
  new ApiError(status, code, message, details);

function isTextPlain(contentType: string | undefined): boolean {
  return contentType?.split(";")[0]?.trim().toLowerCase() === "text/plain";
}

function uniqueTags(tags: readonly string[]): string[] {
  return [...new Set(tags)];
}

/** The listing directory's rules, free of HTTP: every method is one operation of the spec. */
export class DirectoryService {
  readonly #db: Database<DirectorySchema>;
  readonly #bodies: ListingBodyCache | undefined;
  readonly #clock: Clock;
  readonly #fetcher: Fetcher;
  readonly #settings: DirectorySettings;
  #pass: Promise<RevalidationCounts> | undefined;

  constructor(deps: {
    database: Database<DirectorySchema>;
    clock: Clock;
    fetcher: Fetcher;
    settings: DirectorySettings;
    /**
     * Whether single-listing reads may be cached now (listing-changes.ts: SQLite's change
     * counter, or PostgreSQL's LISTEN feed, whose changes reach `listingsChanged`). Without it
     * nothing is cached.
     */
    readCacheVersion?: CacheVersion;
  }) {
    this.#db = deps.database;
    this.#clock = deps.clock;
    this.#fetcher = deps.fetcher;
    this.#settings = deps.settings;
    if (deps.readCacheVersion !== undefined && deps.settings.readCacheBytes > 0) {
      this.#bodies = new ListingBodyCache(deps.settings.readCacheBytes, deps.readCacheVersion);
    }
  }

  get #kdb() {
    return this.#db.db;
  }

  /** Made once: a closure per read was garbage on the hottest path. */
  readonly #readBody = (serviceDid: string) => store.findListingBody(this.#kdb, serviceDid);

  async issueChallenge(discoveryUrl: string): Promise<ChallengeIssued> {
    const location = parseDiscoveryUrl(discoveryUrl);
    const now = this.#clock.now();
    const cap = this.#settings.hostChallengeCap;
    const since = now - cap.windowSeconds * 1000;
    const token = randomToken("ch_", 16);
    const expiresAt = now + this.#settings.challengeTtlSeconds * 1000;
    // Count-then-insert under a per-host lock: replicas issuing together cannot all see room.
    await this.#db.exclusive(`proto:dir:challenge-host:${location.host}`, async (trx) => {
      if ((await store.countActiveChallenges(trx, location.host, since, now)) >= cap.limit) {
        const oldest = await store.oldestActiveChallenge(trx, location.host, since, now);
        const freesAt = oldest
          ? Math.min(
              oldest.issued_at + cap.windowSeconds * 1000,
              oldest.issued_at + this.#settings.challengeTtlSeconds * 1000,
            )
          : now + 1000;
        throw rateLimited(
          Math.max(1, Math.ceil((freesAt - now) / 1000)),
          `too many active challenges for ${location.host}; retry later`,
        );
      }
      await store.insertChallenge(trx, {
        token_hash: hashToken(token),
        discovery_url: location.url,
        host: location.host,
        issued_at: now,
        expires_at: expiresAt,
        consumed_at: null,
      });
    });
    return { challenge_token: token, proof_url: location.proofUrl, expires_at: rfc3339(expiresAt) };
  }

  /** `POST /v1/listings`, in the spec's processing order. */
  async submit(submission: Submission): Promise<{ created: boolean; session: SessionIssued }> {
    const location = parseDiscoveryUrl(submission.discovery_url);
    const tokenHash = hashToken(submission.challenge_token);
    const now = this.#clock.now();

    // 1. The challenge exists, is unexpired and unused, and was issued for this URL.
    const challenge = await store.findChallenge(this.#kdb, tokenHash);
    if (challenge === undefined || challenge.consumed_at !== null || challenge.expires_at <= now) {
      throw err(400, "invalid_challenge", "the challenge is unknown, expired or already used");
    }
    if (challenge.discovery_url !== location.url) {
      throw err(400, "proof_mismatch", "the challenge was issued for a different discovery_url");
    }
    // 2. Consumed before any fetch, so a failed submit burns it.
    if (!(await store.consumeChallenge(this.#kdb, tokenHash, now))) {
      throw err(409, "challenge_already_used", "the challenge was used by a concurrent request; request a new one");
    }
    // 3. The proof.
    await this.#checkProof(location, submission.challenge_token);
    // 4. The discovery document.
    const document = await this.#fetchDiscovery(location);
    // 5. A did:web DID names the discovery host.
    const serviceDid = document.service_did as string;
    const mismatch = serviceDid.startsWith("did:web:") ? didWebMismatch(serviceDid, location.host) : undefined;
    if (mismatch !== undefined) throw err(400, "discovery_did_mismatch", mismatch);
    // 6 and 7. Create, re-register, or refuse.
    try {
      const registered = await this.#kdb
        .transaction()
        .execute((trx) => this.#register(trx, location, document, submission));
      this.listingsChanged(serviceDid);
      return registered;
    } catch (error) {
      if (isUniqueViolation(error)) throw conflict("the host or DID is already claimed by another listing");
      throw error;
    }
  }

  async #register(
    trx: store.Db,
    location: DiscoveryLocation,
    document: Record<string, unknown>,
    submission: Submission,
  ): Promise<{ created: boolean; session: SessionIssued }> {
    const now = this.#clock.now();
    const serviceDid = document.service_did as string;
    const existing = await this.#lockedListing(trx, { serviceDid });
    const live = existing !== undefined && existing.status !== "deleted";
    if (live && existing.host !== location.host) {
      throw conflict(`${serviceDid} is listed from another host`);
    }
    if (!live) {
      const holder = await store.findLiveListingByHost(trx, location.host);
      if (holder !== undefined) throw conflict(`${location.host} is already listed under another DID`);
    }
    const fields = {
      host: location.host,
      discovery_url: location.url,
      discovery_doc: JSON.stringify(document),
      status: "active",
      fetched_at: now,
      updated_at: now,
      failure_count: 0,
      stale_since: null,
      next_check_at: now + this.#settings.revalidation.intervalSeconds * 1000,
      lease_until: null,
    };
    let created: boolean;
    if (existing === undefined) {
      const row = {
        service_did: serviceDid,
        title: submission.title ?? null,
        description: submission.description ?? null,
        tags: JSON.stringify(uniqueTags(submission.tags ?? [])),
        first_listed_at: now,
        ...fields,
      };
      await store.insertListing(trx, { ...row, body: listingBody(row) });
      created = true;
    } else {
      const row: ListingRow = {
        ...existing,
        ...fields,
        title: submission.title ?? existing.title,
        description: submission.description ?? existing.description,
        tags: submission.tags === undefined ? existing.tags : JSON.stringify(uniqueTags(submission.tags)),
      };
      row.body = listingBody(row);
      await store.saveListing(trx, row);
      // A deleted record taken up again from another host is a new listing for that host.
      created = !live && existing.host !== location.host;
    }
    await store.revokeSessions(trx, serviceDid, now);
    const session = await this.#issueSession(trx, serviceDid, now);
    return { created, session };
  }

  async #issueSession(trx: store.Db, serviceDid: string, now: number): Promise<SessionIssued> {
    const token = randomToken("sess_", 32);
    const expiresAt = now + this.#settings.sessionTtlSeconds * 1000;
    await store.insertSession(trx, {
      token_hash: hashToken(token),
      service_did: serviceDid,
      issued_at: now,
      expires_at: expiresAt,
      revoked_at: null,
    });
    return { service_did: serviceDid, session_token: token, expires_at: rfc3339(expiresAt) };
  }

  async #checkProof(location: DiscoveryLocation, token: string): Promise<void> {
    let response: SafeResponse;
    try {
      response = await this.#fetcher.get(location.proofUrl, { accept: "text/plain" });
    } catch (error) {
      throw err(400, "proof_fetch_failed", `could not fetch ${location.proofUrl}: ${describeFetchError(error)}`);
    }
    // The proof is "HTTP 200": any other answer (a 204, a 206, ...) is not the proof file.
    if (response.status !== 200) {
      throw err(
        400,
        "proof_fetch_failed",
        `${location.proofUrl} answered with HTTP status ${response.status}, not 200`,
      );
    }
    if (!isTextPlain(response.contentType)) {
      throw err(400, "proof_fetch_failed", `${location.proofUrl} must be served as text/plain`);
    }
    const expected = Buffer.from(token, "utf8");
    if (response.body.length !== expected.length || !constantTimeEqual(response.body.toString("latin1"), token)) {
      throw err(400, "proof_mismatch", "the proof file does not contain exactly the challenge token");
    }
  }

  async #fetchDiscovery(location: DiscoveryLocation): Promise<Record<string, unknown>> {
    let response: SafeResponse;
    try {
      response = await this.#fetcher.get(location.url, { accept: "application/json" });
    } catch (error) {
      throw err(400, "discovery_fetch_failed", `could not fetch ${location.url}: ${describeFetchError(error)}`);
    }
    return parseDiscoveryBody(response.body);
  }

  /**
   * The session behind a bearer token, allowed to act on `serviceDid`. Inside a transaction the
   * listing row comes back locked, so an update, a withdrawal and a revalidation outcome each
   * apply to the row as the previous one left it.
   */
  async #authorize(db: store.Db, serviceDid: string, bearer: string | undefined): Promise<ListingRow> {
    if (bearer === undefined) throw unauthorized("an Authorization: Bearer session token is required");
    const tokenHash = hashToken(bearer);
    const session = await store.findSession(db, tokenHash);
    const invalid = unauthorized("the session token is invalid, expired or revoked");
    if (session === undefined) throw invalid;
    let live = session.revoked_at === null && session.expires_at > this.#clock.now();
    if (session.service_did !== serviceDid) {
      throw live ? forbidden("the session token is bound to another listing") : invalid;
    }
    // A token issued for this very listing: once the listing is deleted (which revoked the token),
    // the answer is 404, as decisions §6 has it, rather than a 401 that hides why.
    const listing = db.isTransaction
      ? await this.#lockedListing(db, { serviceDid })
      : await store.findListing(db, serviceDid);
    if (listing === undefined || listing.status === "deleted") throw notFound("no listing for that DID");
    if (live && db.isTransaction) {
      // Read again under the row lock: a re-registration or withdrawal that committed while this
      // request waited for the lock has revoked the token.
      const current = await store.findSession(db, tokenHash);
      live = current !== undefined && current.revoked_at === null;
    }
    if (!live) throw invalid;
    return listing;
  }

  /** Answers 401, 403 or 404 exactly as an update or delete would, without changing anything. */
  async checkAccess(serviceDid: string, bearer: string | undefined): Promise<void> {
    await this.#authorize(this.#kdb, serviceDid, bearer);
  }

  async update(serviceDid: string, bearer: string | undefined, patch: ListingPatch): Promise<Listing> {
    const updated = await this.#kdb.transaction().execute(async (trx) => {
      const listing = await this.#authorize(trx, serviceDid, bearer);
      const row: ListingRow = {
        ...listing,
        title: patch.title === undefined ? listing.title : patch.title,
        description: patch.description === undefined ? listing.description : patch.description,
        tags: patch.tags === undefined ? listing.tags : JSON.stringify(uniqueTags(patch.tags)),
        updated_at: this.#clock.now(),
      };
      row.body = listingBody(row);
      await store.saveListing(trx, row);
      return toListing(row);
    });
    this.listingsChanged(serviceDid);
    return updated;
  }

  async withdraw(serviceDid: string, bearer: string | undefined): Promise<void> {
    await this.#kdb.transaction().execute(async (trx) => {
      const listing = await this.#authorize(trx, serviceDid, bearer);
      const now = this.#clock.now();
      const row: ListingRow = { ...listing, status: "deleted", updated_at: now, stale_since: null };
      row.body = listingBody(row);
      await store.saveListing(trx, row);
      await store.revokeSessions(trx, serviceDid, now);
    });
    this.listingsChanged(serviceDid);
  }

  /** The serialised listing, or undefined; at once (no promise) where the store can answer so. */
  get(serviceDid: string): StoredBody | undefined | Promise<StoredBody | undefined> {
    if (this.#bodies !== undefined) return this.#bodies.get(serviceDid, this.#readBody);
    const text = store.findListingBody(this.#kdb, serviceDid);
    if (text instanceof Promise) return text.then((value) => (value === undefined ? undefined : storedBody(value)));
    return text === undefined ? undefined : storedBody(text);
  }

  /**
   * Says that this process changed the listing `serviceDid` (any listing, without one): its next
   * single-listing read goes to the store. Called once the write committed, so the replica that
   * took a write serves it at once; other writers are heard of through the store (listing-changes.ts).
   */
  listingsChanged(serviceDid?: string): void {
    if (serviceDid === undefined) this.#bodies?.clear();
    else this.#bodies?.forget(serviceDid);
  }

  async list(request: ListRequest): Promise<ListPage> {
    const filters = JSON.stringify([
      request.search ?? null,
      request.tag ?? null,
      request.updatedSince ?? null,
      request.status ?? null,
      request.includeDeleted,
    ]);
    const after: Position | undefined =
      request.cursor === undefined ? undefined : decodeCursor(request.cursor, filters);
    const statuses: readonly ListingStatus[] =
      request.status !== undefined ? [request.status] : request.includeDeleted ? LISTING_STATUSES : ["active", "stale"];
    const rows = await store.listListings(this.#kdb, this.#db.engine, {
      after,
      limit: request.limit + 1,
      search: request.search,
      tag: request.tag,
      updatedSince: request.updatedSince,
      statuses,
    });
    const page = rows.slice(0, request.limit);
    const last = page.at(-1);
    const nextCursor =
      rows.length > request.limit && last !== undefined
        ? encodeCursor({ updatedAt: last.updated_at, serviceDid: last.service_did }, filters)
        : null;
    return { bodies: page.map((r) => r.body), nextCursor };
  }

  /**
   * One revalidation pass over every due listing. Passes in this process run one at a time; a
   * lease on each listing keeps passes of other replicas off it.
   */
  revalidateDue(): Promise<RevalidationCounts> {
    const run = async (): Promise<RevalidationCounts> => {
      if (this.#pass !== undefined) await this.#pass.catch(() => undefined);
      return this.#runPass();
    };
    const pass = run();
    this.#pass = pass;
    return pass.finally(() => {
      if (this.#pass === pass) this.#pass = undefined;
    });
  }

  /** Resolves once no revalidation pass is running. */
  async idle(): Promise<void> {
    while (this.#pass !== undefined) await this.#pass.catch(() => undefined);
  }

  async #runPass(): Promise<RevalidationCounts> {
    const counts: RevalidationCounts = { checked: 0, succeeded: 0, failed: 0, became_stale: 0, deleted: 0 };
    const { concurrency } = this.#settings.revalidation;
    const passStart = this.#clock.now();
    for (;;) {
      const due = await store.dueListings(this.#kdb, passStart, concurrency * 4);
      if (due.length === 0) break;
      let index = 0;
      const worker = async () => {
        for (let row = due[index++]; row !== undefined; row = due[index++]) {
          await this.#revalidateOne(row, counts);
        }
      };
      await Promise.all(Array.from({ length: Math.min(concurrency, due.length) }, worker));
    }
    return counts;
  }

  async #revalidateOne(listing: ListingRow, counts: RevalidationCounts): Promise<void> {
    const leaseStart = this.#clock.now();
    const leaseUntil = leaseStart + 10 * 60 * 1000;
    if (!(await store.leaseListing(this.#kdb, listing.id, leaseStart, leaseUntil))) return;
    counts.checked++;
    const outcome = await this.#check(listing);
    await this.#kdb.transaction().execute(async (trx) => {
      // The owner may have updated or withdrawn the listing while it was being fetched: the
      // outcome applies to the row as it is now. A lease that is no longer ours means the row was
      // registered again (or another pass took over); that writer's state stands.
      const current = await this.#lockedListing(trx, { id: listing.id });
      if (current === undefined || current.lease_until !== leaseUntil) return;
      if (current.status === "deleted") {
        await store.saveBookkeeping(trx, current.id, { lease_until: null });
        return;
      }
      const now = this.#clock.now();
      const { intervalSeconds, staleAfterFailures, deleteAfterStaleSeconds } = this.#settings.revalidation;
      const interval = intervalSeconds * 1000;
      // On schedule, the next check keeps the cadence; after a gap (downtime, a backlog) it is one
      // full interval from now, so missed days are not made up with a burst of fetches.
      let next_check_at = current.next_check_at + interval;
      if (next_check_at <= now) next_check_at = now + interval;
      const row: ListingRow = { ...current, next_check_at, lease_until: null };
      if (outcome.ok) {
        counts.succeeded++;
        const visibleChange = row.discovery_doc !== outcome.document || row.status !== "active";
        Object.assign(row, { failure_count: 0, fetched_at: now, stale_since: null, status: "active" });
        row.discovery_doc = outcome.document;
        if (visibleChange) row.updated_at = now;
      } else {
        counts.failed++;
        row.failure_count = current.failure_count + 1;
        if (row.status === "active" && row.failure_count >= staleAfterFailures) {
          Object.assign(row, { status: "stale", stale_since: now, updated_at: now });
          counts.became_stale++;
        } else if (row.status === "stale" && (row.stale_since ?? now) + deleteAfterStaleSeconds * 1000 <= now) {
          Object.assign(row, { status: "deleted", updated_at: now });
          counts.deleted++;
        }
      }
      row.body = listingBody(row);
      if (row.updated_at !== current.updated_at || row.status !== current.status) {
        await store.saveListing(trx, row);
        if (row.status === "deleted") await store.revokeSessions(trx, row.service_did, now);
      } else {
        const { failure_count, next_check_at: next, lease_until, fetched_at, body } = row;
        await store.saveBookkeeping(trx, row.id, { failure_count, next_check_at: next, lease_until, fetched_at, body });
      }
    });
    this.listingsChanged(listing.service_did);
  }

  /**
   * The listing row, locked until the transaction ends on PostgreSQL (SQLite runs one transaction
   * at a time).
   */
  #lockedListing(trx: store.Db, key: { id: number } | { serviceDid: string }): Promise<ListingRow | undefined> {
    const base = trx.selectFrom("dir_listings").selectAll();
    const query = "id" in key ? base.where("id", "=", key.id) : base.where("service_did", "=", key.serviceDid);
    return (this.#db.engine === "postgres" ? query.forUpdate() : query).executeTakeFirst();
  }

  async #check(listing: ListingRow): Promise<{ ok: true; document: string } | { ok: false }> {
    try {
      const response = await this.#fetcher.get(listing.discovery_url, { accept: "application/json" });
      const document = parseDiscoveryBody(response.body);
      if (document.service_did !== listing.service_did) return { ok: false };
      return { ok: true, document: JSON.stringify(document) };
    } catch {
      return { ok: false };
    }
  }

  /** Forgets challenges and sessions long past their expiry. */
  async purgeExpired(): Promise<void> {
    const before = this.#clock.now() - 24 * 3600 * 1000;
    await store.deleteOldChallenges(this.#kdb, before);
    await store.deleteOldSessions(this.#kdb, before);
  }

  async sitemapPage(offset: number, limit: number) {
    return store.activeSitemapRows(this.#kdb, offset, limit);
  }

  countActive(): Promise<number> {
    return store.countActive(this.#kdb);
  }
}

function describeFetchError(error: unknown): string {
  return error instanceof SafeFetchError ? error.message : "the host could not be reached";
}

function parseDiscoveryBody(body: Buffer): Record<string, unknown> {
  let document: unknown;
  try {
    document = JSON.parse(body.toString("utf8"));
  } catch {
    throw err(400, "discovery_invalid", "the discovery document is not JSON");
  }
  const result = validateDiscoveryDocument(document);
  if (!result.valid) {
    throw err(400, "discovery_invalid", "the discovery document does not match the schema", { errors: result.errors });
  }
  return result.document as Record<string, unknown>;
}
