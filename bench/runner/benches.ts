/**
 * Every benchmark the report runs, how it is started in full and quick mode, and which figures it
 * gives. Each runs as its own process; its figures come from its last `RESULT {json}` line, with
 * these keys read:
 *
 *   protocol           rfc9421, attestation: {ratio, roundRatios}
 *   trust-mint         engines[]: {engine, ratio, rounds[].ratio, p50Ms, p99Ms, maxMs, cpuUsPerMint,
 *                      sqlPerMint, redisPerMint}
 *   directory-read     engines (object by engine, or array with `engine`, or the result itself):
 *                      {ratio, cpuRatio, roundRatios, roundCpuRatios}, where cpuRatio is the directory's
 *                      server CPU per request over the baseline's; without the round arrays a
 *                      target that holds in every round is judged on the median
 *   directory-query    count, engines.<engine>: {phases: {fresh, warm}: {worstP99Ms, worstScenario,
 *                      worstP50Ms, worstMaxMs, rssAnonMb}, rss: {startedAnonMb}}
 *
 * A benchmark without that line yet is read from the summary it prints today, where it has one.
 */
import { readFileSync } from "node:fs";
import {
  engineResult,
  type Figure,
  matchNumber,
  numberAt,
  numbersAt,
  numbersOf,
  objectAt,
  stringAt,
} from "./figures.js";

export type Engine = "sqlite" | "postgres";

export interface BenchOutput {
  stdout: string;
  /** The parsed `RESULT` line, when the benchmark printed one. */
  result: unknown;
  exitCode: number | null;
}

export interface BenchSpec {
  id: string;
  title: string;
  /** The script, relative to the repository root. */
  file: string;
  args(quick: boolean): string[];
  env(quick: boolean): Record<string, string>;
  /** Services the run needs, by the environment variable that names each. */
  needs: ("TEST_POSTGRES_URL" | "TEST_REDIS_URL")[];
  /** Why the script cannot give this run's figures yet, from its source (undefined: it can). */
  unsupported?(source: string): string | undefined;
  /** The bench's figures as one run measured them (the same list, in the same order, every run). */
  figures(output: BenchOutput | undefined, quick: boolean, skipped: string | undefined): Figure[];
}

const ENGINE_NAME: Record<Engine, string> = { sqlite: "SQLite", postgres: "PostgreSQL" };
const TEXT_NOTE = "read from the printed summary (the bench prints no RESULT line yet)";

/** What a bench's output says of one figure: a value, or a value with what qualifies it. */
type Reading =
  | number
  | undefined
  | { value: number | undefined; note?: string; rounds?: number[] | undefined; detail?: string | undefined };

/** Figures with no value, all saying why. */
function missing(figures: Figure[], why: string): Figure[] {
  return figures.map((f) => ({ ...f, value: undefined, note: why }));
}

function noResult(output: BenchOutput | undefined, skipped: string | undefined): string {
  if (skipped !== undefined) return `no result: ${skipped}`;
  if (output === undefined) return "no result: not run";
  // Exit status 1 is a bench's "a target is not met"; without a RESULT line it failed before its figures.
  if (output.result === undefined && output.exitCode !== 0) {
    return `no result: the bench failed (exit status ${output.exitCode}, no RESULT line)`;
  }
  return output.exitCode === 0 || output.exitCode === 1
    ? "no result: the bench printed no figure for it"
    : `no result: the bench failed (exit status ${output.exitCode})`;
}

/** Fills each figure from `read`, falling back to a note when the value is absent. */
function fill(
  figures: Figure[],
  output: BenchOutput | undefined,
  skipped: string | undefined,
  read: (output: BenchOutput) => Reading[],
): Figure[] {
  if (output === undefined || skipped !== undefined) return missing(figures, noResult(output, skipped));
  const values = read(output);
  return figures.map((figure, i) => {
    const found = values[i];
    const reading = typeof found === "object" ? found : { value: found };
    if (reading.value === undefined) return { ...figure, value: undefined, note: noResult(output, undefined) };
    const filled: Figure = { ...figure, value: reading.value, note: reading.note ?? figure.note };
    if (reading.rounds !== undefined) filled.rounds = reading.rounds;
    if (reading.detail !== undefined) filled.detail = reading.detail;
    if (figure.everyRound && reading.rounds === undefined) {
      filled.note = "judged on the median: the bench gave no per-round figures";
    }
    return filled;
  });
}

