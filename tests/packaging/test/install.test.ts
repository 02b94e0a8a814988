/**
 * The five published packages as a user gets them: `npm pack` in the workspace, then `npm install`
 * of the tarballs into an empty project in the system's temporary folder, away from the workspace's
 * node_modules, its `source` condition and tsx. There the README quick starts (`consumer/`) are
 * type-checked with the repository's TypeScript and run as compiled JavaScript on plain node, and
 * the `proto`, `proto-server` and `proto-conformance` commands run from node_modules/.bin.
 *
 * Third-party dependencies come from the npm registry (`--prefer-offline`: the local cache first).
 * When the registry cannot be reached the suite is skipped with the reason printed, except under
 * CI=true, where that is a failure. The install builds better-sqlite3's native module when no
 * prebuilt binary can be downloaded, so it takes a minute or two; the steps are separate tests so
 * the reporter shows how long each took.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import {
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { builtinModules } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import {
  explain,
  isInside,
  killChildren,
  type Manifest,
  MINUTE,
  npmInstall,
  PACKAGES,
  type Packed,
  packWorkspaces,
  REPO_ROOT,
  readJson,
  registryProblem,
  run,
  TSC,
  timed,
  track,
  userEnv,
  workspaceVersion,
} from "./support/packing.js";

const CONSUMER_TEMPLATE = fileURLToPath(new URL("../consumer/", import.meta.url));

const unreachable = await registryProblem();
const skip = unreachable !== undefined && process.env.CI !== "true" ? unreachable : undefined;

const root = mkdtempSync(join(tmpdir(), "proto-packaging-"));
const tarballs = join(root, "tarballs");
const project = join(root, "project");
const home = join(root, "agent-home");
const dataDir = join(root, "data");
let packed: Packed[] = [];
let installed = false;
let agentDid = "";

after(() => {
  killChildren();
  rmSync(root, { recursive: true, force: true });
});

function installedDir(name: string): string {
  return join(project, "node_modules", ...name.split("/"));
}

/** Every file a conditional-exports value points at. */
function exportTargets(value: unknown): string[] {
  if (typeof value === "string") return [value];
  if (value === null || typeof value !== "object") return [];
  return Object.values(value).flatMap(exportTargets);
}

/** The package a bare import specifier names (`@scope/name/sub` -> `@scope/name`). */
function packageOf(specifier: string): string {
  const parts = specifier.split("/");
  return (specifier.startsWith("@") ? parts.slice(0, 2) : parts.slice(0, 1)).join("/");
}

/**
 * The bare specifiers of the compiled code's `import`/`export ... from`, `import "x"` and
 * `import("x")`. The clause before `from` may hold only names, braces, commas and `*`, so SQL
 * such as `select "body" from "dir_listings"` in a string is not taken for an import.
 */
function bareImports(source: string): string[] {
  const statement = /^\s*(?:import|export)\s+[\w$*\s{},]*?\bfrom\s*["']([^"']+)["']|^\s*import\s*["']([^"']+)["']/gm;
  const dynamic = /\bimport\(\s*["']([^"']+)["']\s*\)/g;
  const found: string[] = [];
  for (const match of [...source.matchAll(statement), ...source.matchAll(dynamic)]) {
    const specifier = match[1] ?? match[2];
    if (specifier !== undefined && !specifier.startsWith(".") && !specifier.startsWith("/")) found.push(specifier);
  }
  return found;
}

function isBuiltin(specifier: string): boolean {
  return specifier.startsWith("node:") || builtinModules.includes(packageOf(specifier));
}

