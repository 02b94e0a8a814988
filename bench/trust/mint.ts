/**
 * Attestor mint throughput against the bare crypto work of one mint, measured in one run.
 *
 *   node --conditions=source --import tsx bench/trust/mint.ts
 *
 * Targets (issue 25): `POST /v1/token` at 50 concurrent keep-alive connections, each request from
 * one of many distinct linked agents and carrying a fresh nonce, sustains >= 50% of the single-thread
 * rate of {one Ed25519 verify + one Ed25519 sign + one SHA-256 over a typical body} (node:crypto) on
 * SQLite, and >= 35% on PostgreSQL + Redis (when TEST_POSTGRES_URL and TEST_REDIS_URL are set: a
 * database is created and dropped), with p99 under 40 ms on both. It prints the SQL statements and
 * Redis commands the server executed per mint over the timed phase (counting wrappers in the server
 * process: at most one of each is the target), and the server's RssAnon/RssFile.
 *
 * Processes: the crypto baseline runs alone first; then, per engine, the server runs in its own
 * process (`lib/server.ts`: buildTrustApp(readTrustConfig(env)) with test hooks for setup, rate
 * limits raised so they never trip but stay on, LOG_LEVEL=warn), agents are linked through the
 * API and the `/__test/link/confirm` hook, and load-generator processes (`lib/generator.ts`)
 * pre-sign every request (fresh nonce, `created` = the server clock) before firing them over
 * keep-alive connections (undici Pool). Signing is never charged to the server.
 *
 * Environment (all optional):
 *   BENCH_AGENTS=1000        distinct agents linked before the run
 *   BENCH_REQUESTS=30000     timed requests (after BENCH_WARMUP=5000 warm-up requests)
 *   BENCH_CONNECTIONS=50     concurrent keep-alive connections, split over BENCH_WORKERS=1 generators
 *   BENCH_ENGINES=sqlite,postgres
 *   BENCH_PROFILE=DIR        CPU profile of the server over the timed phase, written to DIR/<engine>/
 *                            (BENCH_CPU_PROF=1 adds a whole-process `node --cpu-prof` profile, setup included)
 *   BENCH_CRYPTO_N / BENCH_CRYPTO_ROUNDS   baseline loop size and rounds (20000 x 5)
 *
 * Exit status 1 when the SQLite target is not met (or the run had failed requests).
 */
import { type ChildProcess, fork } from "node:child_process";
import { generateKeyPairSync, randomBytes, sign } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { createAttestationVerifier, encodeDidKey, rawPublicKey, seedOfPrivateKey, signRequest } from "@proto/protocol";
import { printLine } from "../report.js";
import { dropRedisKeys, scratchPostgresDatabase } from "../scratch-stores.js";

const here = dirname(fileURLToPath(import.meta.url));
const num = (name: string, fallback: number) => Number(process.env[name] ?? fallback);

const AGENTS = num("BENCH_AGENTS", 1000);
const REQUESTS = num("BENCH_REQUESTS", 30_000);
const WARMUP = num("BENCH_WARMUP", 5_000);
const CONNECTIONS = num("BENCH_CONNECTIONS", 50);
const WORKERS = Math.max(1, Math.min(num("BENCH_WORKERS", 1), CONNECTIONS));
const ENGINES = (process.env.BENCH_ENGINES ?? "sqlite,postgres").split(",").map((s) => s.trim());
const PROFILE_DIR = process.env.BENCH_PROFILE ? resolve(process.env.BENCH_PROFILE) : undefined;
const POSTGRES_URL = process.env.TEST_POSTGRES_URL;
const REDIS_URL = process.env.TEST_REDIS_URL;
const TARGET_RATIO: Record<string, number> = { sqlite: 0.5, postgres: 0.35 };
const TARGET_P99_MS = 40;
const PUBLIC_URL = "https://trust.bench";
const SIGNATURE_VALIDITY = 300; // the profile's maximum; `created` is the server clock at preparation
const AUDIENCES = Array.from({ length: 8 }, (_, i) => `did:web:svc${i}.example`);
const EXEC_ARGV = ["--conditions=source", "--import", "tsx"];

// ---- child processes ------------------------------------------------------------------------

interface Message {
  type: string;
  [key: string]: unknown;
}

function start(file: string, env: NodeJS.ProcessEnv, extraArgv: string[] = []): ChildProcess {
  return fork(join(here, "lib", file), [], { execArgv: [...EXEC_ARGV, ...extraArgv], env, stdio: "inherit" });
}

