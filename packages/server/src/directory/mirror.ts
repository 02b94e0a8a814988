import { randomBytes } from "node:crypto";
import type { FastifyBaseLogger, FastifyInstance } from "fastify";
import type { Clock } from "../platform/clock.js";
import type { Database } from "../platform/database.js";
import { ApiError } from "../platform/errors.js";
import { parseDiscoveryUrl } from "./discovery-url.js";
import { LISTING_STATUSES, type ListingStatus } from "./listing.js";
import type { DirectorySchema } from "./migrations.js";
import { LeaseLost, MirrorLease } from "./mirror-lease.js";
import {
  applyMirroredListing,
  type MirroredListing,
  type MirrorState,
  openMirrorState,
  saveMirrorProgress,
} from "./mirror-store.js";
import { parseRfc3339 } from "./routes.js";

/**
 * Mirror mode (`proto-server directory --mirror-of URL`): a read-only directory that follows an
 * upstream directory by polling `GET /v1/listings?updated_since=…&include_deleted=true`, stores
 * each listing exactly as the upstream serves it, and serves it through the usual read paths.
 *
 * A pass is one traversal of the upstream's list, page by page, from the last position applied
 * (less a small look-back, since `updated_since` is inclusive and concurrent writes may commit
 * out of timestamp order) to its end. Each page is applied in one transaction together with the
 * position and the upstream's cursor, so a restart goes on from the last page applied instead of
 * downloading everything again. Failures back off (the upstream's `Retry-After` when it sends
 * one, exponential with a cap otherwise); the state is reported through `status()` and `/readyz`.
 */

export interface MirrorSettings {
  /** The upstream's registry URL (its API is under `/v1`), without a trailing slash. */
  upstream: string;
  /** Seconds between the end of a pass and the next; 0: passes run only on demand (tests). */
  pollSeconds: number;
  /** Listings per upstream page (1-100). */
  pageSize: number;
  /** Whole request, first byte to last, per page. */
  timeoutSeconds: number;
  /** The cap of the exponential backoff (a `Retry-After` from the upstream is honoured past it). */
  maxBackoffSeconds: number;
  /** How far before the last position applied a new traversal starts again. */
  lookbackSeconds: number;
  /** Largest upstream page accepted (100 listings of the largest kind are about 7 MB). */
  maxPageBytes: number;
}

export const DEFAULT_MIRROR_SETTINGS: Omit<MirrorSettings, "upstream"> = {
  pollSeconds: 60,
  pageSize: 100,
  timeoutSeconds: 30,
  maxBackoffSeconds: 300,
  lookbackSeconds: 10,
  maxPageBytes: 16 * 1024 * 1024,
};

/** The first backoff; it doubles with each consecutive failure up to `maxBackoffSeconds`. */
const BACKOFF_BASE_MS = 5_000;
/** The longest `Retry-After` honoured. */
const MAX_RETRY_AFTER_MS = 24 * 3600 * 1000;
const ERROR_BODY_BYTES = 64 * 1024;
const USER_AGENT = "proto-directory-mirror/0.1";

/** `fetch`, or a stand-in for it (tests count and break requests through one). */
export type MirrorFetch = (url: string, init: RequestInit) => Promise<Response>;

/** Where the mirror stands: the numbers `/readyz` reports and metrics read. Times are ms. */
export interface MirrorStatus {
  upstream: string;
  /** A first complete pass has ended (in this process or an earlier one): the mirror can serve. */
  ready: boolean;
  /** Start of the last complete pass: every upstream change made before it is mirrored. */
  lastSyncedAt: number | null;
  /** Now less `lastSyncedAt`, in seconds; null before the first complete pass. */
  lagSeconds: number | null;
  /** A pass is running in this process. */
  syncing: boolean;
  /** The list position of the last listing applied. */
  position: { updatedAt: number; serviceDid: string } | null;
  /** The error of the last pass, cleared by a successful one. */
  lastError: string | null;
  lastErrorAt: number | null;
  consecutiveFailures: number;
  /** The next pass: after a failure, not before the backoff ends; otherwise the next poll. */
  nextAttemptAt: number | null;
  /** Since this process started. */
  totals: { passes: number; failedPasses: number; requests: number; listingsFetched: number; listingsApplied: number };
}

