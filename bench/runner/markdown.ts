/** bench/REPORT.md: where and when the run was measured, how idle the machine was, each figure against its target. */
import type { BenchOutput, BenchSpec } from "./benches.js";
import { figureText } from "./chart.js";
import type { Commit, LoadAverage, Machine, Versions } from "./environment.js";
import { type Figure, met } from "./figures.js";

export interface BenchRecord {
  spec: BenchSpec;
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
  benches: BenchRecord[];
  figures: Figure[];
  chartFile: string;
}

/** Other processes' share of the CPU, before any bench, under which a machine counts as idle. */
export const IDLE_BUSY_SHARE = 0.05;

const TARGETS: Record<number, string> = {
  1: "Mint >= 50% of crypto-only on SQLite and >= 35% on PostgreSQL + Redis, p99 under 40 ms; at most one SQL statement and one Redis round trip per mint",
  2: "Reads >= 0.8 of the plain node:http baseline's req/s on SQLite (server CPU per request <= 1.25x the baseline's), >= 0.75 on PostgreSQL",
  3: "Search and tag p99 <= 10 ms at 1,000,000 listings on both engines, over HTTP, fresh store and warm",
  4: "RFC 9421 verify >= 0.9 of bare Ed25519 verify, attestation verification >= 0.7",
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

function verdict(figure: Figure, quick: boolean): string {
  const outcome = met(figure);
  if (outcome === undefined) return "no result";
  const word = outcome ? "MET" : "NOT MET";
  return quick ? `${word} (quick run)` : word;
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
  lines.push("| bench | time | load before | load after | CPU busy before | exit |", "|---|---|---|---|---|---|");
  for (const b of record.benches) {
    if (b.skipped !== undefined) {
      lines.push(`| ${b.spec.id} | ${cell(b.skipped)} | | | | |`);
      continue;
    }
    lines.push(
      `| ${b.spec.id} | ${duration(b.seconds)} | ${load(b.loadBefore)} | ${load(b.loadAfter)} | ${percent(b.othersBefore)} | ${b.output?.exitCode ?? "–"} |`,
    );
  }

  lines.push("", "## Figures against the targets of issue 25", "");
  lines.push(`![Each figure against its target](${record.chartFile})`, "");
  const counted = record.figures.filter((f) => met(f) !== undefined);
  const metCount = counted.filter((f) => met(f) === true).length;
  lines.push(
    `${metCount} of ${record.figures.length} figures meet their target${counted.length < record.figures.length ? `; ${record.figures.length - counted.length} have no result` : ""}.`,
    "",
  );
  for (const [number, description] of Object.entries(TARGETS)) {
    const figures = record.figures.filter((f) => f.target === Number(number));
    if (figures.length === 0) continue;
    lines.push(`### ${number}. ${description}`, "");
    lines.push("| figure | measured (target) | verdict | note |", "|---|---|---|---|");
    for (const f of figures) {
      lines.push(`| ${cell(f.label)} | ${cell(figureText(f))} | ${verdict(f, record.quick)} | ${cell(f.note ?? "")} |`);
    }
    lines.push("");
  }

  lines.push("## Each bench's output", "");
  for (const b of record.benches) {
    lines.push(`<details><summary>${b.spec.id}: ${b.spec.title}</summary>`, "");
    if (b.skipped !== undefined) {
      lines.push(b.skipped, "");
    } else {
      lines.push("```text", (b.output?.stdout ?? "").trimEnd(), "```", "");
    }
    lines.push("</details>", "");
  }
  return lines.join("\n");
}
