/**
 * Issue 36, item 6: the kit's own database is unreachable. A service on the kit cannot look up
 * accounts, invitations or sessions, so every request that needs its store answers 503
 * `kit_store_unavailable` with `Retry-After`, in the envelope for the API and as a page for people
 * (never a 500, never a stack trace or the database's address), on Fastify, Express, Hono and the
 * Fetch API alike; once the database answers again the same requests are served, without a
 * restart. The outage is real: the kit reaches PostgreSQL through a TCP relay that this test cuts
 * and restores. On SQLite, a write lock held by another connection past the busy timeout is the
 * same kind of answer.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { serve } from "@hono/node-server";
import { agentRoute as expressAgentRoute, createService as expressService } from "@proto/kit/express";
import { agentRoute as honoAgentRoute, createService as honoService } from "@proto/kit/hono";
import { signRequest } from "@proto/protocol";
import { startTcpProxy, type TcpProxy } from "@proto/testkit";
import BetterSqlite3 from "better-sqlite3";
import express from "express";
import Fastify, { type FastifyInstance } from "fastify";
import { Hono } from "hono";
import { agentRoute, createService } from "../src/fastify.js";
import { createKit, type Kit, type KitOptions } from "../src/index.js";
import { type Answer, answer } from "./support/attestor.js";
import {
  type Agent,
  createTestDatabase,
  emailAddress,
  newAgent,
  POSTGRES_URL,
  reportSkippedEngines,
  TestClock,
  type TestDatabase,
} from "./support/env.js";

reportSkippedEngines();

const ORIGIN = "https://notes.example";
const SERVICE_DID = "did:web:notes.example";
const ACCOUNTS = "/proto/v1/accounts";
const INVITE = "/proto/v1/accounts/me/owner-invitation";
const CLAIM_PAGE = "/proto/claim";

/** A request to the service as a client sends it; `url` is on the public origin. */
type Send = (request: Request) => Promise<Answer>;

/** One way of mounting the kit, with the application's guarded route `GET /api/whoami`. */
interface Mounted {
  send: Send;
  close(): Promise<void>;
}

/** Sends the request to `base` (a real server), keeping its path, method, headers and body. */
function over(base: string): Send {
  return async (request) => {
    const url = new URL(request.url);
    const body = request.body === null ? undefined : await request.text();
    return answer(
      await fetch(`${base}${url.pathname}${url.search}`, {
        method: request.method,
        headers: request.headers,
        ...(body === undefined ? {} : { body }),
      }),
    );
  };
}

async function fastifyMount(kit: Kit): Promise<Mounted> {
  const app: FastifyInstance = Fastify({ logger: false });
  await app.register(createService(kit));
  app.get("/api/whoami", agentRoute(kit), async (request) => ({ did: request.proto?.did }));
  await app.listen({ port: 0, host: "127.0.0.1" });
  const { port } = app.server.address() as { port: number };
  return { send: over(`http://127.0.0.1:${port}`), close: () => app.close() };
}

/** A node server the application listens on, closed with its connections. */
async function nodeMount(server: Server): Promise<Mounted> {
  if (!server.listening) await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  return {
    send: over(`http://127.0.0.1:${port}`),
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function expressMount(kit: Kit): Promise<Mounted> {
  const app = express();
  app.use(expressService(kit));
  app.get("/api/whoami", expressAgentRoute(kit), (req, res) => {
    res.json({ did: req.proto?.did });
  });
  return nodeMount(app.listen(0, "127.0.0.1"));
}

function honoMount(kit: Kit): Promise<Mounted> {
  const app = new Hono();
  app.use(honoService(kit));
  app.get("/api/whoami", honoAgentRoute(kit), (c) => c.json({ did: c.get("proto")?.did }));
  return nodeMount(serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }) as Server);
}

/** The Fetch API as a worker uses it: `kit.handle`, and `kit.authenticate` on its own route. */
function fetchMount(kit: Kit): Mounted {
  return {
    async send(request) {
      const handled = await kit.handle(request);
      if (handled !== undefined) return answer(handled);
      try {
        const context = await kit.authenticate(request);
        return answer(Response.json({ did: context.did }));
      } catch (error) {
        return answer(kit.errorToResponse(error, request));
      }
    },
    close: async () => undefined,
  };
}

const ADAPTERS: { name: string; mount(kit: Kit): Promise<Mounted> }[] = [
  { name: "Fastify", mount: fastifyMount },
  { name: "Express", mount: expressMount },
  { name: "Hono", mount: honoMount },
  { name: "Fetch API", mount: async (kit) => fetchMount(kit) },
];

function signed(clock: TestClock, agent: Agent, method: string, path: string, body?: unknown): Request {
  const text = body === undefined ? undefined : JSON.stringify(body);
  const url = `${ORIGIN}${path}`;
  const signature = signRequest(
    { method, url, body: text },
    { keyid: agent.did, privateKey: agent.privateKey, created: clock.nowSeconds() },
  );
  return new Request(url, {
    method,
    headers: { ...signature.headers, ...(text === undefined ? {} : { "content-type": "application/json" }) },
    ...(text === undefined ? {} : { body: text }),
  });
}

/** What an outage must never show: a stack, the driver's words, the database's address. */
const LEAKS = /\bat \w|ECONNREFUSED|Connection terminated|SQLITE_|database is locked|127\.0\.0\.1|postgres/i;

