/**
 * Runs every benchmark, one process at a time, and writes the report: REPORT.md (machine, Node.js
 * and database versions, date, commit, load averages and how busy the machine was before each
 * bench, each figure against its target of issue 25, each bench's output) and report.svg (a chart
 * of each figure against its target), linked from the README.
 *
 *   npm run bench                    full run: writes bench/REPORT.md and bench/report.svg
 *   npm run bench -- --quick         a few minutes with small stores; writes to the temporary
 *                                    directory unless --out says where (its figures do not count)
 *
 * Options: --out DIR (where to write), --only ID,ID (benches whose id starts with one of these:
 * protocol, trust-mint, directory-read, directory-query, or a full id such as trust-mint-sqlite),
 * --timeout-minutes N (per bench; default 90, 15 with --quick).
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
import { chart, figureText } from "./runner/chart.js";
import { commit, loadAverage, machine, othersBusy, versions } from "./runner/environment.js";
import { met, resultLine } from "./runner/figures.js";
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
  command: `npm run bench${QUICK ? " -- --quick" : ""}`,
  started,
  seconds: 0,
  machine: machine(),
  versions: await versions(root, postgresUrl, redisUrl),
  commit: commit(root),
  loadStart,
  loadEnd: loadStart,
  benches: [],
  figures: [],
  chartFile: "report.svg",
};
printLine(
  `benchmark report${QUICK ? " (quick)" : ""}: ${selected.length} benches, writing to ${OUT}; ` +
    `load average ${loadStart.map((v) => v.toFixed(2)).join(" ")}`,
);

for (const [index, spec] of selected.entries()) {
  const skipped = skipReason(spec, root, process.env);
  const bench: BenchRecord = {
    spec,
    skipped,
    output: undefined,
    seconds: undefined,
    loadBefore: undefined,
    loadAfter: undefined,
    othersBefore: undefined,
  };
  record.benches.push(bench);
  printLine(`\n==== [${index + 1}/${selected.length}] ${spec.id}: ${spec.title} ====`);
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
    `==== ${spec.id}: exit ${bench.output.exitCode} after ${bench.seconds.toFixed(0)} s, ` +
      `${bench.output.result === undefined ? "no RESULT line" : "RESULT read"}; load average ` +
      `${bench.loadBefore.map((v) => v.toFixed(2)).join(" ")} before, ${bench.loadAfter.map((v) => v.toFixed(2)).join(" ")} after`,
  );
}

record.loadEnd = loadAverage();
record.seconds = (Date.now() - started.getTime()) / 1000;
record.figures = record.benches.flatMap((b) => b.spec.figures(b.output, QUICK, b.skipped));

mkdirSync(OUT, { recursive: true });
const subtitle =
  `${started.toISOString().slice(0, 10)}, ${QUICK ? "quick run (direction only)" : "full run"}; ` +
  `${record.machine.cpu}, ${record.machine.cores} logical processors; Node.js ${record.versions.node}`;
writeFileSync(
  join(OUT, record.chartFile),
  chart(record.figures, { title: "proto: benchmark figures against the targets of issue 25", subtitle }),
);
writeFileSync(join(OUT, "REPORT.md"), markdown(record));

printLine("\n==== summary ====");
for (const figure of record.figures) {
  const outcome = met(figure);
  printLine(
    `${outcome === undefined ? "  -  " : outcome ? " MET " : " NOT "} ${figure.label}: ${figureText(figure)}` +
      (figure.note ? ` [${figure.note}]` : ""),
  );
}
const { idle, worst } = idleVerdict(record);
printLine(
  `machine otherwise idle: ${idle === undefined ? "unknown" : idle ? "yes" : "no"}` +
    `${worst === undefined ? "" : ` (CPU up to ${(worst * 100).toFixed(1)}% busy between benches)`}; ` +
    `load average ${record.loadEnd.map((v) => v.toFixed(2)).join(" ")} at the end`,
);
const shown = relative(process.cwd(), OUT);
const where = shown === "" ? "." : shown.startsWith("..") ? OUT : shown;
printLine(`wrote ${join(where, "REPORT.md")} and ${join(where, record.chartFile)}`);