export type PassOutcome = "synced" | "failed" | "deferred" | "busy" | "stopped";

export interface PassResult {
  /** `deferred`: still backing off, nothing was fetched; `busy`: another replica is syncing. */
  outcome: PassOutcome;
  pages: number;
  listingsFetched: number;
  listingsApplied: number;
  error?: string;
}

export interface DirectoryMirrorDeps {
  database: Database<DirectorySchema>;
  clock: Clock;
  settings: MirrorSettings;
  /** What a primary would schedule revalidation with, for the rows written (see mirror-store). */
  revalidationIntervalSeconds: number;
  fetch?: MirrorFetch;
  log: FastifyBaseLogger;
  /** Told after a page that changed listings committed (the single-listing read cache). */
  onListingsChanged?: () => void;
}

/** A failure the upstream is responsible for, as an operator should read it. */
class UpstreamError extends Error {
  constructor(
    message: string,
    readonly retryAfterMs?: number,
    readonly rejectedCursor = false,
  ) {
    super(message);
  }
}

class Stopped extends Error {}

interface UpstreamPage {
  listings: MirroredListing[];
  nextCursor: string | null;
}

export class DirectoryMirror {
  readonly upstream: string;
  readonly #db: Database<DirectorySchema>;
  readonly #clock: Clock;
  readonly #settings: MirrorSettings;
  readonly #intervalMs: number;
  readonly #onListingsChanged: (() => void) | undefined;
  readonly #fetch: MirrorFetch;
  readonly #log: FastifyBaseLogger;
  readonly #owner = randomBytes(9).toString("base64url");
  readonly #stop = new AbortController();
  readonly #listUrl: string;
  #state: MirrorState | undefined;
  #pass: Promise<PassResult> | undefined;
  #syncing = false;
  #timer: NodeJS.Timeout | undefined;
  #nextPollAt: number | null = null;
  #retryAt: number | null = null;
  #failures = 0;
  #lastError: string | null = null;
  #lastErrorAt: number | null = null;
  readonly #totals = { passes: 0, failedPasses: 0, requests: 0, listingsFetched: 0, listingsApplied: 0 };

  constructor(deps: DirectoryMirrorDeps) {
    this.upstream = deps.settings.upstream;
    this.#db = deps.database;
    this.#clock = deps.clock;
    this.#settings = deps.settings;
    this.#intervalMs = deps.revalidationIntervalSeconds * 1000;
    this.#fetch = deps.fetch ?? ((url, init) => fetch(url, init));
    this.#log = deps.log;
    this.#onListingsChanged = deps.onListingsChanged;
    this.#listUrl = `${this.upstream}/v1/listings`;
  }

  /** Reads (or creates) the mirror's state; refuses a database that belongs to something else. */
  async open(): Promise<void> {
    this.#state = await openMirrorState(this.#db.db, this.upstream);
  }

