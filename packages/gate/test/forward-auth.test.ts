/**
 * Issue 40 item 4: proto-gate in forward-auth mode (`mode: auth`), asked as Caddy's `forward_auth`
 * and Traefik's `forwardAuth` ask: the request's own headers, with its method and request-target in
 * X-Forwarded-Method and X-Forwarded-Uri (nginx `auth_request` sends X-Original-* as its recipe
 * sets them). The checked requests are made and signed by the @proto/agent SDK; its fetch hands
 * them to the gate's check instead of sending them. OUR attestor in this process.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Agent, discoverService, ServiceClient } from "@proto/agent";
import { createTestCA, freePort, type TestFetch, testFetch } from "@proto/testkit";
import pino from "pino";
import { AUTH_PATH, createGate, type Gate } from "../src/gate.js";
import { signIdentity } from "../src/identity.js";
import { gateConfig } from "./support/gate-config.js";
import { type Attestor, linkAgent, startAttestor } from "./support/interop-stack.js";

const HOST = "auth.gate.test";
const SECRET = randomBytes(32).toString("base64url");

describe("proto-gate in forward-auth mode", { timeout: 120_000 }, () => {
  let temp: string;
  let trust: Attestor;
  let gate: Gate;
  let publicUrl: string;
  let fetch: TestFetch;
  let agent: Agent;
  /** Signs as the agent would; the signed request goes to the gate's check, not to the service. */
  let checked: ServiceClient;
  let plain: ServiceClient;

  /** What a forward-auth proxy sends about `request`: its headers, method and request-target. */
  function check(request: Request, via: "forwarded" | "original" = "forwarded"): Promise<Response> {
    const url = new URL(request.url);
    const headers = new Headers(request.headers);
    headers.set(via === "forwarded" ? "x-forwarded-method" : "x-original-method", request.method);
    headers.set(via === "forwarded" ? "x-forwarded-uri" : "x-original-uri", `${url.pathname}${url.search}`);
    return fetch(`${publicUrl}${AUTH_PATH}`, { headers });
  }

  const intercept = ((input: string | URL | Request, init?: RequestInit) => {
    const request = new Request(input, init);
    const length = init?.body === undefined || init.body === null ? 0 : Buffer.byteLength(init.body as string);
    if (length > 0) {
      const headers = new Headers(request.headers);
      headers.set("content-length", String(length));
      return check(new Request(request.url, { method: request.method, headers }));
    }
    return check(request);
  }) as typeof globalThis.fetch;

  before(async () => {
    temp = mkdtempSync(join(tmpdir(), "proto-gate-auth-"));
    const ca = await createTestCA();
    trust = await startAttestor({ dir: temp, caPem: ca.certPem, resolve: [] });
    const trustUrl = trust.url;
    const gatePort = await freePort();
    publicUrl = `https://${HOST}:${gatePort}`;
    const { certPem, keyPem } = await ca.issue([HOST]);
    // No application: in this mode the gate forwards nothing (the upstream is never reached).
    gate = await createGate(
      gateConfig(publicUrl, 9, trustUrl, `sqlite:${join(temp, "gate.db")}`, {
        secret: SECRET,
        mode: "auth",
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
    const discovery = await discoverService(publicUrl, { fetch });
    checked = new ServiceClient(discovery, { identity: agent.identity, fetch: intercept, attestor: agent.attestor() });
    plain = new ServiceClient(discovery, { identity: agent.identity, fetch: intercept, retryWithAttestation: false });
  });

  after(async () => {
    await gate?.close();
    await trust?.close();
    await fetch?.close();
    if (temp) rmSync(temp, { recursive: true, force: true });
  });

  test("a signed call passes: 200 with the identity headers for the proxy to copy, signed", async () => {
    const answer = await plain.fetch("/api/notes?x=1");
    assert.equal(answer.status, 200, await answer.clone().text());
    assert.equal(answer.headers.get("proto-gate-caller"), "agent");
    assert.equal(answer.headers.get("proto-gate-via"), "signature");
    assert.equal(answer.headers.get("proto-gate-agent-did"), agent.did);
    const account = answer.headers.get("proto-gate-account");
    assert.match(account ?? "", /\S/);
    const identity: Record<string, string> = {};
    answer.headers.forEach((value, name) => {
      if (name.startsWith("proto-gate-") && name !== "proto-gate-signature") identity[name] = value;
    });
    const signature = answer.headers.get("proto-gate-signature") ?? "";
    const t = Number(/t=(\d+)/.exec(signature)?.[1]);
    assert.equal(signature, signIdentity(SECRET, "GET", "/api/notes?x=1", identity, t));
    // The same agent on the next check: the same account.
    const again = await plain.fetch("/api/other");
    assert.equal(again.headers.get("proto-gate-account"), account);
  });

  test("nginx's X-Original-Method and X-Original-URI are read as well", async () => {
    const signed = new ServiceClient(await discoverService(publicUrl, { fetch }), {
      identity: agent.identity,
      fetch: ((input: string | URL | Request, init?: RequestInit) =>
        check(new Request(input, init), "original")) as typeof globalThis.fetch,
      retryWithAttestation: false,
    });
    const answer = await signed.fetch("/api/nginx");
    assert.equal(answer.status, 200, await answer.clone().text());
    assert.equal(answer.headers.get("proto-gate-agent-did"), agent.did);
  });

  test("an attested-only route: refused without an attestation, passed with one", async () => {
    const refused = await plain.fetch("/attested/x");
    assert.equal(refused.status, 401);
    assert.equal(((await refused.json()) as { error: { code: string } }).error.code, "attestation_required");
    const passed = await checked.fetch("/attested/x");
    assert.equal(passed.status, 200, await passed.clone().text());
    assert.equal(passed.headers.get("proto-gate-via"), "signature+attestation");
    assert.equal(passed.headers.get("proto-gate-verification"), "email");
  });

  test("an unsigned request to an agents route gets the refusal and the Proto challenge the agent must see", async () => {
    const answer = await check(new Request(`${publicUrl}/api/notes`));
    assert.equal(answer.status, 401);
    assert.match(answer.headers.get("www-authenticate") ?? "", /Proto/);
    assert.equal(answer.headers.get("proto-gate-account"), null);
  });

  test("a signed request with a body cannot be verified without it: 403 gate_body_unverifiable", async () => {
    const answer = await plain.fetch("/api/notes", { method: "POST", body: '{"text":"hello"}' });
    assert.equal(answer.status, 403);
    assert.equal(((await answer.json()) as { error: { code: string } }).error.code, "gate_body_unverifiable");
  });

  test("open routes pass anonymously; spoofed identity headers in the check are not answered back", async () => {
    const answer = await check(
      new Request(`${publicUrl}/open/x`, { headers: { "proto-gate-account": "acct_spoofed" } }),
    );
    assert.equal(answer.status, 200);
    assert.equal(answer.headers.get("proto-gate-caller"), "anonymous");
    assert.equal(answer.headers.get("proto-gate-account"), null);
  });

  test("a check that does not name the request is 400; other paths are not forwarded (404)", async () => {
    const incomplete = await fetch(`${publicUrl}${AUTH_PATH}`);
    assert.equal(incomplete.status, 400);
    assert.equal(((await incomplete.json()) as { error: { code: string } }).error.code, "malformed_request");
    const elsewhere = await fetch(`${publicUrl}/api/notes`);
    assert.equal(elsewhere.status, 404);
  });
});
