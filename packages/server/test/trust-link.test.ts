import assert from "node:assert/strict";
import { sign } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { signRequest } from "@proto/protocol";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";
import {
  type Agent,
  assertError,
  assertRetryAfter,
  newAgent,
  RELAXED_RATE_LIMITS,
  startTrustHarness,
  type TrustHarness,
} from "./support/trust.js";

reportSkippedVariants();

const DAY = 86400;
const email = (label: string) => `${label}-${Math.random().toString(36).slice(2)}@mail.test`;

/** A link request started and confirmed through the hook as `who`, not yet polled. */
async function startAndConfirm(
  h: TrustHarness,
  agent: Agent,
  who: string,
): Promise<{ reqId: string; bindingId: string }> {
  const started = await h.startLink(agent);
  assert.equal(started.status, 200, started.text);
  const confirmed = await h.hook("/__test/link/confirm", { req_id: started.json.req_id, email: who });
  assert.equal(confirmed.status, 200, confirmed.text);
  return { reqId: started.json.req_id, bindingId: confirmed.json.binding_id };
}

for (const variant of STORE_VARIANTS) {
  describe(`link flow (${variant.name})`, () => {
    let h: TrustHarness;
    before(async () => {
      h = await startTrustHarness(variant, { env: { TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS } });
    });
    after(() => h.close());

    test("start, pending poll, confirm, confirmed exactly once, then 410 link_request_expired", async () => {
      const agent = newAgent();
      const started = await h.startLink(agent, { agent_label: "my agent" });
      assert.equal(started.status, 200, started.text);
      assert.deepEqual(Object.keys(started.json).sort(), ["expires_in", "link_url", "poll_url", "req_id"]);
      assert.match(started.json.req_id, /^lr_[A-Za-z0-9_-]+$/);
      assert.equal(new URL(started.json.link_url).origin, h.publicUrl);
      assert.equal(started.json.poll_url, `${h.publicUrl}/v1/link/poll`);
      assert.equal(started.json.expires_in, 1800);
      const reqId: string = started.json.req_id;

      const pending = await h.poll(agent, reqId);
      assert.equal(pending.status, 200, pending.text);
      assert.deepEqual(pending.json, { state: "pending", phase: "awaiting_signin" });
      // Polling a pending request does not consume it.
      assert.deepEqual((await h.poll(agent, reqId)).json, { state: "pending", phase: "awaiting_signin" });

      const confirmed = await h.hook("/__test/link/confirm", { req_id: reqId, email: email("flow") });
      assert.equal(confirmed.status, 200, confirmed.text);
      assert.match(confirmed.json.binding_id, /^bnd_[A-Za-z0-9_-]+$/);

      const now = Math.floor((await h.nowMs()) / 1000);
      const delivered = await h.poll(agent, reqId);
      assert.equal(delivered.status, 200, delivered.text);
      assert.deepEqual(Object.keys(delivered.json).sort(), ["binding_id", "binding_token_expires_at", "state"]);
      assert.equal(delivered.json.state, "confirmed");
      assert.equal(delivered.json.binding_id, confirmed.json.binding_id);
      assert.ok(Number.isInteger(delivered.json.binding_token_expires_at));
      assert.ok(Math.abs(delivered.json.binding_token_expires_at - (now + 90 * DAY)) <= 5);
      // No bearer credential in the confirmation.
      assert.doesNotMatch(delivered.text, /token"\s*:\s*"/);

      assertError(await h.poll(agent, reqId), 410, "link_request_expired");
      assertError(await h.poll(agent, reqId), 410, "link_request_expired");
    });

    test("an unconfirmed request is pending until 1800 s, then 410 and unconfirmable", async () => {
      const agent = newAgent();
      const reqId = (await h.startLink(agent)).json.req_id as string;
      await h.advance(1795);
      assert.deepEqual((await h.poll(agent, reqId)).json, { state: "pending", phase: "awaiting_signin" });
      await h.advance(6);
      assertError(await h.poll(agent, reqId), 410, "link_request_expired");
      assertError(
        await h.hook("/__test/link/confirm", { req_id: reqId, email: email("late") }),
        410,
        "link_request_expired",
      );
      assertError(await h.poll(agent, reqId), 410, "link_request_expired");
    });

    test("a request 1801 s old is 410 even when never polled before", async () => {
      const agent = newAgent();
      const reqId = (await h.startLink(agent)).json.req_id as string;
      await h.advance(1801);
      assertError(await h.poll(agent, reqId), 410, "link_request_expired");
    });

    test("an unknown req_id is 404 not_found", async () => {
      const agent = newAgent();
      assertError(await h.poll(agent, "lr_doesnotexist0000000000"), 404, "not_found");
      assertError(await h.poll(agent, "anything"), 404, "not_found");
    });

    test("poll body rules are 400 invalid_request", async () => {
      assertError(await h.request("POST", "/v1/link/poll", { body: {} }), 400, "invalid_request");
      assertError(await h.request("POST", "/v1/link/poll", { body: { req_id: "lr_x" } }), 400, "invalid_request");
      assertError(await h.request("POST", "/v1/link/poll", { body: { sig_b64: "AAAA" } }), 400, "invalid_request");
      assertError(await h.request("POST", "/v1/link/poll", { rawBody: "{not json" }), 400, "invalid_request");
    });

    test("a bad signature is 401 invalid_signature and consumes nothing", async () => {
      const agent = newAgent();
      const other = newAgent();
      const { reqId, bindingId } = await startAndConfirm(h, agent, email("badsig"));
      const signedByOther = sign(null, Buffer.from(reqId, "utf8"), other.privateKey).toString("base64url");
      const otherMessage = sign(null, Buffer.from(`${reqId}x`, "utf8"), agent.privateKey).toString("base64url");
      const wrongSignatures = [signedByOther, otherMessage, "AAAA", "not base64url!", `${signedByOther}=`];
      for (const sig of wrongSignatures) {
        assertError(
          await h.request("POST", "/v1/link/poll", { body: { req_id: reqId, sig_b64: sig } }),
          401,
          "invalid_signature",
        );
      }
      // The other agent polling with its own key does not get the binding either.
      assertError(await h.poll(other, reqId), 401, "invalid_signature");
      const delivered = await h.poll(agent, reqId);
      assert.equal(delivered.status, 200, delivered.text);
      assert.equal(delivered.json.state, "confirmed");
      assert.equal(delivered.json.binding_id, bindingId);
    });

    test("a bad signature on a pending request leaves it pending", async () => {
      const agent = newAgent();
      const reqId = (await h.startLink(agent)).json.req_id as string;
      assertError(await h.poll(newAgent(), reqId), 401, "invalid_signature");
      assert.deepEqual((await h.poll(agent, reqId)).json, { state: "pending", phase: "awaiting_signin" });
    });

    test("concurrent polls of a confirmed request: exactly one gets the binding, the rest 410", async () => {
      const agent = newAgent();
      const { reqId, bindingId } = await startAndConfirm(h, agent, email("race"));
      const results = await Promise.all(Array.from({ length: 10 }, () => h.poll(agent, reqId)));
      const confirmed = results.filter((r) => r.status === 200);
      assert.equal(confirmed.length, 1, results.map((r) => r.status).join(","));
      assert.equal(confirmed[0]?.json.state, "confirmed");
      assert.equal(confirmed[0]?.json.binding_id, bindingId);
      for (const result of results.filter((r) => r.status !== 200)) assertError(result, 410, "link_request_expired");
    });

    test("the same human re-linking replaces the binding", async () => {
      const who = email("relink");
      const first = await h.link(newAgent(), who);
      const second = await h.link(first.agent, who);
      assert.notEqual(second.bindingId, first.bindingId);
      assert.equal((await h.mint(first.agent, "did:web:svc.test")).status, 200);
      // The agent now maps to the new binding: the old one no longer governs its mints...
      assert.equal((await h.hook("/__test/bindings/expire", { binding_id: first.bindingId })).status, 200);
      const stillWorks = await h.mint(first.agent, "did:web:svc.test");
      assert.equal(stillWorks.status, 200, stillWorks.text);
      // ...and the new one does.
      assert.equal((await h.hook("/__test/bindings/revoke", { binding_id: second.bindingId })).status, 200);
      assertError(await h.mint(first.agent, "did:web:svc.test"), 403, "binding_revoked");
    });

    test("another human confirming for an actively bound agent gets 409 agent_already_bound, revealing nobody", async () => {
      const firstHuman = email("first");
      const { agent, bindingId } = await h.link(newAgent(), firstHuman);
      const started = await h.startLink(agent);
      const reqId = started.json.req_id as string;
      const refused = await h.hook("/__test/link/confirm", { req_id: reqId, email: email("second") });
      assertError(refused, 409, "agent_already_bound");
      assert.ok(!refused.text.includes(firstHuman), refused.text);
      assert.ok(!refused.text.includes(firstHuman.split("@")[0] as string), refused.text);
      assert.ok(!refused.text.includes("hum_"), refused.text);
      assert.ok(!refused.text.includes(bindingId), refused.text);
      // The refusal consumed nothing: the request is still pending, the first binding still mints.
      assert.deepEqual((await h.poll(agent, reqId)).json, { state: "pending", phase: "awaiting_signin" });
      assert.equal((await h.mint(agent, "did:web:svc.test")).status, 200);
      // The first human may still confirm it (a re-link).
      assert.equal((await h.hook("/__test/link/confirm", { req_id: reqId, email: firstHuman })).status, 200);
      assert.equal((await h.poll(agent, reqId)).json.state, "confirmed");
    });

    test("two humans confirming for one unbound agent at once: one binding, one 409", async () => {
      const agent = newAgent();
      const first = (await h.startLink(agent)).json.req_id as string;
      const second = (await h.startLink(agent)).json.req_id as string;
      const results = await Promise.all([
        h.hook("/__test/link/confirm", { req_id: first, email: email("racer-a") }),
        h.hook("/__test/link/confirm", { req_id: second, email: email("racer-b") }),
      ]);
      const statuses = results.map((r) => r.status).sort();
      assert.deepEqual(statuses, [200, 409], results.map((r) => r.text).join(" | "));
      assertError(results.find((r) => r.status === 409) as (typeof results)[number], 409, "agent_already_bound");
      const winner = results[0]?.status === 200 ? first : second;
      const loser = winner === first ? second : first;
      assert.equal((await h.poll(agent, winner)).json.state, "confirmed");
      assert.deepEqual((await h.poll(agent, loser)).json, { state: "pending", phase: "awaiting_signin" });
      assert.equal((await h.mint(agent, "did:web:svc.test")).status, 200);
    });

    test("a revoked or lapsed binding gives way to another human", async () => {
      const revokedOne = await h.link(newAgent(), email("gone"));
      await h.hook("/__test/bindings/revoke", { binding_id: revokedOne.bindingId });
      const relinked = await h.link(revokedOne.agent, email("next"));
      assert.notEqual(relinked.bindingId, revokedOne.bindingId);
      assert.equal((await h.mint(revokedOne.agent, "did:web:svc.test")).status, 200);

      const lapsedOne = await h.link(newAgent(), email("lapsed"));
      await h.hook("/__test/bindings/expire", { binding_id: lapsedOne.bindingId });
      assertError(await h.mint(lapsedOne.agent, "did:web:svc.test"), 410, "binding_expired");
      const taken = await h.link(lapsedOne.agent, email("taker"));
      assert.notEqual(taken.bindingId, lapsedOne.bindingId);
      assert.equal((await h.mint(lapsedOne.agent, "did:web:svc.test")).status, 200);
    });

    test("DELETE /v1/bindings/{id} without a human session is 401 unauthorized", async () => {
      const { bindingId, agent } = await h.link();
      assertError(await h.request("DELETE", `/v1/bindings/${bindingId}`), 401, "unauthorized");
      assertError(
        await h.request("DELETE", `/v1/bindings/${bindingId}`, { headers: { cookie: "session=forged" } }),
        401,
        "unauthorized",
      );
      // An agent cannot revoke with its own request signature either.
      const created = Math.floor((await h.nowMs()) / 1000);
      const signed = signRequest(
        { method: "DELETE", url: `${h.publicUrl}/v1/bindings/${bindingId}` },
        { keyid: agent.did, privateKey: agent.privateKey, created },
      );
      assertError(
        await h.request("DELETE", `/v1/bindings/${bindingId}`, { headers: { ...signed.headers } }),
        401,
        "unauthorized",
      );
      // An unknown binding answers the same: no existence oracle without a session.
      assertError(await h.request("DELETE", "/v1/bindings/bnd_unknown"), 401, "unauthorized");
      // Nothing was revoked.
      assert.equal((await h.mint(agent, "did:web:svc.test")).status, 200);
    });
  });

  describe(`link start body rules (${variant.name})`, () => {
    let h: TrustHarness;
    before(async () => {
      h = await startTrustHarness(variant, { env: { TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS } });
    });
    after(() => h.close());

    const start = (body: unknown) => h.request("POST", "/v1/link/start", { body });
    const base = (agent: Agent) => ({ agent_did: agent.did, agent_pubkey_b64: agent.publicKeyB64 });

    test("a did:key must derive from agent_pubkey_b64", async () => {
      const agent = newAgent();
      const other = newAgent();
      assertError(await start({ agent_did: other.did, agent_pubkey_b64: agent.publicKeyB64 }), 400, "invalid_request");
      assert.equal((await start(base(agent))).status, 200);
    });

    test("agent_pubkey_b64 is base64url without padding of exactly 32 bytes", async () => {
      const agent = newAgent();
      assertError(await start({ ...base(agent), agent_pubkey_b64: `${agent.publicKeyB64}=` }), 400, "invalid_request");
      // A key whose base64url spelling has - or _, so its standard base64 spelling differs.
      let special = newAgent();
      while (!/[-_]/.test(special.publicKeyB64)) special = newAgent();
      const standard = Buffer.from(special.publicKeyB64, "base64url").toString("base64");
      assertError(await start({ ...base(special), agent_pubkey_b64: standard }), 400, "invalid_request");
      assertError(
        await start({ ...base(special), agent_pubkey_b64: standard.replace(/=+$/, "") }),
        400,
        "invalid_request",
      );
      // Lengths checked on a did:web agent, where no did:key derivation is involved.
      const webAgent = "did:web:agent.test";
      for (const bytes of [0, 16, 31, 33, 64]) {
        const key = Buffer.alloc(bytes, 1).toString("base64url");
        assertError(await start({ agent_did: webAgent, agent_pubkey_b64: key }), 400, "invalid_request");
      }
      assert.equal(
        (await start({ agent_did: webAgent, agent_pubkey_b64: Buffer.alloc(32, 1).toString("base64url") })).status,
        200,
      );
    });

    test("agent_did must be a DID", async () => {
      const agent = newAgent();
      for (const did of ["agent-1", "did:example:123", "did:key:zNotAKey", "did:web:", `${agent.did}#frag`, 12]) {
        assertError(await start({ ...base(agent), agent_did: did }), 400, "invalid_request");
      }
    });

    test("agent_label is at most 80 characters", async () => {
      const agent = newAgent();
      assert.equal((await start({ ...base(agent), agent_label: "a".repeat(80) })).status, 200);
      assertError(await start({ ...base(agent), agent_label: "a".repeat(81) }), 400, "invalid_request");
      assertError(await start({ ...base(agent), agent_label: { name: "x" } }), 400, "invalid_request");
    });

    test("callback_url is loopback only: http to 127.0.0.1 or localhost", async () => {
      const agent = newAgent();
      for (const url of ["http://localhost:9999/cb", "http://127.0.0.1:8000/done?x=1", "http://localhost/"]) {
        const result = await start({ ...base(agent), callback_url: url });
        assert.equal(result.status, 200, `${url}: ${result.text}`);
      }
      for (const url of [
        "https://localhost:9999/cb",
        "https://127.0.0.1/cb",
        "http://example.com/cb",
        "http://127.0.0.2/cb",
        "http://[::1]:9999/cb",
        "http://localhost.evil.test/cb",
        "http://127.0.0.1.nip.io/cb",
        "http://user:pw@localhost/cb",
        "ftp://localhost/cb",
        "localhost:9999/cb",
        "not a url",
        // User info, in every spelling the parser accepts.
        "http://user@127.0.0.1:9999/cb",
        "http://:pw@localhost/cb",
        "http://127.0.0.1@evil.example/cb",
        "http://evil.example\t@127.0.0.1/cb",
        // Control characters and backslashes: stripped or turned into slashes by the parser.
        "\thttp://127.0.0.1:9999/cb",
        "http://127.0.0.1\t:9999/cb",
        "http://127.0.0.1:9999/c\nb",
        "http://127.0.0.1:9999/cb\u0000",
        "http://127.0.0.1:9999/cb\u007f",
        "http://localhost\\@evil.example/cb",
        "http://localhost:9999/cb?next=%0D%0ALocation:%20http://evil.example",
        "http://localhost:9999/cb%5C",
        "http://localhost:9999/cb#fragment",
      ]) {
        assertError(await start({ ...base(agent), callback_url: url }), 400, "invalid_request");
      }
    });

    test("missing fields, malformed JSON, oversized bodies, unknown routes", async () => {
      const agent = newAgent();
      assertError(await start({}), 400, "invalid_request");
      assertError(await start({ agent_did: agent.did }), 400, "invalid_request");
      assertError(await start({ agent_pubkey_b64: agent.publicKeyB64 }), 400, "invalid_request");
      assertError(await start([]), 400, "invalid_request");
      assertError(await h.request("POST", "/v1/link/start", { rawBody: '{"agent_did": ' }), 400, "invalid_request");
      assertError(await h.request("POST", "/v1/link/start", { rawBody: "" }), 400, "invalid_request");
      const huge = JSON.stringify({ ...base(agent), agent_label: "x".repeat(70 * 1024) });
      assertError(await h.request("POST", "/v1/link/start", { rawBody: huge }), 413, "payload_too_large");
      assertError(await h.request("GET", "/v1/nothing-here"), 404, "not_found");
      assertError(await h.request("POST", "/v1/link/nope", { body: {} }), 404, "not_found");
      assertError(await h.request("GET", "/v1/link/start"), 404, "not_found");
    });
  });

  describe(`link rate limits (${variant.name})`, () => {
    let h: TrustHarness;
    before(async () => {
      h = await startTrustHarness(variant);
    });
    after(() => h.close());

    test("link start: 20 per hour per agent_did, 30 per minute per IP, with Retry-After", async () => {
      // Every request comes from 127.0.0.1: one agent meets its own limit, another keeps going
      // until the IP's limit.
      await h.alignTo(3600);
      const a = newAgent();
      const b = newAgent();
      for (let i = 0; i < 20; i++) assert.equal((await h.startLink(a)).status, 200, `start ${i + 1}`);
      const agentLimited = await h.startLink(a);
      assertError(agentLimited, 429, "rate_limited");
      assertRetryAfter(agentLimited, 61, 3600);

      let bAccepted = 0;
      let ipLimited: Awaited<ReturnType<TrustHarness["startLink"]>> | undefined;
      for (let i = 0; i < 15 && ipLimited === undefined; i++) {
        const result = await h.startLink(b);
        if (result.status === 200) bAccepted += 1;
        else ipLimited = result;
      }
      assert.ok(ipLimited !== undefined, "the IP limit was never reached");
      assertError(ipLimited, 429, "rate_limited");
      assertRetryAfter(ipLimited, 1, 60);
      assert.ok(bAccepted >= 9 && 20 + bAccepted <= 30, `another agent got ${bAccepted} starts`);

      // The next minute: the IP may start again, the first agent still may not.
      await h.advance(60);
      assert.equal((await h.startLink(b)).status, 200);
      const stillLimited = await h.startLink(a);
      assertError(stillLimited, 429, "rate_limited");
      assertRetryAfter(stillLimited, 61, 3540);
      // The next hour: the first agent starts again.
      await h.advance(3600);
      assert.equal((await h.startLink(a)).status, 200);
    });

    test("link poll: 60 per minute per IP, with Retry-After", async () => {
      const agent = newAgent();
      const reqId = (await h.startLink(agent)).json.req_id as string;
      await h.alignTo(60);
      for (let i = 0; i < 60; i++) assert.equal((await h.poll(agent, reqId)).status, 200, `poll ${i + 1}`);
      const limited = await h.poll(agent, reqId);
      assertError(limited, 429, "rate_limited");
      assertRetryAfter(limited, 1, 60);
      await h.advance(60);
      assert.equal((await h.poll(agent, reqId)).status, 200);
    });

    test("revoking a binding has its own budget: polling does not block it, nor it polling", async () => {
      const agent = newAgent();
      const reqId = (await h.startLink(agent)).json.req_id as string;
      await h.alignTo(60);
      // The human's revocation attempts (here without a session) do not spend the agent's polls...
      for (let i = 0; i < 5; i++) assertError(await h.request("DELETE", "/v1/bindings/bnd_x"), 401, "unauthorized");
      for (let i = 0; i < 60; i++) assert.equal((await h.poll(agent, reqId)).status, 200, `poll ${i + 1}`);
      assertError(await h.poll(agent, reqId), 429, "rate_limited");
      // ...and an agent that used up its polls does not lock its human out of revoking it.
      assertError(await h.request("DELETE", "/v1/bindings/bnd_x"), 401, "unauthorized");
    });
  });
}
