/**
 * The per-replica pre-count of the directory's read limit, against a real Redis (TEST_REDIS_URL):
 * replicas share one count within limit + (N - 1) x slack, a client over it is denied with
 * Retry-After, windows roll over cleanly, a Redis outage falls back to per-process counts and
 * recovers, and memory stays within maxKeys. The clock is frozen and moved by hand; batches are
 * sent by flush() (the timer is set far beyond any test), so nothing depends on timing.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { Redis } from "ioredis";
import { BatchedRedisRateLimiter, replicaSlack } from "../src/platform/batched-rate-limit.js";
import { AdjustableClock, type Clock } from "../src/platform/clock.js";
import {
  FallbackRateLimiter,
  MemoryRateLimiter,
  type RateLimitDecision,
  type RateLimitRule,
  type RedisRateLimitClient,
  RedisRateLimiter,
  rateLimitKey,
} from "../src/platform/rate-limit.js";

// 30 s into a minute, frozen: only advance() moves it.
const BASE_MS = Date.UTC(2030, 0, 1, 12, 0, 30);
const NEVER_MS = 3_600_000;

function testClock(): AdjustableClock {
  const base: Clock = { now: () => BASE_MS };
  return new AdjustableClock(base);
}

function rule(limit: number, windowSeconds = 60): RateLimitRule {
  return { name: `test.${randomUUID()}`, limit, windowSeconds };
}

const redisUrl = process.env.TEST_REDIS_URL;

describe("BatchedRedisRateLimiter", {
  skip: redisUrl ? false : "TEST_REDIS_URL not set: set it (e.g. redis://127.0.0.1:6379) to test against Redis",
}, () => {
  const prefix = `test:batched:${randomUUID()}:`;
  let redis: Redis;
  const limiters: BatchedRedisRateLimiter[] = [];

  before(async () => {
    redis = new Redis(redisUrl ?? "", { lazyConnect: true, maxRetriesPerRequest: 1 });
    await redis.connect();
  });

  after(async () => {
    if (redis === undefined) return;
    await Promise.all(limiters.map((limiter) => limiter.close()));
    let cursor = "0";
    do {
      const [next, keys] = await redis.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 1000);
      cursor = next;
      if (keys.length > 0) await redis.del(...keys);
    } while (cursor !== "0");
    await redis.quit();
  });

  function replica(
    clock: Clock,
    options: { client?: RedisRateLimitClient; maxKeys?: number } = {},
  ): BatchedRedisRateLimiter {
    const limiter = new BatchedRedisRateLimiter({
      redis: options.client ?? redis,
      clock,
      keyPrefix: prefix,
      flushIntervalMs: NEVER_MS,
      ...(options.maxKeys === undefined ? {} : { maxKeys: options.maxKeys }),
    });
    limiters.push(limiter);
    return limiter;
  }

  /** The count Redis holds for `r`'s key `key` in the window at `now`. */
  async function globalCount(r: RateLimitRule, key: string, now: number): Promise<number> {
    const window = Math.floor(now / (r.windowSeconds * 1000));
    const value = await redis.get(`${prefix}${rateLimitKey(r.name, String(r.windowSeconds), key)}:${window}`);
    return Number(value ?? 0);
  }

  it("lets one replica through exactly `limit` times, then denies with Retry-After", async () => {
    const clock = testClock();
    const limiter = replica(clock);
    const r = rule(600);
    const decisions: RateLimitDecision[] = [];
    for (let i = 0; i < 700; i++) decisions.push(await limiter.hit(r, "198.51.100.7"));
    assert.equal(decisions.filter((d) => d.allowed).length, 600);
    assert.deepEqual(
      decisions.slice(595, 601).map((d) => [d.allowed, d.remaining]),
      [
        [true, 4],
        [true, 3],
        [true, 2],
        [true, 1],
        [true, 0],
        [false, 0],
      ],
    );
    const denied = decisions[650] as RateLimitDecision;
    assert.equal(denied.allowed, false);
    assert.equal(denied.retryAfterSeconds, 30);
    assert.equal(denied.resetAt, BASE_MS + 30_000);
    await limiter.flush();
    assert.equal(await globalCount(r, "198.51.100.7", clock.now()), 600, "Redis holds the admitted hits");
  });

  it("shares one count between two replicas, within limit + slack", async () => {
    const clock = testClock();
    const [a, b] = [replica(clock), replica(clock)];
    const r = rule(600);
    const slack = replicaSlack(r.limit);
    assert.equal(slack, 6);
    // The replicas take turns, each sending its batch when its slack is used up.
    let allowed = 0;
    for (let i = 0; i < 1_000; i++) {
      if ((await (i % 2 === 0 ? a : b).hit(r, "client")).allowed) allowed += 1;
    }
    assert.ok(allowed >= r.limit && allowed <= r.limit + slack, `${allowed} let through by two replicas`);
    await Promise.all([a.flush(), b.flush()]);
    assert.equal(await globalCount(r, "client", clock.now()), allowed);
  });

  it("keeps a burst spread over three replicas within limit + 2 x slack", async () => {
    const clock = testClock();
    const replicas = [replica(clock), replica(clock), replica(clock)];
    const r = rule(300);
    const slack = replicaSlack(r.limit);
    const decisions = await Promise.all(
      Array.from({ length: 900 }, (_, i) => (replicas[i % 3] as BatchedRedisRateLimiter).hit(r, "burst")),
    );
    const allowed = decisions.filter((d) => d.allowed).length;
    assert.ok(allowed >= r.limit && allowed <= r.limit + 2 * slack, `${allowed} of 900 let through by three replicas`);
    for (const d of decisions.filter((d) => !d.allowed)) assert.ok(d.retryAfterSeconds >= 1);
  });

  it("denies a client whom another replica has already let through up to the limit", async () => {
    const clock = testClock();
    const [a, b] = [replica(clock), replica(clock)];
    const r = rule(5);
    for (let i = 0; i < 5; i++) assert.equal((await a.hit(r, "k")).allowed, true);
    await a.flush();
    // b has not heard of the key: its slack (one hit) goes through, then it learns the count.
    const first = await b.hit(r, "k");
    assert.equal(first.allowed, true);
    const second = await b.hit(r, "k");
    assert.equal(second.allowed, false);
    assert.equal(second.retryAfterSeconds, 30);
    assert.equal((await a.hit(r, "k")).allowed, false);
  });

  it("counts together with replicas that count exactly (the same keys)", async () => {
    const clock = testClock();
    const batched = replica(clock);
    const exact = new RedisRateLimiter({ redis, clock, keyPrefix: prefix });
    const r = rule(10);
    for (let i = 0; i < 4; i++) assert.equal((await batched.hit(r, "k")).allowed, true);
    await batched.flush();
    const decisions = await Promise.all(Array.from({ length: 10 }, () => exact.hit(r, "k")));
    assert.equal(decisions.filter((d) => d.allowed).length, 6);
  });

  it("gives every counter a TTL to the end of its window and a grace", async () => {
    const clock = testClock();
    const limiter = replica(clock);
    const r = rule(100);
    await limiter.hit(r, "k");
    await limiter.flush();
    const window = Math.floor(clock.now() / 60_000);
    const ttl = await redis.pttl(`${prefix}${rateLimitKey(r.name, "60", "k")}:${window}`);
    assert.ok(ttl > 30_000 && ttl <= 60_000, `PTTL ${ttl}`);
  });

  it("opens the next window afresh: hits not sent in the old one never count in the new one", async () => {
    const clock = testClock();
    const limiter = replica(clock);
    const r = rule(500); // a slack of 5: three hits stay in this process
    for (let i = 0; i < 3; i++) assert.equal((await limiter.hit(r, "k")).allowed, true);
    const oldWindowAt = clock.now();

    clock.advance(30);
    const next = await limiter.hit(r, "k");
    assert.equal(next.allowed, true);
    assert.equal(next.remaining, 499);
    assert.equal(next.resetAt, BASE_MS + 90_000);
    await limiter.flush();
    assert.equal(await globalCount(r, "k", clock.now()), 1, "the new window holds only its own hit");
    assert.equal(await globalCount(r, "k", oldWindowAt), 0, "the old window's unsent hits were dropped");
  });

  it("lets a denied client through again when the window ends", async () => {
    const clock = testClock();
    const limiter = replica(clock);
    const r = rule(1);
    assert.equal((await limiter.hit(r, "k")).allowed, true);
    const denied = await limiter.hit(r, "k");
    assert.equal(denied.allowed, false);
    clock.advance(denied.retryAfterSeconds - 1);
    assert.equal((await limiter.hit(r, "k")).allowed, false, "still inside the window");
    clock.advance(1);
    assert.equal((await limiter.hit(r, "k")).allowed, true);
    assert.equal((await limiter.hit(r, "k")).allowed, false);
  });

  it("ignores an answer for a window that has ended meanwhile", async () => {
    const clock = testClock();
    const limiter = replica(clock);
    const r = rule(2);
    // With a slack of 1, the hit's batch leaves at once; its answer arrives after the window ended.
    assert.equal(limiter.hitSync(r, "k")?.allowed, true);
    clock.advance(30);
    assert.equal(limiter.hitSync(r, "k")?.allowed, true);
    await limiter.flush();
    assert.equal((await limiter.hit(r, "k")).allowed, true);
    assert.equal((await limiter.hit(r, "k")).allowed, false);
  });

  it("sends what it counted on close()", async () => {
    const clock = testClock();
    const limiter = new BatchedRedisRateLimiter({ redis, clock, keyPrefix: prefix, flushIntervalMs: NEVER_MS });
    const r = rule(1000);
    for (let i = 0; i < 3; i++) await limiter.hit(r, "k");
    await limiter.close();
    assert.equal(await globalCount(r, "k", clock.now()), 3);
    await assert.rejects(limiter.hit(r, "k"), /closed/);
  });

  it("stays within maxKeys, forgetting the oldest keys", async () => {
    const clock = testClock();
    const limiter = replica(clock, { maxKeys: 5 });
    const r = rule(1);
    for (let i = 0; i < 100; i++) {
      assert.equal((await limiter.hit(r, `client-${i}`)).allowed, true);
      assert.ok(limiter.size <= 5);
    }
    assert.equal(limiter.size, 5);
    assert.equal((await limiter.hit(r, "client-99")).allowed, false, "the newest keys are kept");
    await limiter.flush();
    // The forgotten keys' hits still went to Redis once sent, or were dropped: never beyond 1.
    for (const i of [0, 50, 99]) assert.ok((await globalCount(r, `client-${i}`, clock.now())) <= 1);
  });

  it("counts per process while Redis is away, reports it, and comes back to the shared count", async () => {
    const clock = testClock();
    let down = false;
    const unreachable = () => Promise.reject(new Error("Connection is closed."));
    // The shared Redis, unreachable on demand (as ioredis answers without its offline queue).
    const client = {
      evalsha: ((...args: Parameters<Redis["evalsha"]>) =>
        down ? unreachable() : redis.evalsha(...args)) as Redis["evalsha"],
      eval: ((...args: Parameters<Redis["eval"]>) => (down ? unreachable() : redis.eval(...args))) as Redis["eval"],
      quit: async (): Promise<"OK"> => "OK",
    } as unknown as RedisRateLimitClient;
    const events: string[] = [];
    const limiter = new FallbackRateLimiter(replica(clock, { client }), new MemoryRateLimiter({ clock }), {
      onFailure: () => events.push("failure"),
      onRecovery: () => events.push("recovery"),
      retryAfterMs: 0,
    });
    const shared = limiters.at(-1) as BatchedRedisRateLimiter;
    const r = rule(1000); // a slack of 10: hits wait in this process for flush()
    const hit = async () => (limiter.hitSync?.(r, "k") ?? (await limiter.hit(r, "k"))).allowed;

    for (let i = 0; i < 5; i++) assert.equal(await hit(), true);
    await shared.flush();
    assert.equal(await hit(), true, "one more, not sent yet");
    down = true;
    // Its batch fails (as the timer's would); the next hits find out and count in this process.
    await assert.rejects(shared.flush());
    for (let i = 0; i < 20; i++) assert.equal(await hit(), true, "reads go on while Redis is away");
    assert.ok(events.includes("failure"), "the outage is reported");
    assert.equal(events.filter((e) => e === "recovery").length, 0);

    down = false;
    assert.equal(await hit(), true);
    assert.equal(events.at(-1), "recovery", "the recovery is reported once Redis answers");
    await shared.flush();
    // 5 counted before the outage and the one after it; the one sent into the outage was lost.
    assert.equal(await globalCount(r, "k", clock.now()), 6);
  });
});
