/**
 * Issue 21: the servers survive their dependencies failing under load. The directory and the
 * attestor run as real `proto-server` processes on real dependencies this file starts and owns (a
 * private PostgreSQL cluster, a private redis-server, SQLite files, a tmpfs to fill), about ten
 * client requests stay in flight, and each fault is driven while they do. What is asserted is what
 * clients and load balancers see: the same processes afterwards, no 500, 503 `service_unavailable`
 * with `Retry-After` during the fault, every answer within 2 s, `/readyz` 503 while a required
 * dependency is away and `/healthz` fast throughout, service again within 5 s of the dependency's
 * return, every acknowledged write there afterwards, and no signed request accepted twice across
 * a Redis restart.
 *
 * `npm run chaos` runs the same file with PROTO_CHAOS=1: more load, longer outages, each fault
 * repeated, and PostgreSQL's disk filled through a tablespace on a tmpfs.
 */
import assert from "node:assert/strict";
import { sign } from "node:crypto";
import { chownSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, type TestContext, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { SqliteHandle, signRequest } from "@proto/protocol";
import { createTestCA } from "@proto/testkit";
import BetterSqlite3 from "better-sqlite3";
import pg from "pg";
import { hashToken } from "../src/platform/tokens.js";
import {
  holdSqliteWriteLock,
  mountTmpfs,
  type PrivatePostgres,
  type PrivateRedis,
  postgresMissing,
  redisMissing,
  startPostgres,
  startRedis,
  type Tmpfs,
} from "./support/dependency-processes.js";
import {
  ANSWER_WITHIN_MS,
  describeSample,
  guardedRequest,
  Load,
  type Operation,
  outageViolations,
  Prober,
  RECOVER_WITHIN_MS,
  recoveryViolations,
  type Sample,
  slowest,
  statuses,
  unavailableProblems,
} from "./support/fault-load.js";
import type { HttpResult } from "./support/http.js";
import { Replica } from "./support/replicas.js";
import { type SiteHost, startSiteHost } from "./support/sites.js";
import {
  type Agent,
  freePort,
  newAgent,
  RELAXED_RATE_LIMITS,
  TEST_KEY_ENCRYPTION_KEY,
  TEST_PSEUDONYM_KEY,
} from "./support/trust.js";

const CHAOS = process.env.PROTO_CHAOS === "1";
const IN_CI = process.env.CI === "true";
/** Requests in flight during each fault. */
const CONCURRENCY = CHAOS ? 30 : 10;
/** How often each fault is driven. */
const ROUNDS = CHAOS ? 3 : 1;
/** How long a stopped dependency stays away, and how long another process holds SQLite's lock. */
const OUTAGE_MS = CHAOS ? 8_000 : 3_000;
const LOCK_MS = CHAOS ? 12_000 : 5_000;
/** Load before each fault, so it strikes requests in flight. */
const BASELINE_MS = 600;
/** `/healthz` never waits on a dependency: a liveness probe gets its answer at once. */
const HEALTHZ_WITHIN_MS = 1_000;
/** Reads never wait for SQLite's write lock held elsewhere. */
const READS_WITHIN_MS = 1_000;

const TRUST_PUBLIC_URL = "https://trust.test";
const AUD = "did:web:svc.test";
const didPath = (did: string) => `/v1/listings/${encodeURIComponent(did)}`;

// Limits stay on but never trip: the load comes from one address.
const DIRECTORY_LIMITS = ["challenge", "create", "write", "read"].map((s) => `${s}=1000000/60`).join(",");
const TRUST_LIMITS = `${RELAXED_RATE_LIMITS},read=1000000/60`;

const METRICS_TOKEN = "metrics-token-for-tests-0123456789";

/** Kept running after an error nobody handled (cli.ts): a crash that was caught, still a bug. */
const STRAY_ERROR = /\((kept running)\)/;

// ---- the two servers ------------------------------------------------------------------------

interface Listing {
  did: string;
  token: string;
  /** Titles sent by PATCH in order, with whether each was acknowledged (2xx). */
  sent: { title: string; acknowledged: boolean }[];
}

interface Services {
  directory: Replica;
  trust: Replica;
  pids: { directory: number; trust: number };
  /** One listing per load client, so each client's updates to it are sequential. */
  listings: Listing[];
  agents: Agent[];
  /** A link request left pending: polling it is a read. */
  pending: { agent: Agent; reqId: string };
  /** The attestor's clock offset, for `created` of signatures. */
  trustOffsetSeconds: number;
  close(): Promise<void>;
}

interface ServiceStores {
  directoryDatabaseUrl: string;
  trustDatabaseUrl: string;
  redisUrl?: string;
}

async function startServices(stores: ServiceStores): Promise<Services> {
  const ca = await createTestCA();
  const sites: SiteHost = await startSiteHost(ca, CONCURRENCY);
  const common: Record<string, string> = {
    PROTO_TEST_HOOKS: "1",
    LOG_LEVEL: "warn",
    METRICS_TOKEN,
    ...(stores.redisUrl === undefined ? {} : { REDIS_URL: stores.redisUrl }),
  };
  const directory = new Replica("directory", "directory", await freePort(), {
    ...common,
    PROTO_FETCH_ALLOW_PRIVATE: "1",
    PROTO_FETCH_RESOLVE: sites.resolveEntries(),
    NODE_EXTRA_CA_CERTS: ca.writeCertFile(),
    DIRECTORY_DATABASE_URL: stores.directoryDatabaseUrl,
    DIRECTORY_PUBLIC_URL: "https://directory.test",
    DIRECTORY_REVALIDATE_TICK_SECONDS: "0",
    DIRECTORY_RATE_LIMITS: DIRECTORY_LIMITS,
    DIRECTORY_HOST_CHALLENGE_LIMIT: "100000",
  });
  const trust = new Replica("trust", "trust", await freePort(), {
    ...common,
    TRUST_PUBLIC_URL,
    TRUST_DATABASE_URL: stores.trustDatabaseUrl,
    TRUST_KEY_ENCRYPTION_KEY: TEST_KEY_ENCRYPTION_KEY.toString("base64url"),
    TRUST_PSEUDONYM_KEY: TEST_PSEUDONYM_KEY.toString("base64url"),
    TRUST_RATE_LIMITS: TRUST_LIMITS,
  });
  const stopAll = async () => {
    await Promise.allSettled([directory.stop(), trust.stop()]);
    await sites.close();
  };
  try {
    await Promise.all([directory.start(), trust.start()]);
    const listings: Listing[] = [];
    for (let i = 0; i < CONCURRENCY; i++) {
      const site = sites.site();
      const challenge = await directory.request("POST", "/v1/listings/challenge", {
        body: { discovery_url: site.discoveryUrl },
      });
      assert.equal(challenge.status, 200, challenge.text);
      site.serveProof(challenge.json.challenge_token);
      site.serveDiscovery(site.document());
      const created = await directory.request("POST", "/v1/listings", {
        body: { discovery_url: site.discoveryUrl, challenge_token: challenge.json.challenge_token, title: "Seeded" },
      });
      assert.equal(created.status, 201, created.text);
      listings.push({ did: site.did, token: created.json.session_token, sent: [] });
    }
    const agents = await Promise.all(Array.from({ length: CONCURRENCY }, () => linkAgent(trust)));
    const pendingAgent = newAgent();
    const pending = await startLink(trust, pendingAgent);
    assert.equal(pending.status, 200, pending.text);
    const clock = await trust.hook("/__test/clock");
    return {
      directory,
      trust,
      pids: { directory: directory.pid!, trust: trust.pid! },
      listings,
      agents,
      pending: { agent: pendingAgent, reqId: pending.json.req_id },
      trustOffsetSeconds: clock.json.offset_seconds,
      close: stopAll,
    };
  } catch (error) {
    const logs = `${directory.log()}\n${trust.log()}`;
    await stopAll();
    if (error instanceof Error) error.message = `${error.message}\n${logs}`;
    throw error;
  }
}

function startLink(trust: Replica, agent: Agent): Promise<HttpResult> {
  return guardedRequest(trust.url, "POST", "/v1/link/start", {
    body: { agent_did: agent.did, agent_pubkey_b64: agent.publicKeyB64 },
  });
}

function pollBody(agent: Agent, reqId: string): { req_id: string; sig_b64: string } {
  return { req_id: reqId, sig_b64: sign(null, Buffer.from(reqId, "utf8"), agent.privateKey).toString("base64url") };
}

/** An agent linked through the test hook: it can mint. */
async function linkAgent(trust: Replica): Promise<Agent> {
  const agent = newAgent();
  const started = await startLink(trust, agent);
  assert.equal(started.status, 200, started.text);
  await trust.hook("/__test/link/confirm", { req_id: started.json.req_id, email: `${agent.did.slice(-12)}@mail.test` });
  const polled = await trust.request("POST", "/v1/link/poll", { body: pollBody(agent, started.json.req_id) });
  assert.equal(polled.status, 200, polled.text);
  return agent;
}

/** A signed `POST /v1/token` as it goes on the wire, created now on the attestor's clock. */
interface SignedMint {
  rawBody: string;
  headers: Record<string, string>;
}

function signedMint(s: Services, agent: Agent): SignedMint {
  const body = JSON.stringify({ aud: AUD });
  const created = Math.floor(Date.now() / 1000 + s.trustOffsetSeconds);
  const signed = signRequest(
    { method: "POST", url: `${TRUST_PUBLIC_URL}/v1/token`, body },
    { keyid: agent.did, privateKey: agent.privateKey, created },
  );
  return { rawBody: body, headers: { "content-type": "application/json", ...signed.headers } };
}

function sendMint(s: Services, mint: SignedMint): Promise<HttpResult> {
  return guardedRequest(s.trust.url, "POST", "/v1/token", mint);
}

async function advanceTrustClock(s: Services, seconds: number): Promise<void> {
  const moved = await s.trust.hook("/__test/clock", { advance_seconds: seconds });
  s.trustOffsetSeconds = moved.json.offset_seconds;
}

// ---- the load -------------------------------------------------------------------------------

/** The writes one run's load had acknowledged, to be read back after the fault. */
interface Acknowledged {
  challenges: string[];
  links: { agent: Agent; reqId: string }[];
}

/** Reads and writes on both servers; `ack` collects what was acknowledged. */
function operations(s: Services, ack: Acknowledged): Operation[] {
  const { directory, trust } = s;
  let counter = 0;
  return [
    {
      name: "directory list",
      send: () => guardedRequest(directory.url, "GET", "/v1/listings?limit=5"),
    },
    {
      name: "directory read",
      send: (worker) => guardedRequest(directory.url, "GET", didPath(s.listings[worker]!.did)),
    },
    {
      name: "directory challenge",
      send: () =>
        guardedRequest(directory.url, "POST", "/v1/listings/challenge", {
          body: { discovery_url: `https://load-${++counter}.example/.well-known/proto` },
        }),
      acknowledged: (result) => ack.challenges.push(result.json.challenge_token),
    },
    {
      name: "directory update",
      send: async (worker) => {
        const listing = s.listings[worker]!;
        const title = `Load ${++counter}`;
        const result = await guardedRequest(directory.url, "PATCH", didPath(listing.did), {
          token: listing.token,
          body: { title },
        });
        listing.sent.push({ title, acknowledged: result.status === 200 });
        return result;
      },
    },
    {
      name: "trust keys",
      send: () => guardedRequest(trust.url, "GET", "/.well-known/jwks.json"),
    },
    {
      name: "trust link poll",
      send: () =>
        guardedRequest(trust.url, "POST", "/v1/link/poll", { body: pollBody(s.pending.agent, s.pending.reqId) }),
    },
    {
      name: "trust link start",
      send: async () => {
        const agent = newAgent();
        const result = await startLink(trust, agent);
        if (result.status === 200) ack.links.push({ agent, reqId: result.json.req_id });
        return result;
      },
    },
    {
      name: "trust mint",
      send: (worker) => sendMint(s, signedMint(s, s.agents[worker]!)),
    },
  ];
}

const READS = ["directory list", "directory read", "trust keys", "trust link poll"];
const WRITES = ["directory challenge", "directory update", "trust link start", "trust mint"];

interface FaultRun {
  operations: Operation[];
  samples: Sample[];
  healthz: Sample[];
  readyz: Sample[];
  ack: Acknowledged;
  /** Date.now() when the dependency had failed (stopped, locked, full), and when it was back. */
  downAt: number;
  backAt: number;
}

interface Fault {
  /** Fails the dependency and brings it back; answers when it was down and when back. */
  inject(): Promise<{ downAt: number; backAt: number }>;
  /** Operations whose recovery is asserted elsewhere (mints after Redis lost its nonces). */
  exempt?: string[];
}

/** Load on both servers, the fault, and load until every operation serves again. */
async function underLoad(s: Services, fault: Fault): Promise<FaultRun> {
  const ack: Acknowledged = { challenges: [], links: [] };
  const ops = operations(s, ack);
  const targets = [
    { name: "directory", url: s.directory.url },
    { name: "trust", url: s.trust.url },
  ];
  const load = new Load(ops, CONCURRENCY);
  const healthz = new Prober(targets, "/healthz", 100);
  const readyz = new Prober(targets, "/readyz", 150);
  load.start();
  healthz.start();
  readyz.start();
  let marks: { downAt: number; backAt: number };
  try {
    await sleep(BASELINE_MS);
    marks = await fault.inject();
    await load.recovered(marks.backAt, marks.backAt + RECOVER_WITHIN_MS + 2_000, fault.exempt);
    // A little more, so "still failing after 5 s" has requests to look at.
    await sleep(1_000);
  } finally {
    await load.stop();
    await healthz.stop();
    await readyz.stop();
  }
  return { operations: ops, samples: load.samples, healthz: healthz.samples, readyz: readyz.samples, ack, ...marks };
}

/** Whatever the fault: same processes, honest answers in time, health checks, recovery. */
function assertSurvived(s: Services, run: FaultRun, exempt: string[] = []): void {
  assert.ok(s.directory.running && s.trust.running, "both servers are still running");
  assert.deepEqual({ directory: s.directory.pid, trust: s.trust.pid }, s.pids, "the same processes as before");
  for (const replica of [s.directory, s.trust]) {
    const stray = replica
      .log()
      .split("\n")
      .find((line) => STRAY_ERROR.test(line));
    assert.equal(stray, undefined, `${replica.name} had an error nobody handled`);
  }
  const problems = outageViolations(run.samples, run.operations);
  assert.deepEqual(problems, [], `${problems.length} bad answers of ${run.samples.length}`);

  const slowHealth = run.healthz.filter((h) => h.status !== 200 || h.ms > HEALTHZ_WITHIN_MS);
  assert.deepEqual(slowHealth.map(describeSample), [], "/healthz answers 200 at once throughout");
  const badReady = run.readyz.filter((r) => (r.status !== 200 && r.status !== 503) || r.ms > ANSWER_WITHIN_MS);
  assert.deepEqual(badReady.map(describeSample), [], "/readyz answers 200 or 503 in time");
  for (const name of ["directory", "trust"]) {
    const ready = run.readyz.find((r) => r.op.startsWith(name) && r.startedAt >= run.backAt && r.status === 200);
    assert.ok(ready !== undefined, `${name} /readyz 200 again after the return`);
    assert.ok(
      ready.startedAt + ready.ms - run.backAt <= RECOVER_WITHIN_MS,
      `${name} ready ${Math.round(ready.startedAt + ready.ms - run.backAt)} ms after the return`,
    );
  }
  const late = recoveryViolations(run.samples, run.operations, run.backAt, exempt);
  assert.deepEqual(late, [], "every operation serves again within 5 s of the return");
}

/** `/readyz` answered 503 on `services` throughout [from, to): the dependency is required there. */
function assertUnready(run: FaultRun, from: number, to: number, services = ["directory", "trust"]): void {
  for (const name of services) {
    const during = run.readyz.filter((r) => r.op.startsWith(name) && r.startedAt >= from && r.startedAt + r.ms < to);
    assert.ok(during.length > 0, `${name} /readyz was probed during the outage`);
    const ready = during.filter((r) => r.status !== 503);
    assert.deepEqual(ready.map(describeSample), [], `${name} /readyz is 503 while a dependency is away`);
    for (const r of during) assert.match(r.result?.headers.get("retry-after") ?? "", /^\d+$/);
  }
}

/**
 * A signed request seen before was not accepted again: refused as a replay (401), or as a
 * signature that may predate the nonce store's loss (503 with Retry-After: sign anew).
 */
function assertReplayRefused(result: HttpResult): void {
  if (result.status === 503) assert.deepEqual(unavailableProblems(result), [], result.text);
  else assert.equal(result.status, 401, `a replay across the Redis restart: ${result.text}`);
  note(`replay across the Redis restart: ${result.status} ${result.text}`);
}

/** Requests of `names` sent and answered within [from, to). */
function answeredBetween(run: FaultRun, from: number, to: number, names: string[]): Sample[] {
  return run.samples.filter((x) => names.includes(x.op) && x.startedAt >= from && x.startedAt + x.ms < to);
}

function assertSome503(samples: Sample[], what: string): void {
  assert.ok(
    samples.some((x) => x.status === 503),
    `${what}: the fault was seen (a 503 among ${samples.length} answers: ${slowest(samples)})`,
  );
}

/** Every acknowledged write of the run is there: link requests by the API, challenges in the store. */
async function assertAcknowledgedWrites(
  s: Services,
  run: FaultRun,
  challengesIn: (hashes: string[]) => Promise<number>,
): Promise<void> {
  for (const link of run.ack.links) {
    const polled = await guardedRequest(s.trust.url, "POST", "/v1/link/poll", {
      body: pollBody(link.agent, link.reqId),
    });
    assert.equal(polled.status, 200, `acknowledged link request ${link.reqId}: ${polled.text}`);
    assert.equal(polled.json.state, "pending");
  }
  const hashes = run.ack.challenges.map(hashToken);
  assert.equal(await challengesIn(hashes), hashes.length, "every acknowledged challenge is stored");
  // Each client's updates to its listing were sequential: the listing shows the last one
  // acknowledged, or a later one whose answer was lost (it may have committed).
  for (const listing of s.listings) {
    const read = await guardedRequest(s.directory.url, "GET", didPath(listing.did));
    assert.equal(read.status, 200, read.text);
    const lastAck = listing.sent.findLastIndex((w) => w.acknowledged);
    const allowed =
      lastAck < 0 ? ["Seeded", ...listing.sent.map((w) => w.title)] : listing.sent.slice(lastAck).map((w) => w.title);
    assert.ok(
      allowed.includes(read.json.title),
      `${listing.did}: ${read.json.title} is not among ${allowed.join(", ")}`,
    );
  }
  s.listings.forEach((l) => {
    l.sent.length = 0;
  });
}

/** One full disk: writes 503 while it is, reads served, everything back once space is freed. */
async function diskFullRound(
  s: Services,
  disk: Tmpfs,
  label: string,
  challengesIn: (hashes: string[]) => Promise<number>,
): Promise<void> {
  let freedAt = 0;
  const run = await underLoad(s, {
    async inject() {
      disk.fill();
      const downAt = Date.now();
      await sleep(OUTAGE_MS);
      freedAt = Date.now();
      disk.free();
      return { downAt, backAt: Date.now() };
    },
  });
  report(label, run);
  assertSurvived(s, run);
  assertSome503(answeredBetween(run, run.downAt, freedAt, WRITES), "writes on a full disk");
  const reads = answeredBetween(run, run.downAt, freedAt, READS);
  assert.deepEqual(reads.filter((x) => x.status !== 200).map(describeSample), [], "reads on a full disk");
  await assertAcknowledgedWrites(s, run, challengesIn);
}

/** A test body whose failure message carries both servers' output. */
const withLogs =
  (services: () => Services | undefined, run: (t: TestContext) => Promise<void>) => async (t: TestContext) => {
    try {
      await run(t);
    } catch (error) {
      const s = services();
      if (error instanceof Error && s !== undefined) {
        error.message = `${error.message}\n\n=== directory\n${s.directory.log()}\n=== trust\n${s.trust.log()}`;
      }
      throw error;
    }
  };

interface DependencyMetrics {
  errors: number;
  degradedSeconds: number;
  up: number;
}

/** One dependency's series as the server's `/metrics` reports them. */
async function dependencyMetrics(replica: Replica, dependency: string): Promise<DependencyMetrics> {
  const scraped = await replica.request("GET", "/metrics", { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
  assert.equal(scraped.status, 200, scraped.text);
  const value = (name: string) => {
    const line = scraped.text
      .split("\n")
      .find((l) => l.startsWith(`${name}{`) && l.includes(`dependency="${dependency}"`));
    assert.ok(line !== undefined, `${replica.name} reports ${name} for ${dependency}`);
    return Number(line.split(" ").at(-1));
  };
  return {
    errors: value("proto_dependency_errors_total"),
    degradedSeconds: value("proto_dependency_degraded_seconds_total"),
    up: value("proto_dependency_up"),
  };
}

/** The outage of `dependency` between two scrapes shows in the metrics, and it is up again. */
async function assertOutageCounted(
  s: Services,
  dependency: string,
  before: Record<string, DependencyMetrics>,
  outageSeconds: number,
): Promise<void> {
  for (const replica of [s.directory, s.trust]) {
    const now = await dependencyMetrics(replica, dependency);
    const was = before[replica.name]!;
    assert.ok(now.errors > was.errors, `${replica.name} counted ${dependency} errors`);
    // At least most of the outage: it counts from the first failure a request or probe saw.
    assert.ok(
      now.degradedSeconds - was.degradedSeconds >= outageSeconds - 1,
      `${replica.name} counted ${now.degradedSeconds - was.degradedSeconds} s degraded for a ${outageSeconds} s outage`,
    );
    assert.equal(now.up, 1, `${replica.name} reports ${dependency} up again`);
  }
}

async function metricsOf(s: Services, dependency: string): Promise<Record<string, DependencyMetrics>> {
  return {
    directory: await dependencyMetrics(s.directory, dependency),
    trust: await dependencyMetrics(s.trust, dependency),
  };
}

/** What a run saw, printed so a reader can compare the bounds with what was measured. */
function report(fault: string, run: FaultRun): void {
  note(`${fault}: ${run.samples.length} requests (${statuses(run.samples)}); slowest ms: ${slowest(run.samples)}`);
}

function note(text: string): void {
  process.stdout.write(`# ${text}\n`);
}

// ---- PostgreSQL and Redis -------------------------------------------------------------------

const SERVERS_SKIP = postgresMissing() ?? redisMissing();
if (SERVERS_SKIP !== undefined) {
  note(`dependency faults on PostgreSQL and Redis ${IN_CI ? "cannot run (CI=true)" : "skipped"}: ${SERVERS_SKIP}`);
}

describe("dependency faults: directory and attestor on PostgreSQL and Redis", {
  skip: SERVERS_SKIP !== undefined && !IN_CI ? SERVERS_SKIP : false,
  timeout: CHAOS ? 900_000 : 120_000,
}, () => {
  let postgres: PrivatePostgres | undefined;
  let redis: PrivateRedis | undefined;
  let services: Services | undefined;
  let pgDisk: Tmpfs | string = "PostgreSQL's disk is filled by `npm run chaos` only";
  let databaseUrl = "";
  const s = () => services!;

  before(async () => {
    if (SERVERS_SKIP !== undefined) throw new Error(`${SERVERS_SKIP} (required under CI=true)`);
    [postgres, redis] = await Promise.all([startPostgres(), startRedis()]);
    let tablespace: string | undefined;
    if (CHAOS) {
      // The services' database in a tablespace on a small tmpfs: filling it is PostgreSQL's full disk.
      pgDisk = mountTmpfs(48, postgres.owner);
      if (typeof pgDisk !== "string") {
        const location = join(pgDisk.path, "tablespace");
        mkdirSync(location);
        if (postgres.owner !== undefined) chownSync(location, postgres.owner.uid, postgres.owner.gid);
        await postgres.createTablespace("fillable", location);
        tablespace = "fillable";
      }
    }
    databaseUrl = await postgres.createDatabase("proto", tablespace === undefined ? {} : { tablespace });
    services = await startServices({
      directoryDatabaseUrl: databaseUrl,
      trustDatabaseUrl: databaseUrl,
      redisUrl: redis.url,
    });
  });

  after(async () => {
    await services?.close();
    await redis?.close();
    await postgres?.close();
    if (typeof pgDisk !== "string") pgDisk.close();
  });

  const challengesIn = async (hashes: string[]) => {
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    try {
      const found = await client.query("select count(*)::int as n from dir_challenges where token_hash = any($1)", [
        hashes,
      ]);
      return found.rows[0].n as number;
    } finally {
      await client.end();
    }
  };

  for (const mode of ["fast", "immediate"] as const) {
    test(
      `PostgreSQL restarted (-m ${mode}) under load: same processes, 503s at most, service within 5 s`,
      withLogs(
        () => services,
        async () => {
          for (let round = 0; round < ROUNDS; round++) {
            const run = await underLoad(s(), {
              async inject() {
                const downAt = Date.now();
                await postgres!.restart(mode);
                return { downAt, backAt: Date.now() };
              },
            });
            report(`restart -m ${mode}`, run);
            assertSurvived(s(), run);
            await assertAcknowledgedWrites(s(), run, challengesIn);
          }
        },
      ),
    );
  }

  test(
    "PostgreSQL stopped for seconds: 503 with Retry-After, /readyz 503, /healthz 200, then service again",
    withLogs(
      () => services,
      async () => {
        for (let round = 0; round < ROUNDS; round++) {
          const metricsBefore = await metricsOf(s(), "database");
          let upAt = 0;
          const run = await underLoad(s(), {
            async inject() {
              await postgres!.stop("fast");
              const downAt = Date.now();
              await sleep(OUTAGE_MS);
              upAt = Date.now();
              await postgres!.start();
              return { downAt, backAt: Date.now() };
            },
          });
          report(`stop ${OUTAGE_MS} ms`, run);
          assertSurvived(s(), run);
          assertUnready(run, run.downAt, upAt);
          assertSome503(answeredBetween(run, run.downAt, upAt, WRITES), "writes while PostgreSQL is away");
          await assertAcknowledgedWrites(s(), run, challengesIn);
          await assertOutageCounted(s(), "database", metricsBefore, (upAt - run.downAt) / 1000);
        }
      },
    ),
  );

  test(
    "Redis stopped and started empty: directory serves on per-process limits, mints 503 (fail closed), no replay",
    withLogs(
      () => services,
      async () => {
        for (let round = 0; round < ROUNDS; round++) {
          // A mint accepted before the outage, and refused when sent again: the replay to try later.
          const agent = s().agents[0]!;
          const before = signedMint(s(), agent);
          const accepted = await sendMint(s(), before);
          assert.equal(accepted.status, 200, accepted.text);
          const replayed = await sendMint(s(), before);
          assert.equal(replayed.status, 401, replayed.text);

          const metricsBefore = await metricsOf(s(), "redis");
          let upAt = 0;
          const run = await underLoad(s(), {
            exempt: ["trust mint"],
            async inject() {
              await redis!.stop();
              const downAt = Date.now();
              await sleep(OUTAGE_MS);
              upAt = Date.now();
              await redis!.start();
              return { downAt, backAt: Date.now() };
            },
          });
          report(`redis away ${OUTAGE_MS} ms`, run);
          assertSurvived(s(), run, ["trust mint"]);
          // Mints need Redis: the attestor leaves the load balancer. The directory serves
          // everything on per-process limits, so it stays in (all replicas out would be an outage).
          assertUnready(run, run.downAt, upAt, ["trust"]);
          const directoryReady = run.readyz.filter(
            (r) => r.op.startsWith("directory") && r.startedAt >= run.downAt && r.startedAt + r.ms < upAt,
          );
          assert.ok(
            directoryReady.length > 0 && directoryReady.every((r) => r.status === 200),
            "directory stays ready",
          );
          const others = answeredBetween(
            run,
            run.downAt,
            upAt,
            [...READS, ...WRITES].filter((op) => op !== "trust mint"),
          );
          assert.deepEqual(
            others.filter((x) => x.status !== 200).map(describeSample),
            [],
            "everything but mints is served while Redis is away",
          );
          const mints = answeredBetween(run, run.downAt, upAt, ["trust mint"]);
          assert.ok(mints.length > 0, "mints were tried while Redis was away");
          assert.deepEqual(
            mints.filter((x) => x.status !== 503).map(describeSample),
            [],
            "every mint fails closed while Redis is away",
          );
          await assertAcknowledgedWrites(s(), run, challengesIn);
          await assertOutageCounted(s(), "redis", metricsBefore, (upAt - run.downAt) / 1000);

          // Redis is back without the nonces: the mint accepted before is refused, and so is every
          // signature that could predate the loss, until the Retry-After; then fresh ones work.
          assertReplayRefused(await sendMint(s(), before));
          const early = await sendMint(s(), signedMint(s(), agent));
          assert.equal(early.status, 503, early.text);
          assert.deepEqual(unavailableProblems(early), []);
          const wait = Number(early.headers.get("retry-after"));
          assert.ok(wait >= 1 && wait <= 62, `Retry-After ${wait} covers the verifier's clock skew, no more`);
          await advanceTrustClock(s(), wait);
          const fresh = await sendMint(s(), signedMint(s(), agent));
          assert.equal(fresh.status, 200, `a fresh mint after the Retry-After: ${fresh.text}`);
          assertReplayRefused(await sendMint(s(), before));
          const freshAgain = await sendMint(s(), signedMint(s(), agent));
          assert.equal(freshAgain.status, 200, freshAgain.text);
        }
      },
    ),
  );

  test(
    "PostgreSQL disk full (tablespace on a tmpfs): writes 503, reads served, writes again once space is freed",
    { skip: CHAOS ? false : "`npm run chaos` only" },
    withLogs(
      () => services,
      async (t) => {
        if (typeof pgDisk === "string") {
          note(`PostgreSQL disk full skipped: ${pgDisk}`);
          t.skip(pgDisk);
          return;
        }
        for (let round = 0; round < ROUNDS; round++)
          await diskFullRound(s(), pgDisk, "postgres disk full", challengesIn);
      },
    ),
  );
});

// ---- SQLite ---------------------------------------------------------------------------------

describe("dependency faults: directory and attestor on SQLite", { timeout: CHAOS ? 900_000 : 120_000 }, () => {
  let services: Services | undefined;
  let disk: Tmpfs | string;
  let dir = "";
  const s = () => services!;
  const files = () => ({ directory: join(dir, "directory.db"), trust: join(dir, "trust.db") });

  before(async () => {
    // Both databases on a small tmpfs when this machine lets the test mount one (disk full).
    disk = mountTmpfs(64);
    dir = typeof disk === "string" ? mkdtempSync(join(tmpdir(), "proto-faults-")) : disk.path;
    if (typeof disk === "string") note(`SQLite disk full will be skipped: ${disk}`);
    services = await startServices({
      directoryDatabaseUrl: `sqlite:${files().directory}`,
      trustDatabaseUrl: `sqlite:${files().trust}`,
    });
  });

  after(async () => {
    await services?.close();
    if (typeof disk === "string") rmSync(dir, { recursive: true, force: true });
    else disk?.close();
  });

  const challengesIn = async (hashes: string[]) => {
    const db = new SqliteHandle(new BetterSqlite3(files().directory, { readonly: true }));
    try {
      const placeholders = hashes.map(() => "?").join(",");
      if (hashes.length === 0) return 0;
      const row = db
        .prepare(`select count(*) as n from dir_challenges where token_hash in (${placeholders})`)
        .get(hashes);
      return (row as { n: number }).n;
    } finally {
      db.close();
    }
  };

  test(
    "another process holds the write lock: reads and /healthz stay fast, writes 503 within 2 s or succeed",
    withLogs(
      () => services,
      async () => {
        for (let round = 0; round < ROUNDS; round++) {
          let releasedAt = 0;
          const run = await underLoad(s(), {
            async inject() {
              const held = await Promise.all([
                holdSqliteWriteLock(files().directory, LOCK_MS),
                holdSqliteWriteLock(files().trust, LOCK_MS),
              ]);
              const downAt = Date.now();
              await Promise.all(held.map((h) => h.released));
              releasedAt = Date.now();
              return { downAt, backAt: releasedAt };
            },
          });
          report(`lock held ${LOCK_MS} ms`, run);
          assertSurvived(s(), run);
          const reads = answeredBetween(run, run.downAt, releasedAt, READS);
          assert.ok(reads.length > 0);
          assert.deepEqual(
            reads.filter((x) => x.status !== 200 || x.ms > READS_WITHIN_MS).map(describeSample),
            [],
            `reads never wait for the lock (within ${READS_WITHIN_MS} ms)`,
          );
          assertSome503(answeredBetween(run, run.downAt, releasedAt, WRITES), "writes while the lock is held");
          await assertAcknowledgedWrites(s(), run, challengesIn);
        }
      },
    ),
  );

  test(
    "disk full: writes 503, reads served, writes again once space is freed, the files intact",
    withLogs(
      () => services,
      async (t) => {
        if (typeof disk === "string") {
          t.skip(disk);
          return;
        }
        for (let round = 0; round < ROUNDS; round++) {
          await diskFullRound(s(), disk, "sqlite disk full", challengesIn);
          for (const file of Object.values(files())) {
            const db = new SqliteHandle(new BetterSqlite3(file, { readonly: true }));
            try {
              assert.deepEqual(
                db.prepare("pragma integrity_check").all(),
                [{ integrity_check: "ok" }],
                `${file} is intact`,
              );
            } finally {
              db.close();
            }
          }
        }
      },
    ),
  );
});
