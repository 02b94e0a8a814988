/**
 * What the agent holds (docs/authority.md, "The agent's side"), against the real attestor and a
 * kit service over HTTPS: `explainToken` and `proto trust token --explain` with and without a
 * grant, `listGrants` and `proto grants` once the person granted something, and the typed refusal
 * of a call that needs more than the token carries.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Agent, AuthorityError, explainToken } from "../src/index.js";
import { type NotesService, revokeGrantOf, setGrant, startNotesService } from "./support/authority.js";
import { jsonOf, runCli, startTestEnv, type TestEnv, tempHome } from "./support/env.js";

describe("what the agent holds: explain, grants, refusals", { timeout: 120_000 }, () => {
  let env: TestEnv;
  let notes: NotesService;
  let agent: Agent;
  let home: string;
  const cli = (...args: string[]) => runCli(args, { home, caFile: env.caFile });

  before(async () => {
    env = await startTestEnv();
    notes = await startNotesService(env);
    home = tempHome();
    agent = Agent.init({ home, fetch: env.fetch, attestorUrl: env.trustUrl }).agent;
    const attestor = agent.attestor();
    const request = await attestor.linkStart();
    await env.trustHook("/__test/link/confirm", { req_id: request.req_id, email: "grace@example.com" });
    await attestor.linkPoll(request.req_id);
    agent.store.updateConfig({ attestor_url: attestor.url });
  });
  after(async () => {
    await notes?.close();
    await env?.close();
  });

  test("without a grant: the token carries none, and the explanation names the service's default permissions", async () => {
    const token = await agent.attestor().token(notes.did);
    const explained = explainToken(token.jwt);
    assert.equal(explained.aud, notes.did);
    assert.equal(explained.iss, "proto-trust");
    assert.equal(explained.verification, "email");
    assert.equal(explained.exp, token.expires_at);
    assert.equal(explained.grant, undefined);

    // By URL: the discovery document gives the DID and the service's own words.
    const human = await cli("trust", "token", "--explain", notes.origin);
    assert.equal(human.code, 0, human.stderr);
    assert.match(
      human.stdout,
      new RegExp(`^Token for ${literal(notes.did)} from proto-trust at ${literal(env.trustUrl)} \\(cached\\)$`, "m"),
    );
    assert.match(
      human.stdout,
      /^No grant: the service's default permissions apply, and no spending:\n {2}notes:read: Read your notes$/m,
    );

    // By DID: a did:web names where its document is.
    const json = jsonOf(await cli("trust", "token", "--explain", notes.did, "--json"));
    assert.equal(json.aud, notes.did);
    assert.equal(json.grant, null);
    assert.deepEqual(json.default_permissions, ["notes:read"]);
    assert.equal(json.service_permissions.purchase.currency, "EUR");
    assert.match(json.expires_at, /^\d{4}-\d\d-\d\dT/);
  });

  test("a call that needs a permission the person has not granted: a typed refusal naming it and the attestor", async () => {
    const service = await agent.service(notes.origin);
    const { response, refusal } = await service.send("/notes/7", { method: "DELETE" });
    assert.equal(response.status, 403);
    assert.ok(refusal instanceof AuthorityError, String(refusal));
    assert.equal(refusal.code, "insufficient_permission");
    assert.deepEqual(refusal.missing, ["notes:write"]);
    assert.equal(refusal.attestor, env.trustUrl);
    assert.equal(refusal.audience, notes.did);
    assert.equal(refusal.kind, "auth");
    // A held permission passes, and carries no refusal.
    const read = await service.send("/notes");
    assert.deepEqual([read.response.status, read.refusal], [200, undefined]);
  });

  test("with a grant: its permissions and limits, in the service's words and in money", async () => {
    await setGrant(
      env.attestor,
      agent.did,
      { aud: notes.did, serviceUrl: notes.origin },
      {
        permissions: ["notes:read", "notes:write", "purchase"],
        spendLimits: [
          { permission: "purchase", currency: "EUR", perTransaction: 2000, perPeriod: 10050, period: "month" },
        ],
      },
    );
    const token = await agent.attestor().token(notes.did, { fresh: true });
    const grant = explainToken(token.jwt).grant;
    assert.ok(grant);
    assert.match(grant.id, /^grt_/);
    assert.deepEqual(grant.permissions, ["notes:read", "notes:write", "purchase"]);
    assert.deepEqual(grant.spendLimits, [
      { permission: "purchase", currency: "EUR", perTransaction: 2000, perPeriod: 10050, period: "month" },
    ]);

    const human = await cli("trust", "token", "--explain", notes.origin);
    assert.equal(human.code, 0, human.stderr);
    assert.ok(
      human.stdout.includes(
        [
          `The person's grant ${grant.id} allows:`,
          "  notes:read: Read your notes",
          "  notes:write: Write and delete your notes",
          "  purchase: Pay for pinned notes (up to 20.00 EUR per transaction and 100.50 EUR per month)",
        ].join("\n"),
      ),
      human.stdout,
    );
    const json = jsonOf(await cli("trust", "token", "--explain", notes.did, "--json"));
    assert.deepEqual(json.grant, {
      grant_id: grant.id,
      permissions: ["notes:read", "notes:write", "purchase"],
      spend_limits: [
        {
          type: "spend_limit",
          permission: "purchase",
          currency: "EUR",
          per_transaction: 2000,
          per_period: 10050,
          period: "month",
        },
      ],
    });
    assert.equal(json.default_permissions, null);
    assert.equal(json.jwt, undefined, "the explanation leaves the bearer token out");

    // The token now carries the permission the call lacked.
    const service = await agent.service(notes.origin);
    const { response } = await service.send("/notes/7", { method: "DELETE" });
    assert.equal(response.status, 200);
  });

  test("listGrants and proto grants: what the person granted, per service", async () => {
    const grants = await agent.attestor().listGrants();
    assert.equal(grants.length, 1);
    const [held] = grants;
    assert.equal(held?.aud, notes.did);
    assert.equal(held?.serviceUrl, notes.origin);
    assert.deepEqual(held?.permissions, ["notes:read", "notes:write", "purchase"]);
    assert.equal(held?.revokedAt, null);

    const human = await cli("grants");
    assert.equal(human.code, 0, human.stderr);
    assert.ok(
      human.stdout.includes(
        [
          `What the person granted this agent at ${env.trustUrl}, per service:`,
          "",
          `${notes.did} (${notes.origin}): live`,
          "  notes:read",
          "  notes:write",
          "  purchase (up to 20.00 EUR per transaction and 100.50 EUR per month)",
        ].join("\n"),
      ),
      human.stdout,
    );
    const json = jsonOf(await cli("grants", "--json"));
    assert.equal(json.attestor_url, env.trustUrl);
    assert.equal(json.grants.length, 1);
    assert.deepEqual(
      { ...json.grants[0], updated_at: undefined },
      {
        grant_id: held?.id,
        aud: notes.did,
        service_url: notes.origin,
        service_name: null,
        state: "live",
        permissions: ["notes:read", "notes:write", "purchase"],
        spend_limits: [
          {
            type: "spend_limit",
            permission: "purchase",
            currency: "EUR",
            per_transaction: 2000,
            per_period: 10050,
            period: "month",
          },
        ],
        expires_at: null,
        revoked_at: null,
        updated_at: undefined,
      },
    );
  });

  test("a grant the person revoked: exit 4 with a line naming the service; granted again, it mints", async () => {
    const [held] = await agent.attestor().listGrants();
    assert.ok(held);
    assert.equal(await revokeGrantOf(env.attestor, agent.did, held.id), true);
    const refused = await cli("trust", "token", notes.did, "--fresh");
    assert.equal(refused.code, 4, refused.stderr);
    assert.equal(
      refused.stderr.trim(),
      `proto: grant_revoked: the person who linked this agent revoked its grant for the service ${notes.did}; no attestation for that service until they approve again on ${env.trustUrl}/account (other services are not affected)`,
    );
    assert.equal(jsonOf(await cli("grants", "--json")).grants[0].state, "revoked");
    await setGrant(
      env.attestor,
      agent.did,
      { aud: notes.did, serviceUrl: notes.origin },
      {
        permissions: held.permissions,
        spendLimits: held.spendLimits,
      },
    );
    assert.equal((await cli("trust", "token", notes.did, "--fresh")).code, 0);
  });

  test("an agent with no grant: proto grants says every service gives it its defaults", async () => {
    const otherHome = tempHome();
    const other = Agent.init({ home: otherHome, fetch: env.fetch, attestorUrl: env.trustUrl }).agent;
    const request = await other.attestor().linkStart();
    await env.trustHook("/__test/link/confirm", { req_id: request.req_id, email: "heidi@example.com" });
    await other.attestor().linkPoll(request.req_id);
    const result = await runCli(["grants", "--attestor", env.trustUrl], { home: otherHome, caFile: env.caFile });
    assert.equal(result.code, 0, result.stderr);
    assert.equal(
      result.stdout,
      `No grants at ${env.trustUrl}: every service gives this agent its default permissions, and no spending.\n`,
    );
  });
});

function literal(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
