/**
 * Every package `npm ci` installs runs on every Node.js line we support: the oldest version the
 * root package.json's `engines` allows (what the README promises) and the lines CI tests
 * (`.ci/node-versions`). A dependency whose `engines.node` excludes one of them makes `npm ci`
 * warn EBADENGINE on that line, and may fail there; the lockfile records each package's
 * `engines`, so this reads it instead of installing anything.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

// semver ships no type declarations; these are the two functions used.
const { minVersion, satisfies } = createRequire(import.meta.url)("semver") as {
  minVersion(range: string): { version: string } | null;
  satisfies(version: string, range: string): boolean;
};

const REPO_ROOT = fileURLToPath(new URL("../../../", import.meta.url));

interface LockEntry {
  version?: string;
  engines?: { node?: string } | string[];
}

function readJson<T>(path: string): T {
  return JSON.parse(readFileSync(`${REPO_ROOT}${path}`, "utf8")) as T;
}

/** The Node.js versions we say we support: the oldest the root allows, then the CI lines. */
function supportedVersions(): string[] {
  const root = readJson<{ engines: { node: string } }>("package.json");
  const oldest = minVersion(root.engines.node)?.version;
  assert.ok(oldest, `package.json engines.node ${root.engines.node} names a version`);
  const ciLines = readFileSync(`${REPO_ROOT}.ci/node-versions`, "utf8")
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line !== "" && !line.startsWith("#"));
  return [oldest, ...ciLines];
}

test("no package in package-lock.json needs a Node.js version we do not support", () => {
  const versions = supportedVersions();
  assert.ok(versions.includes("20.20.0"), `the README promises Node 20.20: ${versions.join(", ")}`);
  const lock = readJson<{ packages: Record<string, LockEntry> }>("package-lock.json");
  const excluded: string[] = [];
  for (const [path, entry] of Object.entries(lock.packages)) {
    // npm reads only the object form of `engines`; the old array form is ignored.
    const range = Array.isArray(entry.engines) ? undefined : entry.engines?.node;
    if (range === undefined) continue;
    for (const version of versions) {
      if (!satisfies(version, range)) {
        excluded.push(`${path || "(root)"}@${entry.version ?? "?"} needs node ${range}, not ${version}`);
      }
    }
  }
  assert.deepEqual(excluded, [], `npm ci would warn EBADENGINE:\n${excluded.join("\n")}`);
});
