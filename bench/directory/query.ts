/**
 * Directory search and tag filters on a large store: p50/p99 latency of `DirectoryService.list`
 * (the code behind `GET /v1/listings`, in this process, one call at a time).
 *
 *   node --conditions=source --import tsx bench/directory/query.ts [--count 1000000] [--engine sqlite,postgres]
 *
 * Target: p99 <= 20 ms for every scenario, on SQLite and on PostgreSQL (the PostgreSQL part runs
 * when TEST_POSTGRES_URL is set; it creates and drops its own database).
 *
 * Scenarios: substring searches of 3-10 characters with few / some / many / no matches, 1-2
 * character searches, tag filters with few and many matches, search + tag, and paging with cursors.
 * Before timing, the first page of every query is checked against a brute-force answer computed
 * while the data set was generated, so a faster query cannot silently return other listings.
 *
 * Options: --count N (default 1,000,000), --engine sqlite|postgres|sqlite,postgres, --reps N
 * (timed rounds over every query; default 12 on SQLite, 4 on PostgreSQL), --detail (figures per
 * query too), --db URL (an already loaded store of the same --count; not dropped), --keep (do not
 * drop the store built).
 */
import type { ListRequest } from "../../packages/server/src/directory/service.js";
import { printLine } from "../report.js";
import { createStore, type GeneratedRow, generateRows, loadStore, RARE_TAGS, TAGS } from "./lib/dataset.js";
import { openService } from "./lib/service.js";
import { args, fmt, log, percentile, table, verdict } from "./lib/stats.js";

const options = args();
const COUNT = Number(options.get("count") ?? process.env.BENCH_DIRECTORY_COUNT ?? 1_000_000);
// Fewer rounds on PostgreSQL: below 100 calls a scenario's p99 is its slowest call, the stricter figure.
const repsFor = (engine: string) => Number(options.get("reps") ?? (engine === "postgres" ? 4 : 12));
const TARGET_P99_MS = 20;
const POSTGRES_URL = process.env.TEST_POSTGRES_URL;
const engines = (options.get("engine") ?? "sqlite,postgres").split(",").filter((e) => {
  if (e === "postgres" && POSTGRES_URL === undefined) {
    log("TEST_POSTGRES_URL is not set: the PostgreSQL part is skipped");
    return false;
  }
  return e === "sqlite" || e === "postgres";
}) as ("sqlite" | "postgres")[];

// ---- the queries ----------------------------------------------------------------------------

interface Case {
  scenario: string;
  label: string;
  request: Omit<ListRequest, "limit" | "includeDeleted"> & { limit?: number; includeDeleted?: boolean };
  /** Pages to follow through next_cursor (1: first page only). */
  pages: number;
}

const MANY_TAG = TAGS[0] as string;
const SECOND_TAG = TAGS[1] as string;

/** Brands (the first word of a title), picked while generating, give searches with few matches. */
function brandOf(row: GeneratedRow): string | undefined {
  const word = row.title?.split(" ")[0]?.toLowerCase();
  return word !== undefined && word.length >= 6 && word.length <= 10 ? word : undefined;
}

