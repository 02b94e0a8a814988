import { createHash } from "node:crypto";
import type { NonceStore } from "@proto/protocol";
import type { Redis } from "ioredis";
import type { Kysely } from "kysely";
import type { Clock } from "../platform/clock.js";
import { Coalescer } from "../platform/coalesce.js";
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

const CHECKS_IN_FLIGHT = 8;
const MAX_CHECKS_PER_CALL = 64;

// Checks many (nonce, counter) entries in one round trip. KEYS[1] the epoch marker; then per
// entry j (from 0) KEYS[2+2j] the pair's key and KEYS[3+2j] a rate-limit counter or '' for none;
// ARGV[1+4j] the pair's TTL seconds, ARGV[2+4j] `created`, ARGV[3+4j] the counter's TTL in ms,
// ARGV[4+4j] its limit. Answers three items per entry, {code, allowed, count} (the last two nil
// without a counter): code -3, the counter is at its limit and nothing else was done; -2, the
// marker is gone (Redis came back empty); -1, signed before the epoch; 1, fresh; 0, seen.
const SEEN_SCRIPT = `${REDIS_HIT_FUNCTION}
local epoch = redis.call('GET', KEYS[1])
local out = {}
for j = 0, (#KEYS - 1) / 2 - 1 do
  local counter = KEYS[3 + 2 * j]
  local counted = {false, false}
  local code
  if counter ~= '' then counted = hit(counter, ARGV[3 + 4 * j], ARGV[4 + 4 * j]) end
  if counter ~= '' and counted[1] == 0 then code = -3
  elseif not epoch then code = -2
  elseif tonumber(ARGV[2 + 4 * j]) < tonumber(epoch) then code = -1
  elseif redis.call('SET', KEYS[2 + 2 * j], '1', 'EX', ARGV[1 + 4 * j], 'NX') then code = 1
  else code = 0 end
  out[3 * j + 1] = code
  out[3 * j + 2] = counted[1]
  out[3 * j + 3] = counted[2]
end
return out
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
  /**
   * The checks that arrive while others are at Redis go together in the next script call. Two
   * checks of one pair never share a call: the second must see the first's mark.
   */
  readonly #checks: Coalescer<Check, unknown[]>;

  constructor(options: ReplayStoreOptions) {
    this.#options = options;
    this.#marker = `${options.keyPrefix}epoch`;
    this.#checks = new Coalescer({
      run: (checks) => this.#runChecks(checks),
      key: (check) => check.key,
      maxInFlight: CHECKS_IN_FLIGHT,
      maxBatch: MAX_CHECKS_PER_CALL,
    });
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

  #run(key: string, ttl: string, created: string, counter: RedisCounter | undefined): Promise<unknown[]> {
    return this.#checks.call({ key, ttl, created, counter });
  }

  async #runChecks(checks: readonly Check[]): Promise<unknown[][]> {
    const keys: string[] = [this.#marker];
    const args: string[] = [];
    for (const { key, ttl, created, counter } of checks) {
      keys.push(key, counter?.key ?? "");
      args.push(ttl, created, counter === undefined ? "0" : String(counter.ttlMs), String(counter?.limit ?? 0));
    }
    const redis = this.#options.redis;
    let reply: unknown;
    try {
      reply = await redis.evalsha(SEEN_SCRIPT_SHA, keys.length, ...keys, ...args);
    } catch (error) {
      // The script cache is empty after a Redis restart or failover; EVAL loads it again.
      if (!(error instanceof Error && error.message.startsWith("NOSCRIPT"))) throw error;
      reply = await redis.eval(SEEN_SCRIPT, keys.length, ...keys, ...args);
    }
    this.#options.onAnswered();
    if (!Array.isArray(reply) || reply.length !== 3 * checks.length)
      throw new Error("the replay script answered oddly");
    return checks.map((_, j) => reply.slice(3 * j, 3 * j + 3));
  }
}

/** One pair to check (and perhaps one counter to count) in the replay script. */
interface Check {
  key: string;
  ttl: string;
  created: string;
  counter: RedisCounter | undefined;
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
