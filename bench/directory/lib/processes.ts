/** Child processes for the HTTP benchmarks: servers started with tsx, stopped by their own pid. */
import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

export interface Child {
  process: ChildProcess;
  port: number;
  stop(): Promise<void>;
}

const here = (file: string) => fileURLToPath(new URL(file, import.meta.url));

/**
 * Starts `file` (a TypeScript file beside this one) as its own Node.js process and waits until it
 * prints `READY <port>`.
 */
export function startChild(file: string, env: Record<string, string>, nodeArgs: string[] = []): Promise<Child> {
  const child = spawn(process.execPath, [...nodeArgs, "--conditions=source", "--import", "tsx", here(file)], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
    if (stderr.length > 20_000) stderr = stderr.slice(-10_000);
  });
  return new Promise((resolve, reject) => {
    let stdout = "";
    const onExit = (code: number | null) =>
      reject(new Error(`${file} exited with ${code} before it was ready:\n${stderr.slice(-4000)}`));
    child.once("exit", onExit);
    child.stdout?.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
      const match = /READY (\d+)/.exec(stdout);
      if (match === null) return;
      child.off("exit", onExit);
      child.stdout?.removeAllListeners("data");
      child.stdout?.resume();
      resolve({
        process: child,
        port: Number(match[1]),
        stop: () =>
          new Promise<void>((done) => {
            if (child.exitCode !== null || child.signalCode !== null) return done();
            const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
            child.once("exit", () => {
              clearTimeout(timer);
              done();
            });
            child.kill("SIGTERM");
          }),
      });
    });
  });
}
