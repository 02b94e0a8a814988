import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import { after, before, describe, test } from "node:test";
import { findProtoChallenge, parseWwwAuthenticate, signRequest } from "@proto/protocol";
import { createKit, type Kit } from "../../src/index.js";
import type { AdapterApp } from "./adapter-apps.js";
import { type Answer, TestAttestor } from "./attestor.js";
import { type Agent, emailAddress, TestClock } from "./env.js";
import { CodeLedger } from "./service.js";

/**
 * The journey every framework adapter goes through over real HTTP, with the same signed and
 * attested requests as the Fastify suite: an `attested_only` service whose attestations our
 * attestor (in process, on the suite's clock) mints.
 *
 * The application an adapter test builds mounts the kit's routes and these of its own:
 * - `GET /api/whoami`, guarded: `{ did, state }`;
 * - `POST /api/notes`, guarded: `{ did, note: <the body as the handler parses it>, raw: <the verified bytes as text> }`;
 * - `GET /api/maybe`, optional: `{ did: <did or null> }`;
 * - `GET /api/bearer-too`, guarded, the application setting `WWW-Authenticate: Bearer realm="notes"` first.
 */

export const ORIGIN = "https://notes.example";
export const SERVICE_DID = "did:web:notes.example";
export const MAX_BODY_BYTES = 4096;
const ME = "/proto/v1/accounts/me";
const INVITE = "/proto/v1/accounts/me/owner-invitation";

export interface SuiteContext {
  readonly kit: Kit;
  readonly app: AdapterApp;
  readonly clock: TestClock;
  /** What the kit reported to `onError` (each test that expects some takes them). */
  readonly unexpected: unknown[];
  /** An agent signed up at the service (attested once, as `attested_only` asks). */
  signedUp(): Promise<Agent>;
  /** A request over real HTTP (fetch). */
  send(
    method: string,
    path: string,
    options?: { headers?: Record<string, string>; body?: string | ReadableStream<Uint8Array> },
  ): Promise<Answer>;
  /** A request signed by `agent` over the public URL, sent with fetch. */
  signed(
    agent: Agent,
    method: string,
    path: string,
    options?: { body?: string; sentBody?: string; attestation?: string },
  ): Promise<Answer>;
}

export async function toAnswer(response: Response): Promise<Answer> {
  const text = await response.text();
  let json: unknown;
  try {
    json = text.length > 0 ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: response.status, headers: response.headers, text, json };
}

/** A GET whose request-target goes on the request line exactly as given (fetch would re-serialise it). */
function rawGet(url: string, target: string, headers: Record<string, string>): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(url, { method: "GET", path: target, headers }, (response) => {
      const chunks: Buffer[] = [];
      response.on("data", (chunk: Buffer) => chunks.push(chunk));
      response.on("end", () => {
        const responseHeaders = new Headers();
        for (const [name, value] of Object.entries(response.headers)) {
          if (value === undefined) continue;
          for (const item of Array.isArray(value) ? value : [value]) responseHeaders.append(name, item);
        }
        const text = Buffer.concat(chunks).toString("utf8");
        resolve({ status: response.statusCode ?? 0, headers: responseHeaders, text, json: JSON.parse(text) });
      });
    });
    request.on("error", reject);
    request.end();
  });
}

/**
 * Runs the journey against the application `start` builds on the kit. `more` adds the adapter's
 * own tests in the same suite.
 */
