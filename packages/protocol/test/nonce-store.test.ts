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

  test("stays within its bound, dropping the oldest first", async () => {
    const store = new MemoryNonceStore({ maxEntries: 3, now: () => 0 });
    for (const n of ["1", "2", "3", "4"]) assert.equal(await store.seen("k", n, 60), true);
    assert.equal(store.size, 3);
    assert.equal(await store.seen("k", "4", 60), false);
    assert.equal(await store.seen("k", "1", 60), true, "the oldest was dropped");
  });

  test("expired entries are swept", async () => {
    let now = 0;
    const store = new MemoryNonceStore({ now: () => now });
    for (let i = 0; i < 100; i++) await store.seen("k", String(i), 1);
    now = 5_000;
    await store.seen("k", "new", 1);
    assert.equal(store.size, 1);
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
