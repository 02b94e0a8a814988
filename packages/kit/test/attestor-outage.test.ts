import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { signRequest } from "@proto/protocol";
import { startTcpProxy, type TcpProxy } from "@proto/testkit";
import Fastify, { type FastifyInstance } from "fastify";
import { agentRoute, createService, mcpRoute } from "../src/fastify.js";
import { type BearerContext, createKit, type Kit, type KitStore, openKitStore } from "../src/index.js";
import { type Answer, answer, TestAttestor } from "./support/attestor.js";
import {
  type Agent,
  createTestDatabase,
  ENGINES,
  emailAddress,
  freePort,
  newAgent,
  reportSkippedEngines,
  TestClock,
  type TestDatabase,
} from "./support/env.js";

/**
 * The attestor's key set cannot be fetched (its host refuses connections): a service on the kit
 * cannot tell a good credential from a bad one, so it answers 503 `kit_attestor_unavailable` with
 * `Retry-After` (never 401, which would tell an agent its attestation or token is bad, nor a 500),
 * creates nothing, and serves the same request once the key set is back. The outage is real: the
 * kit reaches the key set through a TCP relay that this test cuts and restores.
 */

reportSkippedEngines();

/** 503 `kit_attestor_unavailable`, `Retry-After` in whole seconds, and no challenge to re-authenticate. */
function assertUnavailable(got: Answer, retryAfter: number): void {
  assert.equal(got.status, 503, got.text);
  assert.equal(got.json?.error?.code, "kit_attestor_unavailable", got.text);
  assert.equal(got.headers.get("retry-after"), String(retryAfter));
  assert.equal(got.headers.get("www-authenticate"), null, "an outage is no reason to present other credentials");
  // The key set's address and the fetch's failure are the operator's business, not the caller's.
  assert.doesNotMatch(got.text, /jwks|127\.0\.0\.1|unreachable/i);
}

for (const engine of ENGINES) {
  describe(`kit: the attestor's key set is unreachable (${engine})`, { timeout: 120_000 }, () => {
    let database: TestDatabase;
    let store: KitStore;
    let clock: TestClock;
    let attestor: TestAttestor;
    let relay: TcpProxy;
    let kit: Kit;
    let app: FastifyInstance;
    let origin: string;
    let serviceDid: string;

    before(async () => {
      database = await createTestDatabase(engine);
      store = await openKitStore(database.url);
      clock = new TestClock();
      attestor = await TestAttestor.start(clock, []);
      relay = await startTcpProxy("127.0.0.1", Number(new URL(attestor.url).port));
      const port = await freePort();
      origin = `http://127.0.0.1:${port}`;
      serviceDid = `did:web:127.0.0.1%3A${port}`;
      kit = await createKit({
        publicUrl: origin,
        allowHttp: true,
        discovery: { service_did: serviceDid, features: ["attestation"], recipient_types: ["oidc"] },
        attestors: {
          "proto-trust": {
            url: attestor.url,
            keySet: `http://127.0.0.1:${relay.port}/.well-known/jwks.json`,
            allowHttp: true,
          },
        },
        serviceName: "Notes",
        store,
        now: clock.now,
        onError: (error) => {
          throw error;
        },
      });
      app = Fastify({ logger: false });
      await app.register(createService(kit));
      app.get("/api/whoami", agentRoute(kit), async (request) => ({
        account_id: request.proto?.account.account_id,
        created: request.proto?.created,
      }));
      // No scope required: this suite is about the key set, not about what a token may do.
      mcpRoute(app, kit, { path: "/mcp" }, async (request) => ({
        subject: (request.bearer as BearerContext).subject,
      }));
      await app.listen({ port, host: "127.0.0.1" });
    });

    after(async () => {
      await app?.close();
      await kit?.close();
      await store?.close();
      await relay?.close();
      await attestor?.close();
      await database?.drop();
    });

    async function signed(agent: Agent, attestation: string): Promise<Answer> {
      const url = `${origin}/api/whoami`;
      const request = signRequest(
        { method: "GET", url },
        { keyid: agent.did, privateKey: agent.privateKey, created: clock.nowSeconds() },
      );
      return answer(await fetch(url, { headers: { ...request.headers, "proto-attestation": attestation } }));
    }

    async function bearer(token: string): Promise<Answer> {
      return answer(
        await fetch(`${origin}/mcp`, {
          method: "POST",
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          body: "{}",
        }),
      );
    }

    /** An access token asking no scope: the attestor then needs nothing from the service's document. */
    async function accessToken(agent: Agent): Promise<string> {
      const issued = await attestor.jwtBearer(agent, `${origin}/mcp`);
      assert.equal(issued.status, 200, issued.text);
      return issued.json.access_token as string;
    }

    test("signed signup and bearer call: 503 with Retry-After while it is down, nothing created; served once it is back", async () => {
      const agent = await attestor.link(newAgent(), emailAddress("outage"));
      const attestation = await attestor.mint(agent, serviceDid);
      const token = await accessToken(agent);

      relay.cut();
      assertUnavailable(await signed(agent, attestation), 5);
      assert.equal(await store.findAccountByDid(agent.did), undefined, "no account was created");
      // Within the backoff the failure answers at once, counting down.
      clock.advance(2);
      assertUnavailable(await bearer(token), 3);
      clock.advance(3);
      assertUnavailable(await bearer(token), 5);

      relay.restore();
      // Still within the backoff of the last failure: the kit does not fetch yet.
      assertUnavailable(await signed(agent, attestation), 5);
      clock.advance(5);
      const signedUp = await signed(agent, attestation);
      assert.equal(signedUp.status, 200, signedUp.text);
      assert.equal(signedUp.json.created, true);
      const called = await bearer(token);
      assert.equal(called.status, 200, called.text);
      assert.equal(typeof called.json.subject, "string");
    });

    test("a token the key set does not vouch for is still 401 once the key set answers", async () => {
      const agent = await attestor.link(newAgent(), emailAddress("forged"));
      const attestation = await attestor.mint(agent, serviceDid);
      const [head, payload] = attestation.split(".");
      const tampered = `${head}.${payload}.${"A".repeat(86)}`;
      const refused = await signed(agent, tampered);
      assert.equal(refused.status, 401, refused.text);
      assert.equal(refused.json.error.code, "invalid_attestation");
    });

    test("owner sign-in while the attestor is down: a 503 page that says to try again, with Retry-After", async () => {
      const closed = await freePort();
      const offline = await createKit({
        publicUrl: origin,
        allowHttp: true,
        discovery: { service_did: serviceDid, features: ["attestation"], recipient_types: ["oidc"] },
        attestors: { "proto-trust": { url: `http://127.0.0.1:${closed}`, allowHttp: true } },
        serviceName: "Notes",
        store,
        now: clock.now,
      });
      const offlineApp = Fastify({ logger: false });
      await offlineApp.register(createService(offline));
      try {
        const page = await offlineApp.inject({ method: "GET", url: "/proto/owner/signin?attestor=proto-trust" });
        assert.equal(page.statusCode, 503, page.body);
        assert.equal(page.headers["retry-after"], "5");
        assert.match(String(page.headers["content-type"]), /^text\/html/);
        assert.match(page.body, /cannot be reached to sign you in; try again shortly/);
        assert.match(page.body, /Wait a few seconds, then reload this page/);
        assert.match(page.body, /kit_attestor_unavailable/);
        assert.doesNotMatch(page.body, /ECONNREFUSED|127\.0\.0\.1:\d+/);
      } finally {
        await offlineApp.close();
        await offline.close();
      }
    });
  });
}