function next<T extends Message>(child: ChildProcess, type: string): Promise<T> {
  return new Promise((resolvePromise, reject) => {
    const onMessage = (message: Message) => {
      if (message.type === type) {
        cleanup();
        resolvePromise(message as T);
      } else if (message.type === "error") {
        cleanup();
        reject(new Error(String(message.message)));
      }
    };
    const onExit = (code: number | null) => {
      cleanup();
      reject(new Error(`child exited (${code}) while waiting for ${type}`));
    };
    const cleanup = () => {
      child.off("message", onMessage);
      child.off("exit", onExit);
    };
    child.on("message", onMessage);
    child.on("exit", onExit);
  });
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  child.send({ type: "stop" });
  const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  await exited;
  clearTimeout(timer);
}

// ---- statistics -----------------------------------------------------------------------------

function quantile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

const fmt = (n: number, digits = 0) =>
  n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });

/** Busy CPU milliseconds of the whole machine (all cores) so far, from /proc/stat; undefined off Linux. */
function machineBusyMs(): number | undefined {
  if (!existsSync("/proc/stat")) return undefined;
  const fields = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal: everything but idle and iowait is busy.
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = fields;
  return ((user + nice + system + irq + softirq + steal) * 1000) / 100; // USER_HZ is 100 on Linux
}

// ---- crypto baseline ------------------------------------------------------------------------

interface Baseline {
  /** Best round's wall-clock rate: the reference of the target (the most demanding choice). */
  best: number;
  median: number;
  rounds: number;
  /** Best rate per second of CPU time: unaffected by other processes taking the core away. */
  cpuBest: number;
}

async function cryptoBaseline(): Promise<Baseline> {
  const child = start("crypto-baseline.ts", process.env);
  const { rounds } = await next<Message & { rounds: { wall: number; cpu: number }[] }>(child, "baseline");
  await new Promise<void>((r) => (child.exitCode === null ? child.once("exit", () => r()) : r()));
  const wall = rounds.map((r) => r.wall).sort((a, b) => a - b);
  return {
    best: wall.at(-1)!,
    median: wall[Math.floor(wall.length / 2)]!,
    rounds: rounds.length,
    cpuBest: Math.max(...rounds.map((r) => r.cpu)),
  };
}

// ---- one engine -----------------------------------------------------------------------------

interface EngineResult {
  engine: string;
  store: string;
  rate: number;
  ok: number;
  errors: Record<string, number>;
  p50: number;
  p99: number;
  max: number;
  /** Server CPU (all its threads) over the timed phase, as a fraction of one core. */
  serverCpu: number;
  /** Server CPU microseconds per successful mint. */
  serverCpuPerMint: number;
  /** The kernel's share of it (system time: socket writes and reads, file I/O). */
  serverSysPerMint: number;
  serverElu: number;
  generatorCpu: number;
  /** Machine-wide busy CPU over the timed phase, in cores (2 = both cores of a 2-core machine). */
  machineBusy: number | undefined;
  linkMs: number;
  prepareMs: number;
  /** SQL statements and Redis commands the server executed per successful mint (timed phase). */
  sqlPerMint: number;
  redisPerMint: number;
  /** The server's RssAnon and RssFile at the end, in MB. */
  rssAnonMb: number;
  rssFileMb: number;
}

interface Agent {
  did: string;
  seed: string;
  privateKey: ReturnType<typeof generateKeyPairSync>["privateKey"];
}

