/**
 * Issue 36, item 5: a whole stack restarting brings its services up before, or with, their
 * dependencies. `proto-server trust`, `directory` and `all` start while their Redis is not up yet
 * (a private redis-server this file starts and stops): the attestor answers `/healthz` 200,
 * `/readyz` 503 and mints 503 with `Retry-After`, the directory serves on per-process limits, and
 * both use Redis within seconds of its start, without a restart. A database that is down at start
 * is different: migrations and signing keys are read before anything is served, so the process
 * exits with one line saying the database is unavailable (a supervisor starts it again).
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { sign } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, type TestContext, test } from "node:test";
import { fileURLToPath } from "node:url";
import { signRequest } from "@proto/protocol";
import {
  type PrivateRedis,
  postgresMissing,
  redisMissing,
  startPostgres,
  startRedis,
} from "./support/dependency-processes.js";
import { within } from "./support/eventually.js";
import { RECOVER_WITHIN_MS, unavailableProblems } from "./support/fault-load.js";
import type { HttpResult } from "./support/http.js";
import { freshGet, Replica } from "./support/replicas.js";
import { createTestDatabase, POSTGRES_URL, reportSkippedVariants } from "./support/stores.js";
import {
  type Agent,
  freePort,
  newAgent,
  RELAXED_RATE_LIMITS,
  TEST_KEY_ENCRYPTION_KEY,
  TEST_PSEUDONYM_KEY,
} from "./support/trust.js";

reportSkippedVariants();

const IN_CI = process.env.CI === "true";
const TRUST_PUBLIC_URL = "https://trust.test";
const METRICS_TOKEN = "metrics-token-for-tests-0123456789";
/** Only a guard against a hung child; nothing is asserted about time but the recovery bound. */
const TEST_TIMEOUT_MS = 120_000;

function trustEnv(databaseUrl: string, redisUrl?: string): Record<string, string> {
  return {
    PROTO_TEST_HOOKS: "1",
    LOG_LEVEL: "warn",
    ...(redisUrl === undefined ? {} : { REDIS_URL: redisUrl }),
    TRUST_PUBLIC_URL,
    TRUST_DATABASE_URL: databaseUrl,
    TRUST_KEY_ENCRYPTION_KEY: TEST_KEY_ENCRYPTION_KEY.toString("base64url"),
    TRUST_PSEUDONYM_KEY: TEST_PSEUDONYM_KEY.toString("base64url"),
    TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS,
  };
}

function directoryEnv(databaseUrl: string, redisUrl?: string): Record<string, string> {
  return {
    LOG_LEVEL: "warn",
    METRICS_TOKEN,
    ...(redisUrl === undefined ? {} : { REDIS_URL: redisUrl }),
    DIRECTORY_DATABASE_URL: databaseUrl,
    DIRECTORY_PUBLIC_URL: "https://directory.test",
    DIRECTORY_REVALIDATE_TICK_SECONDS: "0",
  };
}

/** A SQLite file always, PostgreSQL when the run has one; Redis is this file's own. */
const ENGINES: ("sqlite" | "postgres")[] = ["sqlite", ...(POSTGRES_URL ? (["postgres"] as const) : [])];

/** A fresh, empty database of `engine`, dropped with the test. */
async function freshDatabase(t: TestContext, engine: "sqlite" | "postgres", label: string): Promise<string> {
  const database = await createTestDatabase(engine, label);
  t.after(() => database.drop());
  return database.url;
}

/** `/readyz` says the service is not ready because of `dependency`, with a Retry-After. */
function assertUnreadyFor(result: HttpResult, dependency: string): void {
  assert.equal(result.status, 503, result.text);
  assert.match(result.headers.get("retry-after") ?? "", /^\d+$/);
  assert.deepEqual(result.json.error.details.unavailable, [dependency], result.text);
}

/** An agent linked through the test hooks (none of this needs Redis). */
async function linkAgent(trust: Replica): Promise<Agent> {
  const agent = newAgent();
  const started = await trust.request("POST", "/v1/link/start", {
    body: { agent_did: agent.did, agent_pubkey_b64: agent.publicKeyB64 },
  });
  assert.equal(started.status, 200, started.text);
  const reqId: string = started.json.req_id;
  await trust.hook("/__test/link/confirm", { req_id: reqId, email: "owner@mail.test" });
  const polled = await trust.request("POST", "/v1/link/poll", {
    body: { req_id: reqId, sig_b64: sign(null, Buffer.from(reqId, "utf8"), agent.privateKey).toString("base64url") },
  });
  assert.equal(polled.status, 200, polled.text);
  return agent;
}

