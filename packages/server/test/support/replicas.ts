/**
 * A cluster of `proto-server` processes for the multi-replica suite: directory and attestor
 * replicas as separate child processes on loopback, sharing one PostgreSQL database and one Redis,
 * with a test HTTPS host for the directory to fetch proofs and discovery documents from and an
 * SMTP collector for the attestor's sign-in mail.
 *
 * The services' Redis key prefixes are not configurable through the environment, so the cluster
 * gets a Redis logical database of its own (`REPLICA_REDIS_DB`), flushed when it starts and ends.
 * Each replica's clock is moved through `/__test/clock`; the cluster keeps every replica of a
 * service at the same offset, a restarted one included.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { request as httpGet, type IncomingMessage } from "node:http";
import { fileURLToPath } from "node:url";
import { createTestCA, type TestCA } from "@proto/testkit";
import { Redis } from "ioredis";
import { type HttpResult, httpRequest, type RequestOptions } from "./http.js";
import { type Site, type SiteHost, startSiteHost } from "./sites.js";
import { type SmtpCollector, startSmtpCollector } from "./smtp.js";
import { createTestDatabase, POSTGRES_URL, REDIS_URL, type TestDatabase } from "./stores.js";
import { freePort, TEST_KEY_ENCRYPTION_KEY, TEST_PSEUDONYM_KEY } from "./trust.js";

export type { Site };

const CLI = fileURLToPath(new URL("../../src/cli.ts", import.meta.url));
const REPO_ROOT = fileURLToPath(new URL("../../../../", import.meta.url));

/** The Redis logical database the cluster owns (flushed at start and end). */
export const REPLICA_REDIS_DB = 5;
/** Only a guard against a replica that never comes up; nothing is asserted about time. */
const READY_DEADLINE_MS = 60_000;
/** How much of each replica's output is kept for failure messages. */
const LOG_TAIL_CHARS = 16_000;

export const ADMIN_TOKEN = "admin-token-for-tests-0123456789";
export const TRUST_PUBLIC_URL = "https://trust.test";
export const DIRECTORY_PUBLIC_URL = "https://directory.test";

/** Why the suite cannot run here, or undefined when it can. */
export const REPLICAS_SKIP_REASON: string | undefined =
  POSTGRES_URL && REDIS_URL
    ? undefined
    : "TEST_POSTGRES_URL and TEST_REDIS_URL must both be set: multi-replica suite skipped";

/** Every child started, so none outlives the test process, even one interrupted mid-suite. */
const children = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
});

/** The parent's environment without anything that configures the services or the test runner. */
function baseEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (value === undefined) continue;
    if (
      /^(NODE_ENV|NODE_TEST_CONTEXT|NODE_OPTIONS|NODE_EXTRA_CA_CERTS|PROTO_|DIRECTORY_|TRUST_|REDIS_URL|SMTP_URL|MAIL_FROM|METRICS_TOKEN|TRUSTED_PROXY_HOPS|TRUSTED_PROXIES|SHUTDOWN_|TEST_|LOG_LEVEL)/.test(
        key,
      )
    ) {
      continue;
    }
    env[key] = value;
  }
  return env;
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** Options of one request to a replica: `ip` is the client address the proxy would append. */
export interface ReplicaRequestOptions extends RequestOptions {
  ip?: string;
}

/** A plain GET on a connection of its own (no keep-alive pool), for health checks around signals. */
export function freshGet(url: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = httpGet(url, { agent: false, headers: { connection: "close" } }, (res: IncomingMessage) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        text += chunk;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end();
  });
}

/** One `proto-server directory|trust` child process, restartable on the same port. */
export class Replica {
  readonly name: string;
  readonly kind: "directory" | "trust";
  readonly port: number;
  readonly url: string;
  readonly #env: Record<string, string>;
  #child: ChildProcess | undefined;
  #exited: Promise<Exit> = Promise.resolve({ code: null, signal: null });
  #log = "";

  constructor(name: string, kind: "directory" | "trust", port: number, env: Record<string, string>) {
    this.name = name;
    this.kind = kind;
    this.port = port;
    this.url = `http://127.0.0.1:${port}`;
    this.#env = env;
  }

  get running(): boolean {
    const child = this.#child;
    return child !== undefined && child.exitCode === null && child.signalCode === null;
  }

  /** The current process's id (a restart gives a new one). */
  get pid(): number | undefined {
    return this.#child?.pid;
  }

  /** Resolves when the current process has ended. */
  get exited(): Promise<Exit> {
    return this.#exited;
  }

  /** The tail of this replica's output (every run of it), for failure messages. */
  log(): string {
    return this.#log.length > LOG_TAIL_CHARS ? `…${this.#log.slice(-LOG_TAIL_CHARS)}` : this.#log;
  }

  #append(text: string): void {
    this.#log += text;
    if (this.#log.length > 4 * LOG_TAIL_CHARS) this.#log = this.#log.slice(-2 * LOG_TAIL_CHARS);
  }