async function http(url: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

/** start -> confirm (test hook) -> poll, as an agent and its human would, for every agent. */
async function linkAgents(base: string, count: number): Promise<Agent[]> {
  const agents: Agent[] = [];
  let index = 0;
  async function lane(): Promise<void> {
    for (;;) {
      const i = index++;
      if (i >= count) return;
      const { privateKey, publicKey } = generateKeyPairSync("ed25519");
      const raw = rawPublicKey(publicKey);
      const did = encodeDidKey(raw);
      const started = await http(`${base}/v1/link/start`, {
        agent_did: did,
        agent_pubkey_b64: Buffer.from(raw).toString("base64url"),
        agent_label: `bench agent ${i}`,
      });
      if (started.status !== 200) throw new Error(`link start: ${started.status} ${JSON.stringify(started.json)}`);
      const reqId = started.json.req_id as string;
      const confirmed = await http(`${base}/__test/link/confirm`, {
        req_id: reqId,
        email: `person-${i}@bench.example`,
      });
      if (confirmed.status !== 200) throw new Error(`confirm: ${confirmed.status} ${JSON.stringify(confirmed.json)}`);
      const sig = sign(null, Buffer.from(reqId, "utf8"), privateKey).toString("base64url");
      const polled = await http(`${base}/v1/link/poll`, { req_id: reqId, sig_b64: sig });
      if (polled.status !== 200 || polled.json.state !== "confirmed") {
        throw new Error(`poll: ${polled.status} ${JSON.stringify(polled.json)}`);
      }
      agents[i] = { did, seed: Buffer.from(seedOfPrivateKey(privateKey)).toString("base64url"), privateKey };
    }
  }
  await Promise.all(Array.from({ length: 16 }, () => lane()));
  return agents;
}

/** One mint from the orchestrator, checked against the live key set: the server mints real tokens. */
async function sanityMint(base: string, agent: Agent, now: number): Promise<void> {
  const body = JSON.stringify({ aud: AUDIENCES[0] });
  const signed = signRequest(
    { method: "POST", url: `${PUBLIC_URL}/v1/token`, body },
    { keyid: agent.did, privateKey: agent.privateKey, created: now },
  );
  const response = await fetch(`${base}/v1/token`, {
    method: "POST",
    headers: { "content-type": "application/json", ...signed.headers },
    body,
  });
  const minted = (await response.json()) as { jwt: string };
  if (response.status !== 200) throw new Error(`sanity mint: ${response.status} ${JSON.stringify(minted)}`);
  const jwks = await (await fetch(`${base}/.well-known/jwks.json`)).json();
  const verifier = createAttestationVerifier({ keySet: jwks as never, now: () => now * 1000 });
  await verifier.verify(minted.jwt, { audience: AUDIENCES[0]!, agentDid: agent.did });
}

async function runEngine(engine: string): Promise<EngineResult> {
  const cleanups: (() => Promise<void>)[] = [];
  const children: ChildProcess[] = [];
  try {
    let databaseUrl: string;
    let store = engine;
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      PROTO_TEST_HOOKS: "1",
      TRUST_PUBLIC_URL: PUBLIC_URL,
      TRUST_KEY_ENCRYPTION_KEY: randomBytes(32).toString("base64url"),
      TRUST_PSEUDONYM_KEY: randomBytes(32).toString("base64url"),
      LOG_LEVEL: "warn",
      TRUST_RATE_LIMITS: "token=100000000/60,link_start=100000000/60,link_poll=100000000/60",
      TRUST_PER_BINDING_DAILY_TOKEN_LIMIT: "100000000",
    };
    if (engine === "sqlite") {
      const dir = mkdtempSync(join(tmpdir(), "proto-bench-trust-"));
      cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
      databaseUrl = `sqlite:${join(dir, "trust.db")}`;
      store = "SQLite (file, WAL), memory nonce store + rate limiter";
    } else {
      if (!POSTGRES_URL) throw new Error("TEST_POSTGRES_URL is not set");
      const database = await scratchPostgresDatabase(POSTGRES_URL, "proto_bench_trust");
      cleanups.push(database.drop);
      databaseUrl = database.url;
      store = "PostgreSQL (pool 10)";
      if (REDIS_URL) {
        const prefix = `bench:trust:${randomBytes(5).toString("hex")}:`;
        env.REDIS_URL = REDIS_URL;
        env.BENCH_REDIS_PREFIX = prefix;
        store += " + Redis nonce store + rate limiter";
        cleanups.push(() => dropRedisKeys(REDIS_URL, [prefix]));
      } else {
        store += ", memory nonce store + rate limiter (TEST_REDIS_URL not set)";
      }
    }
    env.TRUST_DATABASE_URL = databaseUrl;

    if (PROFILE_DIR !== undefined) {
      env.BENCH_PROFILE_DIR = join(PROFILE_DIR, engine);
      mkdirSync(env.BENCH_PROFILE_DIR, { recursive: true });
    }
    const server = start(
      "server.ts",
      env,
      process.env.BENCH_CPU_PROF ? ["--cpu-prof", `--cpu-prof-dir=${env.BENCH_PROFILE_DIR ?? "."}`] : [],
    );
    children.push(server);
    const { port } = await next<Message & { port: number }>(server, "listening");
    const base = `http://127.0.0.1:${port}`;

    const linkStart = performance.now();
    const agents = await linkAgents(base, AGENTS);
    const linkMs = performance.now() - linkStart;
    const clock = await http(`${base}/__test/clock`, {});
    const created = clock.json.now_unix as number;
    await sanityMint(base, agents[0]!, created);

    // Generators: pre-sign everything, then fire.
    const generators = Array.from({ length: WORKERS }, () => start("generator.ts", { ...process.env }));
    children.push(...generators);
    await Promise.all(generators.map((g) => next(g, "ready")));
    const share = (total: number, w: number) => Math.floor(total / WORKERS) + (w < total % WORKERS ? 1 : 0);
    const prepareStart = performance.now();
    await Promise.all(
      generators.map((g, w) => {
        const done = next(g, "prepared");
        g.send({
          type: "prepare",
          url: base,
          publicUrl: PUBLIC_URL,
          agents: agents.map((a) => ({ did: a.did, seed: a.seed })),
          created,
          validitySeconds: SIGNATURE_VALIDITY,
          phases: [
            { name: "warmup", count: share(WARMUP, w) },
            { name: "timed", count: share(REQUESTS, w) },
          ],
          connections: share(CONNECTIONS, w),
          offset: w * Math.ceil(AGENTS / WORKERS),
          audiences: AUDIENCES,
        });
        return done;
      }),
    );
    const prepareMs = performance.now() - prepareStart;

    type Result = Message & {
      ok: number;
      errors: Record<string, number>;
      elapsedMs: number;
      cpuMs: number;
      latencies: number[];
    };
    const fire = async (phase: string): Promise<Result[]> =>
      Promise.all(
        generators.map((g) => {
          const done = next<Result>(g, "result");
          g.send({ type: "run", phase });
          return done;
        }),
      );
    await fire("warmup");
    server.send({ type: "mark" });
    await next(server, "marked");
    const busy0 = machineBusyMs();
    const results = await fire("timed");
    const busy1 = machineBusyMs();
    server.send({ type: "stats" });
    const stats = await next<
      Message & {
        cpu: { user: number; system: number };
        elu: number;
        sql: number;
        redis: number;
        rss: { anon: number; file: number };
      }
    >(server, "stats");
    const serverClock = (await http(`${base}/__test/clock`, {})).json.now_unix as number;
    if (serverClock - created > SIGNATURE_VALIDITY) {
      console.warn(`  ! the run outlasted the signature validity (${serverClock - created}s): late requests may fail`);
    }

    const elapsedMs = Math.max(...results.map((r) => r.elapsedMs));
    const ok = results.reduce((sum, r) => sum + r.ok, 0);
    const errors: Record<string, number> = {};
    for (const r of results) for (const [k, v] of Object.entries(r.errors)) errors[k] = (errors[k] ?? 0) + v;
    const latencies = Float64Array.from(results.flatMap((r) => r.latencies)).sort();
    await Promise.all(generators.map((g) => stop(g)));
    return {
      engine,
      store,
      rate: ok / (elapsedMs / 1000),
      ok,
      errors,
      p50: quantile(latencies, 0.5),
      p99: quantile(latencies, 0.99),
      max: latencies.at(-1) ?? Number.NaN,
      serverCpu: (stats.cpu.user + stats.cpu.system) / 1000 / elapsedMs,
      serverCpuPerMint: (stats.cpu.user + stats.cpu.system) / Math.max(1, ok),
      serverSysPerMint: stats.cpu.system / Math.max(1, ok),
      serverElu: stats.elu,
      generatorCpu: results.reduce((sum, r) => sum + r.cpuMs, 0) / elapsedMs,
      machineBusy: busy0 === undefined || busy1 === undefined ? undefined : (busy1 - busy0) / elapsedMs,
      linkMs,
      prepareMs,
      sqlPerMint: stats.sql / Math.max(1, ok),
      redisPerMint: stats.redis / Math.max(1, ok),
      rssAnonMb: stats.rss.anon / 1024,
      rssFileMb: stats.rss.file / 1024,
    };
  } finally {
    for (const child of children.reverse()) await stop(child).catch(() => child.kill("SIGKILL"));
    for (const cleanup of cleanups.reverse()) await cleanup().catch((e: unknown) => console.warn(`cleanup: ${e}`));
  }
}

