/**
 * What the packaging tests share: running commands as a user's shell would (no workspace
 * node_modules/.bin on PATH, no tsx or test-runner variables), `npm pack` of the published
 * packages, and `npm install` of the tarballs into an empty project outside the workspace.
 *
 * Third-party dependencies come from the npm registry (`--prefer-offline`: the local cache first).
 * Each test file asks `registryProblem()` first and skips when the registry cannot be reached,
 * except under CI=true, where that is a failure.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, isAbsolute, join, relative } from "node:path";
import type { TestContext } from "node:test";
import { fileURLToPath } from "node:url";

export const REPO_ROOT = fileURLToPath(new URL("../../../../", import.meta.url));
export const TSC = join(REPO_ROOT, "node_modules", "typescript", "bin", "tsc");
export const PACKAGES = [
  "@proto/protocol",
  "@proto/agent",
  "@proto/kit",
  "@proto/server",
  "@proto/conformance",
] as const;
export type PackageName = (typeof PACKAGES)[number];
export const MINUTE = 60_000;

export function isInside(parent: string, child: string): boolean {
  const path = relative(parent, child);
  return path === "" || (!path.startsWith("..") && !isAbsolute(path));
}

/**
 * The parent's environment without what the test runner, npm's script runner (which runs the
 * tests inside the workspace) or the services' configuration put there, and with a PATH that
 * reaches no workspace node_modules/.bin: the children see what a user's shell would give them.
 */
export function userEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (value === undefined) continue;
    if (
      /^(NODE_OPTIONS|NODE_PATH|NODE_ENV|NODE_TEST_CONTEXT|INIT_CWD|PROTO_|DIRECTORY_|TRUST_|REDIS_URL|LOG_LEVEL|npm_package_|npm_lifecycle_|npm_config_local_prefix|npm_config_workspace)/.test(
        key,
      )
    ) {
      continue;
    }
    env[key] = value;
  }
  const path = (process.env.PATH ?? "").split(delimiter).filter((dir) => dir !== "" && !isInside(REPO_ROOT, dir));
  // This node first, so the bins' `#!/usr/bin/env node` runs the version under test.
  env.PATH = [dirname(process.execPath), ...path].join(delimiter);
  return { ...env, ...extra };
}

export interface Finished {
  code: number | null;
  signal: NodeJS.Signals | null;
  timedOut: boolean;
  stdout: string;
  stderr: string;
}

const children: ChildProcess[] = [];

/** Remembers a child so `killChildren` ends it (and what it started) when the file's tests end. */
export function track(child: ChildProcess): ChildProcess {
  children.push(child);
  return child;
}

/** Runs a command to its end; a guard kills its whole process group if it hangs. */
export function run(
  command: string,
  args: readonly string[],
  options: { cwd: string; env?: Record<string, string>; timeoutMs: number },
): Promise<Finished> {
  return new Promise((resolve, reject) => {
    const child = track(
      spawn(command, args, {
        cwd: options.cwd,
        env: options.env ?? userEnv(),
        stdio: ["ignore", "pipe", "pipe"],
        detached: true,
      }),
    );
    let stdout = "";
    let stderr = "";
    let timedOut = false;
    child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk;
    });
    child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk;
    });
    const guard = setTimeout(() => {
      timedOut = true;
      killGroup(child);
    }, options.timeoutMs);
    child.once("error", (error) => {
      clearTimeout(guard);
      reject(error);
    });
    child.once("close", (code, signal) => {
      clearTimeout(guard);
      resolve({ code, signal, timedOut, stdout, stderr });
    });
  });
}

/** The child and what it started (npm's scripts, node-gyp's compilers): its own process group. */
export function killGroup(child: ChildProcess): void {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  try {
    process.kill(-child.pid, "SIGKILL");
  } catch {
    // Already gone.
  }
}