function buildCases(brands: readonly string[]): Case[] {
  const cases: Case[] = [];
  const add = (scenario: string, label: string, request: Case["request"], pages = 1) =>
    cases.push({ scenario, label, request, pages });
  for (const brand of brands.slice(0, 8)) add("search 3-10, few matches", brand, { search: brand });
  for (const brand of brands.slice(8, 12))
    add("search 3-10, few matches", brand.slice(1, 6), { search: brand.slice(1, 6) });
  for (const term of [
    "kaleidoscope".slice(0, 10),
    "syzygy",
    "xylophone",
    "labyrinth",
    "zephyr",
    "mnemonic",
    "juxtapose",
    "quasar",
  ]) {
    add("search 3-10, some matches", term, { search: term });
  }
  for (const term of ["the", "data", "team", "secure", "for", "service", "api", "Teams", "DATA", "rom", "ing"]) {
    add("search 3-10, many matches", term, { search: term });
  }
  for (const term of ["qxzvk", "zzyzx", "mnbvq", "100%", "a_b", "wqjx", "jjjj", "xqzq"]) {
    add("search 3-10, no matches", term, { search: term });
  }
  for (const term of ["a", "e", "t", "s", "io", "de", "ap", "Th", ".", "%", "_", "qz", "xj", "zq", "jq"]) {
    add("search 1-2 chars", term, { search: term });
  }
  for (const tag of [MANY_TAG, SECOND_TAG, TAGS[20] as string, TAGS[80] as string])
    add("tag, many matches", tag, { tag });
  for (const tag of [
    TAGS[TAGS.length - 1] as string,
    TAGS[250] as string,
    RARE_TAGS[3] as string,
    RARE_TAGS[10] as string,
    "no-such-tag",
  ]) {
    add("tag, few matches", tag, { tag });
  }
  const combos: [string, string][] = [
    ["data", MANY_TAG],
    ["secure", SECOND_TAG],
    ["kaleidoscope", MANY_TAG],
    ["syzygy", TAGS[250] as string],
    [brands[0] ?? "brand", MANY_TAG],
    ["data", RARE_TAGS[3] as string],
    ["e", MANY_TAG],
    ["qz", MANY_TAG],
    ["qxzvk", SECOND_TAG],
  ];
  for (const [search, tag] of combos) add("search + tag", `${search} + ${tag}`, { search, tag });
  add("paging with cursor", "no filter", {}, 20);
  add("paging with cursor", "include_deleted, limit 100", { includeDeleted: true, limit: 100 }, 20);
  add("paging with cursor", "status=stale", { status: "stale" }, 20);
  add("paging with cursor", `tag ${MANY_TAG}`, { tag: MANY_TAG }, 20);
  add("paging with cursor", "search data", { search: "data" }, 20);
  add("paging with cursor", "search syzygy", { search: "syzygy" }, 20);
  add("paging with cursor", "updated_since 2025-01-01", { updatedSince: Date.UTC(2025, 0, 1) }, 20);
  return cases;
}

// ---- the brute-force answer -----------------------------------------------------------------

interface Expected {
  /** Listings of the whole query (all pages). */
  total: number;
  /** The first page, as [updated_at, service_did]. */
  first: [number, string][];
}

class Oracle {
  readonly #needles: string[];
  readonly #cases: {
    c: Case;
    limit: number;
    keep: [number, string][];
    total: number;
    test: (row: GeneratedRow, hit: readonly boolean[]) => boolean;
  }[];
  readonly #hit: boolean[];
  constructor(cases: readonly Case[]) {
    this.#needles = [
      ...new Set(cases.flatMap((c) => (c.request.search === undefined ? [] : [c.request.search.toLowerCase()]))),
    ];
    this.#hit = this.#needles.map(() => false);
    this.#cases = cases.map((c) => {
      const r = c.request;
      const statuses =
        r.status !== undefined ? [r.status] : r.includeDeleted ? ["active", "stale", "deleted"] : ["active", "stale"];
      const index = r.search === undefined ? -1 : this.#needles.indexOf(r.search.toLowerCase());
      const test = (row: GeneratedRow, hit: readonly boolean[]) =>
        statuses.includes(row.status) &&
        (r.tag === undefined || row.tagList.includes(r.tag)) &&
        (r.updatedSince === undefined || row.updated_at >= r.updatedSince) &&
        (index < 0 || hit[index] === true);
      return { c, limit: r.limit ?? 50, keep: [], total: 0, test };
    });
  }
  /** The generated data is ASCII, where every engine's case folding agrees with toLowerCase. */
  add(row: GeneratedRow): void {
    const title = row.title?.toLowerCase() ?? "";
    const description = row.description?.toLowerCase() ?? "";
    for (let i = 0; i < this.#needles.length; i++) {
      const needle = this.#needles[i] as string;
      this.#hit[i] = title.includes(needle) || description.includes(needle);
    }
    for (const entry of this.#cases) {
      if (!entry.test(row, this.#hit)) continue;
      entry.total++;
      entry.keep.push([row.updated_at, row.service_did]);
      if (entry.keep.length > 2000) this.#trim(entry);
    }
  }
  #trim(entry: { keep: [number, string][]; limit: number }): void {
    entry.keep.sort(compare);
    entry.keep.length = Math.min(entry.keep.length, entry.limit);
  }
  result(): Map<Case, Expected> {
    const out = new Map<Case, Expected>();
    for (const entry of this.#cases) {
      this.#trim(entry);
      out.set(entry.c, { total: entry.total, first: entry.keep });
    }
    return out;
  }
}

