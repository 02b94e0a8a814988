/**
 * Load generation from a separate process: Debian's `wrk` when it is installed (preferred: C,
 * cheap per request), else `autocannon` when `npx --no-install autocannon` finds it, else a small
 * Node.js generator (`loadgen.ts`) run as its own process. Each request takes the next path of a
 * list, round robin (autocannon repeats the first path only).
 */
import { execFile, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);

export interface LoadResult {
  requests: number;
  seconds: number;
  rps: number;
  p50ms: number;
  p99ms: number;
  errors: number;
  non2xx: number;
}

export type Generator = "wrk" | "autocannon" | "node";

export function pickGenerator(preferred?: string): Generator {
  const has = (command: string, argv: string[]) => {
    try {
      execFileSync(command, argv, { stdio: "ignore", timeout: 30_000 });
      return true;
    } catch {
      return false;
    }
  };
  if (preferred === "wrk" || preferred === "autocannon" || preferred === "node") return preferred;
  if (has("sh", ["-c", "command -v wrk"])) return "wrk";
  if (has("npx", ["--no-install", "autocannon", "--version"])) return "autocannon";
  return "node";
}

const WRK_SCRIPT = `
local paths = {}
for line in io.lines(os.getenv("BENCH_PATHS")) do paths[#paths + 1] = line end
local i = math.random(#paths)
request = function()
  i = i + 1
  if i > #paths then i = 1 end
  return wrk.format("GET", paths[i])
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('RESULT {"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"errors":%d,"non2xx":%d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, e.status))
end
`;

export class LoadGenerator {
  readonly kind: Generator;
  readonly #dir: string;
  readonly #pathsFile: string;
  readonly #firstPath: string;

  constructor(kind: Generator, paths: readonly string[]) {
    this.kind = kind;
    this.#dir = mkdtempSync(join(tmpdir(), "proto-bench-load-"));
    this.#pathsFile = join(this.#dir, "paths.txt");
    writeFileSync(this.#pathsFile, `${paths.join("\n")}\n`);
    writeFileSync(join(this.#dir, "paths.lua"), WRK_SCRIPT);
    this.#firstPath = paths[0] ?? "/";
  }

  /** Runs `connections` keep-alive connections against 127.0.0.1:port for `seconds`. */
  async run(port: number, connections: number, seconds: number, threads = 1): Promise<LoadResult> {
    const base = `http://127.0.0.1:${port}`;
    const timeout = (seconds + 60) * 1000;
    if (this.kind === "wrk") {
      const { stdout } = await run(
        "wrk",
        [`-t${threads}`, `-c${connections}`, `-d${seconds}s`, "--latency", "-s", join(this.#dir, "paths.lua"), base],
        { env: { ...process.env, BENCH_PATHS: this.#pathsFile }, timeout, maxBuffer: 1 << 20 },
      );
      const match = /RESULT (\{.*\})/.exec(stdout);
      if (match === null) throw new Error(`wrk printed no result:\n${stdout}`);
      const r = JSON.parse(match[1] as string) as Record<string, number>;
      const secondsRun = (r.duration_us as number) / 1e6;
      return {
        requests: r.requests as number,
        seconds: secondsRun,
        rps: (r.requests as number) / secondsRun,
        p50ms: (r.p50_us as number) / 1000,
        p99ms: (r.p99_us as number) / 1000,
        errors: r.errors as number,
        non2xx: r.non2xx as number,
      };
    }
    if (this.kind === "autocannon") {
      const { stdout } = await run(
        "npx",
        [
          "--no-install",
          "autocannon",
          "-c",
          String(connections),
          "-d",
          String(seconds),
          "-j",
          `${base}${this.#firstPath}`,
        ],
        { timeout, maxBuffer: 16 << 20 },
      );
      const r = JSON.parse(stdout) as {
        requests: { total: number };
        duration: number;
        latency: { p50: number; p99: number };
        errors: number;
        timeouts: number;
        non2xx: number;
      };
      return {
        requests: r.requests.total,
        seconds: r.duration,
        rps: r.requests.total / r.duration,
        p50ms: r.latency.p50,
        p99ms: r.latency.p99,
        errors: r.errors + r.timeouts,
        non2xx: r.non2xx,
      };
    }
    const { stdout } = await run(
      process.execPath,
      [
        "--conditions=source",
        "--import",
        "tsx",
        fileURLToPath(new URL("./loadgen.ts", import.meta.url)),
        base,
        this.#pathsFile,
        String(connections),
        String(seconds),
      ],
      { timeout, maxBuffer: 1 << 20 },
    );
    return JSON.parse(stdout) as LoadResult;
  }

  close(): void {
    rmSync(this.#dir, { recursive: true, force: true });
  }
}
