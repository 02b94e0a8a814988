/**
 * Attestor mint throughput against the bare crypto work of one mint, in alternating rounds.
 *
 *   node --conditions=source --import tsx bench/trust/mint.ts
 *
 * Targets (issues 25 and 39): `POST /v1/token` at 50 concurrent keep-alive connections, each request
 * from one of many distinct linked agents and carrying a fresh nonce, sustains >= 50% of the
 * single-thread rate of {one Ed25519 verify + one Ed25519 sign + one SHA-256 over a typical body}
 * (node:crypto) on SQLite, and >= 35% on PostgreSQL + Redis (when TEST_POSTGRES_URL and
 * TEST_REDIS_URL are set: a database is created and dropped), with p99 under 40 ms on both; on
 * PostgreSQL + Redis the server spends at most 350 µs of CPU per mint. It prints the SQL statements
 * and Redis commands the server executed per mint over the timed rounds (counting wrappers in the
 * server process: at most one of each is the target), and the server's RssAnon/RssFile.
 *
 * Rounds: crypto-only rounds alternate with timed server rounds (BENCH_ROUNDS pairs; even rounds
 * crypto first, odd rounds server first, as bench/directory/read.ts does), so a host that gets
 * busier or quieter during the run moves numerator and denominator alike. Each server round's
 * ratio is its mints/s over the rate of the crypto-only round next to it; the figure is the
 * median of the rounds' ratios. Beside it, the CPU-time view: the server's CPU per mint (all its
 * threads, user + system) against the crypto-only CPU per operation. That one does not depend on
 * what else the host runs, and it is the figure to trust on a shared machine.
 *
 * Processes: the crypto baseline runs in a process of its own (`lib/crypto-baseline.ts`, one
 * round per request); per engine, the server runs in its own process (`lib/server.ts`:
 * buildTrustApp(readTrustConfig(env)) with test hooks for setup, rate limits raised so they never
 * trip but stay on, LOG_LEVEL=warn), agents are linked through the API and the
 * `/__test/link/confirm` hook, and load-generator processes (`lib/generator.ts`) pre-sign every
 * request (fresh nonce, `created` = the server clock) before firing them over keep-alive
 * connections (undici Pool). Signing is never charged to the server, and nothing but the crypto
 * loop runs during a crypto-only round.
 *
 * Environment (all optional):
 *   BENCH_AGENTS=1000        distinct agents linked before the run
 *   BENCH_REQUESTS=30000     timed requests, split over the rounds (after BENCH_WARMUP=5000 warm-up requests)
 *   BENCH_ROUNDS=5           server rounds, each beside a crypto-only round of BENCH_CRYPTO_N=10000 operations
 *   BENCH_CONNECTIONS=50     concurrent keep-alive connections, split over BENCH_WORKERS=1 generators
 *   BENCH_ENGINES=sqlite,postgres
 *   BENCH_PROFILE=DIR        CPU profile of the server over the timed rounds, written to DIR/<engine>/
 *                            (BENCH_CPU_PROF=1 adds a whole-process `node --cpu-prof` profile, setup included)
 *
 * The last line is machine-readable: `RESULT {json}`, with per engine its rounds ({ratio, rate,
 * baselineRate, p99Ms, cpuUsPerMint, cryptoCpuUsPerOp}), the median `ratio`, `cpuUsPerMint`,
 * `cryptoCpuUsPerOp` and `cpuRatio` (crypto CPU per op / server CPU per mint: the ratio the server
 * would reach with a core to itself), p50/p99/max, SQL and Redis per mint, RSS, targets and `met`.
 *
 * Exit status 1 when a target is not met (or the run had failed requests).
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
const ROUNDS = Math.max(1, num("BENCH_ROUNDS", 5));
/** Timed requests of server round `r`: REQUESTS split over the rounds. */
const roundRequests = (r: number) => Math.floor(REQUESTS / ROUNDS) + (r < REQUESTS % ROUNDS ? 1 : 0);
const CONNECTIONS = num("BENCH_CONNECTIONS", 50);
const WORKERS = Math.max(1, Math.min(num("BENCH_WORKERS", 1), CONNECTIONS));
const ENGINES = (process.env.BENCH_ENGINES ?? "sqlite,postgres").split(",").map((s) => s.trim());
const PROFILE_DIR = process.env.BENCH_PROFILE ? resolve(process.env.BENCH_PROFILE) : undefined;
const POSTGRES_URL = process.env.TEST_POSTGRES_URL;
const REDIS_URL = process.env.TEST_REDIS_URL;
interface Targets {
  /** Median of the rounds' ratios to the adjacent crypto-only round, at least. */
  ratio: number;
  /** p99 over every timed request, under. */
  p99Ms: number;
  /** Server CPU microseconds per mint, at most (issue 39 item 4: PostgreSQL + Redis only). */
  cpuUsPerMint: number | undefined;
}
const TARGETS: Record<string, Targets> = {
  sqlite: { ratio: 0.5, p99Ms: 40, cpuUsPerMint: undefined },
  postgres: { ratio: 0.35, p99Ms: 40, cpuUsPerMint: 350 },
};
/** Issue 25: at most one SQL statement and one Redis round trip per mint (5% slack for setup-time caches). */
const ROUND_TRIPS_PER_MINT = 1.05;
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

