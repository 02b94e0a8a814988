/**
 * Single-listing reads: `GET /v1/listings/{did}` of the directory (SQLite store of 100,000
 * listings, rate limiter on with its read limit raised, LOG_LEVEL=warn) against a plain `node:http`
 * server returning the same bytes and headers from memory, measured side by side in one run.
 *
 *   node --conditions=source --import tsx bench/directory/read.ts
 *
 * Target: directory throughput >= 0.7x the baseline's at 50 concurrent connections.
 *
 * Each server runs in its own process, and so does the load generator (wrk if installed, else
 * `npx --no-install autocannon`, else a small Node.js generator); requests cycle through 20,000
 * different DIDs. Baseline and directory rounds alternate; the figures are medians over rounds.
 *
 * Options: --count N (listings, default 100,000), --rounds N (default 5), --seconds N (per round,
 * default 10), --connections N (default 50), --threads N (wrk threads, default 1),
 * --generator wrk|autocannon|node, --cpu-prof DIR (profile the directory process into DIR).
 */

import { printLine } from "../report.js";
import { createStore, loadStore } from "./lib/dataset.js";
import { LoadGenerator, type LoadResult, pickGenerator } from "./lib/load.js";
import { type Child, startChild } from "./lib/processes.js";
import { args, fmt, log, median, table, verdict } from "./lib/stats.js";

const options = args();
const COUNT = Number(options.get("count") ?? 100_000);
const ROUNDS = Number(options.get("rounds") ?? 5);
const SECONDS = Number(options.get("seconds") ?? 10);
const CONNECTIONS = Number(options.get("connections") ?? 50);
const THREADS = Number(options.get("threads") ?? 1);
const TARGET = 0.7;
const RATE_LIMITS = "read=100000000/60";

log(`building a SQLite store of ${COUNT} listings`);
const store = await createStore("sqlite");
const paths: string[] = [];
const children: Child[] = [];
let generator: LoadGenerator | undefined;
try {
  const every = Math.max(1, Math.floor(COUNT / 20_000));
  const report = await loadStore(store, { count: COUNT }, (row) => {
    if (row.id % every === 0) paths.push(`/v1/listings/${row.service_did}`);
  });
  log(`loaded ${report.rows} listings in ${fmt(report.seconds, 1)} s`);
  // Shuffle (deterministically) so consecutive requests hit unrelated rows.
  for (let i = paths.length - 1; i > 0; i--) {
    const j = (i * 7919 + 13) % (i + 1);
    [paths[i], paths[j]] = [paths[j] as string, paths[i] as string];
  }

  const kind = pickGenerator(options.get("generator"));
  log(`load generator: ${kind}${kind === "autocannon" ? " (one path only)" : ""}`);
  generator = new LoadGenerator(kind, paths);

  const baseline = await startChild("./baseline-server.ts", {
    BASELINE_SQLITE_PATH: store.url.slice("sqlite:".length),
  });
  children.push(baseline);
  const profileDir = options.get("cpu-prof");
  const directory = await startChild(
    "./directory-server.ts",
    {
      DIRECTORY_DATABASE_URL: store.url,
      DIRECTORY_RATE_LIMITS: RATE_LIMITS,
      DIRECTORY_REVALIDATE_TICK_SECONDS: "0",
      LOG_LEVEL: "warn",
    },
    profileDir ? ["--cpu-prof", `--cpu-prof-dir=${profileDir}`] : [],
  );
  children.push(directory);

  // Same status, bytes and cache headers from both, for a sample of paths.
  for (const path of paths.slice(0, 50)) {
    const [a, b] = await Promise.all(
      [baseline.port, directory.port].map((port) => fetch(`http://127.0.0.1:${port}${path}`)),
    );
    const [ta, tb] = await Promise.all([a!.text(), b!.text()]);
    for (const header of ["content-type", "cache-control", "access-control-allow-origin", "content-length"]) {
      if (a!.headers.get(header) !== b!.headers.get(header)) {
        throw new Error(`${header} differs for ${path}: ${a!.headers.get(header)} vs ${b!.headers.get(header)}`);
      }
    }
    if (a!.status !== 200 || b!.status !== 200 || ta !== tb) throw new Error(`different answers for ${path}`);
  }
  log("both servers answer the same bytes and headers");

  const subjects = [
    { name: "node:http baseline", port: baseline.port, results: [] as LoadResult[] },
    { name: "directory", port: directory.port, results: [] as LoadResult[] },
  ];
  log("warming up");
  for (const subject of subjects) await generator.run(subject.port, CONNECTIONS, 3, THREADS);
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? subjects : [...subjects].reverse();
    for (const subject of order) {
      const result = await generator.run(subject.port, CONNECTIONS, SECONDS, THREADS);
      subject.results.push(result);
      log(
        `round ${round + 1}/${ROUNDS} ${subject.name}: ${fmt(result.rps, 0)} req/s, p99 ${fmt(result.p99ms)} ms${
          result.errors + result.non2xx > 0 ? `, ${result.errors} errors, ${result.non2xx} non-2xx` : ""
        }`,
      );
    }
  }

  const [base, dir] = subjects as [(typeof subjects)[0], (typeof subjects)[0]];
  const rps = (s: typeof base) => median(s.results.map((r) => r.rps));
  const ratios = base.results.map((r, i) => (dir.results[i] as LoadResult).rps / r.rps);
  const ratio = rps(dir) / rps(base);
  const failed = [...base.results, ...dir.results].some((r) => r.errors > 0 || r.non2xx > 0);
  printLine(
    `\nGET /v1/listings/{did}: ${COUNT} listings (SQLite), ${CONNECTIONS} connections, ${ROUNDS} alternating rounds of ${SECONDS} s, load from ${kind}`,
  );
  printLine(`rate limiter on (DIRECTORY_RATE_LIMITS=${RATE_LIMITS}), LOG_LEVEL=warn\n`);
  printLine(
    table(
      ["server", "median req/s", "min req/s", "max req/s", "median p50 ms", "median p99 ms"],
      subjects.map((s) => [
        s.name,
        fmt(rps(s), 0),
        fmt(Math.min(...s.results.map((r) => r.rps)), 0),
        fmt(Math.max(...s.results.map((r) => r.rps)), 0),
        fmt(median(s.results.map((r) => r.p50ms))),
        fmt(median(s.results.map((r) => r.p99ms))),
      ]),
    ),
  );
  printLine(`\nper-round ratios: ${ratios.map((r) => fmt(r)).join(", ")}`);
  printLine(
    `ratio directory / baseline (medians): ${fmt(ratio)}x, target >= ${TARGET}x: ${verdict(ratio >= TARGET && !failed)}${
      failed ? " (errors or non-2xx answers seen)" : ""
    }`,
  );
} finally {
  for (const child of children.reverse()) await child.stop();
  generator?.close();
  await store.drop();
}