// ---- main -----------------------------------------------------------------------------------

printLine(
  `trust mint bench: ${AGENTS} agents, ${fmt(WARMUP)} warm-up + ${fmt(REQUESTS)} timed requests, ` +
    `${CONNECTIONS} connections over ${WORKERS} generator process(es)`,
);
const baseline = await cryptoBaseline();
printLine(
  `crypto-only (1 Ed25519 verify + 1 Ed25519 sign + 1 SHA-256, one thread): ${fmt(baseline.best)} /s ` +
    `(best of ${baseline.rounds} rounds; median ${fmt(baseline.median)} /s; ` +
    `${fmt(1e6 / baseline.cpuBest)} µs CPU per op)`,
);

const availableCores = availableParallelism();
const engines = ENGINES.filter((e) => {
  if (e === "postgres" && !POSTGRES_URL) {
    printLine("postgres: skipped (TEST_POSTGRES_URL not set)");
    return false;
  }
  return e === "sqlite" || e === "postgres";
});
const outcomes: EngineResult[] = [];
for (const engine of engines) {
  const result = await runEngine(engine);
  outcomes.push(result);
  const errorText = Object.keys(result.errors).length === 0 ? "none" : JSON.stringify(result.errors);
  printLine(
    `\n${engine}: ${result.store}\n` +
      `  setup: ${AGENTS} agents linked in ${fmt(result.linkMs / 1000, 1)}s; requests pre-signed in ${fmt(result.prepareMs / 1000, 1)}s\n` +
      `  mint: ${fmt(result.rate)} /s  (${fmt(result.ok)} ok, errors: ${errorText})\n` +
      `  latency: p50 ${fmt(result.p50, 2)} ms, p99 ${fmt(result.p99, 2)} ms, max ${fmt(result.max, 1)} ms\n` +
      `  server: ${fmt(result.serverCpu * 100)}% of one core, event loop ${fmt(result.serverElu * 100)}% busy, ` +
      `${fmt(result.serverCpuPerMint)} µs CPU per mint (${fmt(result.serverSysPerMint)} of it system); generators ${fmt(result.generatorCpu * 100)}% of a core\n` +
      (result.machineBusy === undefined
        ? ""
        : `  machine: ${fmt(result.machineBusy * 100)}% CPU busy of ${availableCores * 100}% (others: ` +
          `${fmt(Math.max(0, result.machineBusy - result.serverCpu - result.generatorCpu) * 100)}%` +
          `${engine === "postgres" ? ", PostgreSQL/Redis included" : ""})\n`) +
      `  per mint: ${fmt(result.sqlPerMint, 2)} SQL statements, ${fmt(result.redisPerMint, 2)} Redis commands; ` +
      `server RssAnon ${fmt(result.rssAnonMb, 1)} MB, RssFile ${fmt(result.rssFileMb, 1)} MB\n` +
      `  ratio: ${fmt((result.rate / baseline.best) * 100, 1)}% of crypto-only ` +
      `(CPU-time view: ${fmt((1e6 / result.serverCpuPerMint / baseline.cpuBest) * 100, 1)}%)`,
  );
}

