/** The terminal report: one row per probe, then the details of what failed, then the summary line. */
import type { HttpExchange } from "../http.js";
import { type ProbeResult, summarize, summaryLine } from "../runner.js";

const LABEL = { pass: "pass", fail: "FAIL", skipped: "skip" } as const;

function describeExchange(exchange: HttpExchange): string[] {
  const lines = [`    sent: ${exchange.method} ${exchange.url}`];
  if (exchange.requestBody !== undefined) lines.push(`    body: ${exchange.requestBody}`);
  if (exchange.error !== undefined) {
    lines.push(`    no answer: ${exchange.error}`);
    return lines;
  }
  lines.push(`    got: ${exchange.status}`);
  for (const [name, value] of Object.entries(exchange.headers)) {
    if (
      /^(content-type|cache-control|etag|retry-after|www-authenticate|access-control-allow-origin|location)$/.test(name)
    ) {
      lines.push(`    ${name}: ${value}`);
    }
  }
  if (exchange.bodyExcerpt !== "") lines.push(`    body: ${exchange.bodyExcerpt}`);
  return lines;
}

export function formatTable(results: readonly ProbeResult[]): string {
  const idWidth = Math.max(2, ...results.map((r) => r.id.length));
  const lines = [`${"id".padEnd(idWidth)}  result  description`];
  for (const r of results) lines.push(`${r.id.padEnd(idWidth)}  ${LABEL[r.status].padEnd(6)}  ${r.description}`);
  const detailed = results.filter((r) => r.status === "fail" || r.notes.length > 0);
  for (const r of detailed) {
    lines.push("", `${r.id} (${r.section})`);
    if (r.status === "fail") {
      lines.push(`  ${r.message}`);
      if (r.exchange) lines.push(...describeExchange(r.exchange));
    }
    for (const note of r.notes) lines.push(`  note: ${note}`);
  }
  const skipped = results.filter((r) => r.status === "skipped");
  if (skipped.length > 0) {
    lines.push("", "skipped:");
    for (const r of skipped) lines.push(`  ${r.id}: ${r.message}`);
  }
  lines.push("", summaryLine(summarize(results)));
  return `${lines.join("\n")}\n`;
}
