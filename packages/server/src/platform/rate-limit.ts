/**
 * Fixed-window rate limiting, as the directory and attestor specs require: a counter per
 * (rule, key, window), windows aligned on floor(now / window) of the injected clock, overflow
 * denied with a whole-second Retry-After until the window ends.
 *
 * MemoryRateLimiter serves a single process; RedisRateLimiter shares one global count between
 * replicas (used when REDIS_URL is set); BatchedRedisRateLimiter (batched-rate-limit.ts) shares it
 * within a stated error, for the directory's read limit.
 */
import { createHash } from "node:crypto";
import { addressKey } from "@proto/protocol";
import type { Redis } from "ioredis";
import type { Clock } from "./clock.js";

export interface RateLimitRule {
  /** Identifies the limit, e.g. "listings.create"; counters of different rules never mix. */
  name: string;
  /** Hits allowed per window; 0 denies everything. */
  limit: number;
  windowSeconds: number;
}

export interface RateLimitDecision {
  allowed: boolean;
  limit: number;
  /** Hits still allowed in this window after this one. */
  remaining: number;
  /** Whole seconds until the window ends (at least 1) when denied; 0 when allowed. */
  retryAfterSeconds: number;
  /** When the current window ends, in milliseconds since the epoch. */
  resetAt: number;
}

export interface RateLimiter {
  /** Counts one hit of `key` against `rule` and says whether it may proceed. */
  hit(rule: RateLimitRule, key: string): Promise<RateLimitDecision>;
  /**
   * The same as hit(), at once, for limiters that can decide in this process; undefined when this
   * hit cannot be decided without waiting (the caller then asks hit(), which counts it).
   */
  hitSync?(rule: RateLimitRule, key: string): RateLimitDecision | undefined;
  close?(): Promise<void>;
}

/**
 * Joins key parts with ":" after escaping "%" and ":" in each part, so distinct part lists never
 * produce the same key (an IPv6 address or a DID is full of colons).
 */
export function rateLimitKey(...parts: string[]): string {
  return parts.map(escapeKeyPart).join(":");
}

/**
 * The key of a client address: `rateLimitKey("ip", addressKey(address))`, so an IPv6 client is
 * counted by its /64 (a host usually holds a whole one) and an IPv4 client's key is unchanged.
 */
export function addressRateLimitKey(address: string): string {
  return rateLimitKey("ip", addressKey(address));
}

function escapeKeyPart(part: string): string {
  // Most parts (rule names, IPv4 addresses) hold neither character: no copies for them.
  if (part.indexOf("%") === -1 && part.indexOf(":") === -1) return part;
  return part.replaceAll("%", "%25").replaceAll(":", "%3A");
}

interface Window {
  index: number;
  resetAt: number;
}

function validateRule(rule: RateLimitRule): void {
  if (typeof rule.name !== "string" || rule.name === "") {
    throw new TypeError("rate limit rule needs a non-empty name");
  }
  if (!Number.isSafeInteger(rule.limit) || rule.limit < 0) {
    throw new RangeError(`rate limit rule ${rule.name}: limit must be a non-negative integer`);
  }
  if (!Number.isSafeInteger(rule.windowSeconds) || rule.windowSeconds < 1) {
    throw new RangeError(`rate limit rule ${rule.name}: windowSeconds must be a positive integer`);
  }
}

function currentWindow(rule: RateLimitRule, now: number): Window {
  const windowMs = rule.windowSeconds * 1000;
  const index = Math.floor(now / windowMs);
  return { index, resetAt: (index + 1) * windowMs };
}

export function decide(
  rule: RateLimitRule,
  allowed: boolean,
  count: number,
  now: number,
  resetAt: number,
): RateLimitDecision {
  return {
    allowed,
    limit: rule.limit,
    remaining: allowed ? Math.max(0, rule.limit - count) : 0,
    retryAfterSeconds: allowed ? 0 : Math.max(1, Math.ceil((resetAt - now) / 1000)),
    resetAt,
  };
}

export interface CheckedRule {
  name: string;
  limit: number;
  windowSeconds: number;
  /** The counter id's start: escaped name and window length, and the separator before the key. */
  prefix: string;
}

// Each rule object is validated and its id prefix built once, not at every hit (the read limit
// runs on every read); a rule changed in place is checked again.
const checkedRules = new WeakMap<RateLimitRule, CheckedRule>();

