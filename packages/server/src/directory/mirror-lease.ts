/**
 * The sync lease: of the replicas sharing a mirror's database exactly one syncs at a time. The
 * lease is short and a heartbeat renews it while the pass runs (a page may take up to the upstream
 * timeout), so a replica that dies mid-pass, which never releases it, is taken over within
 * seconds rather than after the longest pass it might have run.
 */
import type { FastifyBaseLogger } from "fastify";
import type { Clock } from "../platform/clock.js";
import { releaseSyncLease, renewSyncLease, takeSyncLease } from "./mirror-store.js";
import type * as store from "./store.js";

/** How long a lease outlives its holder's last heartbeat. */
export const MIRROR_LEASE_MS = 15_000;
/** A third of the lease: two heartbeats may be late or fail before the lease runs out. */
export const MIRROR_HEARTBEAT_MS = 5_000;

/** The pass lost its lease (to a replica that took over after missed heartbeats). */
export class LeaseLost extends Error {
  constructor() {
    super("another replica took over the sync");
  }
}

export class MirrorLease {
  readonly #db: store.Db;
  readonly #owner: string;
  readonly #clock: Clock;
  readonly #log: FastifyBaseLogger;
  readonly #lost = new AbortController();
  readonly #timer: NodeJS.Timeout;

  private constructor(db: store.Db, owner: string, clock: Clock, log: FastifyBaseLogger) {
    this.#db = db;
    this.#owner = owner;
    this.#clock = clock;
    this.#log = log;
    this.#timer = setInterval(() => void this.#heartbeat(), MIRROR_HEARTBEAT_MS);
    this.#timer.unref();
  }

  /** The lease, with its heartbeat running; undefined while another replica holds it. */
  static async take(
    db: store.Db,
    owner: string,
    clock: Clock,
    log: FastifyBaseLogger,
  ): Promise<MirrorLease | undefined> {
    const now = clock.now();
    if (!(await takeSyncLease(db, owner, now, now + MIRROR_LEASE_MS))) return undefined;
    return new MirrorLease(db, owner, clock, log);
  }

  /** Aborted once the lease is found to be another replica's. */
  get signal(): AbortSignal {
    return this.#lost.signal;
  }

  /** The expiry a renewal made now sets. */
  until(): number {
    return this.#clock.now() + MIRROR_LEASE_MS;
  }

  /** Stops the heartbeat and lets the lease go (if it is still this replica's). */
  async release(): Promise<void> {
    clearInterval(this.#timer);
    await releaseSyncLease(this.#db, this.#owner).catch((error: unknown) =>
      this.#log.warn({ err: error }, "mirror: could not release the sync lease"),
    );
  }

  async #heartbeat(): Promise<void> {
    if (this.#lost.signal.aborted) return;
    try {
      if (!(await renewSyncLease(this.#db, this.#owner, this.until()))) this.#lost.abort(new LeaseLost());
    } catch (error) {
      // The next beat tries again; the lease outlasts two missed ones.
      this.#log.warn({ err: error }, "mirror: could not renew the sync lease");
    }
  }
}