const ms = (value: number | undefined) => (value === undefined ? "?" : `${value.toFixed(2)} ms`);

const protocol: BenchSpec = {
  id: "protocol",
  title: "RFC 9421 and attestation verification against bare node:crypto (bench/protocol.ts)",
  file: "bench/protocol.ts",
  args: (quick) => (quick ? ["--quick"] : []),
  env: () => ({}),
  needs: [],
  figures(output, _quick, skipped) {
    const figures: Figure[] = [
      {
        target: 4,
        label: "RFC 9421 verify / bare Ed25519 verify",
        value: undefined,
        unit: "ratio",
        comparison: ">=",
        limit: 0.95,
      },
      {
        target: 4,
        label: "attestation verify / bare Ed25519 verify",
        value: undefined,
        unit: "ratio",
        comparison: ">=",
        limit: 0.7,
      },
    ];
    return fill(figures, output, skipped, ({ result, stdout }) => {
      if (result !== undefined) {
        return ["rfc9421", "attestation"].map((key) => {
          const part = objectAt(result, key);
          return { value: numberAt(part, "ratio"), rounds: numbersAt(part, "roundRatios") };
        });
      }
      const text = (pattern: RegExp) => {
        const value = matchNumber(stdout, pattern);
        return value === undefined ? undefined : { value, note: TEXT_NOTE };
      };
      return [text(/RFC 9421 full verify.*?ratio ([\d.]+)/), text(/attestation JWT verify.*?ratio ([\d.]+)/)];
    });
  },
};

function mint(engine: Engine): BenchSpec {
  const name = engine === "sqlite" ? "SQLite" : "PostgreSQL + Redis";
  return {
    id: `trust-mint-${engine}`,
    title: `attestor mint against the crypto work of one mint, ${name} (bench/trust/mint.ts)`,
    file: "bench/trust/mint.ts",
    args: (quick) => (quick ? ["--quick"] : []),
    env: (quick) => ({
      BENCH_ENGINES: engine,
      ...(quick
        ? {
            BENCH_AGENTS: "200",
            BENCH_REQUESTS: "6000",
            // Fewer warm-up mints leave the first round measuring a server still being compiled.
            BENCH_WARMUP: "3000",
            BENCH_ROUNDS: "3",
            BENCH_CRYPTO_N: "5000",
          }
        : {}),
    }),
    needs: engine === "sqlite" ? [] : ["TEST_POSTGRES_URL", "TEST_REDIS_URL"],
    figures(output, _quick, skipped) {
      const figures: Figure[] = [
        {
          target: 1,
          label: `mint, ${name}: rate / crypto-only rate`,
          value: undefined,
          unit: "ratio",
          comparison: ">=",
          limit: engine === "sqlite" ? 0.5 : 0.35,
        },
        { target: 1, label: `mint p99, ${name}`, value: undefined, unit: "ms", comparison: "<", limit: 40 },
      ];
      if (engine === "postgres") {
        figures.push({
          target: 1,
          label: "server CPU per mint, PostgreSQL + Redis",
          value: undefined,
          unit: "µs",
          comparison: "<=",
          limit: 350,
        });
      }
      figures.push({
        target: 1,
        label: `SQL statements per mint, ${name}`,
        value: undefined,
        unit: "per mint",
        comparison: "<=",
        limit: 1,
      });
      if (engine === "postgres") {
        figures.push({
          target: 1,
          label: "Redis round trips per mint, PostgreSQL + Redis",
          value: undefined,
          unit: "per mint",
          comparison: "<=",
          limit: 1,
        });
      }
      return fill(figures, output, skipped, ({ result, stdout }) => {
        const part = engineResult(result, engine);
        if (part !== undefined) {
          const cryptoCpu = numberAt(part, "cryptoCpuUsPerOp");
          const readings: Reading[] = [
            { value: numberAt(part, "ratio"), rounds: numbersOf(part, "rounds", "ratio") },
            {
              value: numberAt(part, "p99Ms"),
              detail: `p50 ${ms(numberAt(part, "p50Ms"))}, max ${ms(numberAt(part, "maxMs"))}`,
            },
          ];
          if (engine === "postgres") {
            readings.push({
              value: numberAt(part, "cpuUsPerMint"),
              rounds: numbersOf(part, "rounds", "cpuUsPerMint"),
              detail: cryptoCpu === undefined ? undefined : `crypto-only ${cryptoCpu.toFixed(0)} µs CPU per op`,
            });
          }
          readings.push(numberAt(part, "sqlPerMint"));
          if (engine === "postgres") readings.push(numberAt(part, "redisPerMint"));
          return readings;
        }
        // An older summary: "<engine>  2322 mints/s  33.8%  p50 … ms  p99 41.00 ms".
        const line = new RegExp(`^${engine}\\s+[\\d.,]+ mints/s\\s+([\\d.]+)%.*?p99 ([\\d.]+) ms`, "m").exec(stdout);
        if (line === null) return [];
        return [
          { value: Number(line[1]) / 100, note: TEXT_NOTE },
          { value: Number(line[2]), note: TEXT_NOTE },
        ];
      });
    },
  };
}