  /**
   * Spawns the process and resolves once `/readyz` answers 200, or with `until: "/healthz"` once
   * it serves at all (a process started while a dependency it needs is down is not ready).
   */
  async start({ until = "/readyz" }: { until?: "/readyz" | "/healthz" } = {}): Promise<void> {
    if (this.running) throw new Error(`${this.name} is already running`);
    this.#append(`--- ${this.name}: starting on port ${this.port}\n`);
    const child = spawn(
      process.execPath,
      ["--conditions=source", "--import", "tsx", CLI, this.kind, "--port", String(this.port), "--host", "127.0.0.1"],
      { cwd: REPO_ROOT, env: { ...baseEnv(), ...this.#env }, stdio: ["ignore", "pipe", "pipe"] },
    );
    this.#child = child;
    children.add(child);
    child.stdout?.setEncoding("utf8").on("data", (chunk: string) => this.#append(chunk));
    child.stderr?.setEncoding("utf8").on("data", (chunk: string) => this.#append(chunk));
    this.#exited = new Promise<Exit>((resolve) => {
      child.once("close", (code, signal) => {
        children.delete(child);
        this.#append(`--- ${this.name}: exited (code ${code}, signal ${signal})\n`);
        resolve({ code, signal });
      });
    });
    const deadline = Date.now() + READY_DEADLINE_MS;
    let ended = false;
    void this.#exited.then(() => {
      ended = true;
    });
    for (;;) {
      if (ended) throw new Error(`${this.name} ended before it was ready:\n${this.log()}`);
      try {
        const ready = await freshGet(`${this.url}${until}`);
        if (ready.status === 200) return;
      } catch {
        // Not listening yet.
      }
      if (Date.now() > deadline) throw new Error(`${this.name} was not ready in time:\n${this.log()}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  /** Sends `signal` to the current process (false when it is not running). */
  kill(signal: NodeJS.Signals): boolean {
    return this.running && (this.#child?.kill(signal) ?? false);
  }

  /** SIGKILL, and wait for the process to be gone. */
  async stop(): Promise<void> {
    if (this.kill("SIGKILL")) await this.#exited;
  }

  request(method: string, path: string, options: ReplicaRequestOptions = {}): Promise<HttpResult> {
    const { ip, ...rest } = options;
    const headers = { ...rest.headers, ...(ip === undefined ? {} : { "x-forwarded-for": ip }) };
    return httpRequest(this.url, method, path, { ...rest, headers });
  }

  /** A `/__test/*` hook; throws with the replica's log unless it answers 200. */
  async hook(path: string, body: Record<string, unknown> = {}): Promise<HttpResult> {
    const result = await this.request("POST", path, { body });
    if (result.status !== 200) {
      throw new Error(`${this.name} ${path} answered ${result.status}: ${result.text}\n${this.log()}`);
    }
    return result;
  }

  /** This replica's clock, in milliseconds since the epoch. */
  async nowMs(): Promise<number> {
    return Date.parse((await this.hook("/__test/clock")).json.now as string);
  }

  async offsetSeconds(): Promise<number> {
    return (await this.hook("/__test/clock")).json.offset_seconds as number;
  }
}

export interface OidcClientConfig {
  client_id: string;
  service_did: string;
  redirect_uris: string[];
}

export interface ClusterOptions {
  directories: number;
  attestors: number;
  /** Sites (HTTPS host names) the suite may use. */
  sites: number;
  oidcClients?: OidcClientConfig[];
  /** Extra environment for every directory replica. */
  directoryEnv?: Record<string, string>;
  /** Extra environment for every attestor replica. */
  trustEnv?: Record<string, string>;
}

export interface Cluster {
  directories: Replica[];
  attestors: Replica[];
  ca: TestCA;
  smtp: SmtpCollector;
  /** The shared PostgreSQL database (both services, each with its own migration table). */
  databaseUrl: string;
  /** The Redis URL every replica uses (the cluster's own logical database). */
  redisUrl: string;
  /** Hands out a fresh site. */
  site(): Site;
  /** Moves every running replica of `kind` forward by `seconds`, and remembers it for restarts. */
  advance(kind: "directory" | "trust", seconds: number): Promise<void>;
  /**
   * Moves every replica of `kind` to one second past the start of the next fixed window of
   * `seconds` (rate-limit windows), so a burst sent now lands in one window.
   */
  alignTo(kind: "directory" | "trust", seconds: number): Promise<void>;
  /** Starts a stopped replica again (same port, same environment) at the cluster's clock. */
  restart(replica: Replica): Promise<void>;
  /** Every replica's output, for failure messages. */
  logs(): string;
  /** Kills every replica (SIGKILL), drops the database, flushes the Redis database, stops the hosts. */
  close(): Promise<void>;
}

/** The Redis URL of the cluster's logical database. */
function clusterRedisUrl(): string {
  if (!REDIS_URL) throw new Error("TEST_REDIS_URL is not set");
  const url = new URL(REDIS_URL);
  url.pathname = `/${REPLICA_REDIS_DB}`;
  return url.href;
}

async function flushRedis(url: string): Promise<void> {
  const redis = new Redis(url, { maxRetriesPerRequest: 2 });
  try {
    await redis.flushdb();
  } finally {
    redis.disconnect();
  }
}

export async function startCluster(options: ClusterOptions): Promise<Cluster> {
  const cleanups: (() => Promise<void>)[] = [];
  const replicas: Replica[] = [];
  const cleanup = async () => {
    await Promise.allSettled(replicas.map((r) => r.stop()));
    for (const step of cleanups.reverse()) await step().catch(() => undefined);
  };
  try {
    const redisUrl = clusterRedisUrl();
    await flushRedis(redisUrl);
    cleanups.push(() => flushRedis(redisUrl));

    const database: TestDatabase = await createTestDatabase("postgres", "replicas");
    cleanups.push(() => database.drop());

    const ca = await createTestCA();
    const caFile = ca.writeCertFile();
    const sites: SiteHost = await startSiteHost(ca, options.sites);
    cleanups.push(() => sites.close());

    const smtp = await startSmtpCollector();
    cleanups.push(() => smtp.close());

    const common: Record<string, string> = {
      PROTO_TEST_HOOKS: "1",
      REDIS_URL: redisUrl,
      // Every request says which client it is for through X-Forwarded-For (the test, on
      // 127.0.0.1, plays one proxy), so each test's traffic has rate-limit counters of its own.
      TRUSTED_PROXIES: "127.0.0.1",
      TRUSTED_PROXY_HOPS: "1",
      LOG_LEVEL: "warn",
    };
    const directoryEnv: Record<string, string> = {
      ...common,
      PROTO_FETCH_ALLOW_PRIVATE: "1",
      PROTO_FETCH_RESOLVE: sites.resolveEntries(),
      NODE_EXTRA_CA_CERTS: caFile,
      DIRECTORY_DATABASE_URL: database.url,
      DIRECTORY_PUBLIC_URL,
      DIRECTORY_ADMIN_TOKEN: ADMIN_TOKEN,
      DIRECTORY_REVALIDATE_TICK_SECONDS: "0",
      ...options.directoryEnv,
    };
    const trustEnv: Record<string, string> = {
      ...common,
      TRUST_PUBLIC_URL,
      TRUST_DATABASE_URL: database.url,
      TRUST_KEY_ENCRYPTION_KEY: TEST_KEY_ENCRYPTION_KEY.toString("base64url"),
      TRUST_PSEUDONYM_KEY: TEST_PSEUDONYM_KEY.toString("base64url"),
      SMTP_URL: smtp.url,
      MAIL_FROM: "proto trust <signin@trust.test>",
      ...(options.oidcClients ? { TRUST_OIDC_CLIENTS: JSON.stringify(options.oidcClients) } : {}),
      ...options.trustEnv,
    };

    const directories: Replica[] = [];
    const attestors: Replica[] = [];
    for (let i = 0; i < options.directories; i++) {
      directories.push(new Replica(`directory-${i}`, "directory", await freePort(), directoryEnv));
    }
    for (let i = 0; i < options.attestors; i++) {
      attestors.push(new Replica(`trust-${i}`, "trust", await freePort(), trustEnv));
    }
    replicas.push(...directories, ...attestors);
    // All together, as an orchestrator starts them: migrations and the first signing key must cope.
    const started = await Promise.allSettled(replicas.map((r) => r.start()));
    const failed = started.find((s): s is PromiseRejectedResult => s.status === "rejected");
    if (failed !== undefined) throw failed.reason;

    const offsets = { directory: 0, trust: 0 };
    const ofKind = (kind: "directory" | "trust") => (kind === "directory" ? directories : attestors);

    const cluster: Cluster = {
      directories,
      attestors,
      ca,
      smtp,
      databaseUrl: database.url,
      redisUrl,
      site: () => sites.site(),
      async advance(kind, seconds) {
        offsets[kind] += seconds;
        await Promise.all(
          ofKind(kind)
            .filter((r) => r.running)
            .map((r) => r.hook("/__test/clock", { advance_seconds: seconds })),
        );
      },
      async alignTo(kind, seconds) {
        const first = ofKind(kind).find((r) => r.running);
        if (first === undefined) throw new Error(`no ${kind} replica is running`);
        const now = await first.nowMs();
        const windowMs = seconds * 1000;
        await cluster.advance(kind, (windowMs - (now % windowMs) + 1000) / 1000);
      },
      async restart(replica) {
        await replica.start();
        const offset = offsets[replica.kind];
        if (offset > 0) await replica.hook("/__test/clock", { advance_seconds: offset });
      },
      logs() {
        return replicas.map((r) => `=== ${r.name}\n${r.log()}`).join("\n");
      },
      close: cleanup,
    };
    return cluster;
  } catch (error) {
    const logs = replicas.map((r) => `=== ${r.name}\n${r.log()}`).join("\n");
    await cleanup();
    if (error instanceof Error && replicas.length > 0 && !error.message.includes("===")) {
      error.message = `${error.message}\n${logs}`;
    }
    throw error;
  }
}