/** Ends every child still running; for the file's `after` hook. */
export function killChildren(): void {
  for (const child of children) killGroup(child);
}

function tail(text: string): string {
  return text.length > 6000 ? `…${text.slice(-6000)}` : text;
}

export function explain(what: string, result: Finished): string {
  const end = result.timedOut ? "timed out" : `exit ${result.code ?? result.signal}`;
  return `${what}: ${end}\n--- stdout\n${tail(result.stdout)}\n--- stderr\n${tail(result.stderr)}`;
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}

/** Runs a step and reports its duration under the test, for whoever watches the suite's time. */
export async function timed<T>(t: TestContext, label: string, step: () => Promise<T>): Promise<T> {
  const start = performance.now();
  try {
    return await step();
  } finally {
    t.diagnostic(`${label} took ${seconds(performance.now() - start)}`);
  }
}

/** Why the registry cannot be used, or undefined when `npm ping` answers. */
export async function registryProblem(): Promise<string | undefined> {
  // One attempt, so an offline machine learns it in seconds rather than after npm's retries.
  const ping = await run("npm", ["ping", "--fetch-retries=0", "--fetch-timeout=30000"], {
    cwd: tmpdir(),
    timeoutMs: MINUTE,
  });
  if (ping.code === 0) return undefined;
  const firstError = ping.stderr.split("\n").find((line) => line.startsWith("npm error") && !/complete log/.test(line));
  const reason = ping.timedOut ? "no answer within a minute" : (firstError ?? `exit ${ping.code}`);
  return `the npm registry cannot be reached (npm ping: ${reason})`;
}

export interface PackedFile {
  path: string;
}
export interface Packed {
  name: string;
  version: string;
  filename: string;
  files: PackedFile[];
}
export interface Manifest {
  name: string;
  version: string;
  bin?: Record<string, string>;
  exports?: unknown;
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
}

export function readJson<T>(path: string): T {
  return JSON.parse(readFileSync(path, "utf8")) as T;
}

/** The version of a package in the workspace's node_modules: the one the workspace is tested with. */
export function workspaceVersion(name: string): string {
  return readJson<Manifest>(join(REPO_ROOT, "node_modules", ...name.split("/"), "package.json")).version;
}

/**
 * `npm pack` of the named workspaces into `destination` (their `prepack` builds them first). The
 * packaging test files run one at a time (`--test-concurrency=1`), so two builds of the same
 * packages never overlap.
 */
export async function packWorkspaces(
  t: TestContext,
  names: readonly PackageName[],
  destination: string,
): Promise<{ result: Finished; packed: Packed[] }> {
  const args = ["pack", ...names.flatMap((name) => ["-w", name]), "--pack-destination", destination, "--json"];
  const result = await timed(t, "npm pack", () => run("npm", args, { cwd: REPO_ROOT, timeoutMs: 10 * MINUTE }));
  if (result.code !== 0) return { result, packed: [] };
  // The prepack scripts (tsc -b) may print before npm's JSON.
  const packed = JSON.parse(result.stdout.slice(result.stdout.search(/^\[/m))) as Packed[];
  for (const p of packed) {
    if (!existsSync(join(destination, p.filename))) throw new Error(`npm pack did not write ${p.filename}`);
  }
  return { result, packed };
}

/** `npm install` of packages (tarball paths or `name@version`) into a project, from the cache first. */
export function npmInstall(
  t: TestContext,
  project: string,
  specs: readonly string[],
  options: { ignoreScripts?: boolean; timeoutMs?: number } = {},
): Promise<Finished> {
  const args = [
    "install",
    ...specs,
    "--prefer-offline",
    "--no-audit",
    "--no-fund",
    ...(options.ignoreScripts === true ? ["--ignore-scripts"] : []),
  ];
  return timed(t, `npm install in ${project}`, () =>
    run("npm", args, { cwd: project, timeoutMs: options.timeoutMs ?? 15 * MINUTE }),
  );
}
