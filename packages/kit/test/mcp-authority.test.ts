/**
 * Issue 38, item 4, on the MCP bearer path: an agent's access token carries its grant (`grant_id`,
 * `scope`, `authorization_details`) as an attestation does, so an MCP tool checks permissions with
 * `kit.requirePermissions` and spends with `kit.spend` like a guarded route; the resource's own
 * required `scopes` still answer `insufficient_scope`. A Fastify `mcpRoute` on a real port.
 */
import assert from "node:assert/strict";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { type AuthorityGrant, findProtoChallenge, spendPeriodKey } from "@proto/protocol";
import Fastify, { type FastifyInstance } from "fastify";
import { createService, mcpRoute } from "../src/fastify.js";
import { createKit, type Kit, type ProtectedResource } from "../src/index.js";
import { type Answer, answer } from "./support/attestor.js";
import { authorityKitOptions, ORIGIN, SERVICE_DID } from "./support/authority.js";
import { newAgent, TestClock } from "./support/env.js";
import { ATTESTOR_URL, GrantAttestor } from "./support/grants.js";

const RESOURCE = `${ORIGIN}/mcp`;

describe("bounded authority for MCP tools (bearer access tokens)", { timeout: 60_000 }, () => {
  const clock = new TestClock();
  let grants: GrantAttestor;
  let kit: Kit;
  let app: FastifyInstance;
  let base: string;
  const unexpected: unknown[] = [];

  before(async () => {
    grants = await GrantAttestor.create(clock);
    kit = await createKit(authorityKitOptions(grants, clock, { onError: (error) => unexpected.push(error) }));
    app = Fastify({ logger: false });
    await app.register(createService(kit));
    // One tool call per request, `{ tool, amount? }`, answered as the MCP server's tools would.
    const resource: ProtectedResource = mcpRoute(app, kit, { path: "/mcp" }, async (request, reply) => {
      const caller = request.bearer;
      const { tool, amount } = request.body as { tool: string; amount?: number };
      try {
        if (tool === "my_permissions") return { kind: caller?.kind, held: kit.heldPermissions(caller) };
        if (caller?.kind !== "agent") throw new Error("these tools are for agents");
        if (tool === "delete_note") {
          kit.requirePermissions(caller, ["notes:delete"]);
          return { deleted: true, held: kit.heldPermissions(caller) };
        }
        return await kit.spend(caller, { amount: amount ?? 0, currency: "EUR", reference: `mcp:${tool}` });
      } catch (error) {
        const refusal = resource.errorResponse(error);
        return reply.code(refusal.status).headers(refusal.headers).send(refusal.body);
      }
    });
    // A resource that requires a scope of its own.
    mcpRoute(app, kit, { path: "/tools", scopes: ["tools"], rootMetadata: false, advertise: false }, async () => ({
      ok: true,
    }));
    await app.listen({ port: 0, host: "127.0.0.1" });
    base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  });

  after(async () => {
    await app?.close();
    await kit?.close();
  });

  async function call(token: string, body: unknown, path = "/mcp"): Promise<Answer> {
    return answer(
      await fetch(`${base}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      }),
    );
  }

  const grant: AuthorityGrant = {
    id: "grt_mcp_1",
    permissions: ["notes:read", "notes:delete", "purchase"],
    spendLimits: [{ permission: "purchase", currency: "EUR", perTransaction: 500, perPeriod: 600, period: "week" }],
  };

  test("a token with the grant: the tool holds its permissions and spends within the grant's limits", async () => {
    const agent = newAgent();
    const token = await grants.accessToken(agent, RESOURCE, { grant });
    const deleted = await call(token, { tool: "delete_note" });
    assert.equal(deleted.status, 200, deleted.text);
    assert.deepEqual(deleted.json, { deleted: true, held: ["notes:read", "notes:delete", "purchase"] });
    const pinned = await call(token, { tool: "pin", amount: 400 });
    assert.equal(pinned.status, 200, pinned.text);
    assert.deepEqual(pinned.json, {
      reference: "mcp:pin",
      amount: 400,
      currency: "EUR",
      permission: "purchase",
      grantId: "grt_mcp_1",
      periodKey: spendPeriodKey("week", clock.now()),
      spentInPeriod: 400,
      remainingInPeriod: 200,
      replayed: false,
    });
    const over = await call(token, { tool: "pin_again", amount: 300 });
    assert.equal(over.status, 403, over.text);
    assert.equal(over.json.error.code, "spend_limit_exceeded");
    assert.equal(over.json.error.details.remaining, 200);
    // The spend landed in the account of the token's agent.
    const record = await kit.store.findAccountByDid(agent.did);
    assert.equal((await kit.store.listSpends([record?.id ?? ""], 10)).length, 1);
  });

  test("a token without a grant holds the defaults: a tool needing more is 403 insufficient_permission, with the challenge", async () => {
    const token = await grants.accessToken(newAgent(), RESOURCE, { scope: "notes:read notes:delete" });
    const refused = await call(token, { tool: "delete_note" });
    assert.equal(refused.status, 403, refused.text);
    assert.deepEqual(refused.json.error.details, {
      missing: ["notes:delete"],
      audience: SERVICE_DID,
      attestor: ATTESTOR_URL,
    });
    const challenge = findProtoChallenge(refused.headers.get("www-authenticate"));
    assert.equal(challenge?.error, "insufficient_permission");
    assert.deepEqual(challenge?.permissions, ["notes:delete"]);
    assert.equal(challenge?.attestor, ATTESTOR_URL);
    const pin = await call(token, { tool: "pin", amount: 1 });
    assert.equal(pin.status, 403, pin.text);
    assert.equal(pin.json.error.code, "insufficient_permission");
  });

  test("a person's MCP client holds the scopes the person consented to", async () => {
    // No `act`: the token is the person's own (the code flow), its scope what they ticked.
    const token = await grants.signAccessToken(newAgent(), RESOURCE, { scope: "notes:delete", act: undefined });
    const held = await call(token, { tool: "my_permissions" });
    assert.equal(held.status, 200, held.text);
    assert.deepEqual(held.json, { kind: "person", held: ["notes:delete"] });
  });

  test("malformed grant claims make the token invalid: 401 invalid_token", async () => {
    const agent = newAgent();
    // The attestor's own key, with claims it would never write.
    const forged = (claims: Record<string, unknown>) =>
      grants.signAccessToken(agent, RESOURCE, { scope: "notes:read", ...claims });
    for (const claims of [
      { authorization_details: [{ type: "spend_limit", permission: "purchase", currency: "EUR", per_transaction: 1 }] },
      { grant_id: "not a grant id!" },
      { grant_id: "grt_ok", authorization_details: [{ type: "spend_limit", permission: "purchase" }] },
    ]) {
      const refused = await call(await forged(claims), { tool: "delete_note" });
      assert.equal(refused.status, 401, refused.text);
      assert.equal(refused.json.error.code, "invalid_token", refused.text);
    }
  });

  test("a resource's required scopes still answer 403 insufficient_scope, grant or not", async () => {
    const token = await grants.accessToken(newAgent(), `${ORIGIN}/tools`, { grant });
    const refused = await call(token, {}, "/tools");
    assert.equal(refused.status, 403, refused.text);
    assert.equal(refused.json.error.code, "insufficient_scope");
  });

  test("nothing unexpected reached onError", () => {
    assert.deepEqual(unexpected, []);
  });
});
