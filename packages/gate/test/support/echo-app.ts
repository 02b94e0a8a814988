/** The Python application of the gate's tests (test/support/echo_app.py), started and stopped as a process. */
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";

const SCRIPT = fileURLToPath(new URL("./echo_app.py", import.meta.url));

export interface EchoApp {
  port: number;
  stop(): Promise<void>;
}

export async function startEchoApp(port: number): Promise<EchoApp> {
  const child: ChildProcess = spawn("python3", [SCRIPT, String(port)], { stdio: ["ignore", "pipe", "inherit"] });
  const [line] = (await Promise.race([
    once(child.stdout!, "data"),
    once(child, "exit").then(() => {
      throw new Error("the Python echo app exited at start");
    }),
  ])) as [Buffer];
  if (!line.toString().includes("listening")) throw new Error(`the Python echo app said ${line.toString()}`);
  return {
    port,
    async stop() {
      if (child.exitCode !== null) return;
      child.kill("SIGTERM");
      await once(child, "exit");
    },
  };
}
