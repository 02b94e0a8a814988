/**
 * Soak: mixed load for a long while against the directory and the attestor, each in its own
 * process, watching their memory. Not part of `npm test`.
 *
 *   node --conditions=source --import tsx bench/soak.ts [--minutes 10] [--store sqlite|postgres]
 *        [--connections 50] [--listings 5000] [--agents 200]
 *
 * Load, from `--connections` concurrent keep-alive lanes: directory reads (one listing, the list,
 * a search), link starts at the attestor (`POST /v1/link/start`, a fresh agent each time), and
 * mints (`POST /v1/token`, signed by agents whose bindings were confirmed through the test hook,
 * as bench/trust/mint.ts does). Rate limits are raised so they never trip but stay on.
 *
 * Prints each server's RSS every minute and, at the end, the slope of RSS (MB/min, least squares
 * over samples every 5 s) over the last five minutes, or the last half of a shorter run, then the
 * request counts by status. Both servers run a full garbage collection every 15 s (`--expose-gc`,
 * bench/soak-gc.ts), so the slope is of what they retain: without it, V8's allocation sawtooth
 * (tens of MB between major collections under load) decides a five-minute slope by where the run
 * happens to stop. Target: flat, under 1 MB/min (measure on an idle machine).
 *
 * --store postgres: PostgreSQL at TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test),
 * a database of its own per server (dropped at the end), and Redis at TEST_REDIS_URL (default
 * redis://127.0.0.1:6379) in logical database 13 under a prefix of its own (removed at the end).
 */
import { type ChildProcess, fork } from "node:child_process";
import { generateKeyPairSync, type KeyObject, randomBytes, sign } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { encodeDidKey, rawPublicKey, signRequest } from "@proto/protocol";
import { Pool } from "undici";
import { createStore, loadStore } from "./directory/lib/dataset.js";
import { type Child, startChild } from "./directory/lib/processes.js";
import { printLine } from "./report.js";
import { dropRedisKeys, scratchPostgresDatabase } from "./scratch-stores.js";

const { values } = parseArgs({
  options: {
    minutes: { type: "string", default: "10" },
    store: { type: "string", default: "sqlite" },
    connections: { type: "string", default: "50" },
    listings: { type: "string", default: "5000" },
    agents: { type: "string", default: "200" },
  },
});
const MINUTES = Number(values.minutes);
const CONNECTIONS = Number(values.connections);
const STORE = values.store;
if (STORE !== "sqlite" && STORE !== "postgres") throw new Error("--store is sqlite or postgres");
const POSTGRES_URL = process.env.TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const REDIS_DB = 13;
const REDIS_URL = `${(process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379").replace(/\/\d*$/, "")}/${REDIS_DB}`;
const TRUST_PUBLIC_URL = "https://trust.soak";
const SAMPLE_SECONDS = 5;
// Both servers collect garbage fully this often (bench/soak-gc.ts): the slope is then of retained
// memory, not of V8's allocation sawtooth, which under load swings tens of MB over minutes.
const GC_SECONDS = 15;
const here = dirname(fileURLToPath(import.meta.url));

// ---- memory ---------------------------------------------------------------------------------

/**
 * Resident memory, whole (`VmRSS`) and anonymous only (`RssAnon`: heaps and buffers). The rest is
 * file pages, mostly SQLite's memory-mapped database, which grow with the data and are the page
 * cache's to reclaim: a leak shows in the anonymous part.
 */
function memoryMb(pid: number | undefined): { rss: number; anon: number } {
  if (pid === undefined) return { rss: Number.NaN, anon: Number.NaN };
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1]) / 1024;
  return { rss: kb("VmRSS"), anon: kb("RssAnon") };
}

