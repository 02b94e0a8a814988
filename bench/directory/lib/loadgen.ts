/**
 * Child process: a plain Node.js load generator, used only when neither wrk nor autocannon is
 * available. N keep-alive connections, each sending its next request when the previous answer
 * is complete, for a fixed time; prints one JSON LoadResult.
 *   loadgen.ts <base-url> <paths-file> <connections> <seconds>
 */
import { readFileSync } from "node:fs";
import { Agent, request } from "node:http";

const [base, pathsFile, connectionsArg, secondsArg] = process.argv.slice(2);
if (base === undefined || pathsFile === undefined)
  throw new Error("usage: loadgen.ts <base> <paths> <connections> <seconds>");
const paths = readFileSync(pathsFile, "utf8")
  .split("\n")
  .filter((p) => p !== "");
const connections = Number(connectionsArg ?? 50);
const seconds = Number(secondsArg ?? 10);
const url = new URL(base);
const agent = new Agent({ keepAlive: true, maxSockets: connections });
const latencies: number[] = [];
let errors = 0;
let non2xx = 0;
let next = 0;
const started = performance.now();
const deadline = started + seconds * 1000;

function one(): Promise<void> {
  return new Promise((resolve) => {
    const path = paths[next++ % paths.length] as string;
    const sent = performance.now();
    const req = request({ host: url.hostname, port: url.port, path, agent, method: "GET" }, (res) => {
      res.on("data", () => {});
      res.on("end", () => {
        if ((res.statusCode ?? 0) >= 300) non2xx++;
        latencies.push(performance.now() - sent);
        resolve();
      });
    });
    req.on("error", () => {
      errors++;
      resolve();
    });
    req.end();
  });
}

async function loop(): Promise<void> {
  while (performance.now() < deadline) await one();
}

await Promise.all(Array.from({ length: connections }, loop));
const elapsed = (performance.now() - started) / 1000;
latencies.sort((a, b) => a - b);
const at = (p: number) =>
  latencies[Math.min(latencies.length - 1, Math.ceil((p / 100) * latencies.length) - 1)] ?? Number.NaN;
agent.destroy();
process.stdout.write(
  JSON.stringify({
    requests: latencies.length,
    seconds: elapsed,
    rps: latencies.length / elapsed,
    p50ms: at(50),
    p99ms: at(99),
    errors,
    non2xx,
  }),
);