/** Reads as the directory serves them on `engine`, with REDIS_URL set when `redis` (a scale-out deployment). */
function read(engine: Engine, redis = false): BenchSpec {
  const name = `${ENGINE_NAME[engine]}${redis ? " + Redis" : ""}`;
  return {
    id: `directory-read-${engine}${redis ? "-redis" : ""}`,
    title: `single-listing reads against plain node:http, ${name} (bench/directory/read.ts)`,
    file: "bench/directory/read.ts",
    args: (quick) => [
      "--engine",
      engine,
      ...(redis ? ["--redis"] : []),
      ...(quick ? ["--quick", "--count", "20000", "--rounds", "2", "--seconds", "3"] : []),
    ],
    env: () => ({}),
    needs: engine === "sqlite" ? [] : redis ? ["TEST_POSTGRES_URL", "TEST_REDIS_URL"] : ["TEST_POSTGRES_URL"],
    unsupported: (source) => {
      if (engine === "postgres" && !/postgres/i.test(source)) return "the bench has no PostgreSQL mode yet";
      if (redis && !source.includes("--redis")) return "the bench has no --redis mode yet";
      return undefined;
    },
    figures(output, _quick, skipped) {
      const sqlite = engine === "sqlite";
      const figures: Figure[] = [
        {
          target: 2,
          label: `reads, ${name}: req/s / node:http baseline req/s`,
          value: undefined,
          unit: "ratio",
          comparison: ">=",
          limit: sqlite ? 0.8 : 0.75,
          everyRound: sqlite,
        },
      ];
      if (sqlite) {
        figures.push({
          target: 2,
          label: "reads, SQLite: server CPU per request / baseline's",
          value: undefined,
          unit: "x",
          comparison: "<=",
          limit: 1.25,
          everyRound: true,
        });
      }
      return fill(figures, output, skipped, ({ result, stdout }) => {
        const part = engineResult(result, engine);
        if (part !== undefined) {
          return [
            { value: numberAt(part, "ratio", "rpsRatio", "reqRatio"), rounds: numbersAt(part, "roundRatios") },
            {
              value: numberAt(part, "cpuRatio", "cpuPerRequestRatio", "serverCpuRatio"),
              rounds: numbersAt(part, "roundCpuRatios"),
            },
          ];
        }
        // An older summary (SQLite only): "ratio directory / baseline (medians): 0.46x".
        if (!sqlite || !/\(SQLite\)/.test(stdout)) return [];
        const ratio = matchNumber(stdout, /ratio directory \/ baseline \(medians\): ([\d.]+)x/);
        return [ratio === undefined ? undefined : { value: ratio, note: TEXT_NOTE }];
      });
    },
  };
}

