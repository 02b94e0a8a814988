import { FingerprintSet, PairHasher } from "./fingerprint-set.js";

/**
 * Replay stores for `(keyid, nonce)` pairs. `seen` records a pair and answers whether it was
 * fresh: true the first time within the TTL, false on every repeat. `createdSeconds` is the
 * signature's `created`: a store that can lose pairs (a cache restarted empty) uses it to refuse
 * signatures that could have been seen before the loss.
 */
export interface NonceStore {
  seen(keyid: string, nonce: string, ttlSeconds: number, createdSeconds?: number): Promise<boolean>;
}

export interface MemoryNonceStoreOptions {
  /**
   * The most pairs kept; past it the pairs closest to expiry are dropped first. Size it to peak
   * rate x window: each pair takes 12 to 24 bytes.
   */
  maxEntries?: number;
  /** Milliseconds since the epoch; an injectable clock. */
  now?: () => number;
}

// Pairs are grouped by when they expire, one set per stretch of this length: a set is dropped
// whole once its stretch has passed, so nothing is swept entry by entry.
const STRETCH_MS = 60_000;
// Emptied sets kept for reuse, so a steady load allocates nothing once it has run a window.
const SPARE_SETS = 4;

/**
 * An in-process store bounded in size, with memory that levels off within one TTL window under a
 * steady load. Pairs are kept as keyed 64-bit fingerprints (see PairHasher: a collision can only
 * refuse, never admit). Only for a single process: several replicas need the Redis store.
 */
export class MemoryNonceStore implements NonceStore {
  readonly #sets = new Map<number, FingerprintSet>();
  readonly #spare: FingerprintSet[] = [];
  readonly #hasher = new PairHasher();
  readonly #maxEntries: number;
  readonly #now: () => number;
  #size = 0;
  /** When the soonest set's stretch ends (no set: infinity). */
  #nextDrop = Number.POSITIVE_INFINITY;

  constructor(options: MemoryNonceStoreOptions = {}) {
    this.#maxEntries = options.maxEntries ?? 1_000_000;
    this.#now = options.now ?? Date.now;
    if (!(this.#maxEntries >= 1)) throw new RangeError("maxEntries must be at least 1");
  }

  /** Pairs held, including some that expired less than a stretch ago. */
  get size(): number {
    return this.#size;
  }

  async seen(keyid: string, nonce: string, ttlSeconds: number): Promise<boolean> {
    return this.seenSync(keyid, nonce, ttlSeconds);
  }

  seenSync(keyid: string, nonce: string, ttlSeconds: number): boolean {
    const now = this.#now();
    this.#dropExpired(now);
    const hasher = this.#hasher;
    hasher.hash(keyid, nonce);
    for (const set of this.#sets.values()) {
      if (set.expiryOf(hasher.high, hasher.low) > now) return false;
    }
    const expiry = now + Math.max(1, ttlSeconds) * 1000;
    const stretch = Math.floor(expiry / STRETCH_MS);
    // Room first, so the pair just recorded is never the one dropped.
    while (this.#size >= this.#maxEntries) this.#dropSoonest();
    let set = this.#sets.get(stretch);
    if (set === undefined) {
      set = this.#spare.pop() ?? new FingerprintSet();
      set.reset(stretch * STRETCH_MS);
      this.#sets.set(stretch, set);
      this.#nextDrop = Math.min(this.#nextDrop, (stretch + 1) * STRETCH_MS);
    }
    if (set.put(hasher.high, hasher.low, expiry)) this.#size += 1;
    return true;
  }

  #dropExpired(now: number): void {
    // Nothing can have expired before the soonest set's stretch ends: most calls stop here.
    if (now < this.#nextDrop) return;
    let next = Number.POSITIVE_INFINITY;
    for (const [stretch, set] of this.#sets) {
      const end = (stretch + 1) * STRETCH_MS;
      if (end <= now) this.#release(stretch, set);
      else next = Math.min(next, end);
    }
    this.#nextDrop = next;
  }

  #dropSoonest(): void {
    let soonest = Number.POSITIVE_INFINITY;
    for (const stretch of this.#sets.keys()) soonest = Math.min(soonest, stretch);
    const set = this.#sets.get(soonest);
    if (set !== undefined) this.#release(soonest, set);
  }

  #release(stretch: number, set: FingerprintSet): void {
    this.#sets.delete(stretch);
    this.#size -= set.count;
    if (this.#spare.length < SPARE_SETS) this.#spare.push(set);
  }
}

/** The subset of an ioredis (or node-redis v4 legacy-mode) client the Redis store needs. */
export interface RedisSetClient {
  set(key: string, value: string, expiryMode: "EX", seconds: number, condition: "NX"): Promise<string | null>;
}

export interface RedisNonceStoreOptions {
  /** Prepended to every key, so several services or test runs can share one Redis. */
  keyPrefix?: string;
}

/** A store shared by every replica: one atomic `SET key 1 EX ttl NX` per pair. */
export class RedisNonceStore implements NonceStore {
  readonly #client: RedisSetClient;
  readonly #prefix: string;

  constructor(client: RedisSetClient, options: RedisNonceStoreOptions = {}) {
    this.#client = client;
    this.#prefix = options.keyPrefix ?? "proto:nonce:";
  }

  async seen(keyid: string, nonce: string, ttlSeconds: number): Promise<boolean> {
    const ttl = Math.max(1, Math.ceil(ttlSeconds));
    const reply = await this.#client.set(`${this.#prefix}${keyid}\n${nonce}`, "1", "EX", ttl, "NX");
    return reply === "OK";
  }
}