function compare(a: [number, string], b: [number, string]): number {
  return a[0] - b[0] || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0);
}

/** Same timestamps in the same order, and the same DIDs within each timestamp (PostgreSQL may collate DIDs differently). */
function samePage(actual: [number, string][], expected: [number, string][]): boolean {
  if (actual.length !== expected.length) return false;
  const key = (page: [number, string][]) => {
    const groups = new Map<number, string[]>();
    for (const [t, d] of page) groups.set(t, [...(groups.get(t) ?? []), d]);
    return [...groups].map(([t, ds]) => `${t}:${ds.sort().join(",")}`).join("|");
  };
  // The last timestamp group can be cut differently when the collations differ; compare the rest exactly.
  const lastT = expected.at(-1)?.[0];
  const trim = (page: [number, string][]) => page.filter(([t]) => t !== lastT);
  return key(trim(actual)) === key(trim(expected)) && actual.map(([t]) => t).join() === expected.map(([t]) => t).join();
}

// ---- running --------------------------------------------------------------------------------

interface ScenarioResult {
  scenario: string;
  queries: number;
  matches: string;
  samples: number[];
}

async function runEngine(
  engine: "sqlite" | "postgres",
): Promise<{ engine: string; results: ScenarioResult[]; failures: string[]; load?: string }> {
  const existing = options.get("db");
  let storeUrl: string;
  let drop = async () => {};
  let loadSummary: string | undefined;
  // Brands (first words of titles) of a few listings spread over the data set: searches with few
  // matches. One cheap pass over the generator finds them before anything is loaded.
  const brands: string[] = [];
  const stride = Math.max(1, Math.floor(COUNT / 40));
  for (const row of generateRows({ count: COUNT })) {
    if (row.id % stride !== 7) continue;
    const brand = brandOf(row);
    if (brand !== undefined && !brands.includes(brand)) brands.push(brand);
    if (brands.length >= 12) break;
  }
  for (let i = 0; brands.length < 12; i++) brands.push(`nobrand${i}`);
  const cases = buildCases(brands);
  const oracle = new Oracle(cases);
  if (existing !== undefined) {
    storeUrl = existing;
    log(`${engine}: computing the expected answers over ${COUNT} generated rows`);
    for (const row of generateRows({ count: COUNT })) oracle.add(row);
  } else {
    log(`${engine}: building ${COUNT} listings`);
    const store = await createStore(engine, POSTGRES_URL);
    storeUrl = store.url;
    if (!options.has("keep")) drop = () => store.drop();
    else log(`${engine}: keeping the store at ${store.url}`);
    try {
      const report = await loadStore(store, { count: COUNT }, (row) => oracle.add(row));
      loadSummary = `${report.rows} listings, ${report.tagRows} tag rows in ${fmt(report.seconds, 1)} s (rows ${fmt(report.phases.rows, 1)} s, indexes ${fmt(report.phases.indexes, 1)} s)`;
      log(`${engine}: ${loadSummary}`);
    } catch (error) {
      await drop();
      throw error;
    }
  }
  const expected = oracle.result();
  const { service, database } = await openService(storeUrl);
  const failures: string[] = [];
  const byScenario = new Map<string, ScenarioResult>();
  try {
    const run = async (c: Case, time: number[] | undefined): Promise<[number, string][]> => {
      let cursor: string | undefined;
      let first: [number, string][] = [];
      for (let page = 0; page < c.pages; page++) {
        const started = performance.now();
        const result = await service.list({
          limit: c.request.limit ?? 50,
          includeDeleted: c.request.includeDeleted ?? false,
          search: c.request.search,
          tag: c.request.tag,
          status: c.request.status,
          updatedSince: c.request.updatedSince,
          cursor,
        });
        time?.push(performance.now() - started);
        if (page === 0) {
          first = result.bodies.map((b) => {
            const listing = JSON.parse(b) as { updated_at: string; service_did: string };
            return [Date.parse(listing.updated_at), listing.service_did];
          });
        }
        if (result.nextCursor === null) break;
        cursor = result.nextCursor;
      }
      return first;
    };
    log(`${engine}: checking the first page of ${cases.length} queries`);
    for (const c of cases) {
      const want = expected.get(c) as Expected;
      const started = performance.now();
      const got = await run(c, undefined);
      const ms = performance.now() - started;
      if (!samePage(got, want.first)) {
        failures.push(`${c.scenario} / ${c.label}: first page differs from the brute-force answer`);
      }
      if (ms > 1000) log(`${engine}: ${c.scenario} / ${c.label}: cold call took ${fmt(ms, 0)} ms`);
    }
    const REPS = repsFor(engine);
    log(`${engine}: timing (${REPS} rounds over every query)`);
    const perCase = new Map<Case, number[]>();
    for (let rep = 0; rep < REPS; rep++) {
      for (const c of cases) {
        let entry = byScenario.get(c.scenario);
        if (entry === undefined) {
          entry = { scenario: c.scenario, queries: 0, matches: "", samples: [] };
          byScenario.set(c.scenario, entry);
        }
        const samples: number[] = [];
        await run(c, samples);
        entry.samples.push(...samples);
        perCase.set(c, [...(perCase.get(c) ?? []), ...samples]);
      }
    }
    if (options.has("detail")) {
      const rows = cases.map((c) => {
        const sorted = [...(perCase.get(c) ?? [])].sort((a, b) => a - b);
        return [
          c.scenario,
          c.label,
          String((expected.get(c) as Expected).total),
          fmt(percentile(sorted, 50)),
          fmt(sorted.at(-1) ?? Number.NaN),
        ];
      });
      printLine(`\n${engine}, per query:\n${table(["scenario", "query", "matches", "p50 ms", "max ms"], rows)}`);
    }
    for (const [scenario, entry] of byScenario) {
      const totals = cases.filter((c) => c.scenario === scenario).map((c) => (expected.get(c) as Expected).total);
      entry.queries = totals.length;
      entry.matches = `${Math.min(...totals)}-${Math.max(...totals)}`;
    }
  } finally {
    await database.close();
    await drop();
  }
  return { engine, results: [...byScenario.values()], failures, ...(loadSummary ? { load: loadSummary } : {}) };
}