describe("the packages installed from npm pack tarballs outside the workspace", { skip }, () => {
  test("npm pack builds and packs the five packages", { timeout: 10 * MINUTE }, async (t) => {
    if (unreachable !== undefined) assert.fail(`${unreachable} (CI=true: not skipped)`);
    assert.ok(!isInside(REPO_ROOT, root), `${root} must be outside the repository`);
    mkdirSync(tarballs);
    const { result, packed: written } = await packWorkspaces(t, PACKAGES, tarballs);
    assert.equal(result.code, 0, explain("npm pack", result));
    packed = written;
    assert.deepEqual(packed.map((p) => p.name).sort(), [...PACKAGES].sort());
  });

  test("each tarball holds built code, types, bins and assets, and no tests or build files", () => {
    assert.equal(packed.length, PACKAGES.length, "npm pack failed above");
    for (const p of packed) {
      const paths = new Set(p.files.map((f) => f.path));
      const manifest = readJson<Manifest>(join(REPO_ROOT, "packages", p.name.split("/")[1] ?? "", "package.json"));
      for (const required of ["package.json", "README.md", "dist/index.js", "dist/index.d.ts"]) {
        assert.ok(paths.has(required), `${p.name} ships ${required}`);
      }
      // Every export condition (the `source` condition's src/ included) and every bin resolves.
      for (const target of [...exportTargets(manifest.exports), ...Object.values(manifest.bin ?? {})]) {
        const path = target.replace(/^\.\//, "");
        // A pattern export (`./vectors/*`) must match at least one shipped file.
        const [prefix = "", suffix = ""] = path.split("*");
        const ships = path.includes("*")
          ? [...paths].some((file) => file.startsWith(prefix) && file.endsWith(suffix) && file.length > prefix.length)
          : paths.has(path);
        assert.ok(ships, `${p.name} ships ${target}, named in its package.json`);
      }
      const junk = [...paths].filter((path) =>
        /(^|\/)(test|tests|__tests__|coverage|node_modules)\/|\.test\.[cm]?[jt]s$|(^|\/)tsconfig[^/]*\.json$|\.tsbuildinfo$|\.log$|(^|\/)\.[^/]+$/.test(
          path,
        ),
      );
      assert.deepEqual(junk, [], `${p.name} ships no tests, build configuration or dotfiles`);
      // Built from the sources that ship, and from nothing else (no output of a deleted source).
      for (const path of paths) {
        if (path.startsWith("src/")) {
          const built = path.replace(/^src\//, "dist/").replace(/\.ts$/, ".js");
          assert.ok(paths.has(built), `${p.name}: ${path} has its compiled ${built}`);
        }
        if (path.startsWith("dist/") && path.endsWith(".js")) {
          const source = path.replace(/^dist\//, "src/").replace(/\.js$/, ".ts");
          assert.ok(paths.has(source), `${p.name}: ${path} is stale, no ${source} (prepack prunes such files)`);
        }
      }
    }
    const protocol = packed.find((p) => p.name === "@proto/protocol");
    assert.ok(
      protocol?.files.some((f) => f.path === "schema/discovery.schema.json"),
      "the discovery schema ships",
    );
  });

  test("npm install puts the tarballs and their dependencies into an empty project", {
    timeout: 15 * MINUTE,
  }, async (t) => {
    assert.equal(packed.length, PACKAGES.length, "npm pack failed above");
    cpSync(CONSUMER_TEMPLATE, project, {
      recursive: true,
      filter: (source) => !/(^|[\\/])(dist|node_modules)$/.test(source),
    });
    writeFileSync(
      join(project, "package.json"),
      `${JSON.stringify(
        {
          name: "proto-packaging-consumer",
          version: "0.0.0",
          private: true,
          type: "module",
          // better-sqlite3 (the kit's and the server's SQLite) builds its native module at install.
          allowScripts: { "better-sqlite3": true },
        },
        null,
        2,
      )}\n`,
    );
    // The versions the workspace is tested with, so the npm cache usually has them.
    const result = await npmInstall(t, project, [
      ...packed.map((p) => join(tarballs, p.filename)),
      `fastify@${workspaceVersion("fastify")}`,
      `@types/node@${workspaceVersion("@types/node")}`,
    ]);
    assert.equal(result.code, 0, explain("npm install", result));
    installed = true;
  });

  test("they install as plain packages, with every runtime import declared by a semver range", () => {
    assert.ok(installed, "npm install failed above");
    const semver = /^[\^~]?\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/;
    for (const name of PACKAGES) {
      const dir = installedDir(name);
      assert.ok(!lstatSync(dir).isSymbolicLink(), `${name} is a copy, not a link into the workspace`);
      assert.ok(isInside(project, realpathSync(dir)), `${name} lives in the project`);
      const manifest = readJson<Manifest>(join(dir, "package.json"));
      const declared = { ...manifest.dependencies, ...manifest.peerDependencies };
      for (const [dependency, range] of Object.entries(declared)) {
        assert.match(range, semver, `${name} depends on ${dependency} by a registry range, not ${range}`);
      }
      const dist = join(dir, "dist");
      const scripts = (readdirSync(dist, { recursive: true }) as string[]).filter((file) => file.endsWith(".js"));
      assert.ok(scripts.length > 0, `${name} has compiled JavaScript`);
      for (const file of scripts) {
        for (const specifier of bareImports(readFileSync(join(dist, file), "utf8"))) {
          if (isBuiltin(specifier)) continue;
          assert.ok(
            packageOf(specifier) in declared,
            `${name}: dist/${file} imports ${specifier}, which its package.json does not declare`,
          );
        }
      }
    }
    for (const absent of ["tsx", "typescript"]) {
      assert.ok(!existsSync(installedDir(absent)), `${absent} is not installed: the packages run without it`);
    }
  });

  test("the README quick starts type-check with tsc (nodenext, strict, library checks on)", {
    timeout: 5 * MINUTE,
  }, async (t) => {
    assert.ok(installed, "npm install failed above");
    const result = await timed(t, "tsc", () =>
      run(process.execPath, [TSC, "-p", join(project, "tsconfig.json")], { cwd: project, timeoutMs: 5 * MINUTE }),
    );
    assert.equal(result.code, 0, explain("tsc", result));
    assert.ok(existsSync(join(project, "dist", "main.js")));
  });

  test("proto --version and proto init run from node_modules/.bin", { timeout: 2 * MINUTE }, async () => {
    assert.ok(installed, "npm install failed above");
    const proto = join(project, "node_modules", ".bin", "proto");
    const version = await run(proto, ["--version"], { cwd: project, timeoutMs: MINUTE });
    assert.equal(version.code, 0, explain("proto --version", version));
    assert.equal(version.stdout.trim(), readJson<Manifest>(join(installedDir("@proto/agent"), "package.json")).version);

    const init = await run(proto, ["init", "--json"], {
      cwd: project,
      env: userEnv({ PROTO_HOME: home }),
      timeoutMs: MINUTE,
    });
    assert.equal(init.code, 0, explain("proto init", init));
    const created = JSON.parse(init.stdout) as { did: string; created: boolean; key_file: string };
    assert.match(created.did, /^did:key:z6Mk/);
    assert.equal(created.created, true);
    assert.equal(created.key_file, join(home, "key.json"));
    assert.ok(existsSync(created.key_file));
    agentDid = created.did;
  });

  test("compiled, on plain node: a kit service answers a request signed with signRequest", {
    timeout: 2 * MINUTE,
  }, async () => {
    assert.ok(existsSync(join(project, "dist", "main.js")), "tsc failed above");
    assert.notEqual(agentDid, "", "proto init failed above");
    mkdirSync(dataDir, { recursive: true });
    const result = await run(process.execPath, [join(project, "dist", "main.js"), dataDir], {
      cwd: project,
      env: userEnv({ PROTO_HOME: home }),
      timeoutMs: MINUTE,
    });
    assert.equal(result.code, 0, explain("node dist/main.js", result));
    const seen = JSON.parse(result.stdout.trim().split("\n").at(-1) ?? "") as {
      freshDidIsDidKey: boolean;
      agentDid: string;
      accepted: { status: number; body: { owner?: string; did?: string; note?: unknown } };
      tampered: { status: number; body: { error?: { code?: string } } };
      discovery: { status: number; valid: boolean; document: { service_did?: string } };
      schemaId: string;
      schemaFileId: string;
      configError: string;
    };
    assert.equal(seen.freshDidIsDidKey, true);
    assert.equal(seen.agentDid, agentDid, "the SDK loads the key the proto command created");
    assert.equal(seen.accepted.status, 200, JSON.stringify(seen.accepted));
    assert.deepEqual(seen.accepted.body, {
      owner: "UNCLAIMED",
      did: agentDid,
      note: { text: "hello from a tarball" },
    });
    assert.equal(seen.tampered.status, 401);
    assert.equal(seen.tampered.body.error?.code, "invalid_signature");
    assert.equal(seen.discovery.status, 200);
    assert.equal(seen.discovery.valid, true);
    assert.equal(seen.discovery.document.service_did, "did:web:notes.example");
    assert.equal(seen.schemaFileId, seen.schemaId, "the schema file export is the schema the validator uses");
    assert.equal(seen.configError, "ConfigError");
  });

  test("proto-server directory from node_modules/.bin answers GET /healthz; proto-conformance finds it conforming", {
    timeout: 2 * MINUTE,
  }, async () => {
    assert.ok(installed, "npm install failed above");
    const database = join(dataDir, "directory", "directory.db");
    const child = spawn(
      join(project, "node_modules", ".bin", "proto-server"),
      ["directory", "--port", "0", "--host", "127.0.0.1"],
      {
        cwd: project,
        env: userEnv({ DIRECTORY_DATABASE_URL: `sqlite:${database}`, LOG_LEVEL: "info" }),
        stdio: ["ignore", "pipe", "pipe"],
        detached: true,
      },
    );
    track(child);
    let output = "";
    const exited = new Promise<number | null>((resolve) => child.once("close", (code) => resolve(code)));
    // Readiness is the server's own "listening" log line; the timer only guards against a hang.
    const origin = await new Promise<string>((resolve, reject) => {
      const guard = setTimeout(() => reject(new Error(`proto-server did not start:\n${output}`)), MINUTE);
      const look = (chunk: string) => {
        output += chunk;
        const match = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output);
        if (match?.[1] !== undefined) {
          clearTimeout(guard);
          resolve(match[1]);
        }
      };
      child.stdout.setEncoding("utf8").on("data", look);
      child.stderr.setEncoding("utf8").on("data", look);
      void exited.then((code) => {
        clearTimeout(guard);
        reject(new Error(`proto-server exited (${code}) before listening:\n${output}`));
      });
    });
    try {
      const health = await fetch(`${origin}/healthz`);
      assert.equal(health.status, 200);
      assert.deepEqual(await health.json(), { status: "ok" });
      assert.ok(existsSync(database), "the directory keeps its SQLite database in the data directory given");
      // proto-conformance from node_modules/.bin checks the running directory: nothing fails.
      const checked = await run(
        join(project, "node_modules", ".bin", "proto-conformance"),
        ["directory", origin, "--json"],
        { cwd: project, env: userEnv({}), timeoutMs: MINUTE },
      );
      assert.equal(checked.code, 0, explain("proto-conformance directory", checked));
      const report = JSON.parse(checked.stdout) as unknown;
      assert.ok(JSON.stringify(report).includes("directory.listings.read"), checked.stdout);
    } finally {
      child.kill("SIGTERM");
    }
    assert.equal(await exited, 0, `proto-server exits 0 on SIGTERM:\n${output}`);
  });
});
