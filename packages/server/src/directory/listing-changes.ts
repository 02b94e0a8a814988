/**
 * How a replica learns that another writer changed a listing, for the single-listing read cache
 * (body-cache.ts). The writer that took a change drops its own entry at once; every other
 * replica must stop serving the old listing within a second (clients may keep it for a minute
 * anyway, `max-age=60`), and nothing may depend on the writer living past its commit.
 *
 * - SQLite: `data_version` moves on a commit by any connection of any process. Reading it is a
 *   statement (a read transaction) that cost as much as the rest of a cached read, so a timer
 *   reads it every SQLITE_CHECK_MS: other processes' writes are seen within that time.
 * - PostgreSQL: the migration `0006_listing_changes` makes every write of a listing's body call
 *   `pg_notify('dir_listings', service_did)` in the writing transaction, so the notification is
 *   delivered if and only if the write committed, whatever becomes of the writer. Each replica
 *   listens on a connection of its own. While that connection is down, or has not proved itself
 *   recently, nothing is cached; once it is back, what was cached before is dropped (changes made
 *   meanwhile were not heard).
 */
import { performance } from "node:perf_hooks";
import pg from "pg";
import type { CacheVersion } from "./body-cache.js";

/** Other processes' commits on a SQLite file reach the read cache within this time. */
export const SQLITE_CHECK_MS = 100;

/** Where the read cache learns of other writers; `version` is asked at every lookup, so it only reads a field. */
export interface ListingChanges {
  readonly version: CacheVersion;
  close(): Promise<void>;
}

/**
 * SQLite: `counter` (data_version) read every `periodMs` by a timer, not at each lookup: timing
 * or reading anything there allocated on every read, and the garbage of the hottest path is what
 * the young generation must stay free of.
 */
export class SqliteListingChanges implements ListingChanges {
  #version = 0;
  #trusted = true;
  readonly #timer: NodeJS.Timeout;

