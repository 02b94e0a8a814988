/**
 * Removes build outputs whose source is gone from the current package's dist/ (run by each
 * package's `prepack` before `tsc -b`). tsc never deletes the output of a source file that was
 * moved or deleted, so a long-lived checkout would otherwise pack modules that no longer exist.
 * Only files tsc writes for a `.ts` source are touched; anything else in dist/ is left alone.
 */
import { existsSync, readdirSync, rmdirSync, rmSync } from "node:fs";
import { join } from "node:path";

const OUTPUT_SUFFIXES = [".d.ts.map", ".d.ts", ".js.map", ".js"];

function sourceOf(file) {
  const suffix = OUTPUT_SUFFIXES.find((s) => file.endsWith(s));
  return suffix === undefined ? undefined : `${file.slice(0, -suffix.length)}.ts`;
}

/** Prunes one folder of dist/ and answers whether it is empty afterwards. */
function prune(distDir, srcDir) {
  let kept = 0;
  for (const entry of readdirSync(distDir, { withFileTypes: true })) {
    const path = join(distDir, entry.name);
    if (entry.isDirectory()) {
      if (prune(path, join(srcDir, entry.name))) rmdirSync(path);
      else kept += 1;
      continue;
    }
    const source = sourceOf(entry.name);
    if (source !== undefined && !existsSync(join(srcDir, source))) {
      rmSync(path);
      process.stderr.write(`prune-dist: removed ${path} (no ${join(srcDir, source)})\n`);
    } else {
      kept += 1;
    }
  }
  return kept === 0;
}

// Without src/ there is nothing to compare with (an unpacked tarball, say): leave dist/ as it is.
if (existsSync("dist") && existsSync("src")) prune("dist", "src");