function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
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

interface CryptoRound {
  /** Operations per second of wall time. */
  wall: number;
  /** Operations per second of the crypto process's CPU time. */
  cpu: number;
}

/** The crypto-only loop in its own process, one round on request (see lib/crypto-baseline.ts). */
class CryptoBaseline {
  readonly #child: ChildProcess;
  private constructor(child: ChildProcess) {
    this.#child = child;
  }
  static async start(): Promise<CryptoBaseline> {
    const child = start("crypto-baseline.ts", process.env);
    await next(child, "ready");
    return new CryptoBaseline(child);
  }
  async round(): Promise<CryptoRound> {
    const answer = next<Message & CryptoRound>(this.#child, "round");
    this.#child.send({ type: "round" });
    const { wall, cpu } = await answer;
    return { wall, cpu };
  }
  stop(): Promise<void> {
    return stop(this.#child);
  }
}

// ---- one engine -----------------------------------------------------------------------------

/** One timed server round and the crypto-only round beside it. */
interface Round {
  /** Mints per second of the round. */
  rate: number;
  crypto: CryptoRound;
  /** rate / crypto.wall. */
  ratio: number;
  ok: number;
  elapsedMs: number;
  p99: number;
  /** Server CPU microseconds (user + system, all threads) per successful mint in the round. */
  cpuUsPerMint: number;
}

interface EngineResult {
  engine: string;
  store: string;
  rounds: Round[];
  /** Median of the rounds' ratios. */
  ratio: number;
  /** Median of the crypto-only rounds' wall-clock rates. */
  baselineRate: number;
  /** Median of the crypto-only rounds' CPU microseconds per operation. */
  cryptoCpuUsPerOp: number;
  /** Mints per second over all timed rounds. */
  rate: number;
  ok: number;
  errors: Record<string, number>;
  p50: number;
  p99: number;
  max: number;
  /** Server CPU (all its threads) over the timed phase, as a fraction of one core. */
  serverCpu: number;
  /** Server CPU microseconds per successful mint, over all timed rounds. */
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

async function runEngine(engine: string, crypto: CryptoBaseline): Promise<EngineResult> {
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
            ...Array.from({ length: ROUNDS }, (_, r) => ({ name: `round-${r}`, count: share(roundRequests(r), w) })),
          ],
          connections: share(CONNECTIONS, w),
          offset: w * Math.ceil(AGENTS / WORKERS),
          audiences: AUDIENCES,
        });
        return done;
      }),
    );
    const prepareMs = performance.now() - prepareStart;
    printLine(
      `\n${engine}: ${store}\n` +
        `  setup: ${AGENTS} agents linked in ${fmt(linkMs / 1000, 1)}s; requests pre-signed in ${fmt(prepareMs / 1000, 1)}s`,
    );

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

    type Stats = Message & {
      cpu: { user: number; system: number };
      elu: number;
      sql: number;
      redis: number;
      rss: { anon: number; file: number };
    };
    const serverRound = async () => {
      server.send({ type: "mark" });
      await next(server, "marked");
      const busy0 = machineBusyMs();
      const results = await fire(`round-${rounds.length}`);
      const busy1 = machineBusyMs();
      server.send({ type: "stats" });
      const stats = await next<Stats>(server, "stats");
      return { results, stats, busyMs: busy0 === undefined || busy1 === undefined ? undefined : busy1 - busy0 };
    };
    // Crypto first in even rounds, server first in odd ones: neither side always runs first.
    const rounds: Round[] = [];
    const timed: Awaited<ReturnType<typeof serverRound>>[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      let cryptoRound: CryptoRound;
      let measured: Awaited<ReturnType<typeof serverRound>>;
      if (r % 2 === 0) {
        cryptoRound = await crypto.round();
        measured = await serverRound();
      } else {
        measured = await serverRound();
        cryptoRound = await crypto.round();
      }
      timed.push(measured);
      const elapsedMs = Math.max(...measured.results.map((x) => x.elapsedMs));
      const ok = measured.results.reduce((sum, x) => sum + x.ok, 0);
      const rate = ok / (elapsedMs / 1000);
      const latencies = Float64Array.from(measured.results.flatMap((x) => x.latencies)).sort();
      const round: Round = {
        rate,
        crypto: cryptoRound,
        ratio: rate / cryptoRound.wall,
        ok,
        elapsedMs,
        p99: quantile(latencies, 0.99),
        cpuUsPerMint: (measured.stats.cpu.user + measured.stats.cpu.system) / Math.max(1, ok),
      };
      rounds.push(round);
      printLine(
        `  round ${r + 1}/${ROUNDS}: crypto-only ${fmt(cryptoRound.wall)} /s (${fmt(1e6 / cryptoRound.cpu)} µs CPU per op), ` +
          `server ${fmt(rate)} mints/s (${fmt(round.cpuUsPerMint)} µs CPU per mint, p99 ${fmt(round.p99, 2)} ms): ` +
          `ratio ${fmt(round.ratio, 3)}`,
      );
    }
    server.send({ type: "profile" });
    await next(server, "profiled");
    const serverClock = (await http(`${base}/__test/clock`, {})).json.now_unix as number;
    if (serverClock - created > SIGNATURE_VALIDITY) {
      console.warn(`  ! the run outlasted the signature validity (${serverClock - created}s): late requests may fail`);
    }

    const results = timed.flatMap((t) => t.results);
    const sum = (values: number[]) => values.reduce((total, v) => total + v, 0);
    const elapsedMs = sum(rounds.map((r) => r.elapsedMs));
    const ok = sum(rounds.map((r) => r.ok));
    const errors: Record<string, number> = {};
    for (const r of results) for (const [k, v] of Object.entries(r.errors)) errors[k] = (errors[k] ?? 0) + v;
    const latencies = Float64Array.from(results.flatMap((r) => r.latencies)).sort();
    const cpuUs = sum(timed.map((t) => t.stats.cpu.user + t.stats.cpu.system));
    const busy = timed.map((t) => t.busyMs);
    const last = timed.at(-1)!.stats;
    await Promise.all(generators.map((g) => stop(g)));
    return {
      engine,
      store,
      rounds,
      ratio: median(rounds.map((r) => r.ratio)),
      baselineRate: median(rounds.map((r) => r.crypto.wall)),
      cryptoCpuUsPerOp: median(rounds.map((r) => 1e6 / r.crypto.cpu)),
      rate: ok / (elapsedMs / 1000),
      ok,
      errors,
      p50: quantile(latencies, 0.5),
      p99: quantile(latencies, 0.99),
      max: latencies.at(-1) ?? Number.NaN,
      serverCpu: cpuUs / 1000 / elapsedMs,
      serverCpuPerMint: cpuUs / Math.max(1, ok),
      serverSysPerMint: sum(timed.map((t) => t.stats.cpu.system)) / Math.max(1, ok),
      serverElu: sum(timed.map((t, i) => t.stats.elu * rounds[i]!.elapsedMs)) / elapsedMs,
      generatorCpu: sum(results.map((r) => r.cpuMs)) / elapsedMs,
      machineBusy: busy.some((b) => b === undefined) ? undefined : sum(busy as number[]) / elapsedMs,
      linkMs,
      prepareMs,
      sqlPerMint: sum(timed.map((t) => t.stats.sql)) / Math.max(1, ok),
      redisPerMint: sum(timed.map((t) => t.stats.redis)) / Math.max(1, ok),
      rssAnonMb: last.rss.anon / 1024,
      rssFileMb: last.rss.file / 1024,
    };
  } finally {
    for (const child of children.reverse()) await stop(child).catch(() => child.kill("SIGKILL"));
    for (const cleanup of cleanups.reverse()) await cleanup().catch((e: unknown) => console.warn(`cleanup: ${e}`));
  }
}

