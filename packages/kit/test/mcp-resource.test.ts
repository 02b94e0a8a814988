import assert from "node:assert/strict";
import { createHash, generateKeyPairSync, randomBytes, randomUUID } from "node:crypto";
import { once } from "node:events";
import { after, before, describe, test } from "node:test";
import { serve } from "@hono/node-server";
import { type Challenge, findProtoChallenge, parseWwwAuthenticate, signRequest } from "@proto/protocol";
import { createTestCA, type TestFetch, testFetch } from "@proto/testkit";
import Fastify, { type FastifyInstance } from "fastify";
import { decodeJwt, decodeProtectedHeader, SignJWT } from "jose";
import { agentRoute, createService, mcpRoute } from "../src/fastify.js";
import { type BearerContext, createKit, type Kit, type KitStore, openKitStore, toFetchResponse } from "../src/index.js";
import { type Answer, answer, TestAttestor } from "./support/attestor.js";
import { allowedConsent, Browser, field, type PageAnswer } from "./support/browser.js";
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
 * Issue 24, the kit as an OAuth resource server for an MCP endpoint: a Fastify service over HTTPS
 * on a real port with `mcpRoute`, our attestor in process (on the suite's clock) issuing RFC 9068
 * access tokens to linked agents (JWT-bearer grant) and to a person's MCP client (authorization
 * code with PKCE, the person signing in by e-mail and consenting), and every request sent with
 * fetch. The service declares `notes` as a default permission: the attestor reads it from the
 * service's discovery document (trusting the suite's CA) and grants no other scope (issue 38).
 */

reportSkippedEngines();

const CALLBACK = "http://127.0.0.1:9/callback";

/** What the resource requires, declared by the service so that the attestor may grant it. */
const PERMISSIONS = { notes: { description: "Read and write your notes", default: true } };

/** A refusal as a client sees it: the status, the envelope, and the challenges in order. */
interface Refusal {
  status: number;
  code: string;
  /** The Bearer challenge's `error`, absent when no token was presented. */
  bearerError?: string;
}