  constructor(counter: () => number, periodMs = SQLITE_CHECK_MS) {
    let last = counter();
    this.#timer = setInterval(() => {
      try {
        const now = counter();
        if (now !== last) {
          last = now;
          this.#version++;
        }
      } catch {
        // The store was closed under us: nothing is trusted any more.
        clearInterval(this.#timer);
        this.#trusted = false;
      }
    }, periodMs);
    this.#timer.unref();
  }

  readonly version: CacheVersion = () => (this.#trusted ? this.#version : undefined);

  async close(): Promise<void> {
    clearInterval(this.#timer);
    this.#trusted = false;
  }
}

/** The listening connection's `application_name`. */
export const FEED_APPLICATION_NAME = "proto-directory-listing-feed";

/** The channel the migration's trigger notifies; the payload is the listing's DID, empty for "any". */
export const LISTING_CHANNEL = "dir_listings";

export interface PostgresListingFeedOptions {
  url: string;
  /** A change to the listing `serviceDid`, or to any listing when undefined. */
  onChange(serviceDid: string | undefined): void;
  /** Told when the feed goes down and comes back (once per outage). */
  onStatus?(up: boolean, error?: unknown): void;
  /** How often the listening connection proves it is alive (default 250 ms). */
  heartbeatMs?: number;
  /** How recent that proof must be for the cache to be used (default 750 ms; under a second). */
  trustMs?: number;
  /** A heartbeat unanswered this long ends the connection (default 2,000 ms). */
  deadAfterMs?: number;
}

/**
 * A `LISTEN dir_listings` connection that reconnects by itself. `version()` is what the read
 * cache asks before every lookup: undefined unless the connection is listening and a heartbeat
 * sent within `trustMs` has been answered. PostgreSQL sends a listening session the
 * notifications of every transaction that committed before a query of that session ends ahead
 * of the query's answer, so once a heartbeat started at t is answered, every change committed
 * before t has been heard: a cached listing is never more than `trustMs` behind.
 */
export class PostgresListingFeed implements ListingChanges {
  readonly #options: Required<Omit<PostgresListingFeedOptions, "onStatus">> &
    Pick<PostgresListingFeedOptions, "onStatus">;
  #client: pg.Client | undefined;
  #listening = false;
  /** Moves at every (re)connection: entries cached before it are dropped. */
  #session = 0;
  /**
   * Until `trustMs` after the last answered heartbeat (or the LISTEN) was sent; a timer ends it,
   * so a lookup reads a field instead of the clock.
   */
  #trusted = false;
  #distrust: NodeJS.Timeout | undefined;
  #heartbeat: NodeJS.Timeout | undefined;
  #reconnect: NodeJS.Timeout | undefined;
  #pending = false;
  #failures = 0;
  #down = false;
  #closed = false;

  constructor(options: PostgresListingFeedOptions) {
    this.#options = { heartbeatMs: 250, trustMs: 750, deadAfterMs: 2_000, ...options };
  }

  /** Starts listening; resolves once the first attempt succeeded or failed (it retries either way). */
  start(): Promise<void> {
    return this.#connect();
  }

  readonly version: CacheVersion = () => (this.#trusted ? this.#session : undefined);

  /** A heartbeat (or the LISTEN) sent at `sent` was answered: everything committed before it was heard. */
  #confirmed(sent: number): void {
    const left = sent + this.#options.trustMs - performance.now();
    clearTimeout(this.#distrust);
    if (left <= 0 || !this.#listening) {
      this.#trusted = false;
      return;
    }
    this.#trusted = true;
    this.#distrust = setTimeout(() => {
      this.#trusted = false;
    }, left);
    this.#distrust.unref();
  }

  /** Whether the feed is listening now (for tests and readiness-like reporting). */
  get listening(): boolean {
    return this.#listening;
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#reconnect);
    clearInterval(this.#heartbeat);
    clearTimeout(this.#distrust);
    const client = this.#client;
    this.#client = undefined;
    this.#listening = false;
    this.#trusted = false;
    await client?.end().catch(() => undefined);
  }

  async #connect(): Promise<void> {
    if (this.#closed) return;
    const client = new pg.Client({
      connectionString: this.#options.url,
      connectionTimeoutMillis: this.#options.deadAfterMs,
      keepAlive: true,
      // What an operator sees in pg_stat_activity.
      application_name: FEED_APPLICATION_NAME,
    });
    this.#client = client;
    const lost = (error?: unknown) => this.#lost(client, error);
    client.on("error", lost);
    client.on("end", () => lost());
    client.on("notification", (message) => {
      if (message.channel !== LISTING_CHANNEL || client !== this.#client) return;
      this.#options.onChange(message.payload === undefined || message.payload === "" ? undefined : message.payload);
    });
    try {
      await client.connect();
      const sent = performance.now();
      await client.query(`listen ${LISTING_CHANNEL}`);
      if (client !== this.#client) return;
      this.#session++;
      this.#listening = true;
      this.#confirmed(sent);
      this.#failures = 0;
      if (this.#down) {
        this.#down = false;
        this.#options.onStatus?.(true);
      }
      clearInterval(this.#heartbeat);
      this.#heartbeat = setInterval(() => this.#beat(client), this.#options.heartbeatMs);
      this.#heartbeat.unref();
    } catch (error) {
      lost(error);
    }
  }

  #beat(client: pg.Client): void {
    if (this.#pending || client !== this.#client) return;
    this.#pending = true;
    const sent = performance.now();
    const deadline = setTimeout(
      () => this.#lost(client, new Error("the listening connection stopped answering")),
      this.#options.deadAfterMs,
    );
    client.query("select 1").then(
      () => {
        clearTimeout(deadline);
        this.#pending = false;
        if (client === this.#client) this.#confirmed(sent);
      },
      (error: unknown) => {
        clearTimeout(deadline);
        this.#pending = false;
        this.#lost(client, error);
      },
    );
  }

  #lost(client: pg.Client, error?: unknown): void {
    if (client !== this.#client) return;
    this.#client = undefined;
    this.#listening = false;
    this.#trusted = false;
    clearTimeout(this.#distrust);
    this.#pending = false;
    clearInterval(this.#heartbeat);
    // A connection that stopped answering may never say goodbye; its events no longer count.
    client.removeAllListeners("notification");
    client.on("error", () => undefined);
    client.end().catch(() => undefined);
    if (this.#closed) return;
    if (!this.#down) {
      this.#down = true;
      this.#options.onStatus?.(false, error);
    }
    const delay = Math.min(100 * 2 ** this.#failures++, 2_000);
    this.#reconnect = setTimeout(() => void this.#connect(), delay);
    this.#reconnect.unref();
  }
}
