/** `--junit FILE`: one testcase per probe, the shape CI systems read. */
import type { ProbeResult } from "../runner.js";

/** Escapes text for XML content and attributes, and drops characters XML 1.0 cannot carry at all. */
export function escapeXml(text: string): string {
  return (
    text
      // biome-ignore lint/suspicious/noControlCharactersInRegex: these are the characters XML forbids
      .replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]/g, "\ufffd")
      .replace(/&/g, "&amp;")
      .replace(/</g, "&lt;")
      .replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;")
      .replace(/'/g, "&apos;")
  );
}

function failureText(result: ProbeResult): string {
  const lines = [result.message, `section: ${result.section}`];
  const x = result.exchange;
  if (x) {
    lines.push(`sent: ${x.method} ${x.url}`);
    if (x.requestBody !== undefined) lines.push(`request body: ${x.requestBody}`);
    if (x.error !== undefined) lines.push(`no answer: ${x.error}`);
    else {
      lines.push(`status: ${x.status}`);
      for (const [name, value] of Object.entries(x.headers)) lines.push(`${name}: ${value}`);
      lines.push(`body: ${x.bodyExcerpt}`);
    }
  }
  return lines.join("\n");
}

export function formatJunit(mode: string, results: readonly ProbeResult[]): string {
  const failures = results.filter((r) => r.status === "fail").length;
  const skipped = results.filter((r) => r.status === "skipped").length;
  const suite = escapeXml(`proto-conformance ${mode}`);
  const cases = results.map((r) => {
    const open = `    <testcase classname="${suite}" name="${escapeXml(r.id)}">`;
    const notes = r.notes.length > 0 ? `\n      <system-out>${escapeXml(r.notes.join("\n"))}</system-out>` : "";
    if (r.status === "fail") {
      return `${open}\n      <failure message="${escapeXml(r.message)}">${escapeXml(failureText(r))}</failure>${notes}\n    </testcase>`;
    }
    if (r.status === "skipped") {
      return `${open}\n      <skipped message="${escapeXml(r.message)}"/>${notes}\n    </testcase>`;
    }
    return `${open}${notes}${notes ? "\n    " : ""}</testcase>`;
  });
  return [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<testsuites tests="${results.length}" failures="${failures}" skipped="${skipped}">`,
    `  <testsuite name="${suite}" tests="${results.length}" failures="${failures}" skipped="${skipped}" errors="0">`,
    ...cases,
    "  </testsuite>",
    "</testsuites>",
    "",
  ].join("\n");
}