/** Least-squares slope of y over x. */
function slope(points: { x: number; y: number }[]): number {
  const n = points.length;
  if (n < 2) return Number.NaN;
  const mx = points.reduce((s, p) => s + p.x, 0) / n;
  const my = points.reduce((s, p) => s + p.y, 0) / n;
  const sxy = points.reduce((s, p) => s + (p.x - mx) * (p.y - my), 0);
  const sxx = points.reduce((s, p) => s + (p.x - mx) ** 2, 0);
  return sxy / sxx;
}

// ---- stores ---------------------------------------------------------------------------------

const cleanups: (() => Promise<void>)[] = [];

async function trustDatabaseUrl(): Promise<string> {
  if (STORE === "sqlite") {
    const dir = mkdtempSync(join(tmpdir(), "proto-soak-trust-"));
    cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
    return `sqlite:${join(dir, "trust.db")}`;
  }
  const database = await scratchPostgresDatabase(POSTGRES_URL, "proto_soak_trust");
  cleanups.push(database.drop);
  return database.url;
}

// ---- the attestor's process (bench/trust/lib/server.ts, spoken to over IPC) ------------------

function startTrust(env: NodeJS.ProcessEnv): Promise<{ child: ChildProcess; port: number }> {
  const child = fork(join(here, "trust", "lib", "server.ts"), [], {
    execArgv: ["--expose-gc", "--conditions=source", "--import", "tsx"],
    env,
    stdio: "inherit",
  });
  return new Promise((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`the attestor exited (${code}) before listening`)));
    child.on("message", (message: { type: string; port?: number }) => {
      if (message.type === "listening") resolve({ child, port: message.port ?? 0 });
    });
  });
}

function stopTrust(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
    child.once("exit", () => {
      clearTimeout(timer);
      resolve();
    });
    child.send({ type: "stop" });
  });
}

// ---- agents ---------------------------------------------------------------------------------

interface Agent {
  did: string;
  publicKeyB64: string;
  privateKey: KeyObject;
}

function newAgent(): Agent {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const raw = rawPublicKey(publicKey);
  return { did: encodeDidKey(raw), publicKeyB64: Buffer.from(raw).toString("base64url"), privateKey };
}