// ---- main -----------------------------------------------------------------------------------

printLine(
  `trust mint bench: ${AGENTS} agents, ${fmt(WARMUP)} warm-up + ${fmt(REQUESTS)} timed requests in ${ROUNDS} rounds, ` +
    `${CONNECTIONS} connections over ${WORKERS} generator process(es)`,
);
printLine(
  "crypto-only: 1 Ed25519 verify + 1 Ed25519 sign + 1 SHA-256, one thread; its rounds alternate with the server's, " +
    "and each server round is compared with the crypto-only round beside it",
);

const availableCores = availableParallelism();
const engines = ENGINES.filter((e) => {
  if (e === "postgres" && !POSTGRES_URL) {
    printLine("postgres: skipped (TEST_POSTGRES_URL not set)");
    return false;
  }
  return e === "sqlite" || e === "postgres";
});
const crypto = await CryptoBaseline.start();
const outcomes: EngineResult[] = [];
try {
  for (const engine of engines) {
    const result = await runEngine(engine, crypto);
    outcomes.push(result);
    const errorText = Object.keys(result.errors).length === 0 ? "none" : JSON.stringify(result.errors);
    const ratios = result.rounds.map((r) => r.ratio);
    printLine(
      `  mint: ${fmt(result.rate)} /s over the ${ROUNDS} rounds (${fmt(result.ok)} ok, errors: ${errorText}); ` +
        `crypto-only ${fmt(result.baselineRate)} /s (median of its rounds)\n` +
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
        `  ratio to crypto-only, per round: ${ratios.map((r) => fmt(r, 3)).join(", ")}; median ${fmt(result.ratio, 3)}\n` +
        `  >> CPU-time view (the figure to trust): ${fmt(result.serverCpuPerMint)} µs server CPU per mint against ` +
        `${fmt(result.cryptoCpuUsPerOp)} µs crypto-only CPU per op = ${fmt(result.cryptoCpuUsPerOp / result.serverCpuPerMint, 3)}`,
    );
  }
} finally {
  await crypto.stop();
}

