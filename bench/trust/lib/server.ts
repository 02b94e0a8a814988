/**
 * The attestor under test, in a process of its own: `buildTrustApp(readTrustConfig(env))` listening
 * on a loopback port. Forked by `bench/trust/mint.ts`, which talks to it over IPC:
 *   -> parent  { type: "listening", port }
 *   <- parent  { type: "stats" }  -> { type: "stats", cpu: {user, system} (µs), elu (0..1) } since the last "mark"
 *   <- parent  { type: "mark" }   -> { type: "marked" }
 *   <- parent  { type: "stop" }   -> closes the app and exits 0 (so `--cpu-prof` writes its profile)
 * BENCH_REDIS_PREFIX, when set, is handed to buildTrustApp so the run's Redis keys can be removed.
 * BENCH_PROFILE_DIR, when set, makes the span from "mark" to "stats" a CPU profile (the timed phase
 * only, unlike `node --cpu-prof`, which would include start-up and agent linking), written there.
 */
import { writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
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
const trust = await buildTrustApp(readTrustConfig(env), prefix === undefined ? {} : { redisPrefix: prefix });
collectGarbagePeriodically();
await trust.app.listen({ port: 0, host: "127.0.0.1" });
const address = trust.app.server.address();
if (address === null || typeof address === "string") throw new Error("no address");

let cpuMark = process.cpuUsage();
let eluMark = performance.eventLoopUtilization();

process.on("message", async (message: { type: string }) => {
  if (message.type === "mark") {
    await inspector?.post("Profiler.start");
    cpuMark = process.cpuUsage();
    eluMark = performance.eventLoopUtilization();
    send({ type: "marked" });
  } else if (message.type === "stats") {
    const cpu = process.cpuUsage(cpuMark);
    const elu = performance.eventLoopUtilization(eluMark);
    if (inspector !== undefined && profileDir !== undefined) {
      const { profile } = await inspector.post("Profiler.stop");
      writeFileSync(join(profileDir, `trust-mint-${process.pid}.cpuprofile`), JSON.stringify(profile));
    }
    send({ type: "stats", cpu, elu: elu.utilization });
  } else if (message.type === "stop") {
    trust
      .close()
      .catch(() => undefined)
      .finally(() => process.exit(0));
  }
});
process.on("disconnect", () => process.exit(0));

send({ type: "listening", port: address.port });
