/**
 * Full mirror traversal: a client follows `next_cursor` through
 * `GET /v1/listings?limit=100&include_deleted=true` from the first page to the last, over HTTP,
 * against a directory process serving a store of 1,000,000 listings.
 *
 *   node --conditions=source --import tsx bench/directory/mirror.ts [--count 1000000] [--engine sqlite,postgres]
 *
 * Target: the whole traversal in <= 60 s, on SQLite and on PostgreSQL (the PostgreSQL part runs
 * when TEST_POSTGRES_URL is set; it creates and drops its own database).
 *
 * The client checks what a mirror relies on: every listing exactly once, in list order
 * (`updated_at` never decreasing, no DID twice), and the total equal to the store's.
 *
 * Options: --count N, --engine sqlite|postgres|sqlite,postgres, --db URL (an already loaded store
 * of --count listings; not dropped), --keep (do not drop the store built), --cpu-prof DIR.
 */

import { printLine } from "../report.js";
import { createStore, loadStore } from "./lib/dataset.js";
import { startChild } from "./lib/processes.js";
import { args, fmt, log, percentile, table, verdict } from "./lib/stats.js";

const options = args();
const COUNT = Number(options.get("count") ?? process.env.BENCH_DIRECTORY_COUNT ?? 1_000_000);
const TARGET_SECONDS = 60;
const POSTGRES_URL = process.env.TEST_POSTGRES_URL;
const engines = (options.get("engine") ?? "sqlite,postgres").split(",").filter((e) => {
  if (e === "postgres" && POSTGRES_URL === undefined) {
    log("TEST_POSTGRES_URL is not set: the PostgreSQL part is skipped");
    return false;
  }
  return e === "sqlite" || e === "postgres";
}) as ("sqlite" | "postgres")[];

interface Traversal {
  engine: string;
  load: string | undefined;
  seconds: number;
  pages: number;
  listings: number;
  pageMs: number[];
  problems: string[];
}

async function traverse(engine: "sqlite" | "postgres"): Promise<Traversal> {
  let url = options.get("db");
  let drop = async () => {};
  let load: string | undefined;
  if (url === undefined) {
    log(`${engine}: building ${COUNT} listings`);
    const store = await createStore(engine, POSTGRES_URL);
    url = store.url;
    if (!options.has("keep")) drop = () => store.drop();
    else log(`${engine}: keeping the store at ${store.url}`);
    try {
      const report = await loadStore(store, { count: COUNT });
      load = `${report.rows} listings loaded in ${fmt(report.seconds, 1)} s`;
      log(`${engine}: ${load}`);
    } catch (error) {
      await drop();
      throw error;
    }
  }
  const profileDir = options.get("cpu-prof");
  const server = await startChild(
    "./directory-server.ts",
    {
      DIRECTORY_DATABASE_URL: url,
      DIRECTORY_RATE_LIMITS: "read=100000000/60",
      DIRECTORY_REVALIDATE_TICK_SECONDS: "0",
      LOG_LEVEL: "warn",
    },
    profileDir ? ["--cpu-prof", `--cpu-prof-dir=${profileDir}`] : [],
  );
  const problems: string[] = [];
  const pageMs: number[] = [];
  const seen = new Set<string>();
  let pages = 0;
  let lastUpdated = Number.NEGATIVE_INFINITY;
  const base = `http://127.0.0.1:${server.port}/v1/listings?limit=100&include_deleted=true`;
  log(`${engine}: traversing`);
  const started = performance.now();
  try {
    let cursor: string | null = null;
    do {
      const pageStarted = performance.now();
      const response = await fetch(cursor === null ? base : `${base}&cursor=${encodeURIComponent(cursor)}`);
      const text = await response.text();
      pageMs.push(performance.now() - pageStarted);
      if (response.status !== 200) throw new Error(`page ${pages + 1}: HTTP ${response.status}: ${text.slice(0, 300)}`);
      const page = JSON.parse(text) as {
        listings: { service_did: string; updated_at: string }[];
        next_cursor: string | null;
      };
      pages++;
      for (const listing of page.listings) {
        const updated = Date.parse(listing.updated_at);
        if (updated < lastUpdated && problems.length < 5)
          problems.push(`order: ${listing.service_did} goes back in time`);
        lastUpdated = updated;
        if (seen.has(listing.service_did) && problems.length < 5) problems.push(`${listing.service_did} seen twice`);
        seen.add(listing.service_did);
      }
      cursor = page.next_cursor;
      if (pages % 1000 === 0)
        log(`${engine}: ${pages} pages, ${seen.size} listings, ${fmt((performance.now() - started) / 1000, 1)} s`);
    } while (cursor !== null);
  } finally {
    await server.stop();
    await drop();
  }
  const seconds = (performance.now() - started) / 1000;
  if (seen.size !== COUNT) problems.push(`saw ${seen.size} listings, the store holds ${COUNT}`);
  return { engine, load, seconds, pages, listings: seen.size, pageMs, problems };
}

const results: Traversal[] = [];
for (const engine of engines) results.push(await traverse(engine));

printLine(`\nFull mirror traversal over HTTP: GET /v1/listings?limit=100&include_deleted=true, following next_cursor`);
printLine(`Target: <= ${TARGET_SECONDS} s per engine\n`);
printLine(
  table(
    ["engine", "listings", "pages", "seconds", "listings/s", "page p50 ms", "page p99 ms", "verdict"],
    results.map((r) => {
      const sorted = [...r.pageMs].sort((a, b) => a - b);
      const met = r.seconds <= TARGET_SECONDS && r.problems.length === 0;
      return [
        r.engine,
        String(r.listings),
        String(r.pages),
        fmt(r.seconds, 1),
        fmt(r.listings / r.seconds, 0),
        fmt(percentile(sorted, 50)),
        fmt(percentile(sorted, 99)),
        verdict(met),
      ];
    }),
  ),
);
for (const r of results) {
  if (r.load) printLine(`${r.engine}: ${r.load}`);
  for (const problem of r.problems) printLine(`${r.engine}: PROBLEM: ${problem}`);
}
