import { createHash } from "node:crypto";
import type { NonceStore } from "@proto/protocol";
import type { Redis } from "ioredis";
import type { Kysely } from "kysely";
import type { Clock } from "../platform/clock.js";
import { DependencyUnavailable, viaRedis } from "../platform/dependency.js";
import { rateLimited } from "../platform/errors.js";
import {
  type RateLimiter,
  type RateLimitRule,
  REDIS_HIT_FUNCTION,
  type RedisCounter,
  redisCounter,
} from "../platform/rate-limit.js";
import type { TrustSchema } from "./migrations.js";

// KEYS[1] the pair's key, KEYS[2] the epoch marker, KEYS[3] (optional) a rate-limit counter;
// ARGV[1] TTL seconds, ARGV[2] `created`, ARGV[3] the counter's TTL in ms, ARGV[4] its limit.
// Answers {code, allowed, count} (the last two with a counter): code -3, the counter is at its
// limit and nothing else was done; -2, the marker is gone (Redis came back empty); -1, signed
// before the epoch; 1, fresh; 0, seen.
const SEEN_SCRIPT = `${REDIS_HIT_FUNCTION}
local counted = {}
if KEYS[3] then
  counted = hit(KEYS[3], ARGV[3], ARGV[4])
  if counted[1] == 0 then return {-3, counted[1], counted[2]} end
end
local function answer(code)
  return {code, counted[1], counted[2]}
end
local epoch = redis.call('GET', KEYS[2])
if not epoch then return answer(-2) end
if tonumber(ARGV[2]) < tonumber(epoch) then return answer(-1) end
if redis.call('SET', KEYS[1], '1', 'EX', ARGV[1], 'NX') then return answer(1) end
return answer(0)
`;
const SEEN_SCRIPT_SHA = createHash("sha1").update(SEEN_SCRIPT).digest("hex");

/** The row saying this deployment's Redis has held nonces before (its loss is then a loss). */
const STATE_NAME = "redis_nonce_epoch";

export interface ReplayStoreOptions {
  redis: Redis;
  /** The rate limiter's key prefix in Redis, for `counting`: its counters are the limiter's own. */
  rateLimitPrefix: string;
  db: Kysely<TrustSchema>;
  clock: Clock;
  keyPrefix: string;
  /** The verifier's clock skew: how far in the future an accepted signature's `created` may be. */
  skewSeconds: number;
  onLoss(epoch: number): void;
  /**
   * Told about every answer from Redis: the end of an outage, if one was going on (the mint path
   * uses no other Redis command that would say so).
   */
  onAnswered(): void;
}

/**
 * Nonces in Redis, and no replay when Redis loses them (a restart without persistence, a
 * failover to an empty replica, a flush). A marker key holds the epoch: the earliest `created`
 * accepted. When the marker is missing but the database says this deployment has used Redis
 * before, the data was lost: every signature that could have been accepted before the loss
 * (created up to `skew` seconds after the moment the loss was found) is refused, with 503 and
 * a Retry-After, until fresh signatures can only be new ones. A first start sets the epoch to 0.
 * Redis unreachable: 503 (fail closed).
 */
export class ReplayStore implements NonceStore {
  readonly #options: ReplayStoreOptions;
  readonly #marker: string;

  constructor(options: ReplayStoreOptions) {
    this.#options = options;
    this.#marker = `${options.keyPrefix}epoch`;
  }

