/** Runs a probe list in-process against a URL, with a wait that records instead of sleeping. */
import { HttpClient, type Probe, type ProbeOptions, type ProbeResult, runProbes } from "../../src/index.js";

export interface Run {
  results: ProbeResult[];
  /** Milliseconds each rate-limit wait asked for. */
  waits: number[];
  byId(id: string): ProbeResult;
}

export const OPTIONS: ProbeOptions = { write: false, mirror: false, pageSize: 1, maxPages: 50 };

export async function run(
  probes: readonly Probe[],
  baseUrl: string,
  options: Partial<ProbeOptions> = {},
): Promise<Run> {
  const waits: number[] = [];
  const http = new HttpClient({
    timeoutMs: 10_000,
    wait: async (ms) => {
      waits.push(ms);
    },
  });
  const results = await runProbes(probes, { baseUrl, http, options: { ...OPTIONS, ...options } });
  return {
    results,
    waits,
    byId(id) {
      const found = results.find((r) => r.id === id);
      if (found === undefined) throw new Error(`no result for ${id}`);
      return found;
    },
  };
}

/** `id: status (message)` per line: what an assertion failure shows. */
export const describe = (results: readonly ProbeResult[]): string =>
  results.map((r) => `${r.id}: ${r.status}${r.message ? ` (${r.message})` : ""}`).join("\n");
