import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";

/** The store variants a suite runs on: SQLite always, PostgreSQL and Redis when CI provides them. */
export interface StoreVariant {
  name: string;
  engine: "sqlite" | "postgres";
  redis: boolean;
}

export const POSTGRES_URL = process.env.TEST_POSTGRES_URL;
export const REDIS_URL = process.env.TEST_REDIS_URL;

export const STORE_VARIANTS: StoreVariant[] = [
  { name: "sqlite", engine: "sqlite", redis: false },
  ...(POSTGRES_URL ? [{ name: "postgres+redis", engine: "postgres" as const, redis: REDIS_URL !== undefined }] : []),
];

/** Printed once per run so a skipped engine is never silent. */
export function reportSkippedVariants(): void {
  if (!POSTGRES_URL) process.stdout.write("# TEST_POSTGRES_URL not set: PostgreSQL variants skipped\n");
  if (!REDIS_URL) process.stdout.write("# TEST_REDIS_URL not set: Redis variants skipped\n");
}

export interface TestDatabase {
  url: string;
  drop(): Promise<void>;
}

/** A database of its own for one suite: a SQLite file in a temp folder, or a new PostgreSQL database. */
export async function createTestDatabase(engine: "sqlite" | "postgres"): Promise<TestDatabase> {
  if (engine === "sqlite") {
    const dir = mkdtempSync(join(tmpdir(), "proto-test-"));
    return { url: `sqlite:${join(dir, "test.db")}`, drop: async () => rmSync(dir, { recursive: true, force: true }) };
  }
  if (!POSTGRES_URL) throw new Error("TEST_POSTGRES_URL is not set");
  const name = `proto_t_${randomBytes(6).toString("hex")}`;
  const admin = new pg.Client({ connectionString: POSTGRES_URL });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  const url = new URL(POSTGRES_URL);
  url.pathname = `/${name}`;
  return {
    url: url.href,
    async drop() {
      const client = new pg.Client({ connectionString: POSTGRES_URL });
      await client.connect();
      await client.query(`drop database if exists ${name} with (force)`);
      await client.end();
    },
  };
}

export function uniquePrefix(label: string): string {
  return `test:${label}:${randomBytes(6).toString("hex")}:`;
}
