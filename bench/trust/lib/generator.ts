/**
 * A load-generator process for `bench/trust/mint.ts`. Every request is signed here, before any
 * timed phase, so signing never competes with the server for CPU while it is measured:
 *   <- { type: "prepare", url, publicUrl, agents, created, phases: {name, count}[], connections, offset, audiences }
 *   -> { type: "prepared", ms }
 *   <- { type: "run", phase }  -> { type: "result", phase, ok, errors, elapsedMs, cpuMs, latencies }
 * Requests cycle through the agents, so in-flight requests come from distinct agents.
 */
import { performance } from "node:perf_hooks";
import { privateKeyFromSeed, randomNonce, signRequest } from "@proto/protocol";
import { Pool } from "undici";

interface PrepareMessage {
  type: "prepare";
  url: string;
  publicUrl: string;
  agents: { did: string; seed: string }[];
  /** Unix seconds of the server clock: every signature's `created`. */
  created: number;
  validitySeconds: number;
  phases: { name: string; count: number }[];
  connections: number;
  /** Where this worker starts in the agent list, so workers interleave agents. */
  offset: number;
  audiences: string[];
}

interface Prepared {
  headers: Record<string, string>;
  body: Buffer;
}

const send = (message: unknown) => process.send?.(message);

let pool: Pool | undefined;
const phases = new Map<string, Prepared[]>();

function prepare(message: PrepareMessage): void {
  const start = performance.now();
  const keys = message.agents.map((a) => ({ did: a.did, key: privateKeyFromSeed(Buffer.from(a.seed, "base64url")) }));
  const tokenUrl = `${message.publicUrl}/v1/token`;
  let n = message.offset;
  for (const phase of message.phases) {
    const list: Prepared[] = [];
    for (let i = 0; i < phase.count; i++, n++) {
      const agent = keys[n % keys.length]!;
      const body = JSON.stringify({ aud: message.audiences[n % message.audiences.length] });
      const signed = signRequest(
        { method: "POST", url: tokenUrl, body },
        {
          keyid: agent.did,
          privateKey: agent.key,
          created: message.created,
          expires: message.created + message.validitySeconds,
          nonce: randomNonce(),
        },
      );
      list.push({
        headers: { "content-type": "application/json", ...(signed.headers as Record<string, string>) },
        body: Buffer.from(body),
      });
    }
    phases.set(phase.name, list);
  }
  pool = new Pool(message.url, { connections: message.connections, pipelining: 1, keepAliveTimeout: 60_000 });
  send({ type: "prepared", ms: performance.now() - start });
}

async function run(phase: string, connections: number): Promise<void> {
  const requests = phases.get(phase);
  if (requests === undefined || pool === undefined) throw new Error(`phase ${phase} was not prepared`);
  const latencies = new Float64Array(requests.length);
  const errors: Record<string, number> = {};
  let ok = 0;
  let next = 0;
  const target = pool;
  async function lane(): Promise<void> {
    for (;;) {
      const i = next++;
      if (i >= requests!.length) return;
      const request = requests![i]!;
      const t0 = performance.now();
      try {
        const response = await target.request({
          path: "/v1/token",
          method: "POST",
          headers: request.headers,
          body: request.body,
        });
        const text = await response.body.text();
        latencies[i] = performance.now() - t0;
        if (response.statusCode === 200 && text.startsWith('{"jwt":"')) ok++;
        else {
          let code = `http_${response.statusCode}`;
          try {
            code += `:${(JSON.parse(text) as { error?: { code?: string } }).error?.code ?? "?"}`;
          } catch {
            // not an envelope
          }
          errors[code] = (errors[code] ?? 0) + 1;
        }
      } catch (error) {
        latencies[i] = performance.now() - t0;
        const code = `client:${error instanceof Error ? ((error as { code?: string }).code ?? error.name) : "error"}`;
        errors[code] = (errors[code] ?? 0) + 1;
      }
    }
  }
  const cpu0 = process.cpuUsage();
  const start = performance.now();
  await Promise.all(Array.from({ length: connections }, () => lane()));
  const elapsedMs = performance.now() - start;
  const cpu = process.cpuUsage(cpu0);
  phases.delete(phase);
  send({
    type: "result",
    phase,
    ok,
    errors,
    elapsedMs,
    cpuMs: (cpu.user + cpu.system) / 1000,
    latencies: Array.from(latencies),
  });
}

let connections = 50;
process.on("message", (message: PrepareMessage | { type: "run"; phase: string } | { type: "stop" }) => {
  if (message.type === "prepare") {
    connections = message.connections;
    prepare(message);
  } else if (message.type === "run") {
    run(message.phase, connections).catch((error: unknown) => {
      send({ type: "error", message: String(error) });
    });
  } else if (message.type === "stop") {
    (pool?.close() ?? Promise.resolve()).finally(() => process.exit(0));
  }
});
process.on("disconnect", () => process.exit(0));
send({ type: "ready" });
