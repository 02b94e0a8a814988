/**
 * bench/REPORT.md: where and when the run was measured, how idle the machine was, each figure
 * against its target with every run's value side by side (and each run's rounds), and each
 * bench's output per run.
 */
import type { BenchOutput, BenchSpec } from "./benches.js";
import { shown, targetText, valueText } from "./chart.js";
import type { Commit, LoadAverage, Machine, Versions } from "./environment.js";
import { type Figure, type FigureRuns, type Outcome, outcome } from "./figures.js";

export interface BenchRecord {
  spec: BenchSpec;
  /** Which run of the bench this is, from 1. */
  run: number;
  skipped: string | undefined;
  output: BenchOutput | undefined;
  seconds: number | undefined;
  loadBefore: LoadAverage | undefined;
  loadAfter: LoadAverage | undefined;
  /** Share of the machine's CPU busy just before the bench started, while nothing of the run ran. */
  othersBefore: number | undefined;
}

export interface RunRecord {
  quick: boolean;
  command: string;
  started: Date;
  seconds: number;
  machine: Machine;
  versions: Versions;
  commit: Commit;
  loadStart: LoadAverage;
  loadEnd: LoadAverage;
  /** How many times each bench runs. */
  runs: number;
  /** How the runs are ordered, and why. */
  order: string;
  benches: BenchRecord[];
  figures: FigureRuns[];
  chartFile: string;
}

/** Other processes' share of the CPU, before any bench, under which a machine counts as idle. */
export const IDLE_BUSY_SHARE = 0.05;

/** The report's target groups (issue 39, and issue 25 where issue 39 leaves a target as it was). */
export const TARGETS: Record<number, string> = {
  1: "Mint: the median of alternating rounds >= 0.50 of crypto-only on SQLite and >= 0.35 on PostgreSQL + Redis, p99 under 40 ms at 50 connections, server CPU <= 350 µs per mint on PostgreSQL + Redis; at most one SQL statement and one Redis round trip per mint",
  2: "Reads >= 0.80 of the plain node:http baseline's req/s on SQLite with server CPU per request <= 1.25x the baseline's, in every round; >= 0.75 on PostgreSQL, without Redis and with it (REDIS_URL, as a scale-out deployment runs)",
  3: "Search and tag p99 <= 10 ms at 1,000,000 listings, over HTTP, fresh store and warm",
  4: "RFC 9421 verify >= 0.95 of bare Ed25519 verify, attestation verification >= 0.70",
  5: "Memory: the directory's RssAnon under 100 MB at 1,000,000 listings on both engines",
};

function load(average: LoadAverage | undefined): string {
  return average === undefined ? "–" : average.map((v) => v.toFixed(2)).join(" / ");
}

function percent(share: number | undefined): string {
  return share === undefined ? "unknown" : `${(share * 100).toFixed(1)}%`;
}

function duration(seconds: number | undefined): string {
  if (seconds === undefined) return "–";
  return seconds < 90 ? `${seconds.toFixed(0)} s` : `${(seconds / 60).toFixed(1)} min`;
}

const VERDICT: Record<Outcome, string> = {
  met: "MET",
  "not met": "NOT MET",
  incomplete: "NOT MET (a run gave no result)",
  "no result": "no result",
};

function verdict(figure: FigureRuns, quick: boolean): string {
  const result = outcome(figure);
  if (result === "no result") return VERDICT[result];
  return quick ? `${VERDICT[result]} (quick run)` : VERDICT[result];
}

/** One run's cell: its value, what qualifies it, its rounds. */
function runCell(figure: Figure): string {
  const parts = [valueText(figure)];
  if (figure.detail !== undefined) parts.push(figure.detail);
  if (figure.rounds !== undefined)
    parts.push(`rounds: ${figure.rounds.map((round) => shown(figure, round)).join(", ")}`);
  return parts.map(cell).join("<br>");
}

/** Notes of the runs, once each. */
function notes(figure: FigureRuns): string {
  const all = figure.runs.map((run) => run.note).filter((note): note is string => note !== undefined && note !== "");
  const distinct = [...new Set(all)];
  if (distinct.length <= 1 || figure.runs.length === 1) return cell(distinct[0] ?? "");
  return figure.runs
    .map((run, i) => (run.note ? `run ${i + 1}: ${cell(run.note)}` : undefined))
    .filter((note) => note !== undefined)
    .join("<br>");
}

/** Whether the machine was otherwise idle: no other load in any sample taken between benches. */
export function idleVerdict(record: RunRecord): { idle: boolean | undefined; worst: number | undefined } {
  const samples = record.benches.map((b) => b.othersBefore).filter((v): v is number => v !== undefined);
  if (samples.length === 0) return { idle: undefined, worst: undefined };
  const worst = Math.max(...samples);
  return { idle: worst <= IDLE_BUSY_SHARE, worst };
}

function cell(text: string): string {
  return text.replace(/\|/g, "\\|").replace(/\n/g, " ");
}