/** A freshly signed `POST /v1/token`, created now on the attestor's clock. */
async function mint(trust: Replica, agent: Agent): Promise<HttpResult> {
  const body = JSON.stringify({ aud: "did:web:svc.test" });
  const created = Math.floor((await trust.nowMs()) / 1000);
  const signed = signRequest(
    { method: "POST", url: `${TRUST_PUBLIC_URL}/v1/token`, body },
    { keyid: agent.did, privateKey: agent.privateKey, created },
  );
  return trust.request("POST", "/v1/token", {
    rawBody: body,
    headers: { "content-type": "application/json", ...signed.headers },
  });
}

/** `proto_dependency_up{dependency="redis"}` as the directory reports it. */
async function redisUp(directory: Replica): Promise<number> {
  const scraped = await directory.request("GET", "/metrics", { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
  assert.equal(scraped.status, 200, scraped.text);
  const line = scraped.text
    .split("\n")
    .find((l) => l.startsWith("proto_dependency_up{") && l.includes('dependency="redis"'));
  assert.ok(line !== undefined, "the directory reports whether Redis is up");
  return Number(line.split(" ").at(-1));
}

/** A test body whose failure message carries the servers' output. */
const withLogs = (replicas: Replica[], run: () => Promise<void>) => async () => {
  try {
    await run();
  } catch (error) {
    if (error instanceof Error) {
      error.message = `${error.message}\n${replicas.map((r) => `=== ${r.name}\n${r.log()}`).join("\n")}`;
    }
    throw error;
  } finally {
    await Promise.allSettled(replicas.map((r) => r.stop()));
  }
};

const REDIS_SKIP = redisMissing();
if (REDIS_SKIP !== undefined)
  process.stdout.write(`# Redis down at start ${IN_CI ? "cannot run" : "skipped"}: ${REDIS_SKIP}\n`);

describe("proto-server starts while its Redis is down", {
  skip: REDIS_SKIP !== undefined && !IN_CI ? REDIS_SKIP : false,
  timeout: TEST_TIMEOUT_MS,
}, () => {
  let redis: PrivateRedis | undefined;

  before(async () => {
    if (REDIS_SKIP !== undefined) throw new Error(`${REDIS_SKIP} (required under CI=true)`);
    // Started once to own a port of its own, then stopped: each test starts with nothing there.
    redis = await startRedis();
  });

  after(async () => {
    await redis?.close();
  });

  for (const engine of ENGINES) {
    test(`the attestor (${engine}): /readyz and mints 503 with Retry-After, then mints once Redis starts`, async (t) => {
      await redis!.stop();
      const trust = new Replica(
        "trust",
        "trust",
        await freePort(),
        trustEnv(await freshDatabase(t, engine, "startup_trust"), redis!.url),
      );
      await withLogs([trust], async () => {
        await trust.start({ until: "/healthz" });
        const pid = trust.pid;
        assertUnreadyFor(await trust.request("GET", "/readyz"), "redis");
        const agent = await linkAgent(trust);
        const refused = await mint(trust, agent);
        assert.equal(refused.status, 503, refused.text);
        assert.deepEqual(unavailableProblems(refused), [], refused.text);

        await redis!.start();
        await within(RECOVER_WITHIN_MS, "the attestor is ready once Redis has started", async () => {
          return (await trust.request("GET", "/readyz")).status === 200;
        });
        const minted = await mint(trust, agent);
        assert.equal(minted.status, 200, minted.text);
        assert.equal(typeof minted.json.jwt, "string");
        assert.ok(trust.running && trust.pid === pid, "the same process throughout");
      })();
    });

    test(`the directory (${engine}): ready and serving without Redis, uses it once it starts`, async (t) => {
      await redis!.stop();
      const directory = new Replica(
        "directory",
        "directory",
        await freePort(),
        directoryEnv(await freshDatabase(t, engine, "startup_directory"), redis!.url),
      );
      await withLogs([directory], async () => {
        // Ready at once: the directory serves on per-process limits while Redis is away.
        await directory.start();
        const pid = directory.pid;
        const listed = await directory.request("GET", "/v1/listings?limit=5");
        assert.equal(listed.status, 200, listed.text);
        assert.equal(await redisUp(directory), 0);

        await redis!.start();
        await within(RECOVER_WITHIN_MS, "the directory reports Redis up once it has started", async () => {
          return (await redisUp(directory)) === 1;
        });
        assert.equal((await directory.request("GET", "/v1/listings?limit=5")).status, 200);
        assert.ok(directory.running && directory.pid === pid, "the same process throughout");
      })();
    });
  }

  test("proto-server all: both services start, the attestor becomes ready once Redis starts", async (t) => {
    await redis!.stop();
    const dir = mkdtempSync(join(tmpdir(), "proto-startup-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const [directoryPort, trustPort] = [await freePort(), await freePort()];
    const env = {
      ...directoryEnv(`sqlite:${join(dir, "directory.db")}`, redis!.url),
      ...trustEnv(`sqlite:${join(dir, "trust.db")}`, redis!.url),
    };
    const server = spawnCli(
      ["all", "--directory-port", String(directoryPort), "--trust-port", String(trustPort), "--host", "127.0.0.1"],
      env,
    );
    t.after(() => server.stop());
    const get = (port: number, path: string) => freshGet(`http://127.0.0.1:${port}${path}`);
    await server.until(async () => (await get(trustPort, "/healthz").catch(() => undefined))?.status === 200);
    assert.equal((await get(directoryPort, "/readyz")).status, 200);
    assert.equal((await get(trustPort, "/readyz")).status, 503);

    await redis!.start();
    await within(RECOVER_WITHIN_MS, "the attestor of `all` is ready once Redis has started", async () => {
      return (await get(trustPort, "/readyz")).status === 200;
    });
    assert.ok(server.running(), server.output());
  });
});

const POSTGRES_SKIP = postgresMissing();
if (POSTGRES_SKIP !== undefined) {
  process.stdout.write(`# PostgreSQL down at start ${IN_CI ? "cannot run" : "skipped"}: ${POSTGRES_SKIP}\n`);
}

describe("proto-server with its PostgreSQL down at start", {
  skip: POSTGRES_SKIP !== undefined && !IN_CI ? POSTGRES_SKIP : false,
  timeout: TEST_TIMEOUT_MS,
}, () => {
  test("exits 1 with one line saying the database is unavailable, and starts once it is up", async (t) => {
    if (POSTGRES_SKIP !== undefined) throw new Error(`${POSTGRES_SKIP} (required under CI=true)`);
    const postgres = await startPostgres();
    t.after(() => postgres.close());
    const url = await postgres.createDatabase("startup");
    await postgres.stop("fast");
    const services = [
      new Replica("trust", "trust", await freePort(), trustEnv(url)),
      new Replica("directory", "directory", await freePort(), directoryEnv(url)),
    ];
    for (const replica of services) {
      await assert.rejects(replica.start({ until: "/healthz" }), /ended before it was ready/);
      assert.deepEqual(await replica.exited, { code: 1, signal: null });
      const output = replica
        .log()
        .split("\n")
        .filter((line) => line !== "" && !line.startsWith("--- "));
      assert.equal(output.length, 1, `one line, no stack trace:\n${output.join("\n")}`);
      assert.match(
        output[0]!,
        /^proto-server: failed to start: the database is unavailable \(connect ECONNREFUSED 127\.0\.0\.1:\d+\); it must answer at start/,
      );
    }
    await postgres.start();
    const trust = services[0]!;
    await withLogs([trust], async () => {
      await trust.start();
    })();
  });
});

interface Spawned {
  running(): boolean;
  output(): string;
  /** Resolves once `check` is true; rejects with the output if the process ends first. */
  until(check: () => Promise<boolean>): Promise<void>;
  stop(): Promise<void>;
}

const CLI = fileURLToPath(new URL("../src/cli.ts", import.meta.url));
const REPO_ROOT = fileURLToPath(new URL("../../../", import.meta.url));

/** `proto-server <args>` as a child process (Replica runs one service; `all` runs two). */
function spawnCli(args: string[], env: Record<string, string>): Spawned {
  const inherited = Object.fromEntries(
    Object.entries(process.env).filter(
      ([key]) =>
        !/^(NODE_ENV|NODE_TEST_CONTEXT|NODE_OPTIONS|PROTO_|DIRECTORY_|TRUST_|REDIS_URL|TEST_|LOG_LEVEL|METRICS_TOKEN)/.test(
          key,
        ),
    ),
  );
  const child: ChildProcess = spawn(process.execPath, ["--conditions=source", "--import", "tsx", CLI, ...args], {
    cwd: REPO_ROOT,
    env: { ...inherited, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
    output += chunk;
  });
  child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
    output += chunk;
  });
  const closed = new Promise<void>((resolve) => child.once("close", () => resolve()));
  const running = () => child.exitCode === null && child.signalCode === null;
  return {
    running,
    output: () => output,
    async until(check) {
      for (;;) {
        if (!running()) throw new Error(`proto-server ${args[0]} ended:\n${output}`);
        if (await check()) return;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    async stop() {
      if (running()) child.kill("SIGKILL");
      await closed;
    },
  };
}
