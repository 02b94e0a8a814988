/**
 * `proto owner invite` against a service built on our kit, over HTTPS, by an agent linked at the
 * real attestor; and the `--json` documents a script reads: `sub_h` on tokens, times in ISO 8601.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createKit, type InvitationEvent, type Kit } from "@proto/kit";
import { createService, protoServerOptions } from "@proto/kit/fastify";
import Fastify, { type FastifyInstance } from "fastify";
import { closedPort, jsonOf, runCli, startCli, startTestEnv, type TestEnv, tempHome } from "./support/env.js";

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

/** Every `*_at` member of a document, at any depth, with its value. */
function timesOf(value: unknown, path = "$"): [string, unknown][] {
  if (Array.isArray(value)) return value.flatMap((item, i) => timesOf(item, `${path}[${i}]`));
  if (typeof value !== "object" || value === null) return [];
  return Object.entries(value).flatMap(([key, member]) => [
    ...(key.endsWith("_at") ? ([[`${path}.${key}`, member]] as [string, unknown][]) : []),
    ...timesOf(member, `${path}.${key}`),
  ]);
}

function assertIsoTimes(document: unknown, what: string): void {
  const times = timesOf(document);
  assert.ok(times.length > 0, `${what} has times`);
  for (const [path, time] of times) {
    assert.ok(
      time === null || (typeof time === "string" && ISO.test(time)),
      `${what} ${path}: ${JSON.stringify(time)}`,
    );
  }
}

describe("proto owner invite, and times and sub_h in --json documents", { timeout: 120_000 }, () => {
  let env: TestEnv;
  let kit: Kit;
  let app: FastifyInstance;
  let origin: string;
  let serviceDid: string;
  const invitations: InvitationEvent[] = [];
  const home = tempHome();
  const cli = (...args: string[]) => runCli(args, { home, caFile: env.caFile });

  before(async () => {
    env = await startTestEnv();
    const { certPem, keyPem } = await env.ca.issue(["localhost"]);
    const port = await closedPort();
    origin = `https://localhost:${port}`;
    serviceDid = `did:web:localhost%3A${port}`;
    kit = await createKit({
      publicUrl: origin,
      discovery: {
        service_did: serviceDid,
        billing: { unclaimed_mode: "free" },
        recipient_types: ["email", "oidc"],
        limits: { unclaimed_ttl_seconds: 86400, unclaimed_rate_limit_per_hour: 1000 },
      },
      database: "sqlite::memory:",
      // The attestor by its iss and URL; this service takes no attestations here (free), so no keys.
      attestors: { "proto-trust": { url: env.trustUrl, keySet: { keys: [] }, signIn: false } },
      onInvitation: (event) => {
        invitations.push(event);
      },
    });
    app = Fastify({ ...protoServerOptions(), https: { key: keyPem, cert: certPem } });
    await app.register(createService(kit));
    await app.listen({ port, host: "127.0.0.1" });

    assert.equal((await cli("init")).code, 0);
    const running = startCli(["trust", "link", "--attestor", env.trustUrl, "--json"], { home, caFile: env.caFile });
    const started = JSON.parse(await running.line("stderr", (line) => line.includes('"link_started"')));
    await running.line("stderr", (line) => line.includes('"waiting"'));
    const confirmed = await env.trustHook("/__test/link/confirm", {
      req_id: started.req_id,
      email: "olive@example.com",
    });
    assert.equal(confirmed.status, 200);
    const linked = await running.done;
    assert.equal(linked.code, 0, linked.stderr);
    assertIsoTimes(jsonOf(linked), "trust link --json");
  });

  after(async () => {
    await app?.close();
    await kit?.close();
    await env?.close();
  });

  test("trust token --json carries sub_h and ISO times; status and whoami use ISO times too", async () => {
    const minted = await cli("trust", "token", serviceDid, "--json");
    assert.equal(minted.code, 0, minted.stderr);
    const token = jsonOf(minted);
    const claims = JSON.parse(Buffer.from(token.jwt.split(".")[1], "base64url").toString("utf8"));
    assert.match(token.sub_h, /^[A-Za-z0-9_-]{22,}$/);
    assert.equal(token.sub_h, claims.sub_h);
    assert.equal(token.expires_at, new Date(claims.exp * 1000).toISOString());
    assertIsoTimes(token, "trust token --json");
    // From the cache: the same document.
    const cached = jsonOf(await cli("trust", "token", serviceDid, "--json"));
    assert.equal(cached.cached, true);
    assert.deepEqual([cached.sub_h, cached.expires_at], [token.sub_h, token.expires_at]);

    const status = jsonOf(await cli("trust", "status", "--json"));
    assertIsoTimes(status, "trust status --json");
    assert.equal(status.tokens[0].expires_at, token.expires_at);
    assert.ok(Date.parse(status.binding.binding_expires_at) > Date.now());
    assertIsoTimes(jsonOf(await cli("whoami", "--json")), "whoami --json");
  });

  test("owner invite --oidc invites the linked person by the attestor's pseudonym; the answer carries the claim link", async () => {
    const sub = jsonOf(await cli("trust", "token", serviceDid, "--json")).sub_h;
    const invited = await cli("owner", "invite", origin, "--oidc");
    assert.equal(invited.code, 0, invited.stderr);
    assert.match(
      invited.stdout,
      new RegExp(
        `^Invited the person this agent is linked to at ${env.trustUrl} to own this agent's account at ${origin}$`,
        "m",
      ),
    );
    assert.match(invited.stdout, /^ {2}invitation inv_\S+; the account is INVITED until \S+$/m);
    assert.match(invited.stdout, new RegExp(`^ {2}hand them this link to claim it: ${origin}/\\S+$`, "m"));
    // What the service staged: the attestor (the agent names it by URL, the service by its iss)
    // and the token's sub_h, the subject its id_token gives the person who signs in there.
    assert.deepEqual(invitations.at(-1)?.recipient, { type: "oidc", value: { issuer: "proto-trust", sub } });

    const json = jsonOf(await cli("owner", "invite", origin, "--oidc", "--json"));
    assert.match(json.claim_url, /^https:\/\/localhost:\d+\//);
    assert.deepEqual(json.recipient, { type: "oidc", value: { issuer: env.trustUrl, sub } });
    assert.equal(json.service_did, serviceDid);
  });

  test("owner invite --email: the service mails the link itself", async () => {
    const invited = await cli("owner", "invite", origin, "--email", "olive@example.com");
    assert.equal(invited.code, 0, invited.stderr);
    assert.match(invited.stdout, /^Invited olive@example\.com to own this agent's account at /m);
    assert.match(invited.stdout, /the service mails the claim link to them itself/);
    assert.deepEqual(invitations.at(-1)?.recipient, { type: "email", value: "olive@example.com" });
  });

  test("owner invite needs exactly one recipient (exit 2)", async () => {
    for (const args of [[], ["--email", "a@example.com", "--oidc"]]) {
      const result = await cli("owner", "invite", origin, ...args);
      assert.equal(result.code, 2, result.stderr);
      assert.equal(result.stderr, "proto: invalid_argument: give exactly one recipient: --email ADDRESS or --oidc\n");
    }
  });
});