function query(engine: Engine): BenchSpec {
  const name = ENGINE_NAME[engine];
  return {
    id: `directory-query-${engine}`,
    title: `search and tag filters, ${name} (bench/directory/query.ts)`,
    file: "bench/directory/query.ts",
    args: (quick) => ["--engine", engine, ...(quick ? ["--quick"] : [])],
    // The count of listings is read from the environment by every version of the bench.
    env: (quick): Record<string, string> => (quick ? { BENCH_DIRECTORY_COUNT: "100000" } : {}),
    needs: engine === "sqlite" ? [] : ["TEST_POSTGRES_URL"],
    figures(output, quick, skipped) {
      const at = quick ? "" : " at 1,000,000";
      const figures: Figure[] = [
        {
          target: 3,
          label: `search/tag worst p99${at}, ${name}, fresh store`,
          value: undefined,
          unit: "ms",
          comparison: "<=",
          limit: 10,
        },
        {
          target: 3,
          label: `search/tag worst p99${at}, ${name}, warm`,
          value: undefined,
          unit: "ms",
          comparison: "<=",
          limit: 10,
        },
        {
          target: 5,
          label: `directory RssAnon${at}, ${name}`,
          value: undefined,
          unit: "MB",
          comparison: "<",
          limit: 100,
        },
      ];
      return fill(figures, output, skipped, ({ result, stdout }) => {
        const part = engineResult(result, engine);
        if (part !== undefined) {
          const count = numberAt(result, "count");
          const note =
            count !== undefined && count < 1_000_000 ? `at ${count.toLocaleString("en-US")} listings` : undefined;
          const phase = (p: string) => objectAt(part, "phases", p);
          const rss = [
            numberAt(objectAt(part, "rss"), "startedAnonMb"),
            numberAt(phase("fresh"), "rssAnonMb"),
            numberAt(phase("warm"), "rssAnonMb"),
          ].filter((v): v is number => v !== undefined);
          const worst = (p: string): Reading => {
            const figures = phase(p);
            const scenario = stringAt(figures, "worstScenario");
            const p50 = numberAt(figures, "worstP50Ms");
            return {
              value: numberAt(figures, "worstP99Ms"),
              ...(note === undefined ? {} : { note }),
              detail:
                scenario === undefined || p50 === undefined
                  ? undefined
                  : `${scenario}: p50 ${ms(p50)}, max ${ms(numberAt(figures, "worstMaxMs"))}`,
            };
          };
          return [
            worst("fresh"),
            worst("warm"),
            {
              value: rss.length === 0 ? undefined : Math.max(...rss),
              ...(note === undefined ? {} : { note }),
            },
          ];
        }
        // An older summary (in process, one pass): "<engine>: worst p99 11.30 ms (target <= 20 ms)".
        const worst = matchNumber(stdout, new RegExp(`^${engine}: worst p99 ([\\d.]+) ms`, "m"));
        if (worst === undefined) return [];
        return [
          undefined,
          { value: worst, note: `${TEXT_NOTE}; in process, not over HTTP, one pass after a check pass` },
        ];
      });
    },
  };
}

export const BENCHES: readonly BenchSpec[] = [
  protocol,
  mint("sqlite"),
  mint("postgres"),
  read("sqlite"),
  read("postgres"),
  read("postgres", true),
  query("sqlite"),
  query("postgres"),
];

/** Why a bench cannot run here, or undefined. */
export function skipReason(spec: BenchSpec, root: string, env: NodeJS.ProcessEnv): string | undefined {
  const unset = spec.needs.filter((name) => !env[name]);
  if (unset.length > 0) return `skipped (${unset.join(" and ")} not set)`;
  if (spec.unsupported !== undefined) {
    const reason = spec.unsupported(readFileSync(`${root}/${spec.file}`, "utf8"));
    if (reason !== undefined) return `skipped (${reason})`;
  }
  return undefined;
}
