/**
 * Real dependency processes a test owns and can fail on purpose: a private PostgreSQL cluster
 * and a private redis-server, each on a port of its own, a second process holding SQLite's write
 * lock, and a small tmpfs to fill up. Nothing here touches the machine's own PostgreSQL or Redis.
 *
 * PostgreSQL's initdb refuses to run as root, so when the test runs as root the cluster belongs
 * to the `postgres` OS user (commands run through `runuser`), in a temporary directory it owns.
 */
import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process";
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { createConnection } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { promisify } from "node:util";
import pg from "pg";
import { freePort } from "./trust.js";

const run = promisify(execFile);
const isRoot = process.getuid?.() === 0;

/** Undoes everything still standing if the test process ends early (a failed `before`, Ctrl-C). */
const exitCleanups = new Set<() => void>();
process.once("exit", () => {
  for (const cleanup of exitCleanups) {
    try {
      cleanup();
    } catch {
      // Best effort: the process is ending.
    }
  }
});

function onPath(command: string): boolean {
  return (process.env.PATH ?? "").split(delimiter).some((dir) => dir !== "" && existsSync(join(dir, command)));
}

/** The newest PostgreSQL server binaries of the Debian layout, or undefined. */
function postgresBinDir(): string | undefined {
  const root = "/usr/lib/postgresql";
  if (!existsSync(root)) return undefined;
  const versions = readdirSync(root)
    .filter((name) => /^\d+$/.test(name))
    .sort((a, b) => Number(b) - Number(a));
  for (const version of versions) {
    const bin = join(root, version, "bin");
    if (existsSync(join(bin, "initdb")) && existsSync(join(bin, "pg_ctl"))) return bin;
  }
  return undefined;
}

/** Why a private PostgreSQL cannot be started here, or undefined when it can. */
export function postgresMissing(): string | undefined {
  if (postgresBinDir() === undefined) return "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin";
  if (isRoot && !onPath("runuser")) return "running as root without runuser (initdb refuses root)";
  if (isRoot && osUser("postgres") === undefined) return "running as root and there is no postgres OS user";
  return undefined;
}

/** Why a private redis-server cannot be started here, or undefined when it can. */
export function redisMissing(): string | undefined {
  return onPath("redis-server") ? undefined : "redis-server is not on the PATH";
}

function osUser(name: string): { uid: number; gid: number } | undefined {
  try {
    const uid = Number(execFileSync("id", ["-u", name], { encoding: "utf8" }).trim());
    const gid = Number(execFileSync("id", ["-g", name], { encoding: "utf8" }).trim());
    return { uid, gid };
  } catch {
    return undefined;
  }
}

// ---- PostgreSQL ---------------------------------------------------------------------------

export type ShutdownMode = "smart" | "fast" | "immediate";

export interface PrivatePostgres {
  port: number;
  /** The URL of a database on this cluster (created by `createDatabase`). */
  url(database: string): string;
  createDatabase(name: string, options?: { tablespace?: string }): Promise<string>;
  /** A tablespace in `directory` (which must be empty and owned by the cluster's OS user). */
  createTablespace(name: string, directory: string): Promise<void>;
  /** The cluster's OS user, for directories it must own (a tablespace). */
  owner: { uid: number; gid: number } | undefined;
  /** `pg_ctl restart`: every connection is dropped, the server is back when this resolves. */
  restart(mode: ShutdownMode): Promise<void>;
  stop(mode: ShutdownMode): Promise<void>;
  start(): Promise<void>;
  /** Stops the cluster and removes its files. */
  close(): Promise<void>;
}

