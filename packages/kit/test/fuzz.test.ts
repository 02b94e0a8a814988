/**
 * Property-based fuzzing of the kit's Express and Hono adapters: every route of a small
 * application on each (the kit's and its own guarded ones), over real HTTP. No 5xx, API errors in
 * the envelope (what node refuses before routing included), pages in HTML, healthy afterwards.
 * See packages/server/test/fuzz.test.ts; `npm run fuzz` is the longer run.
 *
 *   FUZZ_SEED=<n>  FUZZ_REQUESTS=<n> (per adapter; default 800, half on PostgreSQL)
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { formatReport, fuzzTarget } from "@proto/testkit/fuzz";
import { ENGINES, reportSkippedEngines } from "./support/env.js";
import { type RunningTarget, startExpressTarget, startHonoTarget, type TargetStore } from "./support/fuzz-targets.js";

reportSkippedEngines();

const SEED = Number(process.env.FUZZ_SEED ?? 1_306_2025);
const REQUESTS = Number(process.env.FUZZ_REQUESTS ?? 800);

const ADAPTERS: [string, (store: TargetStore) => Promise<RunningTarget>][] = [
  ["Express", startExpressTarget],
  ["Hono", startHonoTarget],
];

for (const engine of ENGINES) {
  describe(`fuzzing the kit's adapters (${engine})`, { timeout: 180_000 }, () => {
    for (const [name, start] of ADAPTERS) {
      test(`${name}: no 5xx, errors in the route's format, healthy afterwards`, async () => {
        const target = await start({ name: engine, engine });
        try {
          const requests = engine === "sqlite" ? REQUESTS : Math.ceil(REQUESTS / 2);
          const report = await fuzzTarget(target, { seed: SEED, requests, concurrency: 8 });
          process.stdout.write(`# ${formatReport(report).split("\n")[0]}\n`);
          if (report.failures.size > 0 || report.health.length > 0) {
            assert.fail(`${formatReport(report)}\n\nReproduce: FUZZ_SEED=${SEED} FUZZ_REQUESTS=${REQUESTS}`);
          }
        } finally {
          await target.close();
        }
      });
    }
  });
}