async function postJson(
  base: string,
  path: string,
  body: unknown,
): Promise<{ status: number; json: Record<string, unknown> }> {
  const response = await fetch(`${base}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

/** start -> confirm (test hook) -> poll: an agent whose binding is confirmed. */
async function linkAgent(base: string, index: number): Promise<Agent> {
  const agent = newAgent();
  const started = await postJson(base, "/v1/link/start", {
    agent_did: agent.did,
    agent_pubkey_b64: agent.publicKeyB64,
  });
  if (started.status !== 200) throw new Error(`link start: ${started.status} ${JSON.stringify(started.json)}`);
  const reqId = started.json.req_id as string;
  const confirmed = await postJson(base, "/__test/link/confirm", {
    req_id: reqId,
    email: `soak-${index}@soak.example`,
  });
  if (confirmed.status !== 200) throw new Error(`confirm: ${confirmed.status}`);
  const sig = sign(null, Buffer.from(reqId, "utf8"), agent.privateKey).toString("base64url");
  const polled = await postJson(base, "/v1/link/poll", { req_id: reqId, sig_b64: sig });
  if (polled.json.state !== "confirmed") throw new Error(`poll: ${polled.status} ${JSON.stringify(polled.json)}`);
  return agent;
}

// ---- the run --------------------------------------------------------------------------------

const counts = new Map<string, number>();
const count = (operation: string, status: number | string) => {
  const key = `${operation} ${status}`;
  counts.set(key, (counts.get(key) ?? 0) + 1);
};

let directory: Child | undefined;
let trust: ChildProcess | undefined;
const pools: Pool[] = [];
const redisPrefix = `soak:${randomBytes(4).toString("hex")}:`;
try {
  printLine(
    `soak: ${MINUTES} min, ${CONNECTIONS} connections, store ${STORE}, full GC every ${GC_SECONDS} s in both servers`,
  );
  const directoryStore = await createStore(STORE, POSTGRES_URL);
  cleanups.push(() => directoryStore.drop());
  const dids: string[] = [];
  const words = new Set<string>();
  const tags = new Set<string>();
  await loadStore(directoryStore, { count: Number(values.listings) }, (row) => {
    if (dids.length < 2000) dids.push(row.service_did);
    for (const word of (row.title ?? "").toLowerCase().split(/\s+/).slice(0, 1)) if (word.length > 2) words.add(word);
    if (row.tagList[0] !== undefined) tags.add(row.tagList[0]);
  });
  const searches = [...words].slice(0, 200);
  const tagList = [...tags].slice(0, 50);
  const redisEnv: Record<string, string> = STORE === "postgres" ? { REDIS_URL } : {};
  if (STORE === "postgres") cleanups.push(() => dropRedisKeys(REDIS_URL, [redisPrefix, "proto:dir:"]));

  directory = await startChild(
    "./directory-server.ts",
    {
      DIRECTORY_DATABASE_URL: directoryStore.url,
      DIRECTORY_RATE_LIMITS: "read=100000000/60",
      DIRECTORY_REVALIDATE_TICK_SECONDS: "0",
      LOG_LEVEL: "warn",
      SOAK_GC_SECONDS: String(GC_SECONDS),
      ...redisEnv,
    },
    ["--expose-gc"],
  );
  const started = await startTrust({
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    PROTO_TEST_HOOKS: "1",
    TRUST_PUBLIC_URL,
    TRUST_DATABASE_URL: await trustDatabaseUrl(),
    TRUST_KEY_ENCRYPTION_KEY: randomBytes(32).toString("base64url"),
    TRUST_PSEUDONYM_KEY: randomBytes(32).toString("base64url"),
    TRUST_RATE_LIMITS:
      "token=100000000/60,link_start=100000000/60,link_start_agent=100000000/60,link_poll=100000000/60",
    TRUST_PER_BINDING_DAILY_TOKEN_LIMIT: "100000000",
    LOG_LEVEL: "warn",
    SOAK_GC_SECONDS: String(GC_SECONDS),
    ...(STORE === "postgres" ? { ...redisEnv, BENCH_REDIS_PREFIX: redisPrefix } : {}),
  });
  trust = started.child;
  const trustBase = `http://127.0.0.1:${started.port}`;
  const agents: Agent[] = [];
  for (let i = 0; i < Number(values.agents); i += 20) {
    agents.push(...(await Promise.all(Array.from({ length: 20 }, (_, k) => linkAgent(trustBase, i + k)))));
  }
  printLine(`  ${dids.length} listings to read, ${agents.length} linked agents; load starts`);

  const directoryPool = new Pool(`http://127.0.0.1:${directory.port}`, { connections: CONNECTIONS });
  const trustPool = new Pool(trustBase, { connections: CONNECTIONS });
  pools.push(directoryPool, trustPool);
  const pick = <T>(items: T[]): T => items[Math.floor(Math.random() * items.length)] as T;

  const operations: [number, string, () => Promise<number>][] = [
    [15, "directory item", () => get(directoryPool, `/v1/listings/${encodeURIComponent(pick(dids))}`)],
    [15, "directory list", () => get(directoryPool, `/v1/listings?limit=20&tag=${encodeURIComponent(pick(tagList))}`)],
    [10, "directory search", () => get(directoryPool, `/v1/listings?search=${encodeURIComponent(pick(searches))}`)],
    [20, "link start", () => linkStart(trustPool)],
    [40, "mint", () => mint(trustPool, pick(agents))],
  ];
  const totalWeight = operations.reduce((sum, [weight]) => sum + weight, 0);
  const choose = () => {
    let roll = Math.random() * totalWeight;
    for (const operation of operations) {
      roll -= operation[0];
      if (roll < 0) return operation;
    }
    return operations[0] as (typeof operations)[number];
  };

  const began = Date.now();
  const deadline = began + MINUTES * 60_000;
  const samples: { t: number; directory: { rss: number; anon: number }; trust: { rss: number; anon: number } }[] = [];
  let requests = 0;
  const sampler = setInterval(() => {
    const t = (Date.now() - began) / 60_000;
    samples.push({ t, directory: memoryMb(directory?.process.pid), trust: memoryMb(trust?.pid) });
  }, SAMPLE_SECONDS * 1000);
  let minute = 0;
  let lastRequests = 0;
  const reporter = setInterval(() => {
    minute += 1;
    const last = samples.at(-1);
    printLine(
      `  minute ${minute}: RSS (anonymous) directory ${last?.directory.rss.toFixed(1)} (${last?.directory.anon.toFixed(1)}) MB, ` +
        `attestor ${last?.trust.rss.toFixed(1)} (${last?.trust.anon.toFixed(1)}) MB; ` +
        `${requests - lastRequests} requests (${((requests - lastRequests) / 60).toFixed(0)}/s)`,
    );
    lastRequests = requests;
  }, 60_000);

  const lane = async () => {
    while (Date.now() < deadline) {
      const [, name, run] = choose();
      try {
        count(name, await run());
      } catch (error) {
        count(name, `error ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
      }
      requests += 1;
    }
  };
  await Promise.all(Array.from({ length: CONNECTIONS }, lane));
  clearInterval(sampler);
  clearInterval(reporter);

  const window = MINUTES >= 10 ? 5 : MINUTES / 2;
  const tail = samples.filter((s) => s.t >= MINUTES - window);
  printLine(`RSS slope over the last ${window} min (${tail.length} samples, target < 1 MB/min):`);
  for (const server of ["directory", "trust"] as const) {
    const name = server === "trust" ? "attestor" : server;
    for (const part of ["rss", "anon"] as const) {
      const perMinute = slope(tail.map((s) => ({ x: s.t, y: s[server][part] })));
      printLine(
        `  ${name} ${part === "rss" ? "RSS" : "anonymous"}: ${perMinute.toFixed(2)} MB/min ` +
          `(${tail[0]?.[server][part].toFixed(1)} -> ${tail.at(-1)?.[server][part].toFixed(1)} MB)`,
      );
    }
  }
  printLine(`${requests} requests in ${MINUTES} min, by operation and status:`);
  for (const [key, n] of [...counts].sort(([a], [b]) => a.localeCompare(b))) printLine(`  ${key}: ${n}`);
} finally {
  await Promise.all(pools.map((pool) => pool.close()));
  await directory?.stop();
  if (trust !== undefined) await stopTrust(trust);
  for (const cleanup of cleanups.reverse()) await cleanup().catch((error: unknown) => printLine(`cleanup: ${error}`));
}

async function get(pool: Pool, path: string): Promise<number> {
  const response = await pool.request({ method: "GET", path });
  await response.body.dump();
  return response.statusCode;
}

async function linkStart(pool: Pool): Promise<number> {
  const agent = newAgent();
  const response = await pool.request({
    method: "POST",
    path: "/v1/link/start",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ agent_did: agent.did, agent_pubkey_b64: agent.publicKeyB64, agent_label: "soak" }),
  });
  await response.body.dump();
  return response.statusCode;
}

async function mint(pool: Pool, agent: Agent): Promise<number> {
  const body = JSON.stringify({ aud: "did:web:service.soak" });
  const signed = signRequest(
    { method: "POST", url: `${TRUST_PUBLIC_URL}/v1/token`, body },
    { keyid: agent.did, privateKey: agent.privateKey },
  );
  const response = await pool.request({
    method: "POST",
    path: "/v1/token",
    headers: { "content-type": "application/json", ...signed.headers },
    body,
  });
  await response.body.dump();
  return response.statusCode;
}