export function adapterJourney(
  name: string,
  start: (kit: Kit) => Promise<AdapterApp>,
  more?: (context: SuiteContext) => void,
): void {
  describe(name, { timeout: 120_000 }, () => {
    const clock = new TestClock();
    const ledger = new CodeLedger();
    const unexpected: unknown[] = [];
    const invitations: string[] = [];
    let attestor: TestAttestor;
    let kit: Kit;
    let app: AdapterApp;

    async function send(
      method: string,
      path: string,
      options: { headers?: Record<string, string>; body?: string | ReadableStream<Uint8Array> } = {},
    ): Promise<Answer> {
      const init: RequestInit & { duplex?: "half" } = { method, redirect: "manual" };
      if (options.headers !== undefined) init.headers = options.headers;
      if (options.body !== undefined) init.body = options.body;
      if (options.body instanceof ReadableStream) init.duplex = "half";
      return toAnswer(await fetch(`${app.url}${path}`, init));
    }

    function signatureHeaders(agent: Agent, method: string, target: string, body?: string) {
      return signRequest(
        { method, url: ORIGIN, target, body },
        { keyid: agent.did, privateKey: agent.privateKey, created: clock.nowSeconds() },
      ).headers;
    }

    async function signed(
      agent: Agent,
      method: string,
      path: string,
      options: { body?: string; sentBody?: string; attestation?: string } = {},
    ): Promise<Answer> {
      const headers: Record<string, string> = { ...signatureHeaders(agent, method, path, options.body) };
      if (options.body !== undefined) headers["content-type"] = "application/json";
      if (options.attestation !== undefined) headers["proto-attestation"] = options.attestation;
      const body = options.sentBody ?? options.body;
      return send(method, path, { headers, ...(body === undefined ? {} : { body }) });
    }

    async function signedUp(): Promise<Agent> {
      const agent = await attestor.link(undefined, emailAddress("adapter"));
      const answer = await signed(agent, "GET", "/api/whoami", {
        attestation: await attestor.mint(agent, SERVICE_DID),
      });
      assert.equal(answer.status, 200, answer.text);
      return agent;
    }

    const context: SuiteContext = {
      get kit() {
        return kit;
      },
      get app() {
        return app;
      },
      clock,
      unexpected,
      signedUp,
      send,
      signed,
    };

    before(async () => {
      attestor = await TestAttestor.start(clock, []);
      kit = await createKit({
        publicUrl: ORIGIN,
        database: "sqlite::memory:",
        discovery: { service_did: SERVICE_DID },
        attestors: { "proto-trust": { url: attestor.url, allowHttp: true } },
        now: clock.now,
        maxBodyBytes: MAX_BODY_BYTES,
        onInvitation: (event) => {
          invitations.push(event.token);
        },
        onError: (error) => {
          unexpected.push(error);
        },
        webBotAuth: false,
      });
      app = await start(kit);
    });

    after(async () => {
      await app?.close();
      await kit?.close();
      await attestor?.close();
    });

    test("the kit's own routes: discovery, introspection, an invitation with its body, the claim page", async () => {
      const discovery = await send("GET", "/.well-known/proto");
      assert.equal(discovery.status, 200, discovery.text);
      assert.deepEqual(discovery.json, kit.discovery);
      assert.match(discovery.headers.get("cache-control") ?? "", /max-age=300/);
      assert.deepEqual(discovery.json.billing, {
        unclaimed_mode: "attested_only",
        accepted_attestors: ["proto-trust"],
      });

      const nothing = await send("GET", "/proto/claim?token=clm_nothing");
      assert.equal(nothing.status, 404);
      assert.match(nothing.headers.get("content-type") ?? "", /^text\/html/);
      assert.match(nothing.text, /data-code="invitation_not_found"/);

      const agent = await signedUp();
      const me = await signed(agent, "GET", ME);
      assert.equal(me.status, 200, me.text);
      assert.equal(me.json.agent_did, agent.did);
      assert.equal(me.json.state, "UNCLAIMED");

      const body = JSON.stringify({ recipient: { type: "email", value: "owner@mail.test" } });
      const invited = await signed(agent, "POST", INVITE, { body });
      assert.equal(invited.status, 202, invited.text);
      assert.equal(invited.json.state, "INVITED");
      const token = invitations.at(-1);
      assert.ok(token);
      const page = await send("GET", `/proto/claim?token=${encodeURIComponent(token)}`);
      assert.equal(page.status, 200, page.text);
      assert.match(page.text, /owner@mail\.test/);
    });

    test("an unsigned request to a guarded route: 401 invalid_signature with the Proto challenge", async () => {
      const refused = await send("GET", "/api/whoami");
      ledger.expect(refused, 401, "invalid_signature");
      assert.equal(
        refused.headers.get("www-authenticate"),
        `Proto discovery="${ORIGIN}/.well-known/proto", realm="${SERVICE_DID}"`,
      );
      // The application's own challenge stays first (upstream §5.7).
      const both = await send("GET", "/api/bearer-too");
      ledger.expect(both, 401, "invalid_signature");
      assert.deepEqual(
        parseWwwAuthenticate(both.headers.get("www-authenticate")).map((challenge) => challenge.scheme),
        ["Bearer", "Proto"],
      );
    });

    test("attested_only: a signup without an attestation is 401 attestation_required; with one, 200 and the account's DID", async () => {
      const agent = await attestor.link(undefined, emailAddress("signup"));
      const refused = await signed(agent, "GET", "/api/whoami");
      ledger.expect(refused, 401, "attestation_required");
      assert.deepEqual(findProtoChallenge(refused.headers.get("www-authenticate"))?.attestors, ["proto-trust"]);
      assert.equal(await kit.store.findAccountByDid(agent.did), undefined, "nothing stored");
      const attested = await signed(agent, "GET", "/api/whoami", {
        attestation: await attestor.mint(agent, SERVICE_DID),
      });
      assert.equal(attested.status, 200, attested.text);
      assert.deepEqual(attested.json, { did: agent.did, state: "UNCLAIMED" });
      // The account exists now: signed requests need no attestation.
      const again = await signed(agent, "GET", "/api/whoami");
      assert.equal(again.status, 200, again.text);
      assert.deepEqual(again.json, { did: agent.did, state: "UNCLAIMED" });
    });

    test("a signed JSON body (content-digest): the handler sees exactly it; a tampered body is 401", async () => {
      const agent = await signedUp();
      const body = '{ "text":  "héllo wörld",\n  "n": 1 }';
      const answer = await signed(agent, "POST", "/api/notes", { body });
      assert.equal(answer.status, 200, answer.text);
      assert.deepEqual(answer.json, { did: agent.did, note: { text: "héllo wörld", n: 1 }, raw: body });
      const tampered = await signed(agent, "POST", "/api/notes", { body, sentBody: body.replace("1", "2") });
      ledger.expect(tampered, 401, "invalid_signature");
      assert.equal(findProtoChallenge(tampered.headers.get("www-authenticate"))?.error, "invalid_signature");
    });

    test("a replayed request is 401 replayed_nonce", async () => {
      const agent = await signedUp();
      const headers = signatureHeaders(agent, "GET", "/api/whoami");
      assert.equal((await send("GET", "/api/whoami", { headers })).status, 200);
      ledger.expect(await send("GET", "/api/whoami", { headers }), 401, "replayed_nonce");
    });

    test("optional authentication: anonymous callers get null, signed ones their DID, bad credentials 401", async () => {
      const anonymous = await send("GET", "/api/maybe");
      assert.equal(anonymous.status, 200, anonymous.text);
      assert.deepEqual(anonymous.json, { did: null });
      const agent = await signedUp();
      const known = await signed(agent, "GET", "/api/maybe");
      assert.equal(known.status, 200, known.text);
      assert.deepEqual(known.json, { did: agent.did });
      ledger.expect(
        await send("GET", "/api/maybe", { headers: { "proto-attestation": "garbage" } }),
        401,
        "invalid_signature",
      );
    });

    test("a body over maxBodyBytes is 413 payload_too_large, declared or streamed", async () => {
      const agent = await signedUp();
      const body = JSON.stringify({ text: "x".repeat(MAX_BODY_BYTES) });
      const declared = await signed(agent, "POST", "/api/notes", { body });
      ledger.expect(declared, 413, "payload_too_large");
      // Chunked, without Content-Length: refused once the bytes pass the limit.
      const headers = { ...signatureHeaders(agent, "POST", "/api/notes", body), "content-type": "application/json" };
      const stream = new ReadableStream<Uint8Array>({
        start(controller) {
          for (let at = 0; at < body.length; at += 512) controller.enqueue(Buffer.from(body.slice(at, at + 512)));
          controller.close();
        },
      });
      ledger.expect(await send("POST", "/api/notes", { headers, body: stream }), 413, "payload_too_large");
      // The server is fine afterwards.
      assert.equal((await signed(agent, "GET", "/api/whoami")).status, 200);
    });

    test("a signed JSON body nested deeper than 64 levels is 400 malformed_request before the handler", async () => {
      const agent = await signedUp();
      const nested = (depth: number) => `${"[".repeat(depth)}${"]".repeat(depth)}`;
      const allowed = await signed(agent, "POST", "/api/notes", { body: nested(64) });
      assert.equal(allowed.status, 200, allowed.text);
      // Strings do not count: brackets inside them are text.
      const text = await signed(agent, "POST", "/api/notes", { body: JSON.stringify({ text: "[".repeat(500) }) });
      assert.equal(text.status, 200, text.text);
      // Within maxBodyBytes; at 5,000 levels echoing the body overflowed JSON.stringify's stack (a 500).
      for (const body of [nested(65), nested(2000), `${'{"a":'.repeat(600)}1${"}".repeat(600)}`]) {
        ledger.expect(await signed(agent, "POST", "/api/notes", { body }), 400, "malformed_request");
      }
    });

    test("a request-target with ' in the query, signed exactly as sent, is verified as received", async () => {
      const agent = await signedUp();
      const target = "/api/whoami?q=it's";
      const accepted = await rawGet(app.url, target, signatureHeaders(agent, "GET", target));
      assert.equal(accepted.status, 200, accepted.text);
      assert.equal(accepted.json.did, agent.did);
      // A signature over the serialised spelling (%27) does not match what was received.
      const serialised = await rawGet(app.url, target, signatureHeaders(agent, "GET", "/api/whoami?q=it%27s"));
      ledger.expect(serialised, 401, "invalid_signature");
    });

    more?.(context);

    test("nothing unexpected reached onError", () => {
      assert.deepEqual(unexpected, []);
    });
  });
}
