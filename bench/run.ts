/**
 * Runs every benchmark, one process at a time, twice, and writes the report: REPORT.md (machine,
 * Node.js and database versions, date, commit, load averages and how busy the machine was before
 * each bench, each figure against its target with both runs' values and their rounds side by
 * side, each bench's output) and report.svg (a chart of each figure against its target, a bar per
 * run), linked from the README. A figure counts as met only when every run meets it: a target
 * met in one run and missed in the next is not met (issue 39).
 *
 *   npm run bench                    full run: writes bench/REPORT.md and bench/report.svg
 *   npm run bench -- --quick         a few minutes with small stores, one run; writes to the
 *                                    temporary directory unless --out says where (its figures do not count)
 *
 * Options: --out DIR (where to write), --only ID,ID (benches whose id starts with one of these:
 * protocol, trust-mint, directory-read, directory-query, or a full id such as trust-mint-sqlite),
 * --runs N (runs of each bench; default 2, 1 with --quick), --timeout-minutes N (per bench; default
 * 90, 15 with --quick).
 *
 * The runs go one after the other over the whole list (run 1 of every bench, then run 2 of every
 * bench), not each bench twice in a row: the two runs of a bench are then minutes apart, so a
 * passing disturbance of the host (another job, a page-cache purge, a noisy neighbour on the
 * hypervisor) lands in one of them rather than in both, and "met in both runs" means met on two
 * independent occasions. It also gives each bench's second run a machine that has just run other
 * benches, as the first run's mostly does.
 *
 * PostgreSQL and Redis parts run when TEST_POSTGRES_URL and TEST_REDIS_URL are set (each bench
 * creates and drops its own database and keys); otherwise the report says they were skipped.
 * Run nothing else on the machine meanwhile: the report says whether it was otherwise idle.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { args } from "./directory/lib/stats.js";
import { printLine } from "./report.js";
import { BENCHES, type BenchOutput, type BenchSpec, skipReason } from "./runner/benches.js";
import { chart, runsText, shown } from "./runner/chart.js";
import { commit, loadAverage, machine, othersBusy, versions } from "./runner/environment.js";
import { acrossRuns, type Outcome, outcome, resultLine } from "./runner/figures.js";
import { type BenchRecord, idleVerdict, markdown, type RunRecord } from "./runner/markdown.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const options = args();
const QUICK = options.has("quick");
const OUT = resolve(options.get("out") ?? (QUICK ? join(tmpdir(), "proto-bench-quick") : join(root, "bench")));
const ONLY = options
  .get("only")
  ?.split(",")
  .map((s) => s.trim());
const TIMEOUT_MS = Number(options.get("timeout-minutes") ?? (QUICK ? 15 : 90)) * 60_000;
const RUNS = Number(options.get("runs") ?? (QUICK ? 1 : 2));
if (!Number.isInteger(RUNS) || RUNS < 1) throw new Error("--runs is a whole number, 1 or more");
const ORDER =
  "run 1 of every bench, then run 2 of every bench: a bench's runs are minutes apart, so a passing disturbance of the host lands in one of them, not both";
const IDLE_SAMPLE_SECONDS = 3;

let running: ChildProcess | undefined;

function stopGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  // Each bench leads its own process group, so its servers and load generators stop with it.
  if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
    try {
      process.kill(-child.pid, signal);
    } catch {
      // Already gone.
    }
  }
}

for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    if (running !== undefined) stopGroup(running, "SIGTERM");
    process.exit(130);
  });
}

function runBench(spec: BenchSpec): Promise<BenchOutput> {
  return new Promise((resolvePromise) => {
    const child = spawn(
      process.execPath,
      ["--conditions=source", "--import", "tsx", join(root, spec.file), ...spec.args(QUICK)],
      {
        cwd: root,
        env: { ...process.env, ...spec.env(QUICK) },
        stdio: ["ignore", "pipe", "inherit"],
        detached: true,
      },
    );
    running = child;
    let stdout = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      process.stdout.write(chunk);
      stdout += chunk.toString("utf8");
    });
    const timer = setTimeout(() => {
      printLine(`\n${spec.id}: no end after ${TIMEOUT_MS / 60_000} minutes; stopping it`);
      stopGroup(child, "SIGTERM");
      setTimeout(() => stopGroup(child, "SIGKILL"), 15_000).unref();
    }, TIMEOUT_MS);
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      running = undefined;
      resolvePromise({ stdout, result: resultLine(stdout), exitCode: code ?? (signal === null ? null : 128) });
    });
  });
}

const selected = BENCHES.filter((spec) => ONLY === undefined || ONLY.some((prefix) => spec.id.startsWith(prefix)));
if (selected.length === 0) throw new Error(`--only ${ONLY?.join(",")} matches no bench`);

const started = new Date();
const loadStart = loadAverage();
const postgresUrl = process.env.TEST_POSTGRES_URL || undefined;
const redisUrl = process.env.TEST_REDIS_URL || undefined;
const record: RunRecord = {
  quick: QUICK,
  command: `npm run bench${commandOptions()}`,
  started,
  seconds: 0,
  machine: machine(),
  versions: await versions(root, postgresUrl, redisUrl),
  commit: commit(root),
  loadStart,
  loadEnd: loadStart,
  runs: RUNS,
  order: ORDER,
  benches: [],
  figures: [],
  chartFile: "report.svg",
};
printLine(
  `benchmark report${QUICK ? " (quick)" : ""}: ${selected.length} benches x ${RUNS} run${RUNS > 1 ? "s" : ""}, ` +
    `writing to ${OUT}; load average ${loadStart.map((v) => v.toFixed(2)).join(" ")}`,
);

const order = Array.from({ length: RUNS }, (_, r) => selected.map((spec) => ({ spec, run: r + 1 }))).flat();
for (const [index, { spec, run }] of order.entries()) {
  const skipped = skipReason(spec, root, process.env);
  const bench: BenchRecord = {
    spec,
    run,
    skipped,
    output: undefined,
    seconds: undefined,
    loadBefore: undefined,
    loadAfter: undefined,
    othersBefore: undefined,
  };
  record.benches.push(bench);
  const runText = RUNS > 1 ? ` (run ${run} of ${RUNS})` : "";
  printLine(`\n==== [${index + 1}/${order.length}] ${spec.id}${runText}: ${spec.title} ====`);
  if (skipped !== undefined) {
    printLine(skipped);
    continue;
  }
  bench.othersBefore = await othersBusy(IDLE_SAMPLE_SECONDS);
  bench.loadBefore = loadAverage();
  const start = performance.now();
  bench.output = await runBench(spec);
  bench.seconds = (performance.now() - start) / 1000;
  bench.loadAfter = loadAverage();
  printLine(
    `==== ${spec.id}${runText}: exit ${bench.output.exitCode} after ${bench.seconds.toFixed(0)} s, ` +
      `${bench.output.result === undefined ? "no RESULT line" : "RESULT read"}; load average ` +
      `${bench.loadBefore.map((v) => v.toFixed(2)).join(" ")} before, ${bench.loadAfter.map((v) => v.toFixed(2)).join(" ")} after`,
  );
}

record.loadEnd = loadAverage();
record.seconds = (Date.now() - started.getTime()) / 1000;
record.figures = selected.flatMap((spec) =>
  acrossRuns(record.benches.filter((b) => b.spec === spec).map((b) => spec.figures(b.output, QUICK, b.skipped))),
);

mkdirSync(OUT, { recursive: true });
const subtitle =
  `${started.toISOString().slice(0, 10)}, ${QUICK ? "quick run (direction only)" : "full run"}, ` +
  `${RUNS} run${RUNS > 1 ? "s" : ""} per bench; ` +
  `${record.machine.cpu}, ${record.machine.cores} logical processors; Node.js ${record.versions.node}`;
writeFileSync(
  join(OUT, record.chartFile),
  chart(record.figures, { title: "proto: benchmark figures against their targets (issues 25 and 39)", subtitle }),
);
writeFileSync(join(OUT, "REPORT.md"), markdown(record));

const MARK: Record<Outcome, string> = { met: " MET ", "not met": " NOT ", incomplete: " NOT ", "no result": "  -  " };
printLine(
  `\n==== summary${RUNS > 1 ? ` (values of runs ${Array.from({ length: RUNS }, (_, i) => i + 1).join(" / ")}; met only when every run meets the target)` : ""} ====`,
);
for (const figure of record.figures) {
  const rounds = figure.runs
    .map((run, i) =>
      run.rounds === undefined
        ? undefined
        : `${RUNS > 1 ? `run ${i + 1} ` : ""}rounds ${run.rounds.map((round) => shown(run, round)).join(" ")}`,
    )
    .filter((text) => text !== undefined);
  const notes = [...new Set(figure.runs.map((run) => run.note).filter((note) => note !== undefined && note !== ""))];
  printLine(
    `${MARK[outcome(figure)]} ${figure.figure.label}: ${runsText(figure)}` +
      (rounds.length > 0 ? `; ${rounds.join("; ")}` : "") +
      (figure.figure.everyRound ? " (every round must meet it)" : "") +
      (notes.length > 0 ? ` [${notes.join("; ")}]` : ""),
  );
}
const { idle, worst } = idleVerdict(record);
printLine(
  `machine otherwise idle: ${idle === undefined ? "unknown" : idle ? "yes" : "no"}` +
    `${worst === undefined ? "" : ` (CPU up to ${(worst * 100).toFixed(1)}% busy between benches)`}; ` +
    `load average ${record.loadEnd.map((v) => v.toFixed(2)).join(" ")} at the end`,
);
const outDir = relative(process.cwd(), OUT);
const where = outDir === "" ? "." : outDir.startsWith("..") ? OUT : outDir;
printLine(`wrote ${join(where, "REPORT.md")} and ${join(where, record.chartFile)}`);

/** The options a reader would pass to run the same report again. */
function commandOptions(): string {
  const parts: string[] = [];
  if (QUICK) parts.push("--quick");
  if (options.has("runs")) parts.push(`--runs ${RUNS}`);
  if (ONLY !== undefined) parts.push(`--only ${ONLY.join(",")}`);
  return parts.length === 0 ? "" : ` -- ${parts.join(" ")}`;
}
