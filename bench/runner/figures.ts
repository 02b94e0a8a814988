/**
 * The figures a report holds, each against its target (issues 25 and 39), and how they are read
 * from a benchmark's output: its last `RESULT {json}` line, or, for a benchmark that prints none
 * yet, the summary lines it prints today. A figure is measured once per run of its bench; it
 * counts as met only when every run meets it.
 */

export type Comparison = ">=" | "<=" | "<";

/** One figure as one run of its bench measured it. */
export interface Figure {
  /** The report's target group (1 to 5). */
  target: number;
  label: string;
  /** The headline value: for a ratio of alternating rounds, the median of the rounds. */
  value: number | undefined;
  unit: "ratio" | "ms" | "MB" | "x" | "per mint" | "µs";
  comparison: Comparison;
  limit: number;
  /** Why there is no value, or what qualifies it. */
  note?: string | undefined;
  /** The value of each round of the run, when the bench measures in alternating rounds. */
  rounds?: number[] | undefined;
  /** The target holds for every round, not only for the median (reads on SQLite, issue 39). */
  everyRound?: boolean | undefined;
  /** What to show beside the value, e.g. the p50 and max beside a p99. */
  detail?: string | undefined;
}

/** A figure across the runs of its bench: the first run's figure gives the label and target. */
export interface FigureRuns {
  figure: Figure;
  /** One per run, in order. */
  runs: Figure[];
}

function meets(figure: Figure, value: number): boolean {
  if (figure.comparison === ">=") return value >= figure.limit;
  if (figure.comparison === "<=") return value <= figure.limit;
  return value < figure.limit;
}

/** Whether one run's figure meets its target (in every round when it must): undefined without a value. */
export function met(figure: Figure): boolean | undefined {
  const value = decisive(figure);
  if (value === undefined || !Number.isFinite(value)) return undefined;
  return meets(figure, value);
}

/** Whether the target is judged round by round in this run (it must hold in every round, and the rounds are known). */
export function judgedByRound(figure: Figure): boolean {
  return figure.everyRound === true && figure.rounds !== undefined && figure.rounds.length > 0;
}

/** The value the verdict rests on: the worst round when every round must meet the target, else the value. */
export function decisive(figure: Figure): number | undefined {
  if (!judgedByRound(figure)) return figure.value;
  const rounds = figure.rounds as number[];
  return figure.comparison === ">=" ? Math.min(...rounds) : Math.max(...rounds);
}

export type Outcome = "met" | "not met" | "incomplete" | "no result";

/**
 * A figure across runs: met only when every run has a value and meets the target; not met when
 * any run misses it; incomplete when the runs that have a value meet it but some run has none.
 */
export function outcome(runs: FigureRuns): Outcome {
  const each = runs.runs.map(met);
  if (each.some((m) => m === false)) return "not met";
  if (each.length > 0 && each.every((m) => m === true)) return "met";
  return each.some((m) => m === true) ? "incomplete" : "no result";
}

/** Zips each run's figures (the same list, in the same order, from every run) into figures across runs. */
export function acrossRuns(perRun: readonly (readonly Figure[])[]): FigureRuns[] {
  const first = perRun[0] ?? [];
  return first.map((figure, i) => ({
    figure,
    runs: perRun.map((figures) => figures[i] ?? { ...figure, value: undefined }),
  }));
}

/** Ratios to a baseline, drawn as bars against their target; the rest are limits not to exceed. */
export function isRatio(figure: Figure): boolean {
  return figure.comparison === ">=";
}

/** The JSON of the last `RESULT ` line, if any. */
export function resultLine(stdout: string): unknown {
  const lines = stdout.split("\n").filter((line) => line.startsWith("RESULT "));
  const last = lines.at(-1);
  if (last === undefined) return undefined;
  try {
    return JSON.parse(last.slice("RESULT ".length));
  } catch {
    return undefined;
  }
}

type Json = Record<string, unknown>;

function isObject(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The array at `key` when it holds finite numbers only (and at least one). */
export function numbersAt(object: unknown, key: string): number[] | undefined {
  if (!isObject(object)) return undefined;
  const value = object[key];
  if (!Array.isArray(value) || value.length === 0) return undefined;
  return value.every((v): v is number => typeof v === "number" && Number.isFinite(v)) ? value : undefined;
}

/** `key` of each object of the array at `arrayKey` (e.g. the ratio of each round), when every one has it. */
export function numbersOf(object: unknown, arrayKey: string, key: string): number[] | undefined {
  if (!isObject(object)) return undefined;
  const list = object[arrayKey];
  if (!Array.isArray(list) || list.length === 0) return undefined;
  const values = list.map((item) => numberAt(item, key));
  return values.every((v): v is number => v !== undefined) ? values : undefined;
}

/** The string at `key`, if it is one. */
export function stringAt(object: unknown, key: string): string | undefined {
  if (!isObject(object)) return undefined;
  const value = object[key];
  return typeof value === "string" ? value : undefined;
}

/** The first of `keys` that holds a finite number. */
export function numberAt(object: unknown, ...keys: string[]): number | undefined {
  if (!isObject(object)) return undefined;
  for (const key of keys) {
    const value = object[key];
    if (typeof value === "number" && Number.isFinite(value)) return value;
  }
  return undefined;
}

/**
 * An engine's part of a result: `engines` as an object keyed by engine, or an array with `engine`,
 * or the result itself when it is of one engine (`engine` at its top).
 */
export function engineResult(result: unknown, engine: string): Json | undefined {
  if (!isObject(result)) return undefined;
  if (result.engine === engine) return result;
  const engines = result.engines;
  if (Array.isArray(engines)) {
    const found = engines.find((e) => isObject(e) && e.engine === engine);
    return isObject(found) ? found : undefined;
  }
  if (isObject(engines) && isObject(engines[engine])) return engines[engine] as Json;
  return undefined;
}

export function objectAt(object: unknown, ...path: string[]): Json | undefined {
  let current: unknown = object;
  for (const key of path) {
    if (!isObject(current)) return undefined;
    current = current[key];
  }
  return isObject(current) ? current : undefined;
}

/** A number captured by `pattern`'s first group in `text`. */
export function matchNumber(text: string, pattern: RegExp): number | undefined {
  const match = pattern.exec(text);
  if (match?.[1] === undefined) return undefined;
  const value = Number(match[1].replace(/,/g, ""));
  return Number.isFinite(value) ? value : undefined;
}
