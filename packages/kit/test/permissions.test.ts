/**
 * Issue 38, item 1: a service declares its permissions. createKit's `permissions` option is checked
 * at start (a KitConfigError naming the option's path), served in the discovery document's
 * `permissions` member, kept on `kit.permissions`, and published by MCP resources as
 * `scopes_supported`. A Fastify service on a real port, read with fetch, as an agent reads it.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { validateDiscoveryDocument } from "@proto/protocol";
import Fastify, { type FastifyInstance } from "fastify";
import { createService, mcpRoute } from "../src/fastify.js";
import { createKit, type Kit, KitConfigError, type KitOptions } from "../src/index.js";
import { answer } from "./support/attestor.js";
import { freePort } from "./support/env.js";

const PERMISSIONS = {
  "notes:read": { description: "Read your notes", default: true },
  "notes:delete": { description: "Delete your notes", phishing_resistant: true },
  purchase: { description: "Pay for pinned notes", currency: "EUR" },
};

/** An attestor the kit names but never calls here: metadata and discovery are built offline. */
const ATTESTORS = { "proto-trust": { url: "http://127.0.0.1:9", allowHttp: true } };

function options(origin: string, overrides: Partial<KitOptions> = {}): KitOptions {
  const port = new URL(origin).port;
  return {
    publicUrl: origin,
    allowHttp: true,
    database: "sqlite::memory:",
    discovery: { service_did: `did:web:127.0.0.1%3A${port}`, recipient_types: ["oidc"] },
    attestors: ATTESTORS,
    ...overrides,
  };
}

/** A service on a real port: the kit's routes, and MCP endpoints with and without their own scopes. */
async function serve(kit: Kit, port: number): Promise<FastifyInstance> {
  const app = Fastify({ logger: false });
  await app.register(createService(kit));
  mcpRoute(app, kit, { path: "/mcp", scopes: ["notes"] }, async () => ({ ok: true }));
  mcpRoute(app, kit, { path: "/tools", scopesSupported: ["tools"], rootMetadata: false }, async () => ({ ok: true }));
  await app.listen({ port, host: "127.0.0.1" });
  return app;
}

async function get(url: string) {
  return answer(await fetch(url));
}

describe("kit: a service that declares its permissions", () => {
  let kit: Kit;
  let app: FastifyInstance;
  let origin: string;

  before(async () => {
    const port = await freePort();
    origin = `http://127.0.0.1:${port}`;
    kit = await createKit(options(origin, { permissions: PERMISSIONS }));
    app = await serve(kit, port);
  });

  after(async () => {
    await app?.close();
    await kit?.close();
  });

  test("GET /.well-known/proto carries the permissions member, as configured, valid under the schema", async () => {
    const reply = await get(`${origin}/.well-known/proto`);
    assert.equal(reply.status, 200);
    assert.deepEqual(reply.json.permissions, PERMISSIONS);
    assert.equal(validateDiscoveryDocument(reply.json).valid, true);
  });

  test("kit.permissions is the declared set, frozen", () => {
    assert.deepEqual(kit.permissions, PERMISSIONS);
    assert.equal(Object.isFrozen(kit.permissions), true);
    assert.equal(Object.isFrozen(kit.permissions["notes:read"]), true);
  });

  test("an MCP resource lists the declared names in scopes_supported, then its required scopes", async () => {
    const reply = await get(`${origin}/.well-known/oauth-protected-resource/mcp`);
    assert.equal(reply.status, 200);
    assert.deepEqual(reply.json.scopes_supported, ["notes:read", "notes:delete", "purchase", "notes"]);
  });

  test("an MCP resource's explicit scopesSupported still wins", async () => {
    const reply = await get(`${origin}/.well-known/oauth-protected-resource/tools`);
    assert.equal(reply.status, 200);
    assert.deepEqual(reply.json.scopes_supported, ["tools"]);
  });
});

describe("kit: a service that declares no permissions is served as before", () => {
  let kit: Kit;
  let app: FastifyInstance;
  let origin: string;

  before(async () => {
    const port = await freePort();
    origin = `http://127.0.0.1:${port}`;
    kit = await createKit(options(origin));
    app = await serve(kit, port);
  });

  after(async () => {
    await app?.close();
    await kit?.close();
  });

  test("no permissions member, an empty kit.permissions, scopes_supported from scopes alone", async () => {
    const discovery = await get(`${origin}/.well-known/proto`);
    assert.equal(discovery.status, 200);
    assert.equal("permissions" in discovery.json, false);
    assert.deepEqual(kit.permissions, {});
    const metadata = await get(`${origin}/.well-known/oauth-protected-resource/mcp`);
    assert.deepEqual(metadata.json.scopes_supported, ["notes"]);
  });
});

describe("createKit: a bad permissions option is a KitConfigError naming its path", () => {
  const origin = "http://127.0.0.1:18999";

  async function refusal(permissions: unknown, extra: Partial<KitOptions> = {}): Promise<KitConfigError> {
    const error = await createKit(options(origin, { permissions, ...extra } as Partial<KitOptions>)).then(
      async (kit) => {
        await kit.close();
        return undefined;
      },
      (caught: unknown) => caught,
    );
    assert.ok(error instanceof KitConfigError, `createKit refuses with a KitConfigError, got ${String(error)}`);
    return error;
  }

  test("a bad name", async () => {
    const error = await refusal({ "Notes Read": { description: "Read your notes" } });
    assert.equal(error.option, 'permissions["Notes Read"]');
    assert.equal(
      error.message,
      'permissions: "Notes Read" is not a permission name (lowercase segments separated by colons, like notes:read, at most 64 characters)',
    );
  });

  test("a multi-line description", async () => {
    const error = await refusal({ "notes:read": { description: "Read\nyour notes" } });
    assert.equal(error.option, 'permissions["notes:read"].description');
    assert.match(error.message, /must be one line of text, not blank/);
  });

  test("a missing description, a non-boolean default, a bad currency", async () => {
    assert.equal((await refusal({ "notes:read": {} })).option, 'permissions["notes:read"].description');
    assert.equal(
      (await refusal({ "notes:read": { description: "Read", default: "yes" } })).option,
      'permissions["notes:read"].default',
    );
    const currency = await refusal({ purchase: { description: "Pay", currency: "euro" } });
    assert.equal(currency.option, 'permissions["purchase"].currency');
    assert.match(currency.message, /ISO 4217/);
  });

  test("more than 64 permissions", async () => {
    const many = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`p${i}`, { description: `P ${i}` }]));
    const error = await refusal(many);
    assert.equal(error.option, "permissions");
    assert.equal(error.message, "permissions: must have at most 64 members");
  });

  test("a misspelt field is refused, not ignored", async () => {
    const error = await refusal({ "notes:delete": { description: "Delete your notes", phishingResistant: true } });
    assert.equal(error.option, 'permissions["notes:delete"].phishingResistant');
    assert.equal(
      error.message,
      'permissions["notes:delete"].phishingResistant is not a permission field (description, default, phishing_resistant, currency)',
    );
  });

  test("permissions given twice, in the option and in the discovery document", async () => {
    const error = await refusal(PERMISSIONS, {
      discovery: { service_did: "did:web:127.0.0.1%3A18999", recipient_types: ["oidc"], permissions: PERMISSIONS },
    });
    assert.equal(error.option, "permissions");
  });
});
