/**
 * Child processes for the HTTP benchmarks: servers started with tsx, or the compiled `proto-server`,
 * stopped by their own pid.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { createServer } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export interface Child {
  process: ChildProcess;
  port: number;
  stop(): Promise<void>;
}

/** SIGTERM, then SIGKILL after 10 s; resolves once the child has exited. */
function stopChild(child: ChildProcess): Promise<void> {
  return new Promise<void>((done) => {
    if (child.exitCode !== null || child.signalCode !== null) return done();
    const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
    child.once("exit", () => {
      clearTimeout(timer);
      done();
    });
    child.kill("SIGTERM");
  });
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
        stop: () => stopChild(child),
      });
    });
  });
}

const root = fileURLToPath(new URL("../../../", import.meta.url));

/**
 * Compiles the packages the server needs (`tsc -b`, incremental: seconds when nothing changed),
 * so that `startProtoServer` runs the sources as they are.
 */
export function buildServer(): void {
  execFileSync(
    process.execPath,
    [join(root, "node_modules/typescript/bin/tsc"), "-b", "packages/protocol", "packages/server"],
    { cwd: root, stdio: "inherit" },
  );
}

/** A free TCP port on 127.0.0.1 (free when asked; the server binds it right after). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (address !== null && typeof address === "object" ? resolve(address.port) : reject()));
    });
  });
}

/**
 * Starts the compiled `proto-server <command>` as an operator runs it (no TypeScript loader in
 * the process, so its memory is the product's), on 127.0.0.1 at a free port, and waits until
 * `/healthz` answers.
 */
export async function startProtoServer(command: "directory" | "trust", env: Record<string, string>): Promise<Child> {
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [join(root, "packages/server/bin/proto-server.js"), command, "--port", String(port), "--host", "127.0.0.1"],
    { env: { ...process.env, ...env }, stdio: ["ignore", "ignore", "pipe"] },
  );
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
    if (stderr.length > 20_000) stderr = stderr.slice(-10_000);
  });
  const stop = () => stopChild(child);
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null)
      throw new Error(
        `proto-server ${command} exited with ${child.exitCode ?? child.signalCode}:\n${stderr.slice(-4000)}`,
      );
    const ok = await fetch(`http://127.0.0.1:${port}/healthz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return { process: child, port, stop };
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`proto-server ${command} did not answer /healthz:\n${stderr.slice(-4000)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
