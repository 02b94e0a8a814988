/**
 * The figures a report holds, each against its target of issue 25, and how they are read from a
 * benchmark's output: its last `RESULT {json}` line, or, for a benchmark that prints none yet, the
 * summary lines it prints today.
 */

export type Comparison = ">=" | "<=" | "<";

export interface Figure {
  /** The target number (1 to 5). */
  target: number;
  label: string;
  value: number | undefined;
  unit: "ratio" | "ms" | "MB" | "x" | "per mint";
  comparison: Comparison;
  limit: number;
  /** Why there is no value, or what qualifies it. */
  note?: string | undefined;
}

export function met(figure: Figure): boolean | undefined {
  const { value, limit } = figure;
  if (value === undefined || !Number.isFinite(value)) return undefined;
  if (figure.comparison === ">=") return value >= limit;
  if (figure.comparison === "<=") return value <= limit;
  return value < limit;
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
