/**
 * Property-based fuzzing of every route of the notes service, the kit's routes included (read
 * from Fastify): no 5xx, API errors in the envelope, pages in HTML, healthy afterwards. See
 * packages/server/test/fuzz.test.ts; `npm run fuzz` is the longer run.
 *
 *   FUZZ_SEED=<n>  FUZZ_REQUESTS=<n> (default 1000; half on PostgreSQL)
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { formatReport, fuzzTarget } from "@proto/testkit/fuzz";
import { reportSkippedVariants, STORE_VARIANTS } from "../../../packages/server/test/support/stores.js";
import { startNotesTarget } from "./support/fuzz-target.js";

reportSkippedVariants();

const SEED = Number(process.env.FUZZ_SEED ?? 1_306_2025);
const REQUESTS = Number(process.env.FUZZ_REQUESTS ?? 1000);

for (const variant of STORE_VARIANTS) {
  describe(`fuzzing every route of the notes service (${variant.name})`, { timeout: 180_000 }, () => {
    test("no 5xx, errors in the route's format, healthy afterwards", async () => {
      const target = await startNotesTarget(variant);
      try {
        const requests = variant.engine === "sqlite" ? REQUESTS : Math.ceil(REQUESTS / 2);
        const report = await fuzzTarget(target, { seed: SEED, requests, concurrency: 8 });
        process.stdout.write(`# ${formatReport(report).split("\n")[0]}\n`);
        if (report.failures.size > 0 || report.health.length > 0) {
          assert.fail(`${formatReport(report)}\n\nReproduce: FUZZ_SEED=${SEED} FUZZ_REQUESTS=${REQUESTS}`);
        }
      } finally {
        await target.close();
      }
    });
  });
}