/** `rule`, validated (throws on a malformed rule), with its counter id's prefix. */
export function checkRule(rule: RateLimitRule): CheckedRule {
  const checked = checkedRules.get(rule);
  if (
    checked !== undefined &&
    checked.name === rule.name &&
    checked.limit === rule.limit &&
    checked.windowSeconds === rule.windowSeconds
  ) {
    return checked;
  }
  validateRule(rule);
  const fresh = {
    name: rule.name,
    limit: rule.limit,
    windowSeconds: rule.windowSeconds,
    // Rule name and window length both go into the counter id, so reconfiguring a rule's window
    // cannot land on counters kept under the old length.
    prefix: `${rateLimitKey(rule.name, String(rule.windowSeconds))}:`,
  };
  checkedRules.set(rule, fresh);
  return fresh;
}

/** `rateLimitKey(rule.name, windowSeconds, key)`: the id shared by every replica (Redis). */
function counterId(rule: RateLimitRule, key: string): string {
  return checkRule(rule).prefix + escapeKeyPart(key);
}

export interface MemoryRateLimiterOptions {
  clock: Clock;
  /**
   * The most counters kept. When full, expired windows are dropped first, then the counters whose
   * window started longest ago; an evicted key starts afresh, so size this to the number of
   * distinct clients expected within the longest window.
   */
  maxKeys?: number;
}

interface Counter {
  window: number;
  resetAt: number;
  count: number;
}

// A full sweep costs one pass over the map; doing it at most this often (in clock time) keeps a
// flood of new keys at the cap from turning every hit into a scan.
const SWEEP_INTERVAL_MS = 1_000;

/** Counters in this process only: right for one replica, wrong for several. */
export class MemoryRateLimiter implements RateLimiter {
  readonly #clock: Clock;
  readonly #maxKeys: number;
  // Map order is insertion order, and a counter is re-inserted when its window rolls over, so
  // the front holds the counters whose window started longest ago.
  readonly #counters = new Map<string, Counter>();
  #nextSweepAt = Number.NEGATIVE_INFINITY;
  #lastKey: string | undefined;
  #lastRule: CheckedRule | undefined;
  #lastId = "";

