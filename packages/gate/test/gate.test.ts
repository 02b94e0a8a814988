/**
 * Issue 40: proto-gate in front of an application written in Python with its standard library
 * only (test/support/echo_app.py), which echoes the identity headers it receives. OUR attestor in
 * this process; the gate serves HTTPS itself (a test CA made here, `gate.test` pinned to
 * 127.0.0.1); agents made with the @proto/agent SDK.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Agent, discoverService, ServiceClient } from "@proto/agent";
import { createTestCA, freePort, type TestFetch, testFetch } from "@proto/testkit";
import pino from "pino";
import { createGate, type Gate } from "../src/gate.js";
import { signIdentity } from "../src/identity.js";
import { type EchoApp, startEchoApp } from "./support/echo-app.js";
import { gateConfig } from "./support/gate-config.js";
import { type Attestor, linkAgent, startAttestor } from "./support/interop-stack.js";

const HOST = "gate.test";
const SECRET = randomBytes(32).toString("base64url");

interface Echoed {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: { length: number; sha256: string };
}

describe("proto-gate in front of a Python standard-library app", { timeout: 180_000 }, () => {
  let temp: string;
  let trust: Attestor;
  let trustUrl: string;
  let app: EchoApp;
  let appPort: number;
  let gate: Gate;
  let publicUrl: string;
  let fetch: TestFetch;
  let agent: Agent;
  let client: ServiceClient;

  before(async () => {
    temp = mkdtempSync(join(tmpdir(), "proto-gate-"));
    const ca = await createTestCA();
    trust = await startAttestor({ dir: temp, caPem: ca.certPem, resolve: [] });
    trustUrl = trust.url;

    appPort = await freePort();
    app = await startEchoApp(appPort);

    const gatePort = await freePort();
    publicUrl = `https://${HOST}:${gatePort}`;
    const { certPem, keyPem } = await ca.issue([HOST]);
    gate = await createGate(
      gateConfig(publicUrl, appPort, trustUrl, `sqlite:${join(temp, "gate.db")}`, {
        secret: SECRET,
        mode: "proxy",
        host: HOST,
      }),
      {
        logger: pino({ level: "silent" }),
        tls: { cert: certPem, key: keyPem },
      },
    );
    await new Promise<void>((resolve) => gate.server.listen(gatePort, "127.0.0.1", resolve));

    fetch = testFetch(ca, { resolve: `${HOST}:${gatePort}:127.0.0.1` });
    agent = Agent.init({ home: join(temp, "agent-home"), fetch, attestorUrl: trustUrl }).agent;
    await linkAgent(agent, trust, `person-${randomBytes(3).toString("hex")}@mail.test`);
    client = await agent.service(publicUrl);
  });

  after(async () => {
    await gate?.close();
    await app?.stop();
    await trust?.close();
    await fetch?.close();
    if (temp) rmSync(temp, { recursive: true, force: true });
  });

  async function echoed(response: Response): Promise<Echoed> {
    assert.equal(response.status, 200, await response.clone().text());
    assert.equal(response.headers.get("x-echo-app"), "python");
    return (await response.json()) as Echoed;
  }

  test("the gate serves the discovery document itself", async () => {
    const discovery = await discoverService(publicUrl, { fetch });
    assert.equal(discovery.did, `did:web:${HOST}%3A${new URL(publicUrl).port}`);
    assert.deepEqual(discovery.document.billing?.accepted_attestors, ["proto-trust"]);
  });

  test("an agent's signed, attested call reaches the app with its identity; the same account on the next call", async () => {
    const first = await echoed(
      await client.fetch("/api/notes?x=1", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: '{"text":"hello"}',
      }),
    );
    assert.equal(first.method, "POST");
    assert.equal(first.path, "/api/notes?x=1");
    assert.equal(first.headers["proto-gate-caller"], "agent");
    assert.equal(first.headers["proto-gate-agent-did"], agent.did);
    assert.match(first.headers["proto-gate-account"] ?? "", /\S/);
    assert.equal(first.headers["proto-gate-account-state"], "UNCLAIMED");
    assert.equal(first.body.length, 16);
    assert.equal(first.body.sha256, createHash("sha256").update('{"text":"hello"}').digest("hex"));
    assert.equal(first.headers["x-forwarded-proto"], "https");
    assert.equal(first.headers["x-forwarded-host"], new URL(publicUrl).host);

    const second = await echoed(await client.fetch("/api/notes"));
    assert.equal(second.headers["proto-gate-account"], first.headers["proto-gate-account"]);
  });

  test("the identity headers are signed with the configured secret, over method, target and every header", async () => {
    const seen = await echoed(await client.fetch("/api/signed?a=b"));
    const signature = seen.headers["proto-gate-signature"] ?? "";
    const t = Number(/t=(\d+)/.exec(signature)?.[1]);
    const identity = Object.fromEntries(
      Object.entries(seen.headers).filter(
        ([name]) => name.startsWith("proto-gate-") && name !== "proto-gate-signature",
      ),
    );
    assert.equal(signature, signIdentity(SECRET, "GET", "/api/signed?a=b", identity, t));
  });

  test("an attested-only route refuses a signed call without an attestation (401 attestation_required)", async () => {
    const discovery = await discoverService(publicUrl, { fetch });
    const bare = new ServiceClient(discovery, { identity: agent.identity, fetch, retryWithAttestation: false });
    const plain = await echoed(await bare.fetch("/api/plain"));
    assert.equal(plain.headers["proto-gate-via"], "signature");
    const refused = await bare.fetch("/attested/thing");
    assert.equal(refused.status, 401);
    assert.equal(((await refused.json()) as { error: { code: string } }).error.code, "attestation_required");
    const attested = await echoed(await client.fetch("/attested/thing"));
    assert.equal(attested.headers["proto-gate-via"], "signature+attestation");
    assert.equal(attested.headers["proto-gate-verification"], "email");
  });

  test("spoofed identity headers never reach the app", async () => {
    const spoof = {
      "Proto-Gate-Account": "acct_spoofed",
      "proto-gate-caller": "agent",
      "PROTO-GATE-SIGNATURE": "t=1, v1=00",
    };
    const open = await echoed(await fetch(`${publicUrl}/open/x`, { headers: spoof }));
    assert.equal(open.headers["proto-gate-account"], undefined);
    assert.equal(open.headers["proto-gate-caller"], "anonymous");
    assert.notEqual(open.headers["proto-gate-signature"], "t=1, v1=00");
    const anonymous = await echoed(await fetch(`${publicUrl}/maybe/x`, { headers: spoof }));
    assert.equal(anonymous.headers["proto-gate-account"], undefined);
    const signed = await echoed(await client.fetch("/api/x", { headers: spoof }));
    assert.notEqual(signed.headers["proto-gate-account"], "acct_spoofed");
    assert.match(signed.headers["proto-gate-account"] ?? "", /\S/);
  });

  test("an unsigned call to an agents route is refused with the Proto challenge, never forwarded", async () => {
    const refused = await fetch(`${publicUrl}/api/notes`);
    assert.equal(refused.status, 401);
    assert.match(refused.headers.get("www-authenticate") ?? "", /Proto/);
  });

  test("a 50 MB upload passes intact: streamed on an open route, verified then forwarded on an agent route", async () => {
    const big = randomBytes(50 * 1024 * 1024);
    const sha256 = createHash("sha256").update(big).digest("hex");
    const open = await echoed(await fetch(`${publicUrl}/open/upload`, { method: "PUT", body: big }));
    assert.deepEqual(open.body, { length: big.length, sha256 });
    const signed = await echoed(await client.fetch("/api/upload", { method: "PUT", body: big }));
    assert.deepEqual(signed.body, { length: big.length, sha256 });
    assert.equal(signed.headers["proto-gate-agent-did"], agent.did);
  });

  test("a server-sent event stream comes back whole, as the app sent it", async () => {
    const response = await fetch(`${publicUrl}/sse`);
    assert.equal(response.status, 200);
    assert.equal(response.headers.get("content-type"), "text/event-stream");
    const text = await response.text();
    assert.equal(text, [0, 1, 2, 3, 4].map((i) => `id: ${i}\ndata: event ${i}\n\n`).join(""));
  });

  test("the app stopped: 503 gate_upstream_unavailable with Retry-After; started again: served without a restart", async () => {
    await app.stop();
    const down = await fetch(`${publicUrl}/open/x`);
    assert.equal(down.status, 503);
    assert.equal(down.headers.get("retry-after"), "5");
    assert.equal(((await down.json()) as { error: { code: string } }).error.code, "gate_upstream_unavailable");
    app = await startEchoApp(appPort);
    const up = await echoed(await fetch(`${publicUrl}/open/x`));
    assert.equal(up.path, "/open/x");
  });
});
