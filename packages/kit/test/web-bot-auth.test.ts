import assert from "node:assert/strict";
import { createPublicKey, type KeyObject } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { findProtoChallenge, jwkThumbprint, signWebBotAuth } from "@proto/protocol";
import Fastify, { type FastifyInstance } from "fastify";
import { agentRoute, createService } from "../src/fastify.js";
import { createKit, type Kit, type KitStore, openKitStore } from "../src/index.js";
import { TestAttestor } from "./support/attestor.js";
import { createTestDatabase, emailAddress, newAgent, TestClock, type TestDatabase } from "./support/env.js";

/**
 * Web Bot Auth callers through the kit's Fastify guard: a signed agent is its own tier (allowed,
 * challenged or refused per route); with an attestation and a signature that binds the request,
 * it is the account of its key's did:key. Keys come from a resolver the test controls, so this
 * suite is about the kit's decisions (the key directory fetch has its own tests).
 */

const ORIGIN = "https://notes.example";
const DID = "did:web:notes.example";
const DIRECTORY = "https://agents.example/.well-known/http-message-signatures-directory";

describe("kit: Web Bot Auth callers", { timeout: 60_000 }, () => {
  let database: TestDatabase;
  let store: KitStore;
  let clock: TestClock;
  let attestor: TestAttestor;
  let kit: Kit;
  let app: FastifyInstance;
  const published = new Map<string, KeyObject>();

  before(async () => {
    database = await createTestDatabase("sqlite");
    store = await openKitStore(database.url);
    clock = new TestClock();
    attestor = await TestAttestor.start(clock, []);
    kit = await createKit({
      publicUrl: ORIGIN,
      discovery: { service_did: DID, features: ["attestation"], recipient_types: ["oidc"] },
      attestors: { "proto-trust": { url: attestor.url, allowHttp: true } },
      store,
      now: clock.now,
      webBotAuth: {
        keys: {
          async lookup(url, thumbprint) {
            return url === DIRECTORY ? published.get(thumbprint) : undefined;
          },
        },
      },
      onError: (error) => {
        throw error;
      },
    });
    app = Fastify({ logger: false });
    await app.register(createService(kit));
    const whoami = (request: { proto: { did: string } | null; signedAgent: unknown }) => ({
      account: request.proto?.did ?? null,
      signed_agent: request.signedAgent,
    });
    app.get("/open", agentRoute(kit, { optional: true }), async (request) => whoami(request));
    app.get("/allow", agentRoute(kit, { signedAgents: "allow" }), async (request) => whoami(request));
    app.get("/refuse", agentRoute(kit, { optional: true, signedAgents: "refuse" }), async (request) => whoami(request));
    app.post("/account", agentRoute(kit), async (request) => whoami(request));
    await app.ready();
  });

  after(async () => {
    await app?.close();
    await kit?.close();
    await store?.close();
    await attestor?.close();
    await database?.drop();
  });

  function agentKey() {
    const agent = newAgent();
    const publicKey = createPublicKey(agent.privateKey);
    return { agent, thumbprint: jwkThumbprint(publicKey), publicKey };
  }

  async function send(
    method: "GET" | "POST",
    path: string,
    agent: { privateKey: KeyObject },
    extra: Record<string, string> = {},
    body?: string,
  ) {
    const signed = signWebBotAuth(
      { method, url: `${ORIGIN}${path}`, body },
      { privateKey: agent.privateKey, signatureAgent: DIRECTORY, created: clock.nowSeconds() },
    );
    const response = await app.inject({
      method,
      url: path,
      headers: { ...signed.headers, ...(body === undefined ? {} : { "content-type": "application/json" }), ...extra },
      ...(body === undefined ? {} : { payload: body }),
    });
    return { status: response.statusCode, headers: response.headers, json: response.json() as Record<string, unknown> };
  }

  test("a signed agent is its own tier: allowed with its identity, refused, or challenged with Accept-Signature", async () => {
    const { agent, thumbprint, publicKey } = agentKey();
    published.set(thumbprint, publicKey);
    const open = await send("GET", "/open", agent);
    assert.equal(open.status, 200);
    assert.equal(open.json.account, null);
    // Signed in the working group's form: the directory's origin as the member, looked up at its well-known path.
    assert.deepEqual(open.json.signed_agent, {
      signerOrigin: "https://agents.example",
      signatureAgent: "https://agents.example",
      thumbprint,
      did: agent.did,
    });
    assert.equal((await send("GET", "/allow", agent)).status, 200);

    const refused = await send("GET", "/refuse", agent);
    assert.equal(refused.status, 403);
    assert.equal((refused.json.error as { code: string }).code, "kit_signed_agent_refused");

    const challenged = await send("POST", "/account", agent, {}, "{}");
    assert.equal(challenged.status, 403);
    assert.equal((challenged.json.error as { code: string }).code, "kit_signature_required");
    const accept = String(challenged.headers["accept-signature"]);
    assert.match(accept, /^proto=\("@method" "@target-uri" "content-digest"\);created;expires;nonce;alg="ed25519", /);
    assert.match(accept, /web-bot-auth=\("@method" "@target-uri" "@authority" "signature-agent" "content-digest"\)/);
    assert.equal(await store.findAccountByDid(agent.did), undefined, "a signed agent creates no account");
  });

  test("with an attestation, the same key's did:key is the account; implicit signup happens once", async () => {
    const { agent, thumbprint, publicKey } = agentKey();
    published.set(thumbprint, publicKey);
    await attestor.link(agent, emailAddress("wba"));
    const jwt = await attestor.mint(agent, DID);
    const first = await send("POST", "/account", agent, { "proto-attestation": jwt }, '{"a":1}');
    assert.equal(first.status, 200, JSON.stringify(first.json));
    assert.equal(first.json.account, agent.did);
    assert.equal((await store.findAccountByDid(agent.did))?.did, agent.did);
    const open = await send("GET", "/open", agent, { "proto-attestation": jwt });
    assert.equal(open.json.account, agent.did);
  });

  test("refusals carry the reserved code, the Proto challenge and Accept-Signature", async () => {
    const { agent } = agentKey(); // never published
    const unknown = await send("GET", "/open", agent);
    assert.equal(unknown.status, 401);
    assert.equal((unknown.json.error as { code: string }).code, "invalid_signature");
    assert.equal(findProtoChallenge(String(unknown.headers["www-authenticate"]))?.error, "invalid_signature");
    assert.ok(unknown.headers["accept-signature"]);

    const { agent: late, thumbprint, publicKey } = agentKey();
    published.set(thumbprint, publicKey);
    const signed = signWebBotAuth(
      { method: "GET", url: `${ORIGIN}/open` },
      { privateKey: late.privateKey, signatureAgent: DIRECTORY, created: clock.nowSeconds() - 600 },
    );
    const expired = await app.inject({ method: "GET", url: "/open", headers: signed.headers });
    assert.equal(expired.statusCode, 401);
    assert.equal(expired.json().error.code, "expired_signature");
    const replayed = signWebBotAuth(
      { method: "GET", url: `${ORIGIN}/open` },
      { privateKey: late.privateKey, signatureAgent: DIRECTORY, created: clock.nowSeconds() },
    );
    assert.equal((await app.inject({ method: "GET", url: "/open", headers: replayed.headers })).statusCode, 200);
    const again = await app.inject({ method: "GET", url: "/open", headers: replayed.headers });
    assert.equal(again.statusCode, 401);
    assert.equal(again.json().error.code, "replayed_nonce");
  });
});
