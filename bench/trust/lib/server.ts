/**
 * The attestor under test, in a process of its own: `buildTrustApp(readTrustConfig(env))` listening
 * on a loopback port. Forked by `bench/trust/mint.ts`, which talks to it over IPC:
 *   -> parent  { type: "listening", port }
 *   <- parent  { type: "stats" }  -> { type: "stats", cpu: {user, system} (µs), elu (0..1), sql, redis } since the
 *                                    last "mark" (sql: statements executed, redis: commands sent), and rss {anon, file} (kB)
 *   <- parent  { type: "mark" }   -> { type: "marked" }
 *   <- parent  { type: "profile" } -> { type: "profiled" } (writes the CPU profile, see below)
 *   <- parent  { type: "stop" }   -> closes the app and exits 0 (so `--cpu-prof` writes its profile)
 * The parent marks and reads stats around each timed round.
 * BENCH_REDIS_PREFIX, when set, is handed to buildTrustApp so the run's Redis keys can be removed.
 * BENCH_PROFILE_DIR, when set, makes the span from the first "mark" to "profile" a CPU profile (the
 * timed rounds, and the crypto-only rounds between them, when the server idles; unlike
 * `node --cpu-prof`, which would include start-up and agent linking), written there.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { SqliteHandle, type SqliteStatement } from "@proto/protocol";
import { Redis } from "ioredis";
import pg from "pg";
import { buildTrustApp } from "../../../packages/server/src/trust/app.js";
import { readTrustConfig } from "../../../packages/server/src/trust/config.js";
import { collectGarbagePeriodically } from "../../soak-gc.js";

const send = (message: unknown) => process.send?.(message);

const prefix = process.env.BENCH_REDIS_PREFIX;
const profileDir = process.env.BENCH_PROFILE_DIR;
const env = { ...process.env };
delete env.BENCH_REDIS_PREFIX;
delete env.BENCH_PROFILE_DIR;
const inspector = profileDir === undefined ? undefined : new Session();
if (inspector !== undefined) {
  inspector.connect();
  await inspector.post("Profiler.enable");
  await inspector.post("Profiler.setSamplingInterval", { interval: 250 });
}
// Counting wrappers, installed before the app exists: every SQL statement executed (SQLite
// statements, PostgreSQL queries: each one a round trip) and every Redis command sent (no pipelines
// on the mint path: each one a round trip). The cost is an increment per call.
let sqlStatements = 0;
let redisCommands = 0;
const counted = new WeakSet<SqliteStatement>();
const prepare = SqliteHandle.prototype.prepare;
SqliteHandle.prototype.prepare = function (this: SqliteHandle, source: string): SqliteStatement {
  const statement = prepare.call(this, source);
  if (!counted.has(statement)) {
    counted.add(statement);
    const methods = statement as unknown as Record<string, (...args: unknown[]) => unknown>;
    for (const name of ["all", "get", "run", "iterate"]) {
      const original = methods[name]!;
      methods[name] = (...args: unknown[]) => {
        sqlStatements++;
        return original(...args);
      };
    }
  }
  return statement;
};
const pgQuery = pg.Client.prototype.query as (...args: unknown[]) => unknown;
(pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown }).query = function (
  this: pg.Client,
  ...args: unknown[]
) {
  sqlStatements++;
  return pgQuery.apply(this, args);
};
const sendCommand = Redis.prototype.sendCommand;
Redis.prototype.sendCommand = function (this: Redis, ...args: Parameters<typeof sendCommand>) {
  redisCommands++;
  return sendCommand.apply(this, args);
};

/** RssAnon and RssFile of this process, in kB (Linux). */
function rss(): { anon: number; file: number } {
  const status = readFileSync("/proc/self/status", "utf8");
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, "m").exec(status)?.[1] ?? Number.NaN);
  return { anon: field("RssAnon"), file: field("RssFile") };
}

const trust = await buildTrustApp(readTrustConfig(env), prefix === undefined ? {} : { redisPrefix: prefix });
collectGarbagePeriodically();
await trust.app.listen({ port: 0, host: "127.0.0.1" });
const address = trust.app.server.address();
if (address === null || typeof address === "string") throw new Error("no address");

let cpuMark = process.cpuUsage();
let eluMark = performance.eventLoopUtilization();
let profiling = false;

process.on("message", async (message: { type: string }) => {
  if (message.type === "mark") {
    if (inspector !== undefined && !profiling) {
      profiling = true;
      await inspector.post("Profiler.start");
    }
    cpuMark = process.cpuUsage();
    eluMark = performance.eventLoopUtilization();
    sqlStatements = 0;
    redisCommands = 0;
    send({ type: "marked" });
  } else if (message.type === "stats") {
    const cpu = process.cpuUsage(cpuMark);
    const elu = performance.eventLoopUtilization(eluMark);
    send({ type: "stats", cpu, elu: elu.utilization, sql: sqlStatements, redis: redisCommands, rss: rss() });
  } else if (message.type === "profile") {
    if (inspector !== undefined && profileDir !== undefined && profiling) {
      profiling = false;
      const { profile } = await inspector.post("Profiler.stop");
      writeFileSync(join(profileDir, `trust-mint-${process.pid}.cpuprofile`), JSON.stringify(profile));
    }
    send({ type: "profiled" });
  } else if (message.type === "stop") {
    trust
      .close()
      .catch(() => undefined)
      .finally(() => process.exit(0));
  }
});
process.on("disconnect", () => process.exit(0));

send({ type: "listening", port: address.port });
