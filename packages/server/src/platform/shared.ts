import { Redis } from "ioredis";
import { AdjustableClock, type Clock, systemClock } from "./clock.js";
import type { PlatformConfig } from "./config.js";
import {
  MemoryRateLimiter,
  observeDenials,
  type RateLimiter,
  type RateLimitRule,
  RedisRateLimiter,
} from "./rate-limit.js";

/** What a service process holds that is not its own: the clock, Redis, the rate limiter. */
export interface PlatformParts {
  clock: Clock;
  /** Present only with test hooks, so nothing else can move time. */
  testClock: AdjustableClock | undefined;
  redis: Redis | undefined;
  limiter: RateLimiter;
  close(): Promise<void>;
}

export interface PlatformPartsOptions {
  /** Key prefix in Redis, so services and test runs sharing one Redis never collide. */
  redisPrefix: string;
  /** A clock to start from (tests hand in one they also control). */
  clock?: Clock;
  /** Told about every hit the limiter denies (the service's metrics). */
  onRateLimited?: (rule: RateLimitRule) => void;
}

export function createPlatformParts(config: PlatformConfig, options: PlatformPartsOptions): PlatformParts {
  const base = options.clock ?? systemClock;
  const testClock = config.testHooks ? (base instanceof AdjustableClock ? base : new AdjustableClock(base)) : undefined;
  const clock = testClock ?? base;
  const redis =
    config.redisUrl === undefined
      ? undefined
      : new Redis(config.redisUrl, { maxRetriesPerRequest: 2, enableOfflineQueue: true, lazyConnect: false });
  const counters: RateLimiter =
    redis === undefined
      ? new MemoryRateLimiter({ clock })
      : new RedisRateLimiter({ redis, clock, keyPrefix: `${options.redisPrefix}rl:` });
  const limiter = options.onRateLimited ? observeDenials(counters, options.onRateLimited) : counters;
  return {
    clock,
    testClock,
    redis,
    limiter,
    async close() {
      await limiter.close?.();
      if (redis !== undefined) await redis.quit().catch(() => redis.disconnect());
    },
  };
}
