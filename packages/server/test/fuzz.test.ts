/**
 * Property-based fuzzing of every route of the directory and the attestor (the route list is read
 * from Fastify, so new routes are covered): broken bodies, headers, query strings and path
 * parameters, over real HTTP. No answer may be a 5xx; API errors are the JSON envelope, pages
 * answer HTML; the server is healthy afterwards. A failure prints the seed, and each failing case
 * (by route and kind of breakage) with the request as sent. `npm run fuzz` is the longer run.
 *
 *   FUZZ_SEED=<n>       another seed (default fixed, so a run is repeatable)
 *   FUZZ_REQUESTS=<n>   requests per server (default 1500; half on PostgreSQL, a third with default rate limits)
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type FuzzReport, formatReport, fuzzTarget } from "@proto/testkit/fuzz";
import {
  type RunningTarget,
  startDirectoryTarget,
  startTrustTarget,
  type TargetOptions,
} from "./support/fuzz-targets.js";
import { reportSkippedVariants, STORE_VARIANTS, type StoreVariant } from "./support/stores.js";

reportSkippedVariants();

const SEED = Number(process.env.FUZZ_SEED ?? 1_306_2025);
const REQUESTS = Number(process.env.FUZZ_REQUESTS ?? 1500);

function assertClean(report: FuzzReport): void {
  if (report.failures.size === 0 && report.health.length === 0) return;
  assert.fail(`${formatReport(report)}\n\nReproduce: FUZZ_SEED=${report.seed} FUZZ_REQUESTS=${REQUESTS}`);
}

type Start = (variant: StoreVariant, options: TargetOptions) => Promise<RunningTarget>;
const SERVERS: [string, Start][] = [
  ["directory", startDirectoryTarget],
  ["attestor", startTrustTarget],
];

async function fuzz(start: Start, variant: StoreVariant, options: TargetOptions, requests: number): Promise<void> {
  const target = await start(variant, options);
  try {
    const report = await fuzzTarget(target, { seed: SEED, requests, concurrency: 8 });
    process.stdout.write(`# ${formatReport(report).split("\n")[0]}\n`);
    assertClean(report);
  } finally {
    await target.close();
  }
}

for (const variant of STORE_VARIANTS) {
  describe(`fuzzing every route (${variant.name}, rate limits raised)`, { timeout: 180_000 }, () => {
    for (const [name, start] of SERVERS) {
      test(`${name}: no 5xx, errors in the route's format, healthy afterwards`, () =>
        fuzz(start, variant, {}, variant.engine === "sqlite" ? REQUESTS : Math.ceil(REQUESTS / 2)));
    }
  });
}

describe("fuzzing every route with the default rate limits (sqlite)", { timeout: 180_000 }, () => {
  const sqlite = STORE_VARIANTS[0] as StoreVariant;
  for (const [name, start] of SERVERS) {
    test(`${name}: 429s are answers like any other`, () =>
      fuzz(start, sqlite, { limits: "default" }, Math.ceil(REQUESTS / 3)));
  }
});