export function markdown(record: RunRecord): string {
  const lines: string[] = [];
  const date = record.started.toISOString().replace("T", " ").slice(0, 16);
  lines.push("# Benchmark report", "");
  lines.push(
    `Written by \`${record.command}\` on ${date} UTC, in ${duration(record.seconds)}` +
      (record.commit.hash === undefined
        ? "."
        : `, at commit \`${record.commit.hash}\`${record.commit.dirty ? " with changes not committed" : ""}.`),
  );
  if (record.quick) {
    lines.push(
      "",
      "**Quick run**: smaller stores, fewer requests and rounds. Its figures show direction only and do not count against the targets; the figures that count come from a full run (`npm run bench`) on an idle machine.",
    );
  }
  lines.push("", "## Machine and versions", "");
  lines.push("| | |", "|---|---|");
  const m = record.machine;
  lines.push(`| CPU | ${cell(m.cpu)}, ${m.cores} logical processors |`);
  lines.push(`| Memory | ${m.memoryGiB.toFixed(1)} GiB |`);
  lines.push(`| OS | ${cell(m.os)} |`);
  lines.push(`| Node.js | ${record.versions.node} |`);
  lines.push(`| SQLite | ${cell(record.versions.sqlite ?? "unknown")} |`);
  lines.push(`| PostgreSQL | ${cell(record.versions.postgres ?? "not used (TEST_POSTGRES_URL not set)")} |`);
  lines.push(`| Redis | ${cell(record.versions.redis ?? "not used (TEST_REDIS_URL not set)")} |`);

  const { idle, worst } = idleVerdict(record);
  lines.push("", "## Was the machine otherwise idle?", "");
  lines.push(
    idle === undefined
      ? "Unknown: /proc/stat could not be read, so only the load averages below tell."
      : idle
        ? `**Yes.** Before each bench, with nothing of the run going, the machine's CPU was at most ${percent(worst)} busy (the threshold is ${percent(IDLE_BUSY_SHARE)}).`
        : `**No.** Before one bench or more, with nothing of the run going, the machine's CPU was up to ${percent(worst)} busy (idle means at most ${percent(IDLE_BUSY_SHARE)}): other work ran beside the benchmarks, and their figures understate what this machine can do.`,
  );
  lines.push(
    "",
    `Load averages (1 / 5 / 15 min): ${load(record.loadStart)} when the run started, ${load(record.loadEnd)} when it ended. A bench's own load shows in the next one's "before"; the CPU column is the share of the whole machine busy over the 3 seconds before each bench started, while the runner waited.`,
    "",
  );
  lines.push(
    "| run | bench | time | load before | load after | CPU busy before | exit |",
    "|---|---|---|---|---|---|---|",
  );
  for (const b of record.benches) {
    if (b.skipped !== undefined) {
      lines.push(`| ${b.run} | ${b.spec.id} | ${cell(b.skipped)} | | | | |`);
      continue;
    }
    lines.push(
      `| ${b.run} | ${b.spec.id} | ${duration(b.seconds)} | ${load(b.loadBefore)} | ${load(b.loadAfter)} | ${percent(b.othersBefore)} | ${b.output?.exitCode ?? "–"} |`,
    );
  }

  lines.push("", "## Figures against their targets", "");
  lines.push(`![Each figure against its target](${record.chartFile})`, "");
  lines.push(
    record.runs > 1
      ? `Each bench ran ${record.runs === 2 ? "twice" : `${record.runs} times`} (${record.order}). A figure counts as met only when every run meets it; ratios measured in alternating rounds show each round, and a target that holds "in every round" is judged on the worst round of each run.`
      : `Each bench ran once (a figure counts as met only when every run meets it: run at least twice, \`--runs 2\`, for figures that count). Ratios measured in alternating rounds show each round.`,
    "",
  );
  const results = record.figures.map(outcome);
  const metCount = results.filter((r) => r === "met").length;
  const none = results.filter((r) => r === "no result").length;
  lines.push(
    `${metCount} of ${record.figures.length} figures meet their target in ${record.runs === 1 ? "the run" : record.runs === 2 ? "both runs" : `all ${record.runs} runs`}${none > 0 ? `; ${none} have no result` : ""}.`,
    "",
  );
  const runHeads = Array.from({ length: record.runs }, (_, i) => `run ${i + 1}`);
  for (const [group, description] of Object.entries(TARGETS)) {
    const figures = record.figures.filter((f) => f.figure.target === Number(group));
    if (figures.length === 0) continue;
    lines.push(`### ${group}. ${description}`, "");
    lines.push(
      `| figure | target | ${runHeads.join(" | ")} | verdict | note |`,
      `|---|---|${runHeads.map(() => "---|").join("")}---|---|`,
    );
    for (const f of figures) {
      lines.push(
        `| ${cell(f.figure.label)} | ${cell(targetText(f.figure))} | ${f.runs.map(runCell).join(" | ")} | ${verdict(f, record.quick)} | ${notes(f)} |`,
      );
    }
    lines.push("");
  }

  lines.push("## Each bench's output", "");
  for (const b of record.benches) {
    const run = record.runs > 1 ? `, run ${b.run}` : "";
    lines.push(`<details><summary>${b.spec.id}${run}: ${b.spec.title}</summary>`, "");
    if (b.skipped !== undefined) {
      lines.push(b.skipped, "");
    } else {
      lines.push("```text", (b.output?.stdout ?? "").trimEnd(), "```", "");
    }
    lines.push("</details>", "");
  }
  return lines.join("\n");
}