  constructor(options: MemoryRateLimiterOptions) {
    this.#clock = options.clock;
    this.#maxKeys = options.maxKeys ?? 100_000;
    if (!Number.isSafeInteger(this.#maxKeys) || this.#maxKeys < 1) {
      throw new RangeError("maxKeys must be a positive integer");
    }
  }

  /** Counters currently held, expired or not. */
  get size(): number {
    return this.#counters.size;
  }

  async hit(rule: RateLimitRule, key: string): Promise<RateLimitDecision> {
    return this.hitSync(rule, key);
  }

  /** The same as hit(); synchronous, so it is atomic within the process. */
  hitSync(rule: RateLimitRule, key: string): RateLimitDecision {
    const checked = checkRule(rule);
    const now = this.#clock.now();
    const { index, resetAt } = currentWindow(rule, now);
    // In this process an id needs only to be unique: the escaped name and window end at the
    // prefix's second colon, and whatever follows is the key, unescaped. The last one is kept:
    // a client's hits come in runs, and each id made anew was garbage.
    let id = this.#lastId;
    if (key !== this.#lastKey || checked !== this.#lastRule) {
      id = checked.prefix + key;
      this.#lastKey = key;
      this.#lastRule = checked;
      this.#lastId = id;
    }

    if (now >= this.#nextSweepAt) this.#sweep(now);

    let counter = this.#counters.get(id);
    if (counter === undefined || counter.window !== index) {
      if (counter !== undefined) this.#counters.delete(id);
      this.#makeRoom(now);
      counter = { window: index, resetAt, count: 0 };
      this.#counters.set(id, counter);
    }

    // Denied hits leave the count at the limit: nothing grows while a client keeps hammering.
    if (counter.count >= rule.limit) return decide(rule, false, counter.count, now, resetAt);
    counter.count += 1;
    return decide(rule, true, counter.count, now, resetAt);
  }

  async close(): Promise<void> {
    this.#counters.clear();
  }

  #sweep(now: number): void {
    this.#nextSweepAt = now + SWEEP_INTERVAL_MS;
    for (const [id, counter] of this.#counters) {
      if (counter.resetAt <= now) this.#counters.delete(id);
    }
  }

  #makeRoom(now: number): void {
    if (this.#counters.size < this.#maxKeys) return;
    if (now >= this.#nextSweepAt) this.#sweep(now);
    for (const id of this.#counters.keys()) {
      if (this.#counters.size < this.#maxKeys) break;
      this.#counters.delete(id);
    }
  }
}

/** What RedisRateLimiter needs of an ioredis client (a Cluster fits too). */
export type RedisRateLimitClient = Pick<Redis, "eval" | "evalsha" | "quit">;

export interface RedisRateLimiterOptions {
  redis: RedisRateLimitClient;
  clock: Clock;
  /** Prepended to every key, so services and test runs can share one Redis. */
  keyPrefix?: string;
  /** Quit the client on close(); leave false when the client is shared with other components. */
  ownsClient?: boolean;
}

// KEYS[1] the window's counter, ARGV[1] its TTL in ms, ARGV[2] the limit.
// One script, so the increment and the expiry are a single atomic step: no crash can leave a
// counter without a TTL (a permanent block). A key already at the limit is not incremented, so
// a flood of denied hits writes nothing. The PTTL check also repairs a key that somehow has no
// expiry. Returns {allowed (1|0), count}.
/**
 * Counts one hit of a counter key unless it is at its limit; answers {allowed 0|1, count}. A Lua
 * function, so that a script that checks more in the same round trip (the attestor's nonces) counts
 * exactly as the limiter does.
 */
export const REDIS_HIT_FUNCTION = `
local function hit(key, ttl, limit)
  local count = tonumber(redis.call('GET', key) or '0')
  local allowed = 0
  if count < tonumber(limit) then
    count = redis.call('INCR', key)
    allowed = 1
  end
  if redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, ttl)
  end
  return {allowed, count}
end
`;
const HIT_SCRIPT = `${REDIS_HIT_FUNCTION}
return hit(KEYS[1], ARGV[1], ARGV[2])
`;
const HIT_SCRIPT_SHA = createHash("sha1").update(HIT_SCRIPT).digest("hex");

// Counters outlive their window by this much (Redis time) so a replica whose clock lags a little
// still finds the count instead of recreating it at zero. A window's key is never reused after
// the window, so the extra life costs only memory.
export const EXPIRY_GRACE_MS = 10_000;

/** The Redis key of `rule`'s counter for `key` in window `index`: the same for every limiter. */
export function redisCounterKey(prefix: string, rule: RateLimitRule, key: string, index: number): string {
  return `${prefix}${counterId(rule, key)}:${index}`;
}

/** Runs a script by its SHA-1, loading it again with EVAL when Redis has lost it. */
export async function runScript(
  redis: RedisRateLimitClient,
  script: string,
  sha: string,
  key: string,
  ...args: string[]
): Promise<unknown> {
  try {
    return await redis.evalsha(sha, 1, key, ...args);
  } catch (error) {
    // The script cache is empty after a Redis restart or failover; EVAL loads it again.
    if (error instanceof Error && error.message.startsWith("NOSCRIPT")) {
      return await redis.eval(script, 1, key, ...args);
    }
    throw error;
  }
}

export interface RedisCounter {
  key: string;
  limit: number;
  /** How long the key lives: to the window's end, and a grace. */
  ttlMs: number;
  /** The decision from the reply of `hit` ({allowed, count}). */
  decide(reply: unknown): RateLimitDecision;
}

/** The Redis counter of `rule` for `key` at `now` (the window index is part of the key). */
export function redisCounter(prefix: string, rule: RateLimitRule, key: string, now: number): RedisCounter {
  const { index, resetAt } = currentWindow(rule, now);
  return {
    key: redisCounterKey(prefix, rule, key, index),
    limit: rule.limit,
    ttlMs: Math.max(1, resetAt - now) + EXPIRY_GRACE_MS,
    decide(reply) {
      if (!Array.isArray(reply) || typeof reply[0] !== "number" || typeof reply[1] !== "number") {
        throw new Error("rate limit script returned an unexpected reply");
      }
      return decide(rule, reply[0] === 1, reply[1], now, resetAt);
    },
  };
}

/**
 * Counters in Redis, shared by every replica. The window index comes from the injected clock and
 * is part of the key, so each window is its own key and expiry only reclaims memory.
 * hit() rejects when Redis does not answer; whether to fail open or closed is the caller's call.
 */
export class RedisRateLimiter implements RateLimiter {
  readonly #redis: RedisRateLimitClient;
  readonly #clock: Clock;
  readonly #prefix: string;
  readonly #ownsClient: boolean;

  constructor(options: RedisRateLimiterOptions) {
    this.#redis = options.redis;
    this.#clock = options.clock;
    this.#prefix = options.keyPrefix ?? "proto:ratelimit:";
    this.#ownsClient = options.ownsClient ?? false;
  }

  async hit(rule: RateLimitRule, key: string): Promise<RateLimitDecision> {
    const counter = redisCounter(this.#prefix, rule, key, this.#clock.now());
    return counter.decide(
      await runScript(
        this.#redis,
        HIT_SCRIPT,
        HIT_SCRIPT_SHA,
        counter.key,
        String(counter.ttlMs),
        String(counter.limit),
      ),
    );
  }

  async close(): Promise<void> {
    if (this.#ownsClient) await this.#redis.quit();
  }
}

export interface FallbackRateLimiterOptions {
  /** Told about every failure of the shared limiter, and when it answers again. */
  onFailure(error: unknown): void;
  onRecovery(): void;
  /** How long to count locally after a failure before asking the shared limiter again. */
  retryAfterMs?: number;
}

/**
 * The shared (Redis) limiter, and this process's counters while it is away: availability fails
 * soft, so public reads go on being served and limited per replica during a Redis outage.
 */
export class FallbackRateLimiter implements RateLimiter {
  readonly #shared: RateLimiter;
  readonly #local: MemoryRateLimiter;
  readonly #options: FallbackRateLimiterOptions;
  #localUntil = 0;
  #degraded = false;
  /** Present when the shared limiter has one: it then decides most hits at once. */
  readonly hitSync?: (rule: RateLimitRule, key: string) => RateLimitDecision | undefined;

  constructor(shared: RateLimiter, local: MemoryRateLimiter, options: FallbackRateLimiterOptions) {
    this.#shared = shared;
    this.#local = local;
    this.#options = options;
    const sharedSync = shared.hitSync;
    if (sharedSync !== undefined) {
      this.hitSync = (rule, key) => {
        if (performance.now() < this.#localUntil) return this.#local.hitSync(rule, key);
        // After a failure, hit() is what sees the shared limiter answer again and reports it.
        if (this.#degraded) return undefined;
        return sharedSync.call(shared, rule, key);
      };
    }
  }

  async hit(rule: RateLimitRule, key: string): Promise<RateLimitDecision> {
    if (performance.now() < this.#localUntil) return this.#local.hitSync(rule, key);
    try {
      const decision = await this.#shared.hit(rule, key);
      if (this.#degraded) {
        this.#degraded = false;
        this.#options.onRecovery();
      }
      return decision;
    } catch (error) {
      this.#degraded = true;
      this.#localUntil = performance.now() + (this.#options.retryAfterMs ?? 1_000);
      this.#options.onFailure(error);
      return this.#local.hitSync(rule, key);
    }
  }

  async close(): Promise<void> {
    await this.#shared.close?.();
    await this.#local.close();
  }
}

/**
 * `limiter`, telling `onDenied` about every hit it denies: the one place that sees the hooks'
 * limits and the services' own (per agent, per binding, per address) alike.
 */
export function observeDenials(limiter: RateLimiter, onDenied: (rule: RateLimitRule) => void): RateLimiter {
  const observed: RateLimiter = {
    async hit(rule, key) {
      const decision = await limiter.hit(rule, key);
      if (!decision.allowed) onDenied(rule);
      return decision;
    },
    close: async () => limiter.close?.(),
  };
  // A limiter that answers at once keeps doing so: the hottest reads skip a promise per hit.
  const sync = limiter.hitSync;
  if (sync !== undefined) {
    observed.hitSync = (rule, key) => {
      const decision = sync.call(limiter, rule, key);
      if (decision !== undefined && !decision.allowed) onDenied(rule);
      return decision;
    };
  }
  return observed;
}

/**
 * `routed` for the rules named in `names`, `others` for every other rule: a deployment can count
 * its availability-only limits approximately and keep the rest exact.
 */
export function routeByRule(others: RateLimiter, routed: RateLimiter, names: ReadonlySet<string>): RateLimiter {
  const pick = (rule: RateLimitRule) => (names.has(rule.name) ? routed : others);
  return {
    hit: (rule, key) => pick(rule).hit(rule, key),
    hitSync(rule, key) {
      const limiter = pick(rule);
      return limiter.hitSync === undefined ? undefined : limiter.hitSync(rule, key);
    },
    async close() {
      await Promise.all([others.close?.(), routed.close?.()]);
    },
  };
}
