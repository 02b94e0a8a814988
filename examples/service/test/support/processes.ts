/**
 * Commands the README tests run as a person would, in a terminal: their output kept, waited for by
 * pattern, and every one stopped when the test file ends (a group leader with its whole group).
 */
import { type ChildProcess, spawn } from "node:child_process";

export interface Run {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves with the first match in stdout; rejects when the process ends first. */
  waitFor(pattern: RegExp): Promise<RegExpMatchArray>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export interface StartOptions {
  cwd: string;
  env: Record<string, string>;
  /** Lead a process group of its own, so a signal reaches everything under it, as Ctrl-C does. */
  group?: boolean;
  /** A guard against a hang, never a timing assertion: past it the process is killed. */
  timeoutMs?: number;
}

/** Every process started here; each is killed by `stopAll`. */
const started: { child: ChildProcess; group: boolean }[] = [];

export function start(command: string, args: string[], options: StartOptions): Run {
  const group = options.group === true;
  const child = spawn(command, args, {
    cwd: options.cwd,
    env: options.env,
    stdio: ["ignore", "pipe", "pipe"],
    detached: group,
  });
  started.push({ child, group });
  let out = "";
  let err = "";
  const waiters = new Set<() => void>();
  const notify = () => {
    for (const waiter of [...waiters]) waiter();
  };
  child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
    out += chunk;
    notify();
  });
  child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
    err += chunk;
    notify();
  });
  const guard =
    options.timeoutMs === undefined ? undefined : setTimeout(() => stop(child, "SIGKILL"), options.timeoutMs);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once("close", (code, signal) => {
      clearTimeout(guard);
      resolve({ code, signal });
      notify();
    });
  });
  return {
    child,
    stdout: () => out,
    stderr: () => err,
    exited,
    waitFor(pattern) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const match = out.match(pattern);
          if (match) {
            waiters.delete(check);
            resolve(match);
          } else if (child.exitCode !== null || child.signalCode !== null) {
            waiters.delete(check);
            reject(new Error(`${command} ${args.join(" ")} ended before ${pattern}:\n${out}\n${err}`));
          }
        };
        waiters.add(check);
        check();
      });
    },
  };
}

/** Sends `signal` to a process started here (to its whole group when it leads one), if it still runs. */
export function stop(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const group = started.find((entry) => entry.child === child)?.group ?? false;
  try {
    process.kill(group ? -child.pid : child.pid, signal);
  } catch {
    // Already gone.
  }
}

/** Kills whatever is still running: only what was started here, each by its own id or group. */
export function stopAll(): void {
  for (const { child } of started) stop(child, "SIGKILL");
}