printLine("\n==== summary ====");
printLine(`crypto-only baseline: ${fmt(baseline.best)} /s`);
let met = outcomes.length > 0;
const summary: Record<string, unknown>[] = [];
for (const r of outcomes) {
  const ratio = r.rate / baseline.best;
  const target = TARGET_RATIO[r.engine] ?? 1;
  const valid = Object.keys(r.errors).length === 0;
  const ok = valid && ratio >= target && r.p99 < TARGET_P99_MS && r.sqlPerMint <= 1.05 && r.redisPerMint <= 1.05;
  met &&= ok;
  printLine(
    `${r.engine.padEnd(9)} ${fmt(r.rate).padStart(7)} mints/s  ${fmt(ratio * 100, 1).padStart(5)}% ` +
      `(target ${target * 100}%)  p99 ${fmt(r.p99, 2)} ms (target < ${TARGET_P99_MS})  ` +
      `${fmt(r.sqlPerMint, 2)} SQL + ${fmt(r.redisPerMint, 2)} Redis per mint (target <= 1 each)  ` +
      `${!valid ? "INVALID (errors)" : ok ? "MET" : "NOT MET"}`,
  );
  summary.push({
    engine: r.engine,
    store: r.store,
    rate: r.rate,
    baseline: baseline.best,
    ratio,
    target,
    p50Ms: r.p50,
    p99Ms: r.p99,
    cpuUsPerMint: r.serverCpuPerMint,
    sqlPerMint: r.sqlPerMint,
    redisPerMint: r.redisPerMint,
    rssAnonMb: r.rssAnonMb,
    rssFileMb: r.rssFileMb,
    errors: r.errors,
    met: ok,
  });
}
printLine(
  "(CPU-time view: server CPU per mint against crypto CPU per op, both single-thread: the ratio the server " +
    "would reach with a core to itself; informational, for runs on a busy machine)",
);
printLine(`RESULT ${JSON.stringify({ bench: "trust-mint", baselinePerSecond: baseline.best, engines: summary })}`);
if (!met) process.exitCode = 1;
