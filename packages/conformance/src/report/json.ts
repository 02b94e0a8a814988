/** `--json`: every result as one document, for scripts. */
import { type ProbeResult, summarize } from "../runner.js";

export function formatJson(mode: string, target: string, results: readonly ProbeResult[]): string {
  return `${JSON.stringify({ mode, target, summary: summarize(results), results }, null, 2)}\n`;
}
