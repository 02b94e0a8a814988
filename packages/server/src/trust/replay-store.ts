import { createHash } from "node:crypto";
import type { NonceStore } from "@proto/protocol";
import type { Redis } from "ioredis";
import type { Kysely } from "kysely";
import type { Clock } from "../platform/clock.js";
import { DependencyUnavailable, viaRedis } from "../platform/dependency.js";
import type { TrustSchema } from "./migrations.js";

// KEYS[1] the pair's key, KEYS[2] the epoch marker; ARGV[1] TTL seconds, ARGV[2] `created`.
// -2: the marker is gone (Redis came back empty); -1: signed before the epoch; 1 fresh; 0 seen.
const SEEN_SCRIPT = `
local epoch = redis.call('GET', KEYS[2])
if not epoch then return -2 end
if tonumber(ARGV[2]) < tonumber(epoch) then return -1 end
if redis.call('SET', KEYS[1], '1', 'EX', ARGV[1], 'NX') then return 1 end
return 0
`;
const SEEN_SCRIPT_SHA = createHash("sha1").update(SEEN_SCRIPT).digest("hex");

/** The row saying this deployment's Redis has held nonces before (its loss is then a loss). */
const STATE_NAME = "redis_nonce_epoch";

export interface ReplayStoreOptions {
  redis: Redis;
  db: Kysely<TrustSchema>;
  clock: Clock;
  keyPrefix: string;
  /** The verifier's clock skew: how far in the future an accepted signature's `created` may be. */
  skewSeconds: number;
  onLoss(epoch: number): void;
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
    const key = `${this.#options.keyPrefix}${keyid}\n${nonce}`;
    const ttl = String(Math.max(1, Math.ceil(ttlSeconds)));
    for (let attempt = 0; attempt < 2; attempt++) {
      const result = await viaRedis(() => this.#run(key, ttl, String(createdSeconds)));
      if (result === 1) return true;
      if (result === 0) return false;
      if (result === -1) {
        const epoch = Number(await viaRedis(() => this.#options.redis.get(this.#marker)));
        const wait = epoch - Math.floor(this.#options.clock.now() / 1000);
        // Once the epoch has come, a signature from before it can only be an old one: it may have
        // been seen, and retrying it can never succeed. Refused as a replay.
        if (wait <= 0) return false;
        throw new DependencyUnavailable(
          "redis",
          "the replay store was reset; sign a new request after the Retry-After delay",
          wait,
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

  async #run(key: string, ttl: string, created: string): Promise<unknown> {
    const redis = this.#options.redis;
    try {
      return await redis.evalsha(SEEN_SCRIPT_SHA, 2, key, this.#marker, ttl, created);
    } catch (error) {
      // The script cache is empty after a Redis restart or failover; EVAL loads it again.
      if (error instanceof Error && error.message.startsWith("NOSCRIPT")) {
        return await redis.eval(SEEN_SCRIPT, 2, key, this.#marker, ttl, created);
      }
      throw error;
    }
  }
}