export async function startPostgres(): Promise<PrivatePostgres> {
  const bin = postgresBinDir();
  if (bin === undefined) throw new Error(postgresMissing());
  const owner = isRoot ? osUser("postgres") : undefined;
  const root = mkdtempSync(join(tmpdir(), "proto-pg-"));
  if (owner !== undefined) chownSync(root, owner.uid, owner.gid);
  const data = join(root, "data");
  const log = join(root, "server.log");
  const port = await freePort();
  // fsync off: a process restart (what these tests do) loses nothing, only an OS crash would.
  // synchronous_commit stays on, so an acknowledged commit is in the WAL before the answer.
  const options = [
    `-p ${port}`,
    `-k ${root}`,
    "-c listen_addresses=127.0.0.1",
    "-c fsync=off",
    "-c full_page_writes=off",
    "-c max_connections=60",
  ].join(" ");
  const command = (tool: string, args: string[]) => {
    const path = join(bin, tool);
    return owner === undefined
      ? { file: path, args }
      : { file: "runuser", args: ["-u", "postgres", "--", path, ...args] };
  };
  const pgCtl = async (args: string[]) => {
    const { file, args: full } = command("pg_ctl", ["-D", data, "-l", log, "-w", "-t", "60", ...args]);
    try {
      await run(file, full, { cwd: root });
    } catch (error) {
      throw new Error(`pg_ctl ${args.join(" ")} failed: ${String(error)}`);
    }
  };
  const stopNow = () => {
    const { file, args } = command("pg_ctl", ["-D", data, "-m", "immediate", "-w", "stop"]);
    execFileSync(file, args, { stdio: "ignore", cwd: root });
  };
  const cleanup = () => {
    if (existsSync(join(data, "postmaster.pid"))) stopNow();
    rmSync(root, { recursive: true, force: true });
  };
  exitCleanups.add(cleanup);
  try {
    const initdb = command("initdb", ["-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"]);
    await run(initdb.file, initdb.args, { cwd: root });
    await pgCtl(["-o", options, "start"]);
  } catch (error) {
    exitCleanups.delete(cleanup);
    cleanup();
    throw error;
  }
  const url = (database: string) => `postgres://postgres@127.0.0.1:${port}/${database}`;
  const admin = async (statement: string) => {
    const client = new pg.Client({ connectionString: url("postgres") });
    await client.connect();
    try {
      await client.query(statement);
    } finally {
      await client.end();
    }
  };
  return {
    port,
    owner,
    url,
    async createDatabase(name, { tablespace } = {}) {
      await admin(`create database ${name}${tablespace === undefined ? "" : ` tablespace ${tablespace}`}`);
      return url(name);
    },
    async createTablespace(name, directory) {
      await admin(`create tablespace ${name} location '${directory}'`);
    },
    restart: (mode) => pgCtl(["-m", mode, "-o", options, "restart"]),
    stop: (mode) => pgCtl(["-m", mode, "stop"]),
    start: () => pgCtl(["-o", options, "start"]),
    async close() {
      exitCleanups.delete(cleanup);
      cleanup();
    },
  };
}

// ---- Redis --------------------------------------------------------------------------------

export interface PrivateRedis {
  port: number;
  url: string;
  /** Stops the server (its data is gone: nothing is saved). */
  stop(signal?: NodeJS.Signals): Promise<void>;
  /** Starts it again on the same port, empty. */
  start(): Promise<void>;
  close(): Promise<void>;
}

/** Resolves once something accepts TCP connections on `port`. */
async function listening(port: number, deadlineMs: number, exited: () => boolean): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    if (exited()) throw new Error(`the process for port ${port} ended before it listened`);
    const open = await new Promise<boolean>((resolve) => {
      const socket = createConnection({ port, host: "127.0.0.1" });
      socket.once("connect", () => {
        socket.destroy();
        resolve(true);
      });
      socket.once("error", () => resolve(false));
    });
    if (open) return;
    if (Date.now() > deadline) throw new Error(`nothing listened on port ${port} in time`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

export async function startRedis(): Promise<PrivateRedis> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "proto-redis-"));
  let child: ChildProcess | undefined;
  let output = "";
  const alive = () => child !== undefined && child.exitCode === null && child.signalCode === null;
  const cleanup = () => {
    if (alive()) child?.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  };
  exitCleanups.add(cleanup);
  const start = async () => {
    if (alive()) throw new Error("redis-server is already running");
    const started = spawn(
      "redis-server",
      [
        ...["--port", String(port), "--bind", "127.0.0.1", "--dir", dir],
        ...["--save", "", "--appendonly", "no", "--daemonize", "no"],
      ],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    child = started;
    started.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
      output = (output + chunk).slice(-4000);
    });
    started.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
      output = (output + chunk).slice(-4000);
    });
    try {
      await listening(port, 10_000, () => started.exitCode !== null || started.signalCode !== null);
    } catch (error) {
      throw new Error(`${String(error)}\n${output}`);
    }
  };
  const stop = async (signal: NodeJS.Signals = "SIGTERM") => {
    const current = child;
    if (current === undefined || !alive()) return;
    const closed = new Promise((resolve) => current.once("close", resolve));
    current.kill(signal);
    await closed;
  };
  try {
    await start();
  } catch (error) {
    exitCleanups.delete(cleanup);
    cleanup();
    throw error;
  }
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    start,
    stop,
    async close() {
      await stop("SIGKILL");
      exitCleanups.delete(cleanup);
      cleanup();
    },
  };
}