  /** Starts polling: a first pass now, then one `pollSeconds` after each (unless that is 0). */
  start(): void {
    if (this.#settings.pollSeconds > 0) this.#schedule(0);
  }

  /** Ends polling, aborts the request in flight and waits for the pass to end. */
  async stop(): Promise<void> {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#stop.abort(new Stopped("the mirror is stopping"));
    await this.idle();
  }

  /** Resolves once no pass is running. */
  async idle(): Promise<void> {
    while (this.#pass !== undefined) await this.#pass.catch(() => undefined);
  }

  /**
   * One pass, after any pass already running in this process. While a backoff runs the answer is
   * `deferred` and nothing is fetched.
   */
  sync(): Promise<PassResult> {
    const previous = this.#pass;
    const pass = (async () => {
      if (previous !== undefined) await previous.catch(() => undefined);
      return this.#runPass();
    })();
    this.#pass = pass;
    return pass.finally(() => {
      if (this.#pass === pass) this.#pass = undefined;
    });
  }

  status(): MirrorStatus {
    const now = this.#clock.now();
    const syncedAt = this.#state?.synced_at ?? null;
    const position = this.#state?.position_updated_at ?? null;
    let nextAttemptAt = this.#retryAt !== null && this.#retryAt > now ? this.#retryAt : this.#nextPollAt;
    if (this.#syncing) nextAttemptAt = null;
    return {
      upstream: this.upstream,
      ready: syncedAt !== null,
      lastSyncedAt: syncedAt,
      lagSeconds: syncedAt === null ? null : Math.max(0, now - syncedAt) / 1000,
      syncing: this.#syncing,
      position: position === null ? null : { updatedAt: position, serviceDid: this.#state?.position_service_did ?? "" },
      lastError: this.#lastError,
      lastErrorAt: this.#lastErrorAt,
      consecutiveFailures: this.#failures,
      nextAttemptAt,
      totals: { ...this.#totals },
    };
  }

  /** For `/readyz`: the status, and unready until a first complete pass. */
  readiness(): { fields: Record<string, unknown>; unready?: string } {
    const status = this.status();
    const fields = { mirror: mirrorStatusJson(status) };
    return status.ready
      ? { fields }
      : { fields, unready: `the mirror has not completed a first sync with ${this.upstream}` };
  }

  #schedule(delayMs: number): void {
    if (this.#stop.signal.aborted) return;
    this.#nextPollAt = this.#clock.now() + delayMs;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.sync().then(() => {
        const now = this.#clock.now();
        this.#schedule(
          this.#retryAt !== null && this.#retryAt > now ? this.#retryAt - now : this.#settings.pollSeconds * 1000,
        );
      });
    }, delayMs);
    this.#timer.unref();
  }

  async #runPass(): Promise<PassResult> {
    const result: PassResult = { outcome: "synced", pages: 0, listingsFetched: 0, listingsApplied: 0 };
    if (this.#stop.signal.aborted) return { ...result, outcome: "stopped" };
    const now = this.#clock.now();
    if (this.#retryAt !== null && now < this.#retryAt) return { ...result, outcome: "deferred" };
    const db = this.#db.db;
    let lease: MirrorLease | undefined;
    try {
      lease = await MirrorLease.take(db, this.#owner, this.#clock, this.#log);
      if (lease === undefined) {
        // Another replica on this database syncs; its progress is ours to report.
        this.#state = await openMirrorState(db, this.upstream);
        return { ...result, outcome: "busy" };
      }
    } catch (error) {
      return this.#failed(result, error);
    }
    this.#syncing = true;
    try {
      await this.#traverse(result, lease);
      this.#totals.passes++;
      this.#failures = 0;
      this.#retryAt = null;
      this.#lastError = null;
      this.#lastErrorAt = null;
      if (result.listingsApplied > 0) {
        this.#log.info({ mirror: { upstream: this.upstream, ...result } }, "mirror pass");
      }
      return result;
    } catch (error) {
      if (this.#stop.signal.aborted) return { ...result, outcome: "stopped" };
      // Not a failure: the replica that took over goes on from the last page applied here.
      if (lease.signal.aborted || error instanceof LeaseLost) return { ...result, outcome: "busy" };
      return this.#failed(result, error);
    } finally {
      this.#syncing = false;
      await lease.release();
    }
  }

  /** Pages from where the last pass stopped to the end of the upstream's list. */
  async #traverse(result: PassResult, lease: MirrorLease): Promise<void> {
    const db = this.#db.db;
    const state = await openMirrorState(db, this.upstream);
    this.#state = state;
    const fresh = () => ({
      since:
        state.position_updated_at === null
          ? null
          : Math.max(0, state.position_updated_at - this.#settings.lookbackSeconds * 1000),
      cursor: null as string | null,
      startedAt: this.#clock.now(),
    });
    let traversal =
      state.pass_cursor === null
        ? fresh()
        : { since: state.pass_since, cursor: state.pass_cursor, startedAt: state.pass_started_at ?? this.#clock.now() };
    let restarted = false;
    for (;;) {
      let page: UpstreamPage;
      try {
        page = await this.#fetchPage(traversal.since, traversal.cursor, lease.signal);
      } catch (error) {
        // A cursor the upstream no longer takes (say, after its upgrade): start again from the
        // position, which loses nothing; the traversal's start time still holds.
        if (error instanceof UpstreamError && error.rejectedCursor && traversal.cursor !== null && !restarted) {
          restarted = true;
          traversal = { ...fresh(), startedAt: traversal.startedAt };
          continue;
        }
        throw error;
      }
      result.pages++;
      result.listingsFetched += page.listings.length;
      this.#totals.listingsFetched += page.listings.length;
      if (page.nextCursor !== null && page.nextCursor === traversal.cursor) {
        throw new UpstreamError(`${this.#listUrl} answered with the cursor it was given: the traversal cannot advance`);
      }
      const done = page.nextCursor === null;
      const last = page.listings.at(-1);
      const progress: Omit<MirrorState, "upstream"> = {
        position_updated_at: state.position_updated_at,
        position_service_did: state.position_service_did,
        pass_since: done ? null : traversal.since,
        pass_cursor: page.nextCursor,
        pass_started_at: done ? null : traversal.startedAt,
        synced_at: done ? traversal.startedAt : state.synced_at,
      };
      if (last !== undefined && (state.position_updated_at === null || last.updated_at >= state.position_updated_at)) {
        progress.position_updated_at = last.updated_at;
        progress.position_service_did = last.service_did;
      }
      const applied = await this.#db.db.transaction().execute(async (trx) => {
        let count = 0;
        for (const listing of page.listings) {
          if (await applyMirroredListing(trx, listing, this.#intervalMs)) count++;
        }
        if (!(await saveMirrorProgress(trx, this.#owner, lease.until(), progress))) throw new LeaseLost();
        return count;
      });
      Object.assign(state, progress);
      if (applied > 0) this.#onListingsChanged?.();
      result.listingsApplied += applied;
      this.#totals.listingsApplied += applied;
      if (done) return;
      this.#stop.signal.throwIfAborted();
      lease.signal.throwIfAborted();
      traversal = { ...traversal, cursor: page.nextCursor };
    }
  }

  #failed(result: PassResult, error: unknown): PassResult {
    const now = this.#clock.now();
    this.#totals.failedPasses++;
    this.#failures++;
    let message: string;
    let delay: number;
    if (error instanceof UpstreamError) {
      message = error.message;
      delay =
        error.retryAfterMs !== undefined
          ? Math.min(Math.max(error.retryAfterMs, 1000), MAX_RETRY_AFTER_MS)
          : this.#backoff(this.#failures);
    } else {
      // Not the upstream's doing (the database, most likely): details go to the log only, since
      // `/readyz` is public.
      message = "the mirror could not store what it fetched (see the log)";
      delay = this.#backoff(this.#failures);
      this.#log.error({ err: error }, "mirror pass failed");
    }
    this.#retryAt = now + delay;
    this.#lastError = message;
    this.#lastErrorAt = now;
    this.#log.warn(
      { mirror: { upstream: this.upstream, error: message, retry_in_seconds: delay / 1000 } },
      "mirror pass failed",
    );
    return { ...result, outcome: "failed", error: message };
  }

  /** Exponential from 5 s, with up to 20% jitter so mirrors do not return in step, capped. */
  #backoff(failures: number): number {
    const exponential = BACKOFF_BASE_MS * 2 ** Math.min(failures - 1, 30);
    return Math.min(this.#settings.maxBackoffSeconds * 1000, exponential * (1 + Math.random() * 0.2));
  }

  async #fetchPage(since: number | null, cursor: string | null, leaseLost: AbortSignal): Promise<UpstreamPage> {
    const query = new URLSearchParams({ limit: String(this.#settings.pageSize), include_deleted: "true" });
    if (since !== null) query.set("updated_since", new Date(since).toISOString());
    if (cursor !== null) query.set("cursor", cursor);
    const timeout = AbortSignal.timeout(this.#settings.timeoutSeconds * 1000);
    const signal = AbortSignal.any([this.#stop.signal, leaseLost, timeout]);
    const where = this.#listUrl;
    const failure = (error: unknown) => {
      if (this.#stop.signal.aborted) return this.#stop.signal.reason as Error;
      if (leaseLost.aborted) return leaseLost.reason as Error;
      if (timeout.aborted)
        return new UpstreamError(`${where} did not answer within ${this.#settings.timeoutSeconds} s`);
      if (error instanceof UpstreamError) return error;
      const cause = (error as { cause?: { code?: string; message?: string } })?.cause;
      return new UpstreamError(`${where} could not be reached (${cause?.code ?? cause?.message ?? String(error)})`);
    };
    this.#totals.requests++;
    let response: Response;
    try {
      response = await this.#fetch(`${where}?${query}`, {
        method: "GET",
        headers: { accept: "application/json", "cache-control": "no-cache", "user-agent": USER_AGENT },
        redirect: "manual",
        signal,
      });
    } catch (error) {
      throw failure(error);
    }
    try {
      if (response.status === 200) {
        return parsePage(await readBody(response, this.#settings.maxPageBytes, where), where);
      }
      const retryAfterMs = parseRetryAfter(response.headers.get("retry-after"), this.#clock.now());
      if (response.status >= 300 && response.status < 400) {
        await response.body?.cancel();
        const location = response.headers.get("location");
        throw new UpstreamError(
          `${where} answered HTTP ${response.status}${location ? ` to ${location}` : ""}; redirects are not followed, configure the final URL`,
        );
      }
      const text = (await readBody(response, ERROR_BODY_BYTES, where).catch(() => Buffer.alloc(0))).toString("utf8");
      let detail = "";
      try {
        const envelope = JSON.parse(text) as { error?: { code?: unknown; message?: unknown } };
        if (typeof envelope.error?.code === "string") {
          detail = ` (${envelope.error.code}${typeof envelope.error.message === "string" ? `: ${envelope.error.message.slice(0, 200)}` : ""})`;
        }
      } catch {
        // Not the error envelope: the status says enough.
      }
      const rejectedCursor = response.status === 400 && cursor !== null;
      throw new UpstreamError(`${where} answered HTTP ${response.status}${detail}`, retryAfterMs, rejectedCursor);
    } catch (error) {
      throw failure(error);
    }
  }
}

/** The status for people and JSON: snake_case, RFC 3339 times. */
export function mirrorStatusJson(status: MirrorStatus) {
  const time = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
  return {
    upstream: status.upstream,
    last_synced_at: time(status.lastSyncedAt),
    lag_seconds: status.lagSeconds,
    syncing: status.syncing,
    position:
      status.position === null
        ? null
        : { updated_at: time(status.position.updatedAt), service_did: status.position.serviceDid },
    consecutive_failures: status.consecutiveFailures,
    last_error: status.lastError,
    last_error_at: time(status.lastErrorAt),
    next_attempt_at: time(status.nextAttemptAt),
  };
}

export function passResultJson(result: PassResult) {
  return {
    outcome: result.outcome,
    pages: result.pages,
    listings_fetched: result.listingsFetched,
    listings_applied: result.listingsApplied,
    ...(result.error === undefined ? {} : { error: result.error }),
  };
}

/** Seconds or an HTTP-date, as milliseconds from `now`. */
export function parseRetryAfter(value: string | null, now: number): number | undefined {
  if (value === null) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  const date = Date.parse(trimmed);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

async function readBody(response: Response, maxBytes: number, where: string): Promise<Buffer> {
  const tooLarge = () => new UpstreamError(`${where} answered with more than ${maxBytes} bytes`);
  const declared = Number(response.headers.get("content-length") ?? Number.NaN);
  if (Number.isFinite(declared) && declared > maxBytes) {
    await response.body?.cancel();
    throw tooLarge();
  }
  if (response.body === null) return Buffer.alloc(0);
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > maxBytes) {
      await reader.cancel();
      throw tooLarge();
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks, total);
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

function parsePage(body: Buffer, where: string): UpstreamPage {
  let page: unknown;
  try {
    page = JSON.parse(body.toString("utf8"));
  } catch {
    throw new UpstreamError(`${where} answered with a body that is not JSON`);
  }
  if (!isObject(page) || !Array.isArray(page.listings)) {
    throw new UpstreamError(`${where} answered without a listings array`);
  }
  const nextCursor = page.next_cursor ?? null;
  if (nextCursor !== null && (typeof nextCursor !== "string" || nextCursor === "" || nextCursor.length > 4096)) {
    throw new UpstreamError(`${where} answered with an unusable next_cursor`);
  }
  if (nextCursor !== null && page.listings.length === 0) {
    throw new UpstreamError(`${where} answered with an empty page and a next_cursor`);
  }
  return { listings: page.listings.map((value, index) => parseListing(value, index, where)), nextCursor };
}

/** One listing of an upstream page, checked for what the read paths index, kept as served. */
function parseListing(value: unknown, index: number, where: string): MirroredListing {
  const bad = (what: string) => new UpstreamError(`${where}: listing ${index} of a page ${what}`);
  if (!isObject(value)) throw bad("is not an object");
  const did = value.service_did;
  if (typeof did !== "string" || !/^did:[a-z0-9]+:./.test(did) || did.length > 2048) {
    throw bad("has no valid service_did");
  }
  const time = (field: string): number => {
    const raw = value[field];
    const ms = typeof raw === "string" ? parseRfc3339(raw) : undefined;
    if (ms === undefined) throw bad(`(${did}) has no RFC 3339 ${field}`);
    return ms;
  };
  const text = (field: string): string | null => {
    const raw = value[field] ?? null;
    if (raw !== null && typeof raw !== "string") throw bad(`(${did}) has a ${field} that is not a string`);
    return raw;
  };
  if (typeof value.discovery_url !== "string") throw bad(`(${did}) has no discovery_url`);
  let host: string;
  try {
    host = parseDiscoveryUrl(value.discovery_url).host;
  } catch {
    throw bad(`(${did}) has a discovery_url that is not https://{host}/.well-known/proto`);
  }
  if (!isObject(value.discovery_doc)) throw bad(`(${did}) has no discovery_doc object`);
  if (!LISTING_STATUSES.includes(value.status as ListingStatus)) throw bad(`(${did}) has an unknown status`);
  const tags = value.tags ?? [];
  if (!Array.isArray(tags) || !tags.every((tag) => typeof tag === "string")) {
    throw bad(`(${did}) has tags that are not strings`);
  }
  return {
    service_did: did,
    host,
    discovery_url: value.discovery_url,
    discovery_doc: JSON.stringify(value.discovery_doc),
    // The tag rows are keyed by tag: the column holds each once, the body what the upstream sent.
    tags: JSON.stringify([...new Set(tags as string[])]),
    title: text("title"),
    description: text("description"),
    status: value.status as ListingStatus,
    fetched_at: time("fetched_at"),
    first_listed_at: time("first_listed_at"),
    updated_at: time("updated_at"),
    body: JSON.stringify(value),
  };
}

/** The write endpoints, and what each path still allows. */
const WRITE_ROUTES = new Map([
  ["POST /v1/listings/challenge", ""],
  ["POST /v1/listings", "GET, HEAD"],
  ["PATCH /v1/listings/:did", "GET, HEAD"],
  ["DELETE /v1/listings/:did", "GET, HEAD"],
  ["POST /admin/revalidate", ""],
]);

/**
 * Answers every write endpoint with 405 `read_only_mirror` naming the upstream, before rate limits,
 * credentials or the body are looked at. Register it before the routes.
 */
export function registerReadOnlyGuard(app: FastifyInstance, upstream: string): void {
  app.addHook("onRequest", async (request, reply) => {
    const allow = WRITE_ROUTES.get(`${request.method} ${request.routeOptions.url}`);
    if (allow === undefined) return;
    reply.header("allow", allow);
    throw new ApiError(
      405,
      "read_only_mirror",
      `this directory is a read-only mirror of ${upstream}; send changes to ${upstream}`,
      { upstream },
    );
  });
}

/** `/__test/mirror/sync`: one pass, answered when it is done (test hooks only). */
export function registerMirrorSyncHook(app: FastifyInstance, mirror: DirectoryMirror): void {
  app.post("/__test/mirror/sync", async () => ({
    ...passResultJson(await mirror.sync()),
    mirror: mirrorStatusJson(mirror.status()),
  }));
}
