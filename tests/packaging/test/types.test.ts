/**
 * Issue 37: the kit's declarations as a TypeScript user meets them. `@proto/protocol` and
 * `@proto/kit` are packed with `npm pack` and installed from the tarballs into two empty projects
 * outside the workspace, an Express app and a Hono app (`apps/`), each with its framework and
 * nothing else: not Fastify, not the other framework. `tsc --noEmit` checks them with the
 * repository's TypeScript, strict, with skipLibCheck off and without the "DOM" lib, so every
 * declaration file the kit's entries reach is checked, and must name neither an optional peer
 * the project lacks nor a DOM type. The install skips install scripts: types need no native module.
 */
import assert from "node:assert/strict";
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import {
  explain,
  isInside,
  killChildren,
  MINUTE,
  npmInstall,
  type PackageName,
  packWorkspaces,
  REPO_ROOT,
  registryProblem,
  run,
  TSC,
  timed,
  workspaceVersion,
} from "./support/packing.js";

const APPS_DIR = fileURLToPath(new URL("../apps/", import.meta.url));
const PACKED: readonly PackageName[] = ["@proto/protocol", "@proto/kit"];

interface App {
  name: string;
  /** Its framework and types, at the versions the workspace is tested with (the npm cache has them). */
  dependencies: string[];
  /** The optional peers of the kit this project does not use, which must not be installed. */
  absent: string[];
  tsconfigs: string[];
}

const APPS: App[] = [
  {
    name: "express",
    dependencies: ["express", "@types/express", "@types/node"],
    absent: ["fastify", "hono"],
    tsconfigs: ["tsconfig.json"],
  },
  {
    name: "hono",
    dependencies: ["hono", "@hono/node-server", "@types/node"],
    absent: ["fastify", "express"],
    tsconfigs: ["tsconfig.json", "tsconfig.node.json"],
  },
];

const unreachable = await registryProblem();
const skip = unreachable !== undefined && process.env.CI !== "true" ? unreachable : undefined;

const root = mkdtempSync(join(tmpdir(), "proto-types-"));
const tarballs = join(root, "tarballs");
let packed: string[] = [];
const installed = new Set<string>();

after(() => {
  killChildren();
  rmSync(root, { recursive: true, force: true });
});

describe("an Express app and a Hono app type-check against the packed kit (strict, skipLibCheck off, no DOM lib)", {
  skip,
}, () => {
  test("npm pack builds and packs @proto/protocol and @proto/kit", { timeout: 10 * MINUTE }, async (t) => {
    if (unreachable !== undefined) assert.fail(`${unreachable} (CI=true: not skipped)`);
    assert.ok(!isInside(REPO_ROOT, root), `${root} must be outside the repository`);
    mkdirSync(tarballs);
    const { result, packed: written } = await packWorkspaces(t, PACKED, tarballs);
    assert.equal(result.code, 0, explain("npm pack", result));
    assert.deepEqual(written.map((p) => p.name).sort(), [...PACKED].sort());
    packed = written.map((p) => join(tarballs, p.filename));
  });

  for (const app of APPS) {
    const project = join(root, app.name);

    test(`${app.name}: npm install of the tarballs and ${app.dependencies.join(", ")}`, {
      timeout: 10 * MINUTE,
    }, async (t) => {
      assert.equal(packed.length, PACKED.length, "npm pack failed above");
      cpSync(join(APPS_DIR, app.name), project, { recursive: true });
      writeFileSync(
        join(project, "package.json"),
        `${JSON.stringify({ name: `proto-types-${app.name}`, version: "0.0.0", private: true, type: "module" }, null, 2)}\n`,
      );
      const versions = app.dependencies.map((name) => `${name}@${workspaceVersion(name)}`);
      const result = await npmInstall(t, project, [...packed, ...versions], { ignoreScripts: true });
      assert.equal(result.code, 0, explain("npm install", result));
      for (const name of app.absent) {
        assert.ok(!existsSync(join(project, "node_modules", name)), `${name} is not installed in the ${app.name} app`);
      }
      installed.add(app.name);
    });

    for (const tsconfig of app.tsconfigs) {
      test(`${app.name}: tsc --noEmit -p ${tsconfig} reports no errors`, { timeout: 5 * MINUTE }, async (t) => {
        assert.ok(installed.has(app.name), "npm install failed above");
        const result = await timed(t, "tsc", () =>
          run(process.execPath, [TSC, "--noEmit", "-p", join(project, tsconfig)], {
            cwd: project,
            timeoutMs: 5 * MINUTE,
          }),
        );
        assert.equal(result.code, 0, explain(`tsc -p ${tsconfig}`, result));
      });
    }
  }
});
