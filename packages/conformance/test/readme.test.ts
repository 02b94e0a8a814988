/** The README's probe tables are the reference operators read: every probe is there, and nothing else. */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { agentProbes, attestorProbes, directoryProbes, serviceProbes } from "../src/index.js";

const README = readFileSync(new URL("../README.md", import.meta.url), "utf8");

/**
 * The probe ids the tables name in their first column. A row may name siblings after the first
 * id by their last segment (`directory.listings.filter.tag` / `.search`).
 */
function documentedIds(markdown: string): string[] {
  const ids: string[] = [];
  for (const line of markdown.split("\n")) {
    const firstCell = /^\| ([^|]+) \|/.exec(line)?.[1] ?? "";
    const names = [...firstCell.matchAll(/`([^`]+)`/g)].map((m) => m[1] ?? "");
    const [first, ...siblings] = names;
    if (first === undefined || !/^(attestor|directory|service|agent)\.[a-z.-]+$/.test(first)) continue;
    ids.push(first);
    const stem = first.slice(0, first.lastIndexOf("."));
    for (const sibling of siblings) if (sibling.startsWith(".")) ids.push(`${stem}${sibling}`);
  }
  return ids;
}

test("the README lists every probe of every mode, and no probe that does not exist", () => {
  const probes = [...attestorProbes, ...directoryProbes, ...serviceProbes, ...agentProbes].map((p) => p.id);
  assert.deepEqual([...documentedIds(README)].sort(), [...probes].sort());
});
