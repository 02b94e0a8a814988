import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { Redis } from "ioredis";
import { AdjustableClock, type Clock } from "../src/platform/clock.js";
import {
  MemoryRateLimiter,
  type RateLimiter,
  type RateLimitRule,
  type RedisRateLimitClient,
  RedisRateLimiter,
  rateLimitKey,
} from "../src/platform/rate-limit.js";

// A frozen base keeps real time out of the tests: only advance() moves the clock, so no window
// can roll over between two hits by accident. It sits 30 s into a minute.
const BASE_MS = Date.UTC(2030, 0, 1, 12, 0, 30);

function testClock(atMs = BASE_MS): AdjustableClock {
  const base: Clock = { now: () => atMs };
  return new AdjustableClock(base);
}

function rule(limit: number, windowSeconds = 60): RateLimitRule {
  // A fresh name per test keeps counters of different tests apart in a shared Redis.
  return { name: `test.${randomUUID()}`, limit, windowSeconds };
}

type MakeLimiter = (clock: Clock) => RateLimiter;

/** Behaviour both implementations must share. */
function sharedBehaviour(make: () => MakeLimiter): void {
  it("allows exactly `limit` hits per window, then denies until the window ends", async () => {
    const clock = testClock();
    const limiter = make()(clock);
    const r = rule(3);
    const remaining: number[] = [];
    for (let i = 0; i < 3; i++) {
      const decision = await limiter.hit(r, "198.51.100.7");
      assert.equal(decision.allowed, true);
      assert.equal(decision.limit, 3);
      assert.equal(decision.retryAfterSeconds, 0);
      remaining.push(decision.remaining);
    }
    assert.deepEqual(remaining, [2, 1, 0]);

    for (let i = 0; i < 5; i++) {
      const denied = await limiter.hit(r, "198.51.100.7");
      assert.equal(denied.allowed, false);
      assert.equal(denied.remaining, 0);
      assert.ok(Number.isInteger(denied.retryAfterSeconds));
      assert.ok(denied.retryAfterSeconds >= 1 && denied.retryAfterSeconds <= 60);
      // 30 s into a 60 s window.
      assert.equal(denied.retryAfterSeconds, 30);
      assert.equal(denied.resetAt, BASE_MS + 30_000);
    }
  });

  it("rounds Retry-After up and never below 1 s", async () => {
    const limiter = make()(testClock(BASE_MS + 29_999)); // 1 ms before the window ends
    const r = rule(1);
    await limiter.hit(r, "k");
    assert.equal((await limiter.hit(r, "k")).retryAfterSeconds, 1);

    const early = make()(testClock(BASE_MS - 29_800)); // 0.2 s into the window
    const r2 = rule(1);
    await early.hit(r2, "k");
    assert.equal((await early.hit(r2, "k")).retryAfterSeconds, 60);
  });

  it("opens the next window when the clock moves past the end of this one", async () => {
    const clock = testClock();
    const limiter = make()(clock);
    const r = rule(2);
    await limiter.hit(r, "k");
    await limiter.hit(r, "k");
    const denied = await limiter.hit(r, "k");
    assert.equal(denied.allowed, false);

    clock.advance(denied.retryAfterSeconds - 1);
    assert.equal((await limiter.hit(r, "k")).allowed, false, "still inside the window");

    clock.advance(1);
    const next = await limiter.hit(r, "k");
    assert.equal(next.allowed, true);
    assert.equal(next.remaining, 1);
    assert.equal(next.resetAt, denied.resetAt + 60_000);
    // Denied hits of the previous window do not count against the new one.
    assert.equal((await limiter.hit(r, "k")).allowed, true);
    assert.equal((await limiter.hit(r, "k")).allowed, false);
  });

  it("keeps keys and rules independent", async () => {
    const limiter = make()(testClock());
    const a = rule(1);
    const b = rule(1);
    assert.equal((await limiter.hit(a, "2001:db8::1")).allowed, true);
    assert.equal((await limiter.hit(a, "2001:db8::1")).allowed, false);
    assert.equal((await limiter.hit(a, "2001:db8::2")).allowed, true, "another key");
    assert.equal((await limiter.hit(b, "2001:db8::1")).allowed, true, "another rule");
    // Same name, different window length: a separate counter.
    assert.equal((await limiter.hit({ ...a, windowSeconds: 3600 }, "2001:db8::1")).allowed, true);
    // Keys that would collide if joined naively.
    const c = rule(1);
    assert.equal((await limiter.hit(c, "a:b")).allowed, true);
    assert.equal((await limiter.hit(c, "a%3Ab")).allowed, true);
  });

  it("allows exactly `limit` of many concurrent hits", async () => {
    const limiter = make()(testClock());
    const r = rule(10);
    const decisions = await Promise.all(Array.from({ length: 50 }, () => limiter.hit(r, "burst")));
    assert.equal(decisions.filter((d) => d.allowed).length, 10);
    assert.deepEqual(
      decisions
        .filter((d) => d.allowed)
        .map((d) => d.remaining)
        .sort((x, y) => x - y),
      [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
    );
    for (const d of decisions.filter((d) => !d.allowed)) assert.equal(d.remaining, 0);
  });

  it("denies everything with a limit of 0", async () => {
    const limiter = make()(testClock());
    const decision = await limiter.hit(rule(0), "k");
    assert.equal(decision.allowed, false);
    assert.equal(decision.retryAfterSeconds, 30);
  });

  it("rejects malformed rules", async () => {
    const limiter = make()(testClock());
    await assert.rejects(limiter.hit({ name: "x", limit: -1, windowSeconds: 60 }, "k"), RangeError);
    await assert.rejects(limiter.hit({ name: "x", limit: 1, windowSeconds: 0 }, "k"), RangeError);
    await assert.rejects(limiter.hit({ name: "x", limit: 1.5, windowSeconds: 60 }, "k"), RangeError);
    await assert.rejects(limiter.hit({ name: "", limit: 1, windowSeconds: 60 }, "k"), TypeError);
  });
}

describe("rateLimitKey", () => {
  it("escapes separators so different parts never join to the same key", () => {
    assert.equal(rateLimitKey("a", "b"), "a:b");
    assert.notEqual(rateLimitKey("a:b", "c"), rateLimitKey("a", "b:c"));
    assert.notEqual(rateLimitKey("a%3Ab"), rateLimitKey("a:b"));
    assert.equal(rateLimitKey("did:web:h%3A8443"), "did%3Aweb%3Ah%253A8443");
  });
});

describe("AdjustableClock", () => {
  it("adds advanced seconds to its base and reports the offset", () => {
    const clock = testClock();
    assert.equal(clock.now(), BASE_MS);
    clock.advance(90);
    clock.advance(0.5);
    assert.equal(clock.now(), BASE_MS + 90_500);
    assert.equal(clock.offsetSeconds, 90.5);
    assert.throws(() => clock.advance(-1), RangeError);
    assert.throws(() => clock.advance(Number.NaN), RangeError);
  });
});

describe("MemoryRateLimiter", () => {
  sharedBehaviour(() => (clock) => new MemoryRateLimiter({ clock }));

  it("stays within maxKeys, evicting the oldest counters", async () => {
    const limiter = new MemoryRateLimiter({ clock: testClock(), maxKeys: 5 });
    const r = rule(1);
    for (let i = 0; i < 100; i++) {
      assert.equal((await limiter.hit(r, `client-${i}`)).allowed, true);
      assert.ok(limiter.size <= 5);
    }
    assert.equal(limiter.size, 5);
    // The newest counters survive.
    assert.equal((await limiter.hit(r, "client-99")).allowed, false);
  });

  it("forgets counters whose window has ended", async () => {
    const clock = testClock();
    const limiter = new MemoryRateLimiter({ clock });
    const minute = rule(5, 60);
    const hour = rule(5, 3600);
    for (let i = 0; i < 20; i++) await limiter.hit(minute, `client-${i}`);
    await limiter.hit(hour, "client-0");
    assert.equal(limiter.size, 21);

    clock.advance(60);
    await limiter.hit(minute, "someone-new");
    // The minute counters are gone; the hour counter is still live and still counts.
    assert.equal(limiter.size, 2);
    assert.equal((await limiter.hit(hour, "client-0")).remaining, 3);
  });

  it("drops expired counters before evicting live ones when full", async () => {
    const clock = testClock();
    const limiter = new MemoryRateLimiter({ clock, maxKeys: 3 });
    const minute = rule(1, 60);
    const hour = rule(1, 3600);
    await limiter.hit(minute, "a");
    await limiter.hit(minute, "b");
    await limiter.hit(hour, "live");
    clock.advance(60);
    await limiter.hit(minute, "c");
    assert.equal(limiter.size, 2);
    assert.equal((await limiter.hit(hour, "live")).allowed, false, "the live counter was kept");
  });
});

const redisUrl = process.env.TEST_REDIS_URL;

describe("RedisRateLimiter", {
  skip: redisUrl ? false : "TEST_REDIS_URL not set: set it (e.g. redis://127.0.0.1:6379) to test against Redis",
}, () => {
  const prefix = `test:ratelimit:${randomUUID()}:`;
  let redis: Redis;

  before(async () => {
    redis = new Redis(redisUrl ?? "", { lazyConnect: true, maxRetriesPerRequest: 1 });
    await redis.connect();
  });

  after(async () => {
    if (redis === undefined) return;
    const keys = await keysUnderPrefix();
    if (keys.length > 0) await redis.del(...keys);
    await redis.quit();
  });

  async function keysUnderPrefix(): Promise<string[]> {
    const keys: string[] = [];
    let cursor = "0";
    do {
      const [next, batch] = await redis.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 1000);
      cursor = next;
      keys.push(...batch);
    } while (cursor !== "0");
    return keys;
  }

  async function keysOf(r: RateLimitRule): Promise<string[]> {
    const keys = await keysUnderPrefix();
    return keys.filter((k) => k.startsWith(`${prefix}${rateLimitKey(r.name)}:`));
  }

  sharedBehaviour(() => (clock) => new RedisRateLimiter({ redis, clock, keyPrefix: prefix }));

  it("gives every counter a TTL from its first hit", async () => {
    const limiter = new RedisRateLimiter({ redis, clock: testClock(), keyPrefix: prefix });
    const r = rule(2);
    await limiter.hit(r, "k");
    const keys = await keysOf(r);
    assert.equal(keys.length, 1);
    const key = keys[0] ?? assert.fail("no key");
    const ttl = await redis.pttl(key);
    assert.ok(ttl > 0, `PTTL ${ttl}`);
    // Outlives the rest of the window (30 s), but not by a whole window.
    assert.ok(ttl > 30_000 && ttl <= 60_000, `PTTL ${ttl}`);

    // Denied hits leave it with a TTL as well.
    await limiter.hit(r, "k");
    await limiter.hit(r, "k");
    assert.ok((await redis.pttl(key)) > 0);
  });

  it("repairs a counter left without an expiry", async () => {
    const limiter = new RedisRateLimiter({ redis, clock: testClock(), keyPrefix: prefix });
    const r = rule(1);
    await limiter.hit(r, "k");
    const key = (await keysOf(r))[0] ?? assert.fail("no key");
    await redis.persist(key);
    assert.equal(await redis.pttl(key), -1);
    assert.equal((await limiter.hit(r, "k")).allowed, false);
    assert.ok((await redis.pttl(key)) > 0);
  });

  it("does not keep counting denied hits", async () => {
    const limiter = new RedisRateLimiter({ redis, clock: testClock(), keyPrefix: prefix });
    const r = rule(2);
    for (let i = 0; i < 10; i++) await limiter.hit(r, "k");
    const key = (await keysOf(r))[0] ?? assert.fail("no key");
    assert.equal(await redis.get(key), "2");
  });

  it("shares one count between limiters (replicas) on the same Redis", async () => {
    const clock = testClock();
    const replicas = [1, 2, 3].map(() => new RedisRateLimiter({ redis, clock, keyPrefix: prefix }));
    const r = rule(10);
    const decisions = await Promise.all(
      Array.from({ length: 30 }, (_, i) => (replicas[i % 3] ?? assert.fail()).hit(r, "k")),
    );
    assert.equal(decisions.filter((d) => d.allowed).length, 10);
  });

  it("falls back to EVAL when Redis has lost the script", async () => {
    // A client whose script cache is always empty, without flushing the shared server's cache.
    let evalCalls = 0;
    const forgetful = {
      evalsha: async (): Promise<unknown> => {
        throw new Error("NOSCRIPT No matching script. Please use EVAL.");
      },
      eval: ((...args: Parameters<Redis["eval"]>) => {
        evalCalls += 1;
        return redis.eval(...args);
      }) as Redis["eval"],
      quit: async (): Promise<"OK"> => "OK",
    } as unknown as RedisRateLimitClient;
    const limiter = new RedisRateLimiter({ redis: forgetful, clock: testClock(), keyPrefix: prefix });
    const r = rule(1);
    assert.equal((await limiter.hit(r, "k")).allowed, true);
    assert.equal((await limiter.hit(r, "k")).allowed, false);
    assert.equal(evalCalls, 2);
  });

  it("keeps each window in its own key", async () => {
    const clock = testClock();
    const limiter = new RedisRateLimiter({ redis, clock, keyPrefix: prefix });
    const r = rule(1);
    await limiter.hit(r, "k");
    clock.advance(60);
    await limiter.hit(r, "k");
    assert.equal((await keysOf(r)).length, 2);
  });
});