for (const engine of ENGINES) {
  describe(`kit: an MCP endpoint as an OAuth protected resource (${engine})`, { timeout: 120_000 }, () => {
    let database: TestDatabase;
    let store: KitStore;
    let clock: TestClock;
    let attestor: TestAttestor;
    let kit: Kit;
    let app: FastifyInstance;
    let origin: string;
    let serviceDid: string;
    let resource: string;
    let metadataUrl: string;
    /** fetch trusting the suite's CA, for the service over HTTPS. */
    let tlsFetch: TestFetch;
    const fetchService = (url: string, init?: RequestInit) =>
      tlsFetch(url, init as Parameters<TestFetch>[1]) as unknown as Promise<Response>;

    before(async () => {
      database = await createTestDatabase(engine);
      store = await openKitStore(database.url);
      clock = new TestClock();
      const ca = await createTestCA();
      tlsFetch = testFetch(ca);
      attestor = await TestAttestor.start(clock, [], "127.0.0.1", { servicesCa: ca.certPem });
      const port = await freePort();
      origin = `https://127.0.0.1:${port}`;
      // The did:web of the host: the subject of access tokens is then the sub_h of attestations.
      serviceDid = `did:web:127.0.0.1%3A${port}`;
      resource = `${origin}/mcp`;
      metadataUrl = `${origin}/.well-known/oauth-protected-resource/mcp`;
      kit = await createKit({
        publicUrl: origin,
        discovery: { service_did: serviceDid, features: ["attestation"], recipient_types: ["oidc"] },
        permissions: PERMISSIONS,
        attestors: { "proto-trust": { url: attestor.url, allowHttp: true } },
        serviceName: "Notes",
        store,
        now: clock.now,
        onError: (error) => {
          throw error;
        },
      });
      const tls = await ca.issue(["127.0.0.1"]);
      // The kit's Fastify helpers are typed for Fastify's default (http) server; https routes alike.
      app = Fastify({ logger: false, https: { key: tls.keyPem, cert: tls.certPem } }) as unknown as FastifyInstance;
      await app.register(createService(kit));
      // The same agent on the signed path: RFC 9421 signature plus an attestation.
      app.get("/api/whoami", agentRoute(kit), async (request) => ({
        did: request.proto?.did,
        account_id: request.proto?.account.account_id,
        created: request.proto?.created,
      }));
      mcpRoute(app, kit, { path: "/mcp", scopes: ["notes"] }, async (request) => {
        const caller = request.bearer as BearerContext;
        return {
          kind: caller.kind,
          issuer: caller.issuer,
          subject: caller.subject,
          agent_did: caller.agentDid ?? null,
          account_id: caller.account?.account_id ?? null,
          created: caller.kind === "agent" ? caller.created : null,
          client_id: caller.clientId,
          scopes: caller.scopes,
          method: request.method,
          body: request.body ?? null,
          accounts: (await caller.accounts()).map((a) => ({ account_id: a.account_id, relation: a.relation })),
        };
      });
      await app.listen({ port, host: "127.0.0.1" });
    });

    after(async () => {
      await app?.close();
      await kit?.close();
      await store?.close();
      await attestor?.close();
      await tlsFetch?.close();
      await database?.drop();
    });

    /** A request to the service over HTTP, with a bearer token when given. */
    async function call(
      method: string,
      path: string,
      options: { token?: string; headers?: Record<string, string>; body?: unknown } = {},
    ): Promise<Answer> {
      const headers: Record<string, string> = { ...options.headers };
      if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
      const init: RequestInit = { method, headers };
      if (options.body !== undefined) {
        headers["content-type"] = "application/json";
        init.body = JSON.stringify(options.body);
      }
      return answer(await fetchService(`${origin}${path}`, init));
    }

    /** A signed request (RFC 9421 over the public URL) with an attestation, over HTTP. */
    async function signed(agent: Agent, path: string, attestation: string): Promise<Answer> {
      const request = signRequest(
        { method: "GET", url: `${origin}${path}` },
        { keyid: agent.did, privateKey: agent.privateKey, created: clock.nowSeconds() },
      );
      return answer(
        await fetchService(`${origin}${path}`, { headers: { ...request.headers, "proto-attestation": attestation } }),
      );
    }

    async function tokenRequest(form: Record<string, string>): Promise<Answer> {
      return answer(
        await fetch(`${attestor.url}/oidc/token`, {
          method: "POST",
          headers: { "content-type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams(form).toString(),
        }),
      );
    }

    /** An access token for `agent` by the JWT-bearer grant (RFC 7523); `scope: ""` asks for none. */
    async function agentToken(agent: Agent, options: { resource?: string; scope?: string } = {}): Promise<string> {
      const scope = options.scope === "" ? undefined : (options.scope ?? "notes");
      const issued = await attestor.jwtBearer(agent, options.resource ?? resource, scope);
      assert.equal(issued.status, 200, issued.text);
      assert.equal(issued.json.token_type, "Bearer");
      return issued.json.access_token as string;
    }

    function challenges(answer: Answer): Challenge[] {
      return parseWwwAuthenticate(answer.headers.get("www-authenticate"));
    }

    /** The envelope, the `Bearer` challenge (RFC 6750 §3, RFC 9728 §5.1) and, on a 401, `Proto` after it. */
    function assertRefused(answer: Answer, expected: Refusal): void {
      assert.equal(answer.status, expected.status, answer.text);
      assert.match(answer.headers.get("content-type") ?? "", /^application\/json/);
      assert.deepEqual(Object.keys(answer.json), ["error"], answer.text);
      assert.deepEqual(Object.keys(answer.json.error).sort(), ["code", "message"], answer.text);
      assert.equal(answer.json.error.code, expected.code, answer.text);
      assert.ok(answer.json.error.message.length > 0);
      const all = challenges(answer);
      const bearerAt = all.findIndex((c) => c.scheme.toLowerCase() === "bearer");
      assert.ok(bearerAt >= 0, `a Bearer challenge: ${answer.headers.get("www-authenticate")}`);
      const bearer = all[bearerAt] as Challenge;
      assert.equal(bearer.params.resource_metadata, metadataUrl);
      assert.equal(bearer.params.scope, "notes");
      assert.equal(bearer.params.error, expected.bearerError);
      if (expected.bearerError === undefined) assert.equal(bearer.params.error_description, undefined);
      else assert.ok((bearer.params.error_description ?? "").length > 0);
      const protoAt = all.findIndex((c) => c.scheme === "Proto");
      if (expected.status === 401) {
        assert.ok(protoAt > bearerAt, "the Proto challenge follows the Bearer one");
        assert.equal(
          findProtoChallenge(answer.headers.get("www-authenticate"))?.discovery,
          `${origin}/.well-known/proto`,
        );
      } else {
        assert.equal(protoAt, -1, "Proto is a 401's challenge only");
      }
    }

    /** A token the attestor did not sign: another key, under its issuer (or another), its key id or another. */
    async function forgedToken(agent: Agent, options: { issuer?: string; kid: string }): Promise<string> {
      const { privateKey } = generateKeyPairSync("ed25519");
      const now = clock.nowSeconds();
      return new SignJWT({
        client_id: agent.did,
        scope: "notes",
        jti: randomUUID(),
        act: { sub: agent.did },
      })
        .setProtectedHeader({ alg: "EdDSA", typ: "at+jwt", kid: options.kid })
        .setIssuer(options.issuer ?? attestor.url)
        .setSubject(randomBytes(32).toString("base64url"))
        .setAudience(resource)
        .setIssuedAt(now)
        .setExpirationTime(now + 600)
        .sign(privateKey);
    }

    test("the metadata (RFC 9728) at the resource's path and at the root: the exact resource, the attestor, the scopes", async () => {
      const expected = {
        resource,
        authorization_servers: [attestor.url],
        scopes_supported: ["notes"],
        bearer_methods_supported: ["header"],
        resource_name: "Notes",
      };
      for (const url of [metadataUrl, `${origin}/.well-known/oauth-protected-resource`]) {
        const got = await answer(await fetchService(url));
        assert.equal(got.status, 200, got.text);
        assert.match(got.headers.get("content-type") ?? "", /^application\/json/);
        assert.equal(got.headers.get("access-control-allow-origin"), "*");
        assert.equal(got.headers.get("cache-control"), "public, max-age=300");
        assert.deepEqual(got.json, expected);
        const head = await fetchService(url, { method: "HEAD" });
        assert.equal(head.status, 200);
        assert.equal(await head.text(), "");
        // A browser's preflight before a GET with MCP's own headers.
        const preflight = await fetchService(url, {
          method: "OPTIONS",
          headers: {
            origin: "https://client.example",
            "access-control-request-method": "GET",
            "access-control-request-headers": "mcp-protocol-version",
          },
        });
        assert.equal(preflight.status, 204);
        assert.equal(preflight.headers.get("access-control-allow-origin"), "*");
        assert.match(preflight.headers.get("access-control-allow-methods") ?? "", /GET/);
      }
      // The chain a client follows: the resource names the attestor, whose metadata names itself.
      const server = await answer(await fetch(`${attestor.url}/.well-known/oauth-authorization-server`));
      assert.equal(server.status, 200, server.text);
      assert.equal(server.json.issuer, attestor.url);
    });

    test("without a token: 401 on every method of the transport, Bearer resource_metadata (no error) then Proto", async () => {
      for (const method of ["POST", "GET", "DELETE"]) {
        const refused = await call(method, "/mcp", method === "POST" ? { body: { jsonrpc: "2.0" } } : {});
        assertRefused(refused, { status: 401, code: "kit_token_required" });
      }
      // The challenge's metadata URL is the document (what an MCP client fetches next).
      const refused = await call("GET", "/mcp");
      const bearer = challenges(refused).find((c) => c.scheme === "Bearer") as Challenge;
      const document = await answer(await fetchService(bearer.params.resource_metadata as string));
      assert.equal(document.json.resource, resource);
      // Another scheme is no token either.
      assertRefused(await call("GET", "/mcp", { headers: { authorization: "Basic YWxpY2U6c2VjcmV0" } }), {
        status: 401,
        code: "kit_token_required",
      });
    });

    test("CORS for browser-based clients: the preflight admits the token and MCP's fields; every answer, refusals too, is readable", async () => {
      const preflight = await call("OPTIONS", "/mcp", {
        headers: {
          origin: "https://client.example",
          "access-control-request-method": "POST",
          "access-control-request-headers": "authorization, content-type, mcp-protocol-version",
        },
      });
      assert.equal(preflight.status, 204, preflight.text);
      assert.equal(preflight.headers.get("access-control-allow-origin"), "*");
      assert.equal(preflight.headers.get("access-control-allow-methods"), "POST, GET, DELETE, OPTIONS");
      const allowed = (preflight.headers.get("access-control-allow-headers") ?? "").toLowerCase().split(/,\s*/);
      for (const name of ["authorization", "content-type", "mcp-protocol-version", "mcp-session-id", "last-event-id"]) {
        assert.ok(allowed.includes(name), `${name} in ${allowed.join(", ")}`);
      }
      const origin = { origin: "https://client.example" };
      const refused = await call("POST", "/mcp", { headers: origin, body: { jsonrpc: "2.0" } });
      assert.equal(refused.status, 401);
      const agent = await attestor.link(newAgent(), emailAddress("cors"));
      const served = await call("POST", "/mcp", { headers: origin, token: await agentToken(agent), body: {} });
      assert.equal(served.status, 200, served.text);
      for (const answered of [refused, served]) {
        assert.equal(answered.headers.get("access-control-allow-origin"), "*");
        const exposed = (answered.headers.get("access-control-expose-headers") ?? "").toLowerCase();
        assert.match(exposed, /www-authenticate/);
        assert.match(exposed, /mcp-session-id/);
      }
    });

    test("an agent's token lands in the account of its signed requests with an attestation, both ways round", async () => {
      const email = emailAddress("mcp-agent");
      // Signed first: the signed path creates the account, the token finds it.
      const first = await attestor.link(newAgent(), email);
      const attestation = await attestor.mint(first, serviceDid);
      const viaSignature = await signed(first, "/api/whoami", attestation);
      assert.equal(viaSignature.status, 200, viaSignature.text);
      assert.equal(viaSignature.json.created, true);
      const token = await agentToken(first);
      assert.equal(decodeProtectedHeader(token).typ, "at+jwt");
      const viaToken = await call("POST", "/mcp", { token, body: { jsonrpc: "2.0", method: "ping", id: 1 } });
      assert.equal(viaToken.status, 200, viaToken.text);
      assert.equal(viaToken.json.kind, "agent");
      assert.equal(viaToken.json.agent_did, first.did);
      assert.equal(viaToken.json.account_id, viaSignature.json.account_id);
      assert.equal(viaToken.json.created, false);
      assert.equal(viaToken.json.issuer, "proto-trust");
      // The person of the token is the person of the attestation.
      assert.equal(viaToken.json.subject, decodeJwt(attestation).sub_h);
      assert.equal(viaToken.json.client_id, first.did);
      assert.deepEqual(viaToken.json.scopes, ["notes"]);
      assert.deepEqual(viaToken.json.body, { jsonrpc: "2.0", method: "ping", id: 1 });
      // GET and DELETE (the transport's stream and session end) take the token too.
      for (const method of ["GET", "DELETE"]) {
        const other = await call(method, "/mcp", { token });
        assert.equal(other.status, 200, other.text);
        assert.equal(other.json.method, method);
        assert.equal(other.json.account_id, viaSignature.json.account_id);
      }

      // Token first: the token signs the agent up (attested_only passes: the attestor vouched for
      // the person), recording the person; its signed requests then find the same account.
      const second = await attestor.link(newAgent(), email);
      const created = await call("POST", "/mcp", { token: await agentToken(second), body: {} });
      assert.equal(created.status, 200, created.text);
      assert.equal(created.json.created, true);
      const record = await store.findAccountByDid(second.did);
      assert.ok(record?.personId, "the person is recorded");
      const person = await store.findPerson(record.personId);
      assert.deepEqual([person?.issuer, person?.subject], ["proto-trust", created.json.subject]);
      const later = await signed(second, "/api/whoami", await attestor.mint(second, serviceDid));
      assert.equal(later.status, 200, later.text);
      assert.equal(later.json.account_id, created.json.account_id);
      assert.equal(later.json.created, false);
      // Both agents are the same person's: each sees both accounts, as attested.
      const again = await call("GET", "/mcp", { token: await agentToken(second) });
      assert.deepEqual(
        again.json.accounts.map((a: { account_id: string }) => a.account_id).sort(),
        [viaSignature.json.account_id, created.json.account_id].sort(),
      );
    });

    test("a person's MCP client (authorization code, PKCE, consent): the person, with their agents' accounts", async () => {
      const email = emailAddress("mcp-person");
      const agent = await attestor.link(newAgent(), email);
      const agentCall = await call("GET", "/mcp", { token: await agentToken(agent) });
      assert.equal(agentCall.status, 200, agentCall.text);

      const registered = await answer(
        await fetch(`${attestor.url}/oidc/register`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ client_name: "Desk Assistant", redirect_uris: [CALLBACK] }),
        }),
      );
      assert.equal(registered.status, 201, registered.text);
      const clientId = registered.json.client_id as string;
      const verifier = randomBytes(32).toString("base64url");
      const challenge = createHash("sha256").update(verifier).digest("base64url");
      const authorize = `${attestor.url}/oidc/authorize?${new URLSearchParams({
        client_id: clientId,
        redirect_uri: CALLBACK,
        response_type: "code",
        scope: "notes",
        code_challenge: challenge,
        code_challenge_method: "S256",
        state: "st",
        resource,
      })}`;
      const code = await authorizeAsPerson(new Browser(new Map()), authorize, email);
      const tokens = await tokenRequest({
        grant_type: "authorization_code",
        code,
        code_verifier: verifier,
        client_id: clientId,
        redirect_uri: CALLBACK,
        resource,
      });
      assert.equal(tokens.status, 200, tokens.text);
      const personCall = await call("POST", "/mcp", { token: tokens.json.access_token, body: { id: 2 } });
      assert.equal(personCall.status, 200, personCall.text);
      assert.equal(personCall.json.kind, "person");
      assert.equal(personCall.json.agent_did, null);
      assert.equal(personCall.json.account_id, null);
      assert.equal(personCall.json.client_id, clientId);
      assert.equal(personCall.json.issuer, "proto-trust");
      // The same person as their agent's token names, with the account the agent made.
      assert.equal(personCall.json.subject, agentCall.json.subject);
      assert.deepEqual(personCall.json.accounts, [{ account_id: agentCall.json.account_id, relation: "attested" }]);
    });

    /** Authorization as the person: sign-in by the mailed link when asked, consent; answers the code. */
    async function authorizeAsPerson(browser: Browser, authorize: string, email: string): Promise<string> {
      let page: PageAnswer = await browser.get(authorize);
      for (let hops = 0; hops < 10; hops++) {
        if (page.status === 200 && page.text.includes('action="/oidc/consent"')) {
          // The service describes `notes`: its box is ticked, and Allow sends it.
          assert.match(page.text, /Read and write your notes/);
          page = await browser.send("POST", `${attestor.url}/oidc/consent`, { form: allowedConsent(page.text) });
          continue;
        }
        assert.ok(page.status >= 300 && page.status < 400 && page.location !== undefined, page.text);
        const next = new URL(page.location);
        if (next.href.startsWith(CALLBACK)) {
          assert.equal(next.searchParams.get("state"), "st");
          const code = next.searchParams.get("code");
          assert.ok(code, next.href);
          return code;
        }
        if (next.pathname === "/signin") {
          const signin = await browser.get(next.href);
          const sent = await browser.send("POST", `${attestor.url}/signin/email`, {
            form: { _csrf: field(signin.text, "_csrf"), next: field(signin.text, "next"), email },
          });
          assert.equal(sent.status, 200, sent.text);
          const confirm = await browser.get(attestor.magicLink(email));
          page = await browser.send("POST", `${attestor.url}/signin/email/verify`, {
            form: { _csrf: field(confirm.text, "_csrf"), token: field(confirm.text, "token") },
          });
          continue;
        }
        page = await browser.get(next.href);
      }
      throw new Error("the authorization did not come back to the client");
    }

    test("a token for another resource: 401 invalid_token", async () => {
      const agent = await attestor.link(newAgent(), emailAddress("mcp-aud"));
      for (const elsewhere of [`${origin}/other-mcp`, "https://notes.example/mcp", `${resource}/`]) {
        // notes.example declares nothing the attestor can read, so no scope can be asked of it.
        const scope = elsewhere.startsWith(origin) ? "notes" : "";
        const token = await agentToken(agent, { resource: elsewhere, scope });
        assertRefused(await call("POST", "/mcp", { token, body: {} }), {
          status: 401,
          code: "invalid_token",
          bearerError: "invalid_token",
        });
      }
      assert.equal(await store.findAccountByDid(agent.did), undefined, "nothing stored");
    });

    test("an expired token (the kit's clock past exp and the 60 s skew): 401 invalid_token", async () => {
      const agent = await attestor.link(newAgent(), emailAddress("mcp-exp"));
      const token = await agentToken(agent);
      const { exp } = decodeJwt(token);
      // Within the skew it still works.
      clock.advance((exp as number) - clock.nowSeconds() + 30);
      assert.equal((await call("GET", "/mcp", { token })).status, 200);
      clock.advance(31 + 1);
      const refused = await call("GET", "/mcp", { token });
      assertRefused(refused, { status: 401, code: "invalid_token", bearerError: "invalid_token" });
      assert.match(refused.json.error.message, /expired/);
    });

    test("an attestation presented as a bearer token: 401 invalid_token (typ is not at+jwt)", async () => {
      const agent = await attestor.link(newAgent(), emailAddress("mcp-att"));
      const attestation = await attestor.mint(agent, serviceDid);
      const refused = await call("GET", "/mcp", { token: attestation });
      assertRefused(refused, { status: 401, code: "invalid_token", bearerError: "invalid_token" });
      assert.match(refused.json.error.message, /at\+jwt/);
      assert.equal(await store.findAccountByDid(agent.did), undefined, "nothing stored");
    });

    test("a token the attestor did not sign, or from an unknown issuer: 401 invalid_token", async () => {
      const agent = await attestor.link(newAgent(), emailAddress("mcp-forged"));
      const kid = decodeProtectedHeader(await agentToken(agent)).kid as string;
      const cases: [string, RegExp][] = [
        [await forgedToken(agent, { kid }), /signature/],
        [await forgedToken(agent, { kid: "not-a-key-of-the-attestor" }), /key/],
        [await forgedToken(agent, { kid, issuer: "https://trust.evil.example" }), /issuer/],
        [await forgedToken(agent, { kid, issuer: "proto-trust" }), /issuer/],
      ];
      for (const [token, reason] of cases) {
        const refused = await call("GET", "/mcp", { token });
        assertRefused(refused, { status: 401, code: "invalid_token", bearerError: "invalid_token" });
        assert.match(refused.json.error.message, reason);
      }
      assert.equal(await store.findAccountByDid(agent.did), undefined, "nothing stored");
    });

    test("a token in the query (?access_token=) is never read: 401 as without one", async () => {
      const agent = await attestor.link(newAgent(), emailAddress("mcp-query"));
      const token = await agentToken(agent);
      assertRefused(await call("GET", `/mcp?access_token=${encodeURIComponent(token)}`), {
        status: 401,
        code: "kit_token_required",
      });
      // The header still works on the same URL.
      assert.equal((await call("GET", `/mcp?access_token=x`, { token })).status, 200);
    });

    test("a token without the resource's scope: 403 insufficient_scope naming it; nothing stored", async () => {
      const agent = await attestor.link(newAgent(), emailAddress("mcp-scope"));
      const refused = await call("POST", "/mcp", { token: await agentToken(agent, { scope: "" }), body: {} });
      assertRefused(refused, { status: 403, code: "insufficient_scope", bearerError: "insufficient_scope" });
      // A scope the service does not declare is not issued at all (issue 38).
      const undeclared = await attestor.jwtBearer(agent, resource, "calendar");
      assert.equal(undeclared.status, 400, undeclared.text);
      assert.equal(undeclared.json.error, "invalid_scope");
      assert.equal(await store.findAccountByDid(agent.did), undefined, "nothing stored");
    });

    test("malformed, oversized and revoked: 401 invalid_token, never a 500", async () => {
      for (const value of [
        "Bearer",
        "Bearer not a token",
        "Bearer abc.def",
        `Bearer ${"a".repeat(9000)}`,
        "Bearer a, Bearer b",
      ]) {
        assertRefused(await call("GET", "/mcp", { headers: { authorization: value } }), {
          status: 401,
          code: "invalid_token",
          bearerError: "invalid_token",
        });
      }
      const agent = await attestor.link(newAgent(), emailAddress("mcp-revoked"));
      const token = await agentToken(agent);
      const accepted = await call("GET", "/mcp", { token });
      assert.equal(accepted.status, 200, accepted.text);
      await store.revokeKey({ accountId: accepted.json.account_id, did: agent.did, now: clock.now(), reason: "test" });
      const refused = await call("GET", "/mcp", { token });
      assertRefused(refused, { status: 401, code: "invalid_token", bearerError: "invalid_token" });
      assert.match(refused.json.error.message, /revoked/);
    });

    test("the framework-free core on a Fetch handler: metadata, both challenges, an agent's account", async () => {
      const port = await freePort();
      const fetchOrigin = `http://127.0.0.1:${port}`;
      const own = await createKit({
        publicUrl: fetchOrigin,
        allowHttp: true,
        discovery: {
          service_did: `did:web:127.0.0.1%3A${port}`,
          features: ["attestation"],
          recipient_types: ["oidc"],
        },
        attestors: { "proto-trust": { url: attestor.url, allowHttp: true } },
        database: "sqlite::memory:",
        now: clock.now,
      });
      const mcp = own.protectedResource({ path: "/tools/mcp" });
      // What a worker writes: the metadata, then the bearer check, refusals as the kit answers them.
      const handle = async (request: Request): Promise<Response> => {
        const metadata = mcp.handleMetadata(request);
        if (metadata !== undefined) return metadata;
        if (request.method === "OPTIONS") return toFetchResponse(mcp.preflightResponse(["POST"]));
        let response: Response;
        try {
          const caller = await mcp.authenticate(request);
          response = Response.json({ kind: caller.kind, account_id: caller.account?.account_id ?? null });
        } catch (error) {
          response = mcp.errorToResponse(error, request);
        }
        for (const [name, value] of Object.entries(mcp.corsHeaders())) response.headers.set(name, value);
        return response;
      };
      const server = serve({ fetch: handle, port, hostname: "127.0.0.1" });
      await once(server, "listening");
      try {
        const document = await answer(await fetch(`${fetchOrigin}/.well-known/oauth-protected-resource/tools/mcp`));
        assert.equal(document.status, 200, document.text);
        assert.equal(document.json.resource, `${fetchOrigin}/tools/mcp`);
        assert.deepEqual(document.json.authorization_servers, [attestor.url]);
        assert.equal(document.json.scopes_supported, undefined, "no scopes, none advertised");
        const preflight = await fetch(`${fetchOrigin}/tools/mcp`, {
          method: "OPTIONS",
          headers: { origin: "https://client.example", "access-control-request-method": "POST" },
        });
        assert.equal(preflight.status, 204);
        assert.equal(preflight.headers.get("access-control-allow-methods"), "POST, OPTIONS");
        assert.match(preflight.headers.get("access-control-allow-headers") ?? "", /Authorization/);
        const refused = await answer(await fetch(`${fetchOrigin}/tools/mcp`, { method: "POST", body: "{}" }));
        assert.equal(refused.status, 401, refused.text);
        assert.equal(refused.json.error.code, "kit_token_required");
        assert.equal(refused.headers.get("access-control-allow-origin"), "*");
        assert.match(refused.headers.get("access-control-expose-headers") ?? "", /WWW-Authenticate/);
        const [bearer, proto] = challenges(refused);
        assert.equal(bearer?.scheme, "Bearer");
        assert.deepEqual(bearer?.params, {
          resource_metadata: `${fetchOrigin}/.well-known/oauth-protected-resource/tools/mcp`,
        });
        assert.equal(proto?.scheme, "Proto");
        const agent = await attestor.link(newAgent(), emailAddress("mcp-fetch"));
        const token = await agentToken(agent, { resource: `${fetchOrigin}/tools/mcp`, scope: "" });
        const accepted = await answer(
          await fetch(`${fetchOrigin}/tools/mcp`, { method: "POST", headers: { authorization: `Bearer ${token}` } }),
        );
        assert.equal(accepted.status, 200, accepted.text);
        assert.equal(accepted.json.kind, "agent");
        assert.equal(accepted.json.account_id, (await own.store.findAccountByDid(agent.did))?.id);
      } finally {
        server.close();
        await own.close();
      }
    });

    test("configuration mistakes are refused at start: a path that is no path, a scope that is no scope, a DID not of the host", async () => {
      assert.throws(() => kit.protectedResource({ path: "mcp" }), /path/);
      assert.throws(() => kit.protectedResource({ path: "/mcp?x=1" }), /path/);
      assert.throws(() => kit.protectedResource({ path: "/mcp", scopes: ["two words"] }), /scope/);
      // A did:web with a path names the host, but the attestor derives subjects from the host alone.
      const elsewhere = await createKit({
        publicUrl: "https://notes.example",
        discovery: { service_did: "did:web:notes.example:mcp", features: ["attestation"], recipient_types: ["oidc"] },
        attestors: { "proto-trust": { url: attestor.url, allowHttp: true } },
        store,
        now: clock.now,
      });
      try {
        assert.throws(() => elsewhere.protectedResource({ path: "/mcp" }), /must be did:web:notes\.example /);
      } finally {
        await elsewhere.close();
      }
    });
  });
}
