import type { Clock } from "../../platform/clock.js";
import { addressRateLimitKey, type RateLimiter, type RateLimitRule } from "../../platform/rate-limit.js";

/**
 * A fetch refused before any connection was made: the asking address spent its budget (429), or
 * every fetch slot of the process is busy (503). Either way the caller says when to try again.
 */
export class FetchRefused extends Error {
  constructor(
    message: string,
    readonly status: 429 | 503,
    readonly retryAfterSeconds: number,
  ) {
    super(message);
  }
}

export interface FetchBounds {
  limiter: RateLimiter;
  /** New fetches one address may cause (a cached answer or a shared fetch costs nothing). */
  perAddress: RateLimitRule;
  /** Fetches out at once, for every address together. */
  maxConcurrent: number;
  /** How long a failed fetch is answered from memory instead of being tried again. */
  failureCacheSeconds: number;
  /** The longest one fetch can take: when to try again while every slot is busy. */
  busyRetryAfterSeconds: number;
}

/** What a fetch produced, and how long it may be kept. */
export interface Fetched<T> {
  value: T;
  keepSeconds: number;
}

export interface BoundedFetchesOptions<T> {
  clock: Clock;
  bounds: FetchBounds;
  /** The most results, and separately the most failures, kept (the oldest are dropped first). */
  maxEntries: number;
  /** Fetches and reads one URL; what it throws is the failure kept and answered meanwhile. */
  load(url: string): Promise<Fetched<T>>;
}

interface Kept<V> {
  value: V;
  until: number;
}

/**
 * Fetches that anyone can cause by naming a URL (an https `client_id`), kept from being anyone's
 * to command: a result is kept for its lifetime and a failure for `failureCacheSeconds`, asks for
 * a URL being fetched share that one fetch, a new fetch is charged to the address that asked for
 * it, and at most `maxConcurrent` are out at once. There is deliberately no process-wide rate: one
 * client spending it would shut out every other client's first sign-in.
 */
export class BoundedFetches<T> {
  readonly #options: BoundedFetchesOptions<T>;
  readonly #results = new Map<string, Kept<T>>();
  readonly #failures = new Map<string, Kept<unknown>>();
  readonly #inFlight = new Map<string, Promise<T>>();

  constructor(options: BoundedFetchesOptions<T>) {
    this.#options = options;
  }

  /** The value at `url` for a request from `address`; throws the load's failure or FetchRefused. */
  async get(url: string, address: string): Promise<T> {
    const { bounds } = this.#options;
    const ready = this.#ready(url);
    if (ready !== undefined) return ready;
    // Refused before the budget is read: a busy process charges nobody.
    if (this.#inFlight.size >= bounds.maxConcurrent) throw this.#busy();
    const decision = await bounds.limiter.hit(bounds.perAddress, addressRateLimitKey(address));
    // The budget may live in Redis: another request may have started or ended this fetch meanwhile.
    const raced = this.#ready(url);
    if (raced !== undefined) return raced;
    if (!decision.allowed) {
      throw new FetchRefused(
        "too many new documents were asked to be fetched from this address",
        429,
        decision.retryAfterSeconds,
      );
    }
    if (this.#inFlight.size >= bounds.maxConcurrent) throw this.#busy();
    // From the check above to here nothing awaits, so one URL never has two fetches out.
    const pending = this.#fetch(url);
    this.#inFlight.set(url, pending);
    return pending;
  }

  #busy(): FetchRefused {
    return new FetchRefused(
      "too many documents are being fetched right now",
      503,
      this.#options.bounds.busyRetryAfterSeconds,
    );
  }

  /** A kept result or failure still in its lifetime, or the fetch already out for `url`. */
  #ready(url: string): Promise<T> | undefined {
    const now = this.#options.clock.now();
    const result = this.#results.get(url);
    if (result !== undefined && result.until > now) return Promise.resolve(result.value);
    const failure = this.#failures.get(url);
    if (failure !== undefined && failure.until > now) return Promise.reject(failure.value);
    return this.#inFlight.get(url);
  }

  async #fetch(url: string): Promise<T> {
    const { load, clock, bounds } = this.#options;
    try {
      const { value, keepSeconds } = await load(url);
      keep(this.#results, url, value, clock.now() + keepSeconds * 1000, this.#options.maxEntries);
      this.#failures.delete(url);
      return value;
    } catch (error) {
      keep(this.#failures, url, error, clock.now() + bounds.failureCacheSeconds * 1000, this.#options.maxEntries);
      throw error;
    } finally {
      this.#inFlight.delete(url);
    }
  }
}

/** Keeps `value` under `key` as the newest entry, dropping the oldest past `maxEntries`. */
function keep<V>(map: Map<string, Kept<V>>, key: string, value: V, until: number, maxEntries: number): void {
  map.delete(key);
  if (map.size >= maxEntries) {
    const oldest = map.keys().next().value;
    if (oldest !== undefined) map.delete(oldest);
  }
  map.set(key, { value, until });
}
