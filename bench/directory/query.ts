/**
 * Directory search and tag filters on a large store, over HTTP: p50/p99 latency of
 * `GET /v1/listings?search=…&tag=…&cursor=…` answered by the directory running in its own process
 * (the compiled `proto-server directory`, built first with `tsc -b`, so no TypeScript loader adds
 * to its memory), one request at a time on a keep-alive connection, timed from the request to the
 * answer's last byte.
 *
 *   node --conditions=source --import tsx bench/directory/query.ts [--count 1000000] [--engine sqlite,postgres] [--quick]
 *
 * Targets: p99 <= 10 ms in every scenario, and the server's anonymous resident memory (RssAnon)
 * under 100 MB, on SQLite and on PostgreSQL (the PostgreSQL part runs when TEST_POSTGRES_URL is
 * set; it creates and drops its own database).
 *
 * Scenarios: substring searches of 3-10 characters with few / some / many / no matches, 1-2
 * character searches, tag filters with few and many matches, search + tag, and paging with cursors.
 * Each scenario gets at least --calls requests (default 200, so that p99 is not the slowest call),
 * in rounds over its queries, the scenarios interleaved. Two phases, reported apart: "fresh", the
 * first pass, started right after the store is built and its writes are on disk (on PostgreSQL a
 * CHECKPOINT ends the build), by a new server process with no warm-up, and
 * "warm", the same pass again. Every first page answered in either phase is compared with a
 * brute-force answer computed while the data set was generated, so a faster query cannot silently
 * return other listings; a difference fails the run. After starting and after each phase the
 * bench reads the server's `RssAnon` (its own heap and buffers) and `RssFile` (mapped file pages:
 * code, and on SQLite the memory-mapped database, shared with the OS page cache) from
 * /proc/<pid>/status; see docs/operations.md.
 *
 * Every p99 is printed with the p50 and the maximum of the same calls beside it: a p99 over 200
 * calls is the third-slowest call, and the maximum shows how far the tail reaches past it.
 *
 * Options: --count N (default 1,000,000; 100,000 with --quick), --engine sqlite|postgres|sqlite,postgres,
 * --calls N (per scenario and phase, default 200), --quick (a short run for `npm run bench`),
 * --detail (figures per query too), --db URL (an already loaded store of the same --count; not
 * dropped; its first phase is then a new server's, not a new store's), --keep (do not drop the
 * store built).
 *
 * The last line printed is machine-readable:
 *   RESULT {"bench":"directory-query","count":N,"callsPerScenario":200,"targetP99Ms":10,
 *     "targetRssAnonMb":100,"loadavg":{"before":[1,5,15],"after":[…]},"met":bool,
 *     "engines":{"sqlite":{"store":"built"|"given","loadSeconds":s|null,"wrong":["…"],"met":bool,
 *       "rss":{"startedAnonMb":…,"startedFileMb":…},
 *       "phases":{"fresh":{"worstP99Ms":…,"worstScenario":"…","worstP50Ms":…,"worstMaxMs":…,"maxMs":… (slowest call),
 *         "rssAnonMb":…,"rssFileMb":…,"serverCpuMsPerCall":…,
 *         "scenarios":{"<scenario>":{"calls":…,"p50Ms":…,"p99Ms":…,"maxMs":…}}},"warm":{…}}},
 *       "postgres":{…}}}
 */
import { readFileSync } from "node:fs";
import { Agent, request as httpRequest } from "node:http";
import type { ListRequest } from "../../packages/server/src/directory/service.js";
import { printLine } from "../report.js";
import { createStore, type GeneratedRow, generateRows, loadStore, RARE_TAGS, TAGS } from "./lib/dataset.js";
import { buildServer, type Child, startProtoServer } from "./lib/processes.js";
import { args, fmt, log, percentile, table, verdict } from "./lib/stats.js";

const options = args();
const QUICK = options.has("quick");
const COUNT = Number(options.get("count") ?? process.env.BENCH_DIRECTORY_COUNT ?? (QUICK ? 100_000 : 1_000_000));
const CALLS = Number(options.get("calls") ?? 200);
const TARGET_P99_MS = 10;
const TARGET_RSS_ANON_MB = 100;
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

// ---- HTTP -----------------------------------------------------------------------------------

/** The list endpoint's path for one page of a case. */
function pathOf(c: Case, cursor: string | undefined): string {
  const q = new URLSearchParams();
  const r = c.request;
  if (r.search !== undefined) q.set("search", r.search);
  if (r.tag !== undefined) q.set("tag", r.tag);
  if (r.status !== undefined) q.set("status", r.status);
  if (r.includeDeleted) q.set("include_deleted", "true");
  if (r.limit !== undefined) q.set("limit", String(r.limit));
  if (r.updatedSince !== undefined) q.set("updated_since", new Date(r.updatedSince).toISOString());
  if (cursor !== undefined) q.set("cursor", cursor);
  return `/v1/listings?${q}`;
}

