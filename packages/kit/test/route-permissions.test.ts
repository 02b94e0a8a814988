/**
 * Issue 38, item 4: a route's permissions (docs/authority.md, "Enforcement in the kit"). The same
 * service on Fastify, Express, Hono and the Fetch API (`kit.authenticate`), each on a real server,
 * called by agents whose attestations carry a grant, no grant, or no attestation at all: held
 * permissions pass, a missing one is 403 `insufficient_permission` with its `Proto` challenge, and
 * a permission the service never declared fails when the route is defined.
 */
import assert from "node:assert/strict";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { serve } from "@hono/node-server";
import { agentRoute as expressRoute } from "@proto/kit/express";
import { agentRoute as honoRoute } from "@proto/kit/hono";
import { type AuthorityGrant, findProtoChallenge } from "@proto/protocol";
import Fastify from "fastify";
import { createService, agentRoute as fastifyRoute } from "../src/fastify.js";
import { createKit, type Kit, KitConfigError } from "../src/index.js";
import { type AdapterApp, expressApp, honoApp, startExpress, startHono } from "./support/adapter-apps.js";
import type { Answer } from "./support/attestor.js";
import { authorityKitOptions, ORIGIN, SERVICE_DID, signedCall } from "./support/authority.js";
import { type Agent, newAgent, TestClock } from "./support/env.js";
import { ATTESTOR_URL, GrantAttestor } from "./support/grants.js";

const READ = { permissions: ["notes:read"] };
const DELETE = { permissions: ["notes:delete"] };

/** The service on Fastify: its notes routes, each guarded with its permission. */
async function fastifyApp(kit: Kit): Promise<AdapterApp> {
  const app = Fastify({ logger: false });
  await app.register(createService(kit));
  app.get("/api/notes", fastifyRoute(kit, READ), async (request) => ({
    did: request.proto?.did ?? null,
    held: kit.heldPermissions(request.proto),
  }));
  app.delete("/api/notes/:id", fastifyRoute(kit, DELETE), async (request) => ({
    deleted: (request.params as { id: string }).id,
  }));
  // Optional authentication: an anonymous caller holds the defaults too.
  app.get("/api/shared", fastifyRoute(kit, { optional: true, ...READ }), async (request) => ({
    did: request.proto?.did ?? null,
  }));
  app.get("/api/purge", fastifyRoute(kit, { optional: true, ...DELETE }), async () => ({ purged: true }));
  await app.listen({ port: 0, host: "127.0.0.1" });
  const { port } = app.server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, close: () => app.close() };
}

function expressNotes(kit: Kit): Promise<AdapterApp> {
  return startExpress(
    expressApp(kit, (app) => {
      app.get("/api/notes", expressRoute(kit, READ), (req, res) => {
        res.json({ did: req.proto?.did ?? null, held: kit.heldPermissions(req.proto ?? null) });
      });
      app.delete("/api/notes/:id", expressRoute(kit, DELETE), (req, res) => {
        res.json({ deleted: req.params.id });
      });
    }),
  );
}

function honoNotes(kit: Kit): Promise<AdapterApp> {
  return startHono(
    honoApp(kit, (app) => {
      app.get("/api/notes", honoRoute(kit, READ), (c) =>
        c.json({ did: c.get("proto")?.did ?? null, held: kit.heldPermissions(c.get("proto")) }),
      );
      app.delete("/api/notes/:id", honoRoute(kit, DELETE), (c) => c.json({ deleted: c.req.param("id") }));
    }),
  );
}

