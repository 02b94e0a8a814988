import { Redis } from "ioredis";
import { BatchedRedisRateLimiter } from "./batched-rate-limit.js";
import { AdjustableClock, type Clock, systemClock } from "./clock.js";
import type { PlatformConfig } from "./config.js";
import type { Dependency } from "./dependency.js";
import { DependencyMonitor, type Probe } from "./dependency-monitor.js";
import {
  FallbackRateLimiter,
  MemoryRateLimiter,
  observeDenials,
  type RateLimiter,
  type RateLimitRule,
  RedisRateLimiter,
  routeByRule,
} from "./rate-limit.js";

/** What a service process holds that is not its own: the clock, Redis, the rate limiter. */
export interface PlatformParts {
  clock: Clock;
  /** Present only with test hooks, so nothing else can move time. */
  testClock: AdjustableClock | undefined;
  redis: Redis | undefined;
  limiter: RateLimiter;
  /** The health of the database and Redis. */
  dependencies: DependencyMonitor;
  /** For `/readyz`: the dependencies the service needs to serve that do not answer now. */
  unavailable(): Promise<string[]>;
  /** Resolves once Redis is connected, or after `timeoutMs` (a server starts during an outage too). */
  redisReady(timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

export interface PlatformPartsOptions {
  /** Key prefix in Redis, so services and test runs sharing one Redis never collide. */
  redisPrefix: string;
  /**
   * Whether the service cannot serve without Redis (the attestor: nonces and quotas are
   * exactly-once state). A service that can (the directory: per-process limits meanwhile) stays
   * ready through a Redis outage, which is still tracked and counted.
   */
  redisRequired: boolean;
  /** A clock to start from (tests hand in one they also control). */
  clock?: Clock;
  /** Told about every hit the limiter denies (the service's metrics). */
  onRateLimited?: (rule: RateLimitRule) => void;
  /** How the service checks that its database answers (for readiness and outage tracking). */
  databaseProbe: Probe;
  /**
   * With Redis, the rules counted by a per-replica pre-count that reconciles with Redis in
   * batches (batched-rate-limit.ts): limits that only protect availability and can overshoot by
   * 1% of the limit per further replica. Every other rule costs one round trip per hit, exactly.
   */
  batchedRateLimits?: readonly RateLimitRule[];
}

// Fail fast: a request during a Redis outage is answered in about a second, never queued for
// the reconnection (no offline queue, one retry, bounded connect and command times).
const REDIS_TIMEOUT_MS = 1_000;

function redisClient(url: string): Redis {
  return new Redis(url, {
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    connectTimeout: REDIS_TIMEOUT_MS,
    commandTimeout: REDIS_TIMEOUT_MS,
    // Reconnect forever, at most a second apart, so service resumes within a second of Redis.
    retryStrategy: (attempt) => Math.min(50 * 2 ** attempt, 1_000),
    lazyConnect: false,
    enableAutoPipelining: true,
  });
}

/** Where the rate limiter keeps its counters in Redis, under a service's prefix. */
export function rateLimitPrefix(redisPrefix: string): string {
  return `${redisPrefix}rl:`;
}

export function createPlatformParts(config: PlatformConfig, options: PlatformPartsOptions): PlatformParts {
  const base = options.clock ?? systemClock;
  const testClock = config.testHooks ? (base instanceof AdjustableClock ? base : new AdjustableClock(base)) : undefined;
  const clock = testClock ?? base;
  const redis = config.redisUrl === undefined ? undefined : redisClient(config.redisUrl);
  const probes: Partial<Record<Dependency, Probe>> = { database: options.databaseProbe };
  if (redis !== undefined) probes.redis = async () => (await redis.ping()) === "PONG";
  const dependencies = new DependencyMonitor(probes);
  // ioredis reports each failed (re)connection here; unhandled, it would print to stderr.
  redis?.on("error", (error: unknown) => dependencies.failed("redis", error));
  redis?.on("ready", () => dependencies.recovered("redis"));
  let counters: RateLimiter = new MemoryRateLimiter({ clock });
  if (redis !== undefined) {
    const keyPrefix = rateLimitPrefix(options.redisPrefix);
    const health = {
      onFailure: (error: unknown) => dependencies.failed("redis", error),
      onRecovery: () => dependencies.recovered("redis"),
    };
    counters = new FallbackRateLimiter(
      new RedisRateLimiter({ redis, clock, keyPrefix }),
      new MemoryRateLimiter({ clock }),
      health,
    );
    const batched = options.batchedRateLimits ?? [];
    if (batched.length > 0) {
      const preCounted = new FallbackRateLimiter(
        new BatchedRedisRateLimiter({ redis, clock, keyPrefix }),
        new MemoryRateLimiter({ clock }),
        health,
      );
      counters = routeByRule(counters, preCounted, new Set(batched.map((rule) => rule.name)));
    }
  }
  const limiter = options.onRateLimited ? observeDenials(counters, options.onRateLimited) : counters;
  return {
    clock,
    testClock,
    redis,
    limiter,
    dependencies,
    async unavailable() {
      const down = await dependencies.unavailable();
      return options.redisRequired ? down : down.filter((dependency) => dependency !== "redis");
    },
    async redisReady(timeoutMs = 2_000) {
      if (redis === undefined || redis.status === "ready") return;
      // Not events.once: it rejects on the first "error", and a refused connection is one. Redis
      // still down at start (a whole stack restarting) is an outage like any other, not a crash.
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          redis.off("ready", done);
          resolve();
        };
        const timer = setTimeout(done, timeoutMs);
        timer.unref();
        redis.once("ready", done);
      });
    },
    async close() {
      dependencies.close();
      await limiter.close?.();
      if (redis !== undefined) await redis.quit().catch(() => redis.disconnect());
    },
  };
}