const reports = [];
for (const engine of engines) reports.push(await runEngine(engine));

printLine(`\nDirectory search and tag filters: DirectoryService.list on ${COUNT} listings, one call at a time`);
printLine(`Target: p99 <= ${TARGET_P99_MS} ms in every scenario, per engine\n`);
let allMet = true;
for (const report of reports) {
  printLine(`== ${report.engine}${report.load ? ` (${report.load})` : ""}`);
  const rows = report.results.map((r) => {
    const sorted = [...r.samples].sort((a, b) => a - b);
    return [
      r.scenario,
      String(r.queries),
      r.matches,
      String(sorted.length),
      fmt(percentile(sorted, 50)),
      fmt(percentile(sorted, 99)),
      fmt(sorted.at(-1) ?? Number.NaN),
    ];
  });
  printLine(table(["scenario", "queries", "matches", "calls", "p50 ms", "p99 ms", "max ms"], rows));
  const worst = Math.max(
    ...report.results.map((r) =>
      percentile(
        [...r.samples].sort((a, b) => a - b),
        99,
      ),
    ),
  );
  const met = worst <= TARGET_P99_MS && report.failures.length === 0;
  allMet &&= met;
  for (const failure of report.failures) printLine(`WRONG RESULT: ${failure}`);
  printLine(`${report.engine}: worst p99 ${fmt(worst)} ms (target <= ${TARGET_P99_MS} ms): ${verdict(met)}\n`);
}
printLine(
  `Overall: ${verdict(allMet)}${engines.includes("postgres") ? "" : " (SQLite only: set TEST_POSTGRES_URL for PostgreSQL)"}`,
);