// ---- SQLite -------------------------------------------------------------------------------

const BETTER_SQLITE3 = createRequire(import.meta.url).resolve("better-sqlite3");

// Runs in a second node process: the write lock of another process, as `sqlite3` on the live
// file or a maintenance job would hold it.
const HOLD_LOCK_SCRIPT = `
const Database = require(process.argv[1]);
const db = new Database(process.argv[2]);
db.exec("pragma busy_timeout = 10000");
db.exec("BEGIN IMMEDIATE");
process.stdout.write("locked\\n");
setTimeout(() => { db.exec("COMMIT"); db.close(); process.exit(0); }, Number(process.argv[3]));
`;

export interface HeldLock {
  /** Resolves once the other process has committed and ended (the lock is free). */
  released: Promise<void>;
}

/** A second process takes SQLite's write lock on `path` (BEGIN IMMEDIATE) and holds it `ms`. */
export async function holdSqliteWriteLock(path: string, ms: number): Promise<HeldLock> {
  const child = spawn(process.execPath, ["-e", HOLD_LOCK_SCRIPT, BETTER_SQLITE3, path, String(ms)], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  const cleanup = () => child.kill("SIGKILL");
  exitCleanups.add(cleanup);
  let output = "";
  const released = new Promise<void>((resolve, reject) => {
    child.once("close", (code) => {
      exitCleanups.delete(cleanup);
      if (code === 0) resolve();
      else reject(new Error(`the lock holder ended with ${code}: ${output}`));
    });
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
      output += chunk;
      if (output.includes("locked")) resolve();
    });
    child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
      output += chunk;
    });
    released.catch(reject);
  });
  return { released };
}

// ---- a disk that fills up -----------------------------------------------------------------

export interface Tmpfs {
  path: string;
  /** Writes a filler file until the file system has no space left. */
  fill(): void;
  /** Removes the filler: space again. */
  free(): void;
  close(): void;
}

/**
 * A tmpfs of `sizeMiB` mounted on a fresh directory (owned by `owner` when given), or the reason
 * it cannot be (not root, no mount permission in this container).
 */
export function mountTmpfs(sizeMiB: number, owner?: { uid: number; gid: number }): Tmpfs | string {
  const path = mkdtempSync(join(tmpdir(), "proto-tmpfs-"));
  const ids = owner === undefined ? "" : `,uid=${owner.uid},gid=${owner.gid}`;
  try {
    execFileSync("mount", ["-t", "tmpfs", "-o", `size=${sizeMiB}m,mode=0755${ids}`, "tmpfs", path], {
      stdio: "pipe",
    });
  } catch (error) {
    rmSync(path, { recursive: true, force: true });
    const detail = (error as { stderr?: Buffer }).stderr?.toString().trim() || String(error);
    return `cannot mount a tmpfs here (${detail})`;
  }
  if (owner !== undefined) chmodSync(path, 0o700);
  const filler = join(path, "filler");
  const cleanup = () => {
    execFileSync("umount", ["-l", path], { stdio: "ignore" });
    rmSync(path, { recursive: true, force: true });
  };
  exitCleanups.add(cleanup);
  return {
    path,
    fill() {
      // Big blocks, then small ones for what is left: no room for even one more database page.
      for (const bs of ["1M", "4k"]) {
        try {
          execFileSync("dd", ["if=/dev/zero", `of=${filler}`, `bs=${bs}`, "oflag=append", "conv=notrunc"], {
            stdio: "ignore",
          });
        } catch {
          // dd ends with ENOSPC: the disk is full, which is the point.
        }
      }
    },
    free() {
      rmSync(filler, { force: true });
    },
    close() {
      exitCleanups.delete(cleanup);
      cleanup();
    },
  };
}
