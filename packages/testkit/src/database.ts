import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";

export const TEST_POSTGRES_URL = process.env.TEST_POSTGRES_URL;

export interface TestDatabase {
  url: string;
  drop(): Promise<void>;
}

/**
 * A database of its own for one suite, so runs never see each other's data: a SQLite file in a
 * temporary folder, or a new PostgreSQL database on `TEST_POSTGRES_URL`, dropped afterwards.
 */
export async function createTestDatabase(engine: "sqlite" | "postgres", label = "proto"): Promise<TestDatabase> {
  if (engine === "sqlite") {
    const dir = mkdtempSync(join(tmpdir(), `${label}-test-`));
    return { url: `sqlite:${join(dir, "test.db")}`, drop: async () => rmSync(dir, { recursive: true, force: true }) };
  }
  if (!TEST_POSTGRES_URL) throw new Error("TEST_POSTGRES_URL is not set");
  const name = `${label.replace(/[^a-z0-9_]/g, "_")}_t_${randomBytes(6).toString("hex")}`;
  const admin = new pg.Client({ connectionString: TEST_POSTGRES_URL });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  const url = new URL(TEST_POSTGRES_URL);
  url.pathname = `/${name}`;
  return {
    url: url.href,
    async drop() {
      const client = new pg.Client({ connectionString: TEST_POSTGRES_URL });
      await client.connect();
      await client.query(`drop database if exists ${name} with (force)`);
      await client.end();
    },
  };
}