/** One keep-alive connection, one request at a time. */
const agent = new Agent({ keepAlive: true, maxSockets: 1 });

function get(
  port: number,
  path: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: string; ms: number }> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const req = httpRequest({ host: "127.0.0.1", port, path, agent, method: "GET", headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () =>
        resolve({
          status: res.statusCode ?? 0,
          body: Buffer.concat(chunks).toString("utf8"),
          ms: performance.now() - started,
        }),
      );
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end();
  });
}

// ---- the server process -----------------------------------------------------------------------

interface Memory {
  anonMb: number;
  fileMb: number;
  /** V8's heap, committed and in use (from the server's own metrics): the JavaScript part of RssAnon. */
  heapTotalMb: number;
  heapUsedMb: number;
}

/** Lets the bench read the server's `/metrics` (an operator's setting, on in production too). */
const METRICS_TOKEN = "bench-metrics-token-0123456789abcdef";

/** `RssAnon` and `RssFile` of the server (NaN off Linux), and its V8 heap, in MB. */
async function memoryOf(server: Child): Promise<Memory> {
  let status = "";
  try {
    status = readFileSync(`/proc/${server.process.pid}/status`, "utf8");
  } catch {}
  const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1]) / 1024;
  const metrics = await get(server.port, "/metrics", { authorization: `Bearer ${METRICS_TOKEN}` });
  const gauge = (name: string) =>
    Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)`, "m").exec(metrics.body)?.[1]) / (1024 * 1024);
  return {
    anonMb: kb("RssAnon"),
    fileMb: kb("RssFile"),
    heapTotalMb: gauge("nodejs_heap_size_total_bytes"),
    heapUsedMb: gauge("nodejs_heap_size_used_bytes"),
  };
}

/** CPU milliseconds (user + system) a process has used so far (NaN off Linux). */
function cpuMsOf(pid: number | undefined): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command (which may hold spaces) start at state; utime and stime are 14 and 15.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
  } catch {
    return Number.NaN;
  }
}

function memoryText(m: Memory): string {
  return `RssAnon ${fmt(m.anonMb, 1)} MB (V8 heap ${fmt(m.heapUsedMb, 1)} of ${fmt(m.heapTotalMb, 1)} MB), RssFile ${fmt(m.fileMb, 1)} MB`;
}

function loadavg(): number[] {
  try {
    return readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).map(Number);
  } catch {
    return [];
  }
}

// ---- running --------------------------------------------------------------------------------

interface ScenarioFigures {
  scenario: string;
  queries: number;
  matches: string;
  samples: number[];
}

interface Phase {
  name: "fresh" | "warm";
  scenarios: ScenarioFigures[];
  perCase: Map<Case, number[]>;
  memory: Memory;
  cpuMsPerCall: number;
}

interface EngineReport {
  engine: "sqlite" | "postgres";
  store: "built" | "given";
  loadSeconds: number | undefined;
  load: string | undefined;
  started: Memory;
  phases: Phase[];
  failures: string[];
  expected: Map<Case, Expected>;
}

async function runEngine(engine: "sqlite" | "postgres"): Promise<EngineReport> {
  const existing = options.get("db");
  let storeUrl: string;
  let drop = async () => {};
  let load: string | undefined;
  let loadSeconds: number | undefined;
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
      loadSeconds = report.seconds;
      load = `${report.rows} listings, ${report.tagRows} tag rows in ${fmt(report.seconds, 1)} s (rows ${fmt(report.phases.rows, 1)} s, indexes ${fmt(report.phases.indexes, 1)} s)`;
      log(`${engine}: ${load}`);
    } catch (error) {
      await drop();
      throw error;
    }
  }
  const expected = oracle.result();
  let server: Child | undefined;
  const failures: string[] = [];
  const phases: Phase[] = [];
  try {
    server = await startProtoServer("directory", {
      DIRECTORY_DATABASE_URL: storeUrl,
      // One client asks thousands of pages a minute: the read limit must not answer 429.
      DIRECTORY_RATE_LIMITS: "read=100000000/60",
      DIRECTORY_REVALIDATE_TICK_SECONDS: "0",
      LOG_LEVEL: "warn",
      METRICS_TOKEN,
    });
    const { port } = server;
    const pid = server.process.pid;
    const started = await memoryOf(server);
    log(`${engine}: server started (${memoryText(started)})`);

    /** Follows a case's pages; checks the first against the brute-force answer; pushes each page's time. */
    const run = async (c: Case, time: number[]): Promise<void> => {
      let cursor: string | undefined;
      for (let page = 0; page < c.pages; page++) {
        const answer = await get(port, pathOf(c, cursor));
        time.push(answer.ms);
        if (answer.status !== 200) {
          failures.push(`${c.scenario} / ${c.label}: HTTP ${answer.status}: ${answer.body.slice(0, 200)}`);
          return;
        }
        const body = JSON.parse(answer.body) as {
          listings: { updated_at: string; service_did: string }[];
          next_cursor: string | null;
        };
        if (page === 0) {
          const got = body.listings.map((l): [number, string] => [Date.parse(l.updated_at), l.service_did]);
          if (!samePage(got, (expected.get(c) as Expected).first)) {
            const message = `${c.scenario} / ${c.label}: first page differs from the brute-force answer`;
            if (!failures.includes(message)) failures.push(message);
          }
        }
        if (body.next_cursor === null) return;
        cursor = body.next_cursor;
      }
    };

    // Rounds per scenario: enough for CALLS requests; the scenarios interleave round by round.
    const scenarioNames = [...new Set(cases.map((c) => c.scenario))];
    const rounds = new Map(
      scenarioNames.map((s) => {
        const perRound = cases.filter((c) => c.scenario === s).reduce((sum, c) => sum + c.pages, 0);
        return [s, Math.ceil(CALLS / perRound)];
      }),
    );
    const most = Math.max(...rounds.values());
    for (const name of ["fresh", "warm"] as const) {
      log(`${engine}: ${name} pass (at least ${CALLS} calls per scenario)`);
      const perCase = new Map<Case, number[]>(cases.map((c) => [c, []]));
      const cpuBefore = cpuMsOf(pid);
      let calls = 0;
      for (let round = 0; round < most; round++) {
        for (const c of cases) {
          if (round >= (rounds.get(c.scenario) as number)) continue;
          const samples = perCase.get(c) as number[];
          const before = samples.length;
          await run(c, samples);
          calls += samples.length - before;
        }
      }
      const cpuMsPerCall = (cpuMsOf(pid) - cpuBefore) / calls;
      const memory = await memoryOf(server);
      const scenarios = scenarioNames.map((scenario) => {
        const mine = cases.filter((c) => c.scenario === scenario);
        const totals = mine.map((c) => (expected.get(c) as Expected).total);
        return {
          scenario,
          queries: mine.length,
          matches: `${Math.min(...totals)}-${Math.max(...totals)}`,
          samples: mine.flatMap((c) => perCase.get(c) as number[]),
        };
      });
      phases.push({ name, scenarios, perCase, memory, cpuMsPerCall });
      log(`${engine}: ${name} pass done: ${calls} calls, ${memoryText(memory)}`);
    }
    return {
      engine,
      store: existing === undefined ? "built" : "given",
      loadSeconds,
      load,
      started,
      phases,
      failures,
      expected,
    };
  } finally {
    await server?.stop();
    await drop();
  }
}

log("compiling the server (tsc -b)");
buildServer();
const loadBefore = loadavg();
const reports: EngineReport[] = [];
for (const engine of engines) reports.push(await runEngine(engine));
agent.destroy();
const loadAfter = loadavg();

const sortedOf = (samples: readonly number[]) => [...samples].sort((a, b) => a - b);

interface Latency {
  p50: number;
  p99: number;
  max: number;
}

function latencyOf(samples: readonly number[]): Latency {
  const sorted = sortedOf(samples);
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99), max: sorted.at(-1) ?? Number.NaN };
}

/** The scenario of the phase with the highest p99, and its latencies. */
function worstOf(phase: Phase): { scenario: string } & Latency {
  let worst: { scenario: string } & Latency = { scenario: "none", p50: Number.NaN, p99: Number.NaN, max: Number.NaN };
  for (const s of phase.scenarios) {
    const latency = latencyOf(s.samples);
    if (!(latency.p99 <= worst.p99)) worst = { scenario: s.scenario, ...latency };
  }
  return worst;
}

printLine(`\nDirectory search and tag filters: GET /v1/listings over HTTP on ${COUNT} listings, one request at a time`);
printLine(
  `Targets: p99 <= ${TARGET_P99_MS} ms in every scenario and phase, server RssAnon < ${TARGET_RSS_ANON_MB} MB, per engine`,
);
printLine(`Load average before ${loadBefore.join(" ")}, after ${loadAfter.join(" ")}\n`);
let allMet = true;
const result: Record<string, unknown> = {};
for (const report of reports) {
  printLine(`== ${report.engine}${report.load ? ` (${report.load})` : " (store given with --db)"}`);
  printLine(`server after start: ${memoryText(report.started)}`);
  const phases: Record<string, unknown> = {};
  let met = report.failures.length === 0;
  let anonMax = report.started.anonMb;
  for (const phase of report.phases) {
    const label = phase.name === "fresh" ? (report.store === "built" ? "fresh store" : "new server") : "warm";
    printLine(`\n-- ${label}`);
    if (options.has("detail")) {
      const rows = [...phase.perCase].map(([c, samples]) => {
        const latency = latencyOf(samples);
        return [
          c.scenario,
          c.label,
          String((report.expected.get(c) as Expected).total),
          fmt(latency.p50),
          fmt(latency.p99),
          fmt(latency.max),
        ];
      });
      printLine(table(["scenario", "query", "matches", "p50 ms", "p99 ms", "max ms"], rows));
      printLine("");
    }
    const rows = phase.scenarios.map((s) => {
      const latency = latencyOf(s.samples);
      return [
        s.scenario,
        String(s.queries),
        s.matches,
        String(s.samples.length),
        fmt(latency.p50),
        fmt(latency.p99),
        fmt(latency.max),
      ];
    });
    printLine(table(["scenario", "queries", "matches", "calls", "p50 ms", "p99 ms", "max ms"], rows));
    const worst = worstOf(phase);
    const slowest = Math.max(...phase.scenarios.map((s) => latencyOf(s.samples).max));
    anonMax = Math.max(anonMax, phase.memory.anonMb);
    met &&= worst.p99 <= TARGET_P99_MS;
    printLine(
      `${label}: worst p99 ${fmt(worst.p99)} ms, in "${worst.scenario}" (p50 ${fmt(worst.p50)} ms, max ${fmt(worst.max)} ms), ` +
        `target <= ${TARGET_P99_MS} ms: ${verdict(worst.p99 <= TARGET_P99_MS)}; slowest call of the phase ${fmt(slowest)} ms; ` +
        `server CPU ${fmt(phase.cpuMsPerCall)} ms per call; ${memoryText(phase.memory)}`,
    );
    phases[phase.name] = {
      worstP99Ms: round2(worst.p99),
      worstScenario: worst.scenario,
      worstP50Ms: round2(worst.p50),
      worstMaxMs: round2(worst.max),
      maxMs: round2(slowest),
      rssAnonMb: round2(phase.memory.anonMb),
      rssFileMb: round2(phase.memory.fileMb),
      heapTotalMb: round2(phase.memory.heapTotalMb),
      serverCpuMsPerCall: round2(phase.cpuMsPerCall),
      scenarios: Object.fromEntries(
        phase.scenarios.map((s) => {
          const latency = latencyOf(s.samples);
          return [
            s.scenario,
            {
              calls: s.samples.length,
              p50Ms: round2(latency.p50),
              p99Ms: round2(latency.p99),
              maxMs: round2(latency.max),
            },
          ];
        }),
      ),
    };
  }
  const memoryMet = anonMax < TARGET_RSS_ANON_MB;
  met &&= memoryMet;
  allMet &&= met;
  for (const failure of report.failures) printLine(`WRONG RESULT: ${failure}`);
  printLine(
    `\n${report.engine}: highest RssAnon ${fmt(anonMax, 1)} MB (target < ${TARGET_RSS_ANON_MB} MB): ${verdict(memoryMet)}; overall ${verdict(met)}\n`,
  );
  result[report.engine] = {
    store: report.store,
    loadSeconds: report.loadSeconds === undefined ? null : round2(report.loadSeconds),
    wrong: report.failures,
    met,
    rss: { startedAnonMb: round2(report.started.anonMb), startedFileMb: round2(report.started.fileMb) },
    phases,
  };
}
printLine(
  `Overall: ${verdict(allMet)}${engines.includes("postgres") ? "" : " (SQLite only: set TEST_POSTGRES_URL for PostgreSQL)"}`,
);
printLine(
  `RESULT ${JSON.stringify({
    bench: "directory-query",
    count: COUNT,
    quick: QUICK,
    callsPerScenario: CALLS,
    targetP99Ms: TARGET_P99_MS,
    targetRssAnonMb: TARGET_RSS_ANON_MB,
    loadavg: { before: loadBefore, after: loadAfter },
    met: allMet,
    engines: result,
  })}`,
);

function round2(value: number): number | null {
  return Number.isFinite(value) ? Math.round(value * 100) / 100 : null;
}
