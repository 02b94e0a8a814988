/**
 * Runs probes one after another (a deployment sees one request at a time, well inside any rate
 * limit) and turns whatever a probe does, throwing included, into a result.
 */
import type { HttpClient, HttpExchange } from "./http.js";
import {
  type Probe,
  type ProbeContext,
  ProbeFailure,
  type ProbeOptions,
  ProbeSkip,
  type ProbeStatus,
} from "./probe.js";

export interface ProbeResult {
  id: string;
  description: string;
  section: string;
  status: ProbeStatus;
  message: string;
  exchange?: HttpExchange;
  /** Rate-limit waits and the like: what happened on the way that a reader should know. */
  notes: string[];
}

export interface RunOptions {
  baseUrl: string;
  http: HttpClient;
  options: ProbeOptions;
  nowSeconds?: () => number;
}

export async function runProbes(probes: readonly Probe[], run: RunOptions): Promise<ProbeResult[]> {
  const memos = new Map<string, Promise<unknown>>();
  const context: ProbeContext = {
    baseUrl: run.baseUrl.replace(/\/+$/, ""),
    http: run.http,
    options: run.options,
    nowSeconds: run.nowSeconds ?? (() => Math.floor(Date.now() / 1000)),
    memo<T>(key: string, compute: () => Promise<T>): Promise<T> {
      let value = memos.get(key);
      if (value === undefined) {
        value = compute();
        memos.set(key, value);
      }
      return value as Promise<T>;
    },
  };
  const results: ProbeResult[] = [];
  for (const probe of probes) {
    const base = { id: probe.id, description: probe.description, section: probe.section };
    if (probe.writes && !run.options.write) {
      results.push({ ...base, status: "skipped", message: "creates state on the target: run with --write", notes: [] });
      continue;
    }
    run.http.takeNotes();
    let result: ProbeResult;
    try {
      const { note, ...outcome } = await probe.run(context);
      result = { ...base, ...outcome, notes: note ? [note] : [] };
    } catch (error) {
      if (error instanceof ProbeSkip) {
        result = { ...base, status: "skipped", message: error.message, notes: [] };
      } else if (error instanceof ProbeFailure) {
        result = {
          ...base,
          status: "fail",
          message: error.message,
          ...(error.exchange ? { exchange: error.exchange } : {}),
          notes: [],
        };
      } else {
        // A bug in a probe, or something no probe expected: a failure to look at, never a crash.
        const message = error instanceof Error ? error.message : String(error);
        result = { ...base, status: "fail", message: `the probe stopped: ${message}`, notes: [] };
      }
    }
    result.notes = [...run.http.takeNotes(), ...result.notes];
    results.push(result);
  }
  return results;
}

export interface Summary {
  passed: number;
  failed: number;
  skipped: number;
}

export function summarize(results: readonly ProbeResult[]): Summary {
  return {
    passed: results.filter((r) => r.status === "pass").length,
    failed: results.filter((r) => r.status === "fail").length,
    skipped: results.filter((r) => r.status === "skipped").length,
  };
}

export const summaryLine = (s: Summary): string => `${s.passed} passed, ${s.failed} failed, ${s.skipped} skipped`;
