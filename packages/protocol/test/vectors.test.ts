/**
 * The reference vectors ship inside this package: a lost file would silently shrink every
 * conformance suite that loads them, so the set is counted here against the package's own folder
 * (not through PROTO_VECTORS_DIR, which may point at another copy).
 */
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { basename, join, relative } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";

const packageDir = fileURLToPath(new URL("..", import.meta.url));
const vectorsDir = join(packageDir, "vectors");

const EXPECTED_COUNTS: Record<string, number> = {
  signatures: 8,
  "replay-window": 4,
  "trust-attestation": 5,
  discovery: 18,
  recipients: 19,
  errors: 18,
};

describe("the package's reference vectors", () => {
  for (const [folder, count] of Object.entries(EXPECTED_COUNTS)) {
    test(`${folder}/ holds ${count} cases, each named after its file`, () => {
      const files = readdirSync(join(vectorsDir, folder)).filter((f) => f.endsWith(".json"));
      assert.equal(files.length, count);
      for (const file of files) {
        const vector = JSON.parse(readFileSync(join(vectorsDir, folder, file), "utf8")) as { name?: unknown };
        assert.equal(vector.name, basename(file, ".json"), `${folder}/${file}`);
      }
    });
  }

  test("keypair.json and the README are there", () => {
    assert.ok(existsSync(join(vectorsDir, "keypair.json")));
    assert.ok(existsSync(join(vectorsDir, "README.md")));
  });

  test("npm publishes them and Node resolves them by package name", () => {
    const manifest = JSON.parse(readFileSync(join(packageDir, "package.json"), "utf8")) as {
      files: string[];
      exports: Record<string, unknown>;
    };
    assert.ok(manifest.files.includes("vectors"), "package.json files lists vectors");
    assert.equal(
      fileURLToPath(import.meta.resolve("@proto/protocol/vectors/keypair.json")),
      join(vectorsDir, "keypair.json"),
    );
  });

  // The reference set sits beside a clone of the repository (as in CI); a copy that drifted from it
  // would test other data than every other language reads.
  const referenceDir = join(packageDir, "..", "..", "..", "shared", "vectors");
  test("they are the reference set, file for file, where it sits beside the repository", (t) => {
    if (!existsSync(referenceDir)) {
      t.skip(`no reference set at ${referenceDir} to compare with`);
      return;
    }
    const files = (dir: string): string[] =>
      readdirSync(dir, { recursive: true, withFileTypes: true })
        .filter((entry) => entry.isFile())
        .map((entry) => relative(dir, join(entry.parentPath, entry.name)))
        .sort();
    assert.deepEqual(files(vectorsDir), files(referenceDir));
    for (const file of files(referenceDir)) {
      assert.ok(readFileSync(join(vectorsDir, file)).equals(readFileSync(join(referenceDir, file))), file);
    }
  });
});
