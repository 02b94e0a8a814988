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
  /** The most pairs kept; past it the oldest are dropped. Size it to peak rate x window. */
  maxEntries?: number;
  /** Milliseconds since the epoch; an injectable clock. */
  now?: () => number;
}

/**
 * An in-process store bounded in size. Entries expire by TTL; when full, the oldest insertion is
 * dropped first (with the profile's TTLs of at most a few minutes, oldest is nearly soonest to
 * expire). Only for a single process: several replicas need the Redis store.
 */
export class MemoryNonceStore implements NonceStore {
  readonly #entries = new Map<string, number>();
  readonly #maxEntries: number;
  readonly #now: () => number;

  constructor(options: MemoryNonceStoreOptions = {}) {
    this.#maxEntries = options.maxEntries ?? 1_000_000;
    this.#now = options.now ?? Date.now;
    if (!(this.#maxEntries >= 1)) throw new RangeError("maxEntries must be at least 1");
  }

  get size(): number {
    return this.#entries.size;
  }

  async seen(keyid: string, nonce: string, ttlSeconds: number): Promise<boolean> {
    return this.seenSync(keyid, nonce, ttlSeconds);
  }

  seenSync(keyid: string, nonce: string, ttlSeconds: number): boolean {
    const now = this.#now();
    const key = `${keyid}\n${nonce}`;
    const expiry = this.#entries.get(key);
    if (expiry !== undefined && expiry > now) return false;
    if (expiry !== undefined) this.#entries.delete(key);
    this.#sweep(now);
    this.#entries.set(key, now + Math.max(1, ttlSeconds) * 1000);
    return true;
  }

  #sweep(now: number): void {
    // Insertion order is close to expiry order, so expired entries gather at the front.
    for (const [key, expiry] of this.#entries) {
      if (expiry > now && this.#entries.size < this.#maxEntries) break;
      this.#entries.delete(key);
    }
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