  async seen(keyid: string, nonce: string, ttlSeconds: number, createdSeconds = 0): Promise<boolean> {
    return (await this.#seen(keyid, nonce, ttlSeconds, createdSeconds, undefined)).fresh;
  }

  /**
   * A nonce store for one request of the client `key`, which counts the request against `rule`
   * in the same round trip as the nonce (the limiter's own counter). At its limit, `seen` throws
   * the 429 before the nonce is looked at, and `onDenied` hears of it.
   */
  counting(rule: RateLimitRule, key: string, onDenied: (rule: RateLimitRule) => void): CountedNonceStore {
    let counted = false;
    return {
      counted: () => counted,
      seen: async (keyid, nonce, ttlSeconds, createdSeconds = 0) => {
        counted = true;
        const counter = redisCounter(this.#options.rateLimitPrefix, rule, key, this.#options.clock.now());
        const decision = await this.#seen(keyid, nonce, ttlSeconds, createdSeconds, counter);
        if (!decision.allowed) {
          onDenied(rule);
          throw rateLimited(decision.retryAfterSeconds);
        }
        return decision.fresh;
      },
    };
  }

  async #seen(
    keyid: string,
    nonce: string,
    ttlSeconds: number,
    createdSeconds: number,
    counter: RedisCounter | undefined,
  ): Promise<{ fresh: boolean; allowed: boolean; retryAfterSeconds: number }> {
    const key = `${this.#options.keyPrefix}${keyid}\n${nonce}`;
    const ttl = String(Math.max(1, Math.ceil(ttlSeconds)));
    let pending = counter;
    let retryAfterSeconds = 0;
    for (let attempt = 0; attempt < 2; attempt++) {
      const reply = await viaRedis(() => this.#run(key, ttl, String(createdSeconds), pending));
      if (!Array.isArray(reply) || typeof reply[0] !== "number") throw new Error("the replay script answered oddly");
      const result = reply[0];
      if (pending !== undefined) {
        // Counted once: a retry after re-establishing the epoch does not count again.
        const decision = pending.decide(reply.slice(1));
        pending = undefined;
        if (!decision.allowed) return { fresh: false, allowed: false, retryAfterSeconds: decision.retryAfterSeconds };
        retryAfterSeconds = decision.retryAfterSeconds;
      }
      if (result === 1) return { fresh: true, allowed: true, retryAfterSeconds };
      if (result === 0) return { fresh: false, allowed: true, retryAfterSeconds };
      if (result === -1) {
        const epoch = Number(await viaRedis(() => this.#options.redis.get(this.#marker)));
        const wait = epoch - Math.floor(this.#options.clock.now() / 1000);
        // Once the epoch has come, a signature from before it can only be an old one: it may have
        // been seen, and retrying it can never succeed. Refused as a replay.
        if (wait <= 0) return { fresh: false, allowed: true, retryAfterSeconds };
        // Redis answered: the wait is this store's rule, not an outage to track.
        throw new DependencyUnavailable(
          "redis",
          "the replay store was reset; sign a new request after the Retry-After delay",
          wait,
          { answered: true },
        );
      }
      await this.#establishEpoch();
    }
    throw new DependencyUnavailable("redis", "the replay store could not be established; retry shortly");
  }

  async #establishEpoch(): Promise<void> {
    const { db, redis, clock, skewSeconds } = this.#options;
    const known = await db.selectFrom("trust_state").select("value").where("name", "=", STATE_NAME).executeTakeFirst();
    const epoch = known === undefined ? 0 : Math.floor(clock.now() / 1000) + skewSeconds + 1;
    const set = await viaRedis(() => redis.set(this.#marker, String(epoch), "NX"));
    if (set === "OK" && known !== undefined) this.#options.onLoss(epoch);
    if (known === undefined) {
      await db
        .insertInto("trust_state")
        .values({ name: STATE_NAME, value: "1" })
        .onConflict((conflict) => conflict.column("name").doNothing())
        .execute();
    }
  }

  async #run(key: string, ttl: string, created: string, counter: RedisCounter | undefined): Promise<unknown> {
    const redis = this.#options.redis;
    const args =
      counter === undefined
        ? [2, key, this.#marker, ttl, created]
        : [3, key, this.#marker, counter.key, ttl, created, String(counter.ttlMs), String(counter.limit)];
    let reply: unknown;
    try {
      reply = await redis.evalsha(SEEN_SCRIPT_SHA, ...(args as [number, ...string[]]));
    } catch (error) {
      // The script cache is empty after a Redis restart or failover; EVAL loads it again.
      if (!(error instanceof Error && error.message.startsWith("NOSCRIPT"))) throw error;
      reply = await redis.eval(SEEN_SCRIPT, ...(args as [number, ...string[]]));
    }
    this.#options.onAnswered();
    return reply;
  }
}

/** A nonce store for one request; `counted()` says whether it counted the request's rate limit. */
export interface CountedNonceStore extends NonceStore {
  counted(): boolean;
}

/**
 * The same as ReplayStore.counting, without Redis: the limiter's hit, then the nonce store (both
 * in this process, so no round trip to save).
 */
export function countingLocally(
  limiter: RateLimiter,
  nonces: NonceStore,
  rule: RateLimitRule,
  key: string,
): CountedNonceStore {
  let counted = false;
  return {
    counted: () => counted,
    async seen(keyid, nonce, ttlSeconds, createdSeconds) {
      counted = true;
      const decision = await limiter.hit(rule, key);
      if (!decision.allowed) throw rateLimited(decision.retryAfterSeconds);
      return nonces.seen(keyid, nonce, ttlSeconds, createdSeconds);
    },
  };
}
