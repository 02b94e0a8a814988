/**
 * What a report says about where it was measured: the machine, the versions of Node.js and of the
 * database engines, the commit, and how busy the machine was (load averages, and the CPU time the
 * whole machine spent while none of the benchmarks ran).
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { cpus, loadavg, release, totalmem, type } from "node:os";
import { join } from "node:path";

export interface Machine {
  cpu: string;
  /** Logical processors. */
  cores: number;
  memoryGiB: number;
  os: string;
}

export interface Versions {
  node: string;
  sqlite: string | undefined;
  postgres: string | undefined;
  redis: string | undefined;
}

export interface Commit {
  hash: string | undefined;
  /** Whether the work tree had changes not committed. */
  dirty: boolean;
}

export type LoadAverage = [number, number, number];

export function machine(): Machine {
  const list = cpus();
  return {
    cpu: list[0]?.model.trim() ?? "unknown",
    cores: list.length,
    memoryGiB: totalmem() / 2 ** 30,
    os: `${type()} ${release()}`,
  };
}

export function loadAverage(): LoadAverage {
  const [one = 0, five = 0, fifteen = 0] = loadavg();
  return [one, five, fifteen];
}

export function commit(root: string): Commit {
  try {
    const hash = execFileSync("git", ["rev-parse", "--short=12", "HEAD"], { cwd: root, encoding: "utf8" }).trim();
    const status = execFileSync("git", ["status", "--porcelain", "--untracked-files=no"], {
      cwd: root,
      encoding: "utf8",
    });
    return { hash, dirty: status.trim() !== "" };
  } catch {
    return { hash: undefined, dirty: false };
  }
}

/** Total and idle jiffies of all processors, from /proc/stat (Linux). */
function cpuTimes(): { total: number; idle: number } | undefined {
  try {
    const line = readFileSync("/proc/stat", "utf8").split("\n")[0] ?? "";
    const fields = line.trim().split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal (guest time is counted in user already)
    const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] = fields;
    return { total: user + nice + system + idle + iowait + irq + softirq + steal, idle: idle + iowait };
  } catch {
    return undefined;
  }
}

/**
 * The share of the whole machine's processor time that was busy over `seconds`, measured while the
 * runner itself waits: what other processes use. Undefined where /proc/stat does not exist.
 */
export async function othersBusy(seconds: number): Promise<number | undefined> {
  const before = cpuTimes();
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  const after = cpuTimes();
  if (before === undefined || after === undefined || after.total <= before.total) return undefined;
  return 1 - (after.idle - before.idle) / (after.total - before.total);
}

/** The database engines' versions: SQLite as better-sqlite3 embeds it, and the servers the URLs name. */
export async function versions(root: string, postgresUrl?: string, redisUrl?: string): Promise<Versions> {
  // The server package owns the database clients.
  const require = createRequire(join(root, "packages", "server", "package.json"));
  const found: Versions = { node: process.version, sqlite: undefined, postgres: undefined, redis: undefined };
  try {
    const Database = require("better-sqlite3") as new (
      path: string,
    ) => {
      prepare(sql: string): { get(): unknown };
      close(): void;
    };
    const db = new Database(":memory:");
    const row = db.prepare("select sqlite_version() as version").get() as { version: string };
    db.close();
    const { version } = require("better-sqlite3/package.json") as { version: string };
    found.sqlite = `${row.version} (better-sqlite3 ${version})`;
  } catch (error) {
    found.sqlite = `unknown (${error instanceof Error ? error.message : String(error)})`;
  }
  if (postgresUrl !== undefined) {
    try {
      const pg = require("pg") as typeof import("pg");
      const client = new pg.Client({ connectionString: postgresUrl });
      await client.connect();
      const result = await client.query<{ server_version: string }>("show server_version");
      await client.end();
      found.postgres = result.rows[0]?.server_version;
    } catch (error) {
      found.postgres = `unknown (${error instanceof Error ? error.message : String(error)})`;
    }
  }
  if (redisUrl !== undefined) {
    try {
      const { Redis } = require("ioredis") as typeof import("ioredis");
      const redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
      await redis.connect();
      const info = await redis.info("server");
      redis.disconnect();
      found.redis = /redis_version:(\S+)/.exec(info)?.[1];
    } catch (error) {
      found.redis = `unknown (${error instanceof Error ? error.message : String(error)})`;
    }
  }
  return found;
}