printLine("\n==== summary ====");
printLine(
  "CPU-time view, the figure to trust: server CPU per mint (all its threads) against crypto-only CPU per operation " +
    "(one thread). CPU time does not depend on what else the host runs; wall-clock rates do.",
);
const summary: Record<string, unknown>[] = [];
const verdicts: string[] = [];
let met = outcomes.length > 0;
for (const r of outcomes) {
  const target = TARGETS[r.engine]!;
  const cpuRatio = r.cryptoCpuUsPerOp / r.serverCpuPerMint;
  const cpuMet = target.cpuUsPerMint === undefined || r.serverCpuPerMint <= target.cpuUsPerMint;
  printLine(
    `  ${r.engine.padEnd(9)} ${fmt(r.serverCpuPerMint).padStart(5)} µs per mint against ${fmt(r.cryptoCpuUsPerOp)} µs per op: ` +
      `${fmt(cpuRatio, 3)}` +
      (target.cpuUsPerMint === undefined
        ? ""
        : `  (target <= ${target.cpuUsPerMint} µs per mint: ${cpuMet ? "MET" : "NOT MET"})`),
  );
  const valid = Object.keys(r.errors).length === 0;
  const roundTrips = r.sqlPerMint <= ROUND_TRIPS_PER_MINT && r.redisPerMint <= ROUND_TRIPS_PER_MINT;
  const ok = valid && r.ratio >= target.ratio && r.p99 < target.p99Ms && cpuMet && roundTrips;
  met &&= ok;
  verdicts.push(
    `  ${r.engine.padEnd(9)} ${fmt(r.rate).padStart(7)} mints/s  ratio ${fmt(r.ratio, 3)} (rounds ` +
      `${r.rounds.map((x) => fmt(x.ratio, 2)).join(" ")}; target >= ${target.ratio})  ` +
      `p99 ${fmt(r.p99, 2)} ms (target < ${target.p99Ms})  ` +
      `${fmt(r.sqlPerMint, 2)} SQL + ${fmt(r.redisPerMint, 2)} Redis per mint (target <= 1 each)  ` +
      `${!valid ? "INVALID (errors)" : ok ? "MET" : "NOT MET"}`,
  );
  summary.push({
    engine: r.engine,
    store: r.store,
    rate: r.rate,
    baseline: r.baselineRate,
    rounds: r.rounds.map((x) => ({
      ratio: x.ratio,
      rate: x.rate,
      baselineRate: x.crypto.wall,
      p99Ms: x.p99,
      cpuUsPerMint: x.cpuUsPerMint,
      cryptoCpuUsPerOp: 1e6 / x.crypto.cpu,
    })),
    ratio: r.ratio,
    target: target.ratio,
    p50Ms: r.p50,
    p99Ms: r.p99,
    maxMs: r.max,
    p99TargetMs: target.p99Ms,
    cpuUsPerMint: r.serverCpuPerMint,
    cryptoCpuUsPerOp: r.cryptoCpuUsPerOp,
    cpuRatio,
    cpuTargetUsPerMint: target.cpuUsPerMint ?? null,
    sqlPerMint: r.sqlPerMint,
    redisPerMint: r.redisPerMint,
    rssAnonMb: r.rssAnonMb,
    rssFileMb: r.rssFileMb,
    errors: r.errors,
    met: ok,
  });
}
printLine(`wall-clock ratio: median over ${ROUNDS} rounds, each server round against the crypto-only round beside it`);
for (const line of verdicts) printLine(line);
const baselinePerSecond = median(outcomes.flatMap((r) => r.rounds.map((x) => x.crypto.wall)));
printLine(`RESULT ${JSON.stringify({ bench: "trust-mint", rounds: ROUNDS, baselinePerSecond, engines: summary })}`);
if (!met) process.exitCode = 1;