/** 503 `kit_store_unavailable` in the envelope, with `Retry-After` in whole seconds. */
function assertUnavailable(got: Answer, what: string): void {
  assert.equal(got.status, 503, `${what}: ${got.text}`);
  assert.match(got.headers.get("content-type") ?? "", /^application\/json/, what);
  assert.equal(got.json?.error?.code, "kit_store_unavailable", `${what}: ${got.text}`);
  assert.equal(typeof got.json.error.message, "string");
  assert.match(got.headers.get("retry-after") ?? "", /^[1-9]\d*$/, `${what}: Retry-After`);
  assert.equal(
    got.headers.get("www-authenticate"),
    null,
    `${what}: an outage is no reason to present other credentials`,
  );
  assert.doesNotMatch(got.text, LEAKS, what);
}

/** The same, as the page a person sees. */
function assertUnavailablePage(got: Answer, what: string): void {
  assert.equal(got.status, 503, `${what}: ${got.text}`);
  assert.match(got.headers.get("content-type") ?? "", /^text\/html/, what);
  assert.match(got.headers.get("retry-after") ?? "", /^[1-9]\d*$/, `${what}: Retry-After`);
  assert.match(got.text, /kit_store_unavailable/, what);
  assert.doesNotMatch(got.text, LEAKS, what);
}

/** A kit on `database` (a URL), owning its store, recording what it reports as unexpected. */
async function kitOn(database: string, clock: TestClock, unexpected: unknown[], invitations: Map<string, string>) {
  const options: KitOptions = {
    publicUrl: ORIGIN,
    discovery: { service_did: SERVICE_DID, billing: { unclaimed_mode: "free" } },
    database,
    now: clock.now,
    serviceName: "Notes",
    onInvitation: (event) => {
      invitations.set(event.account.agent_did, event.token);
    },
    onError: (error) => {
      unexpected.push(error);
    },
  };
  return createKit(options);
}

describe("kit: its PostgreSQL is unreachable", {
  skip: POSTGRES_URL ? false : "TEST_POSTGRES_URL not set",
  timeout: 120_000,
}, () => {
  let database: TestDatabase;
  let relay: TcpProxy;
  let kit: Kit;
  const clock = new TestClock();
  const unexpected: unknown[] = [];
  const invitations = new Map<string, string>();

  before(async () => {
    database = await createTestDatabase("postgres");
    const url = new URL(database.url);
    relay = await startTcpProxy(url.hostname, Number(url.port || 5432));
    url.host = `127.0.0.1:${relay.port}`;
    kit = await kitOn(url.href, clock, unexpected, invitations);
  });

  after(async () => {
    await kit?.close();
    await relay?.close();
    await database?.drop();
  });

  for (const adapter of ADAPTERS) {
    test(`${adapter.name}: signup, a signed request and the claim page answer 503 with Retry-After while it is down, then are served`, async () => {
      const service = await adapter.mount(kit);
      try {
        // An account with an invitation pending, before the outage.
        const owner = newAgent();
        const first = await service.send(signed(clock, owner, "GET", "/api/whoami"));
        assert.equal(first.status, 200, first.text);
        const invited = await service.send(
          signed(clock, owner, "POST", INVITE, { recipient: { type: "email", value: emailAddress("owner") } }),
        );
        assert.equal(invited.status, 202, invited.text);
        const token = invitations.get(owner.did);
        assert.ok(token !== undefined);
        const claimPage = () => new Request(`${ORIGIN}${CLAIM_PAGE}?token=${encodeURIComponent(token)}`);
        const newcomer = newAgent();

        relay.cut();
        assertUnavailable(await service.send(signed(clock, newcomer, "POST", ACCOUNTS)), "explicit signup");
        assertUnavailable(await service.send(signed(clock, owner, "GET", "/api/whoami")), "a signed request");
        assertUnavailable(await service.send(signed(clock, owner, "GET", `${ACCOUNTS}/me`)), "introspection");
        assertUnavailablePage(await service.send(claimPage()), "the claim page");
        assert.deepEqual(unexpected, [], "an outage is not reported as a bug");

        relay.restore();
        const signedUp = await service.send(signed(clock, newcomer, "POST", ACCOUNTS));
        assert.equal(signedUp.status, 201, signedUp.text);
        const again = await service.send(signed(clock, owner, "GET", "/api/whoami"));
        assert.equal(again.status, 200, again.text);
        assert.equal(again.json.did, owner.did);
        const page = await service.send(claimPage());
        assert.equal(page.status, 200, page.text);
        assert.match(page.headers.get("content-type") ?? "", /^text\/html/);
        assert.deepEqual(unexpected, []);
      } finally {
        relay.restore();
        await service.close();
      }
    });
  }
});

describe("kit: its SQLite file is locked by another connection", { timeout: 60_000 }, () => {
  let database: TestDatabase;
  let kit: Kit;
  const clock = new TestClock();
  const unexpected: unknown[] = [];

  before(async () => {
    database = await createTestDatabase("sqlite");
    kit = await kitOn(database.url, clock, unexpected, new Map());
  });

  after(async () => {
    await kit?.close();
    await database?.drop();
  });

  test("a signup that cannot write past the busy timeout answers 503 with Retry-After, then is served", async () => {
    const service = fetchMount(kit);
    const agent = newAgent();
    // Another writer (a maintenance job, `sqlite3` on the live file) holds the write lock.
    const other = new BetterSqlite3(database.url.slice("sqlite:".length));
    try {
      other.exec("BEGIN EXCLUSIVE");
      assertUnavailable(await service.send(signed(clock, agent, "POST", ACCOUNTS)), "signup while locked");
      other.exec("COMMIT");
      const signedUp = await service.send(signed(clock, agent, "POST", ACCOUNTS));
      assert.equal(signedUp.status, 201, signedUp.text);
      assert.deepEqual(unexpected, []);
    } finally {
      other.close();
    }
  });
});
