/**
 * The agent's account at a service built on our kit (upstream §6.4, §6.5, §7.2), over real HTTPS:
 * the SDK reads the upstream shapes, and `proto account show|invite` prints them.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { createServer as createHttpsServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { createKit, type InvitationEvent, type Kit } from "@proto/kit";
import { agentRoute, createService, protoServerOptions } from "@proto/kit/fastify";
import { createTestCA, type TestCA, type TestFetch, testFetch } from "@proto/testkit";
import Fastify, { type FastifyInstance } from "fastify";
import { AgentIdentity, getAccount, inviteOwner, ServerError, ServiceClient, signUp } from "../src/index.js";
import { closedPort, jsonOf, runCli, tempHome } from "./support/env.js";

describe("the agent's account at a kit service", { timeout: 60_000 }, () => {
  let kit: Kit;
  let app: FastifyInstance;
  let fetch: TestFetch;
  let ca: TestCA;
  let caFile: string;
  let origin: string;
  const invitations: InvitationEvent[] = [];
  /** A Web Bot Auth key directory on another host of the test CA, serving the keys put here. */
  let directory: Server;
  let directoryUrl: string;
  const publishedKeys: Record<string, string>[] = [];

  before(async () => {
    ca = await createTestCA();
    caFile = ca.writeCertFile();
    const { certPem, keyPem } = await ca.issue(["localhost"]);
    directory = createHttpsServer({ key: keyPem, cert: certPem }, (_request, response) => {
      response.writeHead(200, { "content-type": "application/http-message-signatures-directory+json" });
      response.end(JSON.stringify({ keys: publishedKeys }));
    });
    await new Promise<void>((resolve) => directory.listen(0, "127.0.0.1", resolve));
    directoryUrl = `https://localhost:${(directory.address() as AddressInfo).port}/.well-known/http-message-signatures-directory`;
    // A port chosen before listening: the kit's public URL names it.
    const port = await closedPort();
    origin = `https://localhost:${port}`;
    kit = await createKit({
      publicUrl: origin,
      discovery: {
        service_did: `did:web:localhost%3A${port}`,
        billing: { unclaimed_mode: "free" },
        recipient_types: ["email", "oidc"],
        limits: { unclaimed_ttl_seconds: 86400, unclaimed_rate_limit_per_hour: 1000 },
      },
      database: "sqlite::memory:",
      onInvitation: (event) => {
        invitations.push(event);
      },
      // The directory is on this machine: a development setting, as PROTO_FETCH_ALLOW_PRIVATE is.
      webBotAuth: { fetch: { allowPrivate: true, ca: ca.certPem } },
    });
    app = Fastify({ ...protoServerOptions(), https: { key: keyPem, cert: certPem } });
    await app.register(createService(kit));
    // What a signed agent sent, as the kit verified it.
    app.get("/wba-echo", agentRoute(kit, { optional: true, signedAgents: "allow" }), async (request) => ({
      signature_agent: request.headers["signature-agent"],
      signature_input: request.headers["signature-input"],
      signed_agent: request.signedAgent,
    }));
    await app.listen({ port, host: "127.0.0.1" });
    fetch = testFetch(ca);
  });

  after(async () => {
    directory?.close();
    await app?.close();
    await kit?.close();
    await fetch?.close();
  });

  const connect = (identity: AgentIdentity) => ServiceClient.connect(origin, { identity, fetch });

  test("SDK: signup, introspection and invitations in upstream's shapes", async () => {
    const identity = AgentIdentity.generate();
    const client = await connect(identity);
    const created = await signUp(client);
    // Upstream §6.4 field for field: no owner in a signup's answer; introspection has it.
    assert.deepEqual(Object.keys(created).sort(), [
      "account_id",
      "agent_did",
      "created_at",
      "state",
      "unclaimed_expires_at",
    ]);
    assert.equal(created.agent_did, identity.did);
    assert.equal(created.state, "UNCLAIMED");
    assert.ok(created.unclaimed_expires_at, "the service declares a TTL");
    const me = await getAccount(client);
    assert.equal(me.account_id, created.account_id);
    assert.equal(me.owner, null);

    const byMail = await inviteOwner(client, { email: "Owner@Example.com" });
    assert.equal(byMail.state, "INVITED");
    assert.match(byMail.invitation_id, /^inv_/);
    assert.equal(byMail.claim_url, undefined, "an e-mail link is the proof of the mailbox: it goes by mail only");
    assert.equal(invitations.at(-1)?.recipient.value, "owner@example.com");
    assert.equal((await getAccount(client)).state, "INVITED");

    const byOidc = await inviteOwner(client, {
      recipient: { type: "oidc", value: { issuer: "https://id.example", sub: "alice" } },
    });
    assert.equal(byOidc.claim_url, invitations.at(-1)?.claimUrl);

    await assert.rejects(
      inviteOwner(client, { recipient: { type: "phone", value: "+14155550173" } }),
      (error: unknown) =>
        error instanceof ServerError && error.code === "unsupported_recipient_type" && error.status === 400,
    );
  });

  test("CLI: a refusal with Retry-After says when to try again, as text and as JSON", async () => {
    // A service that lets an unclaimed account make two requests an hour.
    const port = await closedPort();
    const tight = await createKit({
      publicUrl: `https://localhost:${port}`,
      discovery: {
        service_did: `did:web:localhost%3A${port}`,
        billing: { unclaimed_mode: "free" },
        recipient_types: ["oidc"],
        limits: { unclaimed_ttl_seconds: 86400, unclaimed_rate_limit_per_hour: 2 },
      },
      database: "sqlite::memory:",
      onInvitation: () => undefined,
    });
    const { certPem, keyPem } = await ca.issue(["localhost"]);
    const tightApp = Fastify({ ...protoServerOptions(), https: { key: keyPem, cert: certPem } });
    await tightApp.register(createService(tight));
    await tightApp.listen({ port, host: "127.0.0.1" });
    try {
      const options = { home: tempHome(), caFile };
      assert.equal((await runCli(["init"], options)).code, 0);
      let refused: Awaited<ReturnType<typeof runCli>> | undefined;
      for (let i = 0; i < 6 && refused === undefined; i++) {
        const shown = await runCli(["account", "show", `https://localhost:${port}`], options);
        if (shown.code !== 0) refused = shown;
      }
      assert.ok(refused, "the service's hourly limit was reached");
      const lines = refused.stderr.split("\n").filter((line) => line !== "");
      assert.match(lines[0] ?? "", /^proto: rate_limit_exceeded: \S/);
      const wait = /^proto: the server asks to wait: try again in (\d+) (s|min)$/.exec(lines[1] ?? "");
      assert.ok(wait, refused.stderr);
      assert.equal(lines.length, 2, refused.stderr);
      const json = await runCli(["account", "show", `https://localhost:${port}`, "--json"], options);
      const document = jsonOf(json) as { error: { code: string; retry_after: number; status: number } };
      assert.equal(document.error.code, "rate_limit_exceeded");
      assert.equal(document.error.status, 429);
      assert.ok(document.error.retry_after > 0 && document.error.retry_after <= 3600);
    } finally {
      await tightApp.close();
      await tight.close();
    }
  });

  test("CLI: `proto account show` and `proto account invite`, as text and as JSON", async () => {
    const home = tempHome();
    const options = { home, caFile };
    assert.equal((await runCli(["init"], options)).code, 0);
    const did = jsonOf(await runCli(["whoami", "--json"], options)).did;

    const shown = await runCli(["account", "show", origin], options);
    assert.equal(shown.code, 0, shown.stderr);
    assert.match(shown.stdout, new RegExp(`^UNCLAIMED account acct_\\S+ for ${did}$`, "m"));
    assert.match(shown.stdout, /^ {2}expires {3}\d{4}-\d\d-\d\dT.* unless claimed$/m);

    const invited = await runCli(["account", "invite", origin, "--email", "owner@example.com"], options);
    assert.equal(invited.code, 0, invited.stderr);
    assert.match(invited.stdout, /^Invitation inv_\S+ staged; the account is INVITED until /m);
    assert.match(invited.stdout, /the service sends the claim link to the recipient itself/);

    const oidc = jsonOf(
      await runCli(["account", "invite", origin, "--oidc", "https://id.example alice", "--json"], options),
    );
    assert.equal(oidc.state, "INVITED");
    assert.equal(oidc.claim_url, invitations.at(-1)?.claimUrl);

    const json = jsonOf(await runCli(["account", "show", origin, "--json"], options));
    assert.deepEqual(Object.keys(json).sort(), [
      "account_id",
      "agent_did",
      "created_at",
      "owner",
      "state",
      "unclaimed_expires_at",
    ]);

    const both = await runCli(["account", "invite", origin, "--email", "a@example.com", "--oidc", "x y"], options);
    assert.equal(both.code, 2, both.stderr);
    assert.match(both.stderr, /exactly one recipient/);
    const refused = await runCli(
      ["account", "invite", origin, "--email", "a@example.com", "--redirect-url", "https://evil.example/"],
      options,
    );
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /malformed_request: redirect_url must be on an allowed origin/);

    // The owner revoked this key (upstream §8.4): terminal, and the CLI says what to do next.
    const record = await kit.store.findAccountByDid(did);
    assert.ok(record);
    await kit.store.revokeKey({ accountId: record.id, did, now: Date.now(), reason: "owner_revoked" });
    for (const args of [
      ["account", "show", origin],
      ["call", `${origin}/proto/v1/accounts/me`],
    ]) {
      const revoked = await runCli(args, options);
      assert.equal(revoked.code, 4, `${args.join(" ")}: ${revoked.stderr}`);
      assert.match(revoked.stderr, /^proto: revoked_key: /m);
      assert.match(revoked.stderr, /ask the account's owner to re-key it .*`proto keys rotate`.*`proto trust link`/);
    }
  });

  test("CLI: `proto call --web-bot-auth` sends both signatures; `--web-bot-auth-only` is a signed agent to the kit's own endpoints; Signature-Agent is the working group's dictionary, the older string with --signature-agent-string", async () => {
    const home = tempHome();
    const options = { home, caFile };
    assert.equal((await runCli(["init"], options)).code, 0);
    const exported = jsonOf(await runCli(["keys", "export", "--json"], options));
    publishedKeys.push({ ...exported.jwk, kid: thumbprintOf(exported.jwk.x), use: "sig" });
    const me = `${origin}/proto/v1/accounts/me`;

    const both = await runCli(["call", me, "--web-bot-auth", "--signature-agent", directoryUrl, "--json"], options);
    assert.equal(both.code, 0, both.stderr);
    const answer = jsonOf(both);
    assert.equal(answer.status, 200);
    assert.equal(answer.body.agent_did, exported.did);
    assert.deepEqual(answer.web_bot_auth, { signatureAgent: directoryUrl, mode: "both" });

    // One Web Bot Auth signature and no attestation: the kit found the key in the directory and
    // sees a signed agent, which its account endpoints challenge.
    const single = await runCli(["call", "--web-bot-auth-only", "--signature-agent", directoryUrl, me], options);
    assert.equal(single.code, 4, single.stderr);
    assert.match(single.stdout, /^HTTP 403/);
    assert.match(single.stderr, /^proto: kit_signature_required: A Web Bot Auth signature identifies the agent/m);

    // The working group's dictionary by default: the directory's origin as this signature's member,
    // which alone it covers; the older bare string, covered whole, with --signature-agent-string.
    const echo = `${origin}/wba-echo`;
    const directoryOrigin = new URL(directoryUrl).origin;
    const dictionary = jsonOf(
      await runCli(["call", "--web-bot-auth-only", "--signature-agent", directoryUrl, echo, "--json"], options),
    );
    assert.equal(dictionary.status, 200, JSON.stringify(dictionary));
    assert.equal(dictionary.body.signature_agent, `sig1="${directoryOrigin}"`);
    assert.match(dictionary.body.signature_input, /^sig1=\([^)]* "signature-agent";key="sig1"[^)]*\);/);
    assert.equal(dictionary.body.signed_agent.did, exported.did);
    assert.equal(dictionary.body.signed_agent.signatureAgent, directoryOrigin);
    const legacy = jsonOf(
      await runCli(
        ["call", "--web-bot-auth-only", "--signature-agent", directoryUrl, "--signature-agent-string", echo, "--json"],
        options,
      ),
    );
    assert.equal(legacy.status, 200, JSON.stringify(legacy));
    assert.equal(legacy.body.signature_agent, `"${directoryUrl}"`);
    assert.match(legacy.body.signature_input, /^sig1=\([^)]* "signature-agent"[ )]/);
    assert.equal(legacy.body.signed_agent.signatureAgent, directoryUrl);
    assert.deepEqual(legacy.web_bot_auth, {
      signatureAgent: directoryUrl,
      mode: "single",
      signatureAgentForm: "string",
    });

    const wrong = await runCli(["call", me, "--web-bot-auth", "--web-bot-auth-only"], options);
    assert.equal(wrong.code, 2);
    assert.match(wrong.stderr, /give --web-bot-auth or --web-bot-auth-only, not both/);
    const badEnv = await runCli(["call", me], { ...options, env: { PROTO_WEB_BOT_AUTH: "sometimes" } });
    assert.equal(badEnv.code, 2);
    assert.match(badEnv.stderr, /Web Bot Auth mode must be both, single or off, got "sometimes"/);
    const noAgent = await runCli(["call", me, "--web-bot-auth"], options);
    assert.equal(noAgent.code, 2, "no attestor linked, no --signature-agent");
    assert.match(noAgent.stderr, /link an attestor first .* or give --signature-agent/);
  });
});

/** RFC 8037 §A.3 thumbprint, computed here independently of the library under test. */
function thumbprintOf(x: string): string {
  return createHash("sha256").update(`{"crv":"Ed25519","kty":"OKP","x":"${x}"}`).digest("base64url");
}