/** The service on the Fetch API, as a worker writes it, served by node through @hono/node-server. */
async function fetchNotes(kit: Kit): Promise<AdapterApp> {
  async function handle(request: Request): Promise<Response> {
    const own = await kit.handle(request);
    if (own !== undefined) return own;
    const { pathname } = new URL(request.url);
    try {
      if (request.method === "GET" && pathname === "/api/notes") {
        const agent = await kit.authenticate(request, { route: "GET /api/notes", ...READ });
        return Response.json({ did: agent.did, held: kit.heldPermissions(agent) });
      }
      if (request.method === "DELETE" && pathname.startsWith("/api/notes/")) {
        await kit.authenticate(request, { route: "DELETE /api/notes/:id", ...DELETE });
        return Response.json({ deleted: pathname.slice("/api/notes/".length) });
      }
      return Response.json({ error: { code: "not_found", message: "no such route" } }, { status: 404 });
    } catch (error) {
      return kit.errorToResponse(error, request);
    }
  }
  const server = serve({ fetch: handle, port: 0, hostname: "127.0.0.1" }) as Server;
  if (!server.listening) await new Promise((resolve) => server.once("listening", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

const FRAMEWORKS: [string, (kit: Kit) => Promise<AdapterApp>][] = [
  ["Fastify", fastifyApp],
  ["Express", expressNotes],
  ["Hono", honoNotes],
  ["Fetch API", fetchNotes],
];

describe("route permissions on every adapter", { timeout: 60_000 }, () => {
  const clock = new TestClock();
  let grants: GrantAttestor;
  let kit: Kit;
  const apps: [string, AdapterApp][] = [];
  const unexpected: unknown[] = [];
  let grantCount = 0;

  before(async () => {
    grants = await GrantAttestor.create(clock);
    kit = await createKit(authorityKitOptions(grants, clock, { onError: (error) => unexpected.push(error) }));
    for (const [name, start] of FRAMEWORKS) apps.push([name, await start(kit)]);
  });

  after(async () => {
    for (const [, app] of apps) await app.close();
    await kit?.close();
  });

  function grantOf(permissions: string[]): AuthorityGrant {
    return { id: `grt_routes_${++grantCount}`, permissions, spendLimits: [] };
  }

  /** A new agent, signed up at the service with an attestation that carries `grant` (or none). */
  async function agentWith(grant?: AuthorityGrant): Promise<{ agent: Agent; attestation: string }> {
    const agent = newAgent();
    const attestation = await grants.attest(agent, SERVICE_DID, grant);
    return { agent, attestation };
  }

  function expectRefused(answer: Answer, missing: string[], where: string, attestor: string | undefined): void {
    assert.equal(answer.status, 403, `${where}: ${answer.text}`);
    assert.match(answer.headers.get("content-type") ?? "", /^application\/json/, where);
    assert.equal(answer.json.error.code, "insufficient_permission", where);
    assert.deepEqual(
      answer.json.error.details,
      { missing, audience: SERVICE_DID, ...(attestor === undefined ? {} : { attestor }) },
      where,
    );
    const challenge = findProtoChallenge(answer.headers.get("www-authenticate"));
    assert.ok(challenge, `${where}: a Proto challenge`);
    assert.equal(challenge.discovery, `${ORIGIN}/.well-known/proto`, where);
    assert.equal(challenge.error, "insufficient_permission", where);
    assert.deepEqual(challenge.permissions, missing, where);
    assert.equal(challenge.attestor, attestor, where);
  }

  test("a grant that holds the route's permission passes; one without it is 403 insufficient_permission with the challenge", async () => {
    for (const [name, app] of apps) {
      const call = (agent: Agent, method: string, path: string, attestation: string) =>
        signedCall(app.url, agent, clock, method, path, { attestation });
      const both = await agentWith(grantOf(["notes:read", "notes:delete"]));
      const read = await call(both.agent, "GET", "/api/notes", both.attestation);
      assert.equal(read.status, 200, `${name}: ${read.text}`);
      assert.deepEqual(read.json, { did: both.agent.did, held: ["notes:read", "notes:delete"] }, name);
      const deleted = await call(both.agent, "DELETE", "/api/notes/n1", both.attestation);
      assert.equal(deleted.status, 200, `${name}: ${deleted.text}`);
      assert.deepEqual(deleted.json, { deleted: "n1" }, name);

      const readOnly = await agentWith(grantOf(["notes:read"]));
      assert.equal((await call(readOnly.agent, "GET", "/api/notes", readOnly.attestation)).status, 200, name);
      const refused = await call(readOnly.agent, "DELETE", "/api/notes/n1", readOnly.attestation);
      expectRefused(refused, ["notes:delete"], name, ATTESTOR_URL);
    }
  });

  test("a grant holds exactly its permissions: the defaults are not added to it", async () => {
    for (const [name, app] of apps) {
      const { agent, attestation } = await agentWith(grantOf(["notes:delete"]));
      const refused = await signedCall(app.url, agent, clock, "GET", "/api/notes", { attestation });
      expectRefused(refused, ["notes:read"], name, ATTESTOR_URL);
      const deleted = await signedCall(app.url, agent, clock, "DELETE", "/api/notes/n2", { attestation });
      assert.equal(deleted.status, 200, `${name}: ${deleted.text}`);
    }
  });

  test("without a grant the declared defaults are held: read passes, delete is refused", async () => {
    for (const [name, app] of apps) {
      const { agent, attestation } = await agentWith();
      const read = await signedCall(app.url, agent, clock, "GET", "/api/notes", { attestation });
      assert.equal(read.status, 200, `${name}: ${read.text}`);
      assert.deepEqual(read.json.held, ["notes:read"], name);
      const refused = await signedCall(app.url, agent, clock, "DELETE", "/api/notes/n3", { attestation });
      expectRefused(refused, ["notes:delete"], name, ATTESTOR_URL);
    }
  });

  test("a request without an attestation (the account exists) holds the defaults; the attestor is not named", async () => {
    for (const [name, app] of apps) {
      const { agent, attestation } = await agentWith(grantOf(["notes:read", "notes:delete"]));
      const signedUp = await signedCall(app.url, agent, clock, "GET", "/api/notes", { attestation });
      assert.equal(signedUp.status, 200, `${name}: ${signedUp.text}`);
      // The same agent without its attestation: the grant came with the token, so it is not held now.
      const read = await signedCall(app.url, agent, clock, "GET", "/api/notes");
      assert.equal(read.status, 200, `${name}: ${read.text}`);
      assert.deepEqual(read.json.held, ["notes:read"], name);
      const refused = await signedCall(app.url, agent, clock, "DELETE", "/api/notes/n4");
      expectRefused(refused, ["notes:delete"], name, undefined);
    }
  });

  test("an anonymous caller of an optional route holds the defaults", async () => {
    const [, app] = apps[0] as [string, AdapterApp];
    const shared = await fetch(`${app.url}/api/shared`);
    assert.equal(shared.status, 200);
    assert.deepEqual(await shared.json(), { did: null });
    const purge = await fetch(`${app.url}/api/purge`);
    assert.equal(purge.status, 403);
    const body = (await purge.json()) as { error: { code: string; details: unknown } };
    assert.equal(body.error.code, "insufficient_permission");
    assert.deepEqual(body.error.details, { missing: ["notes:delete"], audience: SERVICE_DID });
  });

  test("a permission the service does not declare fails when the route is defined, naming it", async () => {
    const typo = { permissions: ["notes:delte"] };
    const named = (error: unknown) =>
      error instanceof KitConfigError &&
      error.option === "permissions" &&
      /"notes:delte" is not declared/.test(error.message) &&
      /notes:read, notes:delete, purchase/.test(error.message);
    assert.throws(() => fastifyRoute(kit, typo), named);
    assert.throws(() => expressRoute(kit, typo), named);
    assert.throws(() => honoRoute(kit, typo), named);
    assert.throws(
      () => fastifyRoute(kit, { ...typo, route: "DELETE /api/notes/:id" }),
      /route DELETE \/api\/notes\/:id/,
    );
    const request = new Request(`${ORIGIN}/api/notes`);
    await assert.rejects(kit.authenticate(request, { route: "GET /api/notes", ...typo }), (error: unknown) => {
      return named(error) && /GET \/api\/notes/.test((error as Error).message);
    });
  });

  test("nothing unexpected reached onError", () => {
    assert.deepEqual(unexpected, []);
  });
});
