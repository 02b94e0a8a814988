/**
 * The long fuzz run: generated bad requests to every route of the directory, the attestor, the
 * notes service and the kit's Express and Hono adapters (the same generator and rules as the fuzz
 * tests, @proto/testkit/fuzz), printing
 * counts by status per server and every failing case once (by route, problem and kind of
 * breakage) with an example request. Exit status 1 on any failure.
 *
 *   node --conditions=source --import tsx bench/fuzz.ts [--requests 100000] [--seed N]
 *        [--concurrency 16] [--store sqlite|postgres]
 *
 * --requests is the total, split evenly over the five targets. --store postgres needs
 * TEST_POSTGRES_URL (and uses Redis when TEST_REDIS_URL is set).
 */
import { parseArgs } from "node:util";
import { type FuzzReport, formatReport, fuzzTarget } from "@proto/testkit/fuzz";
import { startNotesTarget } from "../examples/service/test/support/fuzz-target.js";
import { startExpressTarget, startHonoTarget } from "../packages/kit/test/support/fuzz-targets.js";
import { startDirectoryTarget, startTrustTarget } from "../packages/server/test/support/fuzz-targets.js";
import type { StoreVariant } from "../packages/server/test/support/stores.js";
import { printLine } from "./report.js";

const { values } = parseArgs({
  options: {
    requests: { type: "string", default: "100000" },
    seed: { type: "string", default: String(Date.now() % 1_000_000_000) },
    concurrency: { type: "string", default: "16" },
    store: { type: "string", default: "sqlite" },
  },
});
const total = Number(values.requests);
const seed = Number(values.seed);
const concurrency = Number(values.concurrency);
if (values.store !== "sqlite" && values.store !== "postgres") throw new Error("--store is sqlite or postgres");
if (values.store === "postgres" && !process.env.TEST_POSTGRES_URL)
  throw new Error("--store postgres needs TEST_POSTGRES_URL");
const variant: StoreVariant =
  values.store === "sqlite"
    ? { name: "sqlite", engine: "sqlite", redis: false }
    : { name: "postgres", engine: "postgres", redis: process.env.TEST_REDIS_URL !== undefined };

const starters = [
  () => startDirectoryTarget(variant),
  () => startTrustTarget(variant),
  () => startNotesTarget(variant),
  () => startExpressTarget(variant),
  () => startHonoTarget(variant),
];
const perTarget = Math.ceil(total / starters.length);
printLine(`fuzz: ${perTarget * starters.length} requests (seed ${seed}, ${concurrency} at a time, ${variant.name})`);

const reports: FuzzReport[] = [];
for (const start of starters) {
  const target = await start();
  const began = Date.now();
  let lastPrint = 0;
  try {
    const report = await fuzzTarget(target, {
      seed,
      requests: perTarget,
      concurrency,
      onProgress(progress) {
        if (Date.now() - lastPrint < 10_000) return;
        lastPrint = Date.now();
        printLine(`  ${progress.target}: ${progress.sent} sent, ${progress.failures.size} failing cases so far`);
      },
    });
    printLine(`  ${report.target}: done in ${((Date.now() - began) / 1000).toFixed(0)} s`);
    reports.push(report);
  } finally {
    await target.close();
  }
}

printLine("");
for (const report of reports) printLine(`${formatReport(report)}\n`);
const failing = reports.filter((report) => report.failures.size > 0 || report.health.length > 0);
const sent = reports.reduce((sum, report) => sum + report.sent, 0);
printLine(
  `${sent} requests in all; ${reports.reduce((n, r) => n + r.failures.size, 0)} failing cases` +
    `${failing.length > 0 ? ` on ${failing.map((r) => r.target).join(", ")}` : ""}. Seed ${seed}.`,
);
process.exit(failing.length > 0 ? 1 : 0);
