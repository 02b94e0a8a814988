/**
 * Throwaway stores for benchmark runs: a PostgreSQL database made for the run and dropped after
 * it, and the Redis keys a run wrote under its prefixes.
 */
import { randomBytes } from "node:crypto";
import { Redis } from "ioredis";
import pg from "pg";

/** Creates a database named `${prefix}_<random>` beside `adminUrl`; answers its URL and how to drop it. */
export async function scratchPostgresDatabase(
  adminUrl: string,
  prefix: string,
): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `${prefix}_${randomBytes(5).toString("hex")}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.href,
    async drop() {
      const client = new pg.Client({ connectionString: adminUrl });
      await client.connect();
      await client.query(`drop database if exists ${name} with (force)`);
      await client.end();
    },
  };
}

/** Deletes every key under each prefix. */
export async function dropRedisKeys(redisUrl: string, prefixes: readonly string[]): Promise<void> {
  const redis = new Redis(redisUrl);
  for (const prefix of prefixes) {
    let cursor = "0";
    do {
      const [next, keys] = await redis.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 1000);
      cursor = next;
      if (keys.length > 0) await redis.del(...keys);
    } while (cursor !== "0");
  }
  redis.disconnect();
}
