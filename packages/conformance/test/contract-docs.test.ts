/**
 * Keeps the contract in docs/contract honest: every error code the packages define appears in
 * docs/contract/errors.md with the same HTTP statuses, and every relative link in the docs and
 * READMEs reaches a file (and, for markdown, a heading) that exists.
 */
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { KIT_ERRORS, KIT_SPECIFIC_ERRORS } from "@proto/kit";
import { ATTESTOR_ERRORS, RESERVED_ERRORS } from "@proto/protocol";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const ERRORS_DOC = join(ROOT, "docs/contract/errors.md");

/** The `| `code` | statuses | … |` rows under one `## ` heading: code to the statuses named. */
function errorTable(heading: string): Map<string, number[]> {
  const text = readFileSync(ERRORS_DOC, "utf8");
  const start = text.indexOf(`\n## ${heading}\n`);
  assert.notEqual(start, -1, `errors.md has a "## ${heading}" section`);
  const end = text.indexOf("\n## ", start + 1);
  const rows = new Map<string, number[]>();
  for (const line of text.slice(start, end === -1 ? undefined : end).split("\n")) {
    const match = /^\| `([a-z_]+)` \| ([^|]+) \|/.exec(line);
    if (match?.[1] === undefined || match[2] === undefined) continue;
    const statuses = [...match[2].matchAll(/\b[1-5]\d\d\b/g)].map((m) => Number(m[0]));
    rows.set(match[1], statuses.sort());
  }
  return rows;
}

function statusesOf(spec: { status: number; alternateStatus?: { status: number } }): number[] {
  return [spec.status, ...(spec.alternateStatus === undefined ? [] : [spec.alternateStatus.status])].sort();
}

test("every reserved service-side code is in errors.md with its statuses", () => {
  const table = errorTable("Services");
  for (const [code, spec] of Object.entries(RESERVED_ERRORS)) {
    assert.deepEqual(table.get(code), statusesOf(spec), `errors.md, Services: ${code}`);
  }
  assert.deepEqual([...table.keys()].sort(), Object.keys(RESERVED_ERRORS).sort(), "no code beyond the reserved ones");
});

test("every status the kit answers a reserved code with is documented", () => {
  const table = errorTable("Services");
  for (const [code, use] of Object.entries(KIT_ERRORS)) {
    for (const status of use.statuses) {
      assert.ok(table.get(code)?.includes(status), `errors.md, Services: ${code} ${status}`);
    }
  }
});

test("every attestor code is in errors.md with its status", () => {
  const table = errorTable("Attestor");
  for (const [code, spec] of Object.entries(ATTESTOR_ERRORS)) {
    assert.deepEqual(table.get(code), [spec.status], `errors.md, Attestor: ${code}`);
  }
});

test("every kit-specific code is in errors.md with its status", () => {
  const table = errorTable("Kit-specific codes");
  for (const [code, spec] of Object.entries(KIT_SPECIFIC_ERRORS)) {
    assert.deepEqual(table.get(code), [spec.status], `errors.md, Kit-specific codes: ${code}`);
  }
});

const SKIPPED_DIRS = new Set(["node_modules", "dist", "data", ".git"]);

/** docs/**\/*.md and every README.md of the repository. */
function documents(dir = ROOT): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name.startsWith(".") || SKIPPED_DIRS.has(entry.name)) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) found.push(...documents(path));
    else if (entry.name === "README.md" || (entry.name.endsWith(".md") && path.startsWith(join(ROOT, "docs")))) {
      found.push(path);
    }
  }
  return found;
}

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered. */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const result = new Set<string>();
  for (const line of withoutFences(markdown).split("\n")) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const text = heading.replace(/\[([^\]]*)\]\([^)]*\)/g, "$1");
    const slug = text
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\p{M}\s_-]/gu, "")
      .replace(/\s/g, "-");
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    result.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return result;
}

function withoutFences(markdown: string): string {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, "");
}

/** The text outside fenced code blocks and inline code, where links are links. */
function withoutCode(markdown: string): string {
  return withoutFences(markdown).replace(/`[^`\n]*`/g, "");
}

test("every relative link in docs/ and the READMEs resolves", () => {
  const broken: string[] = [];
  const docs = documents();
  assert.ok(docs.includes(join(ROOT, "docs/contract/README.md")), "the contract is among the documents checked");
  for (const file of docs) {
    const text = readFileSync(file, "utf8");
    for (const match of withoutCode(text).matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      const target = match[1] as string;
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto: and the like
      const [pathPart = "", anchor] = target.split("#", 2);
      const path = pathPart === "" ? file : resolve(dirname(file), decodeURIComponent(pathPart));
      const where = `${relative(ROOT, file)}: ${target}`;
      if (!existsSync(path)) {
        broken.push(`${where} (no such file)`);
        continue;
      }
      if (anchor !== undefined && anchor !== "" && statSync(path).isFile() && path.endsWith(".md")) {
        if (!anchors(readFileSync(path, "utf8")).has(anchor)) broken.push(`${where} (no such heading)`);
      }
    }
  }
  assert.deepEqual(broken, []);
});

test("no document points readers at the spec outside the repository", () => {
  const offenders = documents().filter((file) => readFileSync(file, "utf8").includes("shared/spec"));
  assert.deepEqual(
    offenders.map((file) => relative(ROOT, file)),
    [],
  );
});
