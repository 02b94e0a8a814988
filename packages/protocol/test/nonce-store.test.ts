import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, describe, test } from "node:test";
import { Redis } from "ioredis";
import { MemoryNonceStore, RedisNonceStore } from "../src/nonce-store.js";

describe("MemoryNonceStore", () => {
  test("a pair is fresh once within its TTL, and again after it", async () => {
    let now = 1_000_000;
    const store = new MemoryNonceStore({ now: () => now });
    assert.equal(await store.seen("did:key:a", "n", 10), true);
    assert.equal(await store.seen("did:key:a", "n", 10), false);
    assert.equal(await store.seen("did:key:b", "n", 10), true, "scoped to the keyid");
    now += 10_001;
    assert.equal(await store.seen("did:key:a", "n", 10), true);
  });

  test("stays within its bound, dropping the pairs closest to expiry first", async () => {
    const store = new MemoryNonceStore({ maxEntries: 3, now: () => 0 });
    assert.equal(await store.seen("k", "short", 10), true);
    for (const n of ["2", "3", "4"]) assert.equal(await store.seen("k", n, 300), true);
    assert.ok(store.size <= 3, `size ${store.size}`);
    assert.equal(await store.seen("k", "4", 300), false, "the newest pair is kept");
    assert.equal(await store.seen("k", "short", 10), true, "the pair closest to expiry was dropped");
  });

  test("expired entries are dropped", async () => {
    let now = 0;
    const store = new MemoryNonceStore({ now: () => now });
    for (let i = 0; i < 100; i++) await store.seen("k", String(i), 1);
    assert.equal(store.size, 100);
    now = 60_000;
    await store.seen("k", "new", 1);
    assert.equal(store.size, 1);
  });

  test("agrees with a plain map of expiries over a long random run", async () => {
    let now = 1_700_000_000_000;
    const store = new MemoryNonceStore({ now: () => now });
    const model = new Map<string, number>();
    let refused = 0;
    for (let i = 0; i < 60_000; i++) {
      now += Math.floor(Math.random() * 40);
      const keyid = `did:key:z${i % 37}`;
      // Few distinct nonces, so repeats (inside and outside their TTL) are common.
      const nonce = String(Math.floor(Math.random() * 3000));
      const ttl = 1 + (i % 5) * 30;
      const key = `${keyid}\n${nonce}`;
      const expiry = model.get(key);
      const expected = expiry === undefined || expiry <= now;
      if (expected) model.set(key, now + ttl * 1000);
      else refused += 1;
      assert.equal(store.seenSync(keyid, nonce, ttl), expected, `step ${i}: ${key}`);
    }
    assert.ok(refused > 1000, `repeats were exercised (${refused})`);
  });

  test("the keyid and the nonce are hashed apart at their boundary", async () => {
    const store = new MemoryNonceStore();
    assert.equal(await store.seen("ab", "c", 60), true);
    assert.equal(await store.seen("a", "bc", 60), true);
    assert.equal(await store.seen("abc", "", 60), true);
  });
});

const redisUrl = process.env.TEST_REDIS_URL;
describe("RedisNonceStore", { skip: redisUrl ? false : "TEST_REDIS_URL is not set; Redis store not tested" }, () => {
  const client = redisUrl ? new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 }) : undefined;
  const prefix = `test:${randomUUID()}:`;
  after(async () => {
    if (!client) return;
    const keys = await client.keys(`${prefix}*`);
    if (keys.length > 0) await client.del(...keys);
    client.disconnect();
  });

  test("atomic first-seen across concurrent callers, with a TTL", async () => {
    const store = new RedisNonceStore(client!, { keyPrefix: prefix });
    const results = await Promise.all(Array.from({ length: 20 }, () => store.seen("did:key:a", "n1", 30)));
    assert.equal(results.filter(Boolean).length, 1);
    assert.equal(await store.seen("did:key:b", "n1", 30), true);
    const ttl = await client!.ttl(`${prefix}did:key:a\nn1`);
    assert.ok(ttl > 0 && ttl <= 30, `ttl ${ttl}`);
  });
});
