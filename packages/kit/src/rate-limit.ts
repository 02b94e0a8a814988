import type { KitStore } from "./store/types.js";

export interface RateLimitDecision {
  allowed: boolean;
  /** Seconds until the window ends (sent as `Retry-After` when refused). */
  retryAfterSeconds: number;
  count: number;
}

/** Fixed-window counters: `hit` counts one request against `bucket` and decides. */
export interface RateLimiter {
  hit(bucket: string, limit: number, windowSeconds: number, nowMs: number): Promise<RateLimitDecision>;
}

function decide(count: number, limit: number, windowStart: number, windowMs: number, now: number): RateLimitDecision {
  return {
    allowed: count <= limit,
    retryAfterSeconds: Math.max(1, Math.ceil((windowStart + windowMs - now) / 1000)),
    count,
  };
}

/** Counters in the kit's database: shared by every replica that uses the same database (the default). */
export class StoreRateLimiter implements RateLimiter {
  constructor(private readonly store: KitStore) {}

  async hit(bucket: string, limit: number, windowSeconds: number, nowMs: number): Promise<RateLimitDecision> {
    const windowMs = windowSeconds * 1000;
    const windowStart = Math.floor(nowMs / windowMs) * windowMs;
    const count = await this.store.incrementCounter(bucket, windowStart);
    return decide(count, limit, windowStart, windowMs, nowMs);
  }
}

/** Counters in this process only (one replica, or tests). */
export class MemoryRateLimiter implements RateLimiter {
  readonly #counters = new Map<string, { windowStart: number; count: number }>();
  readonly #maxEntries: number;

  constructor(options: { maxEntries?: number } = {}) {
    this.#maxEntries = options.maxEntries ?? 100_000;
  }

  async hit(bucket: string, limit: number, windowSeconds: number, nowMs: number): Promise<RateLimitDecision> {
    const windowMs = windowSeconds * 1000;
    const windowStart = Math.floor(nowMs / windowMs) * windowMs;
    const key = `${windowSeconds}\n${bucket}`;
    let entry = this.#counters.get(key);
    if (entry === undefined || entry.windowStart !== windowStart) {
      if (entry === undefined && this.#counters.size >= this.#maxEntries) {
        for (const [k, v] of this.#counters) if (v.windowStart < windowStart) this.#counters.delete(k);
        if (this.#counters.size >= this.#maxEntries) this.#counters.clear();
      }
      entry = { windowStart, count: 0 };
      this.#counters.set(key, entry);
    }
    entry.count += 1;
    return decide(entry.count, limit, windowStart, windowMs, nowMs);
  }
}
