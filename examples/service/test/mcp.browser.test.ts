/**
 * Issue 24, end to end: the MCP TypeScript SDK's own client lists and calls the notes service's
 * tools through OUR attestor, twice: as a person (the SDK's OAuth flow, its authorization URL
 * driven in Chromium through sign-in and consent) and as a headless agent (the agent SDK's
 * JWT-bearer provider). Both reach the same person's subject. On SQLite, and on PostgreSQL +
 * Redis when TEST_POSTGRES_URL and TEST_REDIS_URL are set.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer as createHttpServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type {
  OAuthClientInformationMixed,
  OAuthClientMetadata,
  OAuthTokens,
} from "@modelcontextprotocol/sdk/shared/auth.js";
import { Agent, connectMcp, createMcpAuthProvider } from "@proto/agent";
import { buildTrustApp, readTrustConfig } from "@proto/server";
import {
  createTestCA,
  createTestDatabase,
  freePort,
  launchChromium,
  lookAt,
  quietStream,
  type TestDatabase,
  type TestFetch,
  testFetch,
} from "@proto/testkit";
import { linkIn, type SmtpCollector, startSmtpCollector } from "@proto/testkit/smtp";
import type { Page } from "playwright-core";
import { buildNotesService, type NotesService } from "../src/app.js";
import { MCP_PATH } from "../src/mcp.js";

const NOTES_HOST = "notes.test";
const POSTGRES = process.env.TEST_POSTGRES_URL;
const REDIS = process.env.TEST_REDIS_URL;

const VARIANTS = [
  { name: "SQLite", postgres: false },
  ...(POSTGRES && REDIS ? [{ name: "PostgreSQL + Redis", postgres: true }] : []),
];
if (!POSTGRES || !REDIS)
  process.stdout.write("# TEST_POSTGRES_URL or TEST_REDIS_URL not set: the PostgreSQL run is skipped\n");

/** The JSON a tool answered with (its one text content). */
function toolJson(result: Awaited<ReturnType<Client["callTool"]>>): Record<string, unknown> {
  const content = result.content as { type: string; text: string }[];
  assert.equal(content[0]?.type, "text", JSON.stringify(result));
  return JSON.parse(content[0]?.text ?? "null") as Record<string, unknown>;
}

/**
 * The person's MCP client, as a desktop assistant would be: it registers itself (RFC 7591), sends
 * the person's browser to the authorization URL, and takes the code at a loopback callback.
 */
class DesktopClient {
  readonly callback: Server;
  #port = 0;
  #client: OAuthClientInformationMixed | undefined;
  #tokens: OAuthTokens | undefined;
  #verifier = "";
  #code: Promise<string> | undefined;
  #resolveCode: ((code: string) => void) | undefined;
  authorizationUrls: URL[] = [];

  constructor(private readonly drive: (url: URL) => Promise<void>) {
    this.callback = createHttpServer((req, res) => {
      const url = new URL(req.url ?? "/", `http://127.0.0.1:${this.#port}`);
      const code = url.searchParams.get("code");
      res.writeHead(200, { "content-type": "text/plain" }).end(code ? "You can close this window." : "No code.");
      if (code) this.#resolveCode?.(code);
    });
  }

  async listen(): Promise<void> {
    await new Promise<void>((resolve) => this.callback.listen(0, "127.0.0.1", resolve));
    this.#port = (this.callback.address() as { port: number }).port;
  }

  /** The provider the SDK's transport calls. */
  provider() {
    const self = this;
    return {
      get redirectUrl() {
        return `http://127.0.0.1:${self.#port}/callback`;
      },
      get clientMetadata(): OAuthClientMetadata {
        return {
          client_name: "Desk Assistant",
          redirect_uris: [`http://127.0.0.1:${self.#port}/callback`],
          grant_types: ["authorization_code", "refresh_token"],
          response_types: ["code"],
          token_endpoint_auth_method: "none",
        };
      },
      clientInformation: () => self.#client,
      saveClientInformation: (info: OAuthClientInformationMixed) => {
        self.#client = info;
      },
      tokens: () => self.#tokens,
      saveTokens: (tokens: OAuthTokens) => {
        self.#tokens = tokens;
      },
      redirectToAuthorization: async (url: URL) => {
        self.authorizationUrls.push(url);
        self.#code = new Promise((resolve) => {
          self.#resolveCode = resolve;
        });
        await self.drive(url);
      },
      saveCodeVerifier: (verifier: string) => {
        self.#verifier = verifier;
      },
      codeVerifier: () => self.#verifier,
    };
  }

  code(): Promise<string> {
    if (this.#code === undefined) throw new Error("no authorization was started");
    return this.#code;
  }

  get tokens(): OAuthTokens | undefined {
    return this.#tokens;
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.callback.close(() => resolve()));
  }
}

const launched = await launchChromium([`--host-resolver-rules=MAP ${NOTES_HOST} 127.0.0.1`]);
if (launched.skip !== undefined) process.stdout.write(`# MCP end to end skipped: ${launched.skip}\n`);

for (const variant of VARIANTS) {
  describe(`MCP: the SDK's client reaches the notes service's tools through our attestor (${variant.name})`, {
    timeout: 180_000,
    skip: launched.skip,
  }, () => {
    const email = `mcp-${randomBytes(5).toString("hex")}@mail.test`;
    let temp: string;
    let smtp: SmtpCollector;
    let trust: Awaited<ReturnType<typeof buildTrustApp>>;
    let trustUrl: string;
    let notes: NotesService;
    let publicUrl: string;
    let mcpUrl: string;
    let fetch: TestFetch;
    let agent: Agent;
    const databases: TestDatabase[] = [];

    before(async () => {
      temp = mkdtempSync(join(tmpdir(), "proto-notes-mcp-"));
      const ca = await createTestCA();
      smtp = await startSmtpCollector();
      const notesPort = await freePort();
      publicUrl = `https://${NOTES_HOST}:${notesPort}`;
      mcpUrl = `${publicUrl}${MCP_PATH}`;

      const trustDb = await createTestDatabase(variant.postgres ? "postgres" : "sqlite", "mcp_trust");
      const notesDb = await createTestDatabase(variant.postgres ? "postgres" : "sqlite", "mcp_notes");
      databases.push(trustDb, notesDb);
      const trustPort = await freePort();
      trustUrl = `http://127.0.0.1:${trustPort}`;
      trust = await buildTrustApp(
        readTrustConfig({
          PROTO_TEST_HOOKS: "1",
          TRUST_PUBLIC_URL: trustUrl,
          TRUST_DATABASE_URL: trustDb.url,
          TRUST_KEY_ENCRYPTION_KEY: Buffer.alloc(32, 7).toString("base64url"),
          TRUST_PSEUDONYM_KEY: Buffer.alloc(32, 9).toString("base64url"),
          SMTP_URL: smtp.url,
          MAIL_FROM: "proto trust <signin@trust.test>",
          LOG_LEVEL: "warn",
          // The attestor reads the notes service's declared permissions (the scopes it may grant,
          // and how the consent page describes them) from its discovery document.
          PROTO_FETCH_ALLOW_PRIVATE: "1",
          PROTO_FETCH_RESOLVE: `${NOTES_HOST}:${notesPort}:127.0.0.1`,
          ...(variant.postgres && REDIS ? { REDIS_URL: REDIS } : {}),
        }),
        {
          logStream: quietStream(),
          redisPrefix: `proto:test:mcp:${randomBytes(4).toString("hex")}:`,
          fetchCa: ca.certPem,
        },
      );
      await trust.app.listen({ port: trustPort, host: "127.0.0.1" });

      const { certPem, keyPem } = await ca.issue([NOTES_HOST]);
      notes = await buildNotesService({
        publicUrl,
        database: notesDb.url,
        attestorUrl: trustUrl,
        proofDir: join(temp, "webroot"),
        https: { key: keyPem, cert: certPem },
        mail: { smtpUrl: smtp.url, from: "Notes <no-reply@notes.test>" },
      });
      await notes.app.listen({ port: notesPort, host: "127.0.0.1" });

      fetch = testFetch(ca, { resolve: `${NOTES_HOST}:${notesPort}:127.0.0.1` });
      agent = Agent.init({ home: join(temp, "agent-home"), fetch, attestorUrl: trustUrl }).agent;
      // The agent is linked to the same person who will use the desktop client.
      const request = await agent.attestor().linkStart({ label: "mcp agent" });
      const confirmed = await fetch(`${trustUrl}/__test/link/confirm`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ req_id: request.req_id, email }),
      });
      assert.equal(confirmed.status, 200);
      assert.equal((await agent.attestor().pollOnce(request.req_id)).state, "confirmed");
    });

    after(async () => {
      await notes?.close();
      await trust?.close();
      await smtp?.close();
      await fetch?.close();
      for (const db of databases) await db.drop();
      if (temp) rmSync(temp, { recursive: true, force: true });
    });

    test("the discovery document names the MCP endpoint; its metadata names our attestor", async () => {
      const discovery = (await (await fetch(`${publicUrl}/.well-known/proto`)).json()) as {
        mcp?: { url: string; resource_metadata: string };
      };
      assert.deepEqual(discovery.mcp, {
        url: mcpUrl,
        resource_metadata: `${publicUrl}/.well-known/oauth-protected-resource${MCP_PATH}`,
      });
      const metadata = (await (await fetch(discovery.mcp?.resource_metadata ?? "")).json()) as Record<string, unknown>;
      assert.equal(metadata.resource, mcpUrl);
      assert.deepEqual(metadata.authorization_servers, [trustUrl]);
      const refused = await fetch(mcpUrl, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: "{}",
      });
      assert.equal(refused.status, 401);
      assert.match(refused.headers.get("www-authenticate") ?? "", /Bearer .*resource_metadata=/);
      assert.match(refused.headers.get("www-authenticate") ?? "", /Proto /);
    });

    test("a page of another origin in Chromium: the preflight passes, the 401's challenge is readable, a token lists the tools", async () => {
      const browser = launched.browser;
      assert.ok(browser);
      // The agent's access token, as a browser-based MCP client would hold one.
      const provider = createMcpAuthProvider(agent);
      const client = new Client({ name: "token-holder", version: "1.0.0" });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: provider, fetch: provider.fetch }),
      );
      await client.close();
      const token = (await provider.tokens())?.access_token;
      assert.ok(token);
      // A plain page on a loopback origin of its own (no CSP of ours in the way).
      const elsewhere = createHttpServer((_req, res) =>
        res.writeHead(200, { "content-type": "text/html" }).end("<!doctype html><title>client</title>"),
      );
      await new Promise<void>((resolve) => elsewhere.listen(0, "127.0.0.1", resolve));
      const context = await browser.newContext({ ignoreHTTPSErrors: true });
      try {
        const page = await context.newPage();
        await page.goto(`http://127.0.0.1:${(elsewhere.address() as { port: number }).port}/`);
        const seen = await page.evaluate(
          async ({ url, token }) => {
            const initialize = JSON.stringify({
              jsonrpc: "2.0",
              id: 1,
              method: "initialize",
              params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "page", version: "1" } },
            });
            const headers = {
              "content-type": "application/json",
              accept: "application/json, text/event-stream",
              "mcp-protocol-version": "2025-06-18",
            };
            const refused = await fetch(url, { method: "POST", headers, body: initialize });
            const allowed = await fetch(url, {
              method: "POST",
              headers: { ...headers, authorization: `Bearer ${token}` },
              body: initialize,
            });
            return {
              refused: { status: refused.status, challenge: refused.headers.get("www-authenticate") },
              allowed: { status: allowed.status, body: await allowed.text() },
            };
          },
          { url: mcpUrl, token },
        );
        assert.equal(seen.refused.status, 401);
        assert.match(seen.refused.challenge ?? "", /^Bearer .*resource_metadata="[^"]+oauth-protected-resource\/mcp"/);
        assert.equal(seen.allowed.status, 200, seen.allowed.body);
        assert.match(seen.allowed.body, /"serverInfo"/);
      } finally {
        await context.close();
        await new Promise<void>((resolve) => elsewhere.close(() => resolve()));
      }
    });

    test("as a person (Chromium through sign-in and consent) and as the person's agent (JWT-bearer): the same subject, the same notes", async () => {
      const browser = launched.browser;
      assert.ok(browser);
      const context = await browser.newContext({ ignoreHTTPSErrors: false });
      const page: Page = await context.newPage();
      const desktop = new DesktopClient(async (url) => {
        // The person's browser, at the attestor: sign in by the mailed link, then allow the client.
        await page.goto(url.href);
        await page.waitForURL((u) => u.origin === trustUrl && u.pathname === "/signin");
        await page.getByLabel("E-mail address").fill(email);
        await page.getByRole("button", { name: "E-mail me a sign-in link" }).click();
        await page.getByRole("heading", { name: "Check your e-mail" }).waitFor();
        await page.goto(linkIn(await smtp.nextMailTo(email), "/signin/email/verify"));
        await page.getByRole("button", { name: "Sign in" }).click();
        await page.getByRole("heading", { name: /Let Desk Assistant use notes\.test/ }).waitFor();
        await lookAt(page, "mcp-consent");
        const text = (await page.locator("main").textContent()) ?? "";
        assert.match(text, /named itself/, "a self-registered client is said to be unchecked");
        assert.match(text, /this computer/, "a loopback redirect is pointed out");
        // The scope asked for (the resource's required one), in the notes service's own words.
        assert.match(text, /Read your notes/, "the service's description of notes:read");
        await page.getByRole("button", { name: "Allow" }).click();
        await page.waitForURL((u) => u.hostname === "127.0.0.1" && u.pathname === "/callback");
      });
      await desktop.listen();
      try {
        const transportFor = () =>
          new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: desktop.provider(), fetch });
        const first = new Client({ name: "desk-assistant", version: "1.0.0" });
        await assert.rejects(first.connect(transportFor()), UnauthorizedError, "the first connection needs the person");
        const pending = transportFor();
        await pending.finishAuth(await desktop.code());
        assert.equal(desktop.authorizationUrls.length, 1);
        const authorization = desktop.authorizationUrls[0];
        assert.equal(authorization?.searchParams.get("resource"), mcpUrl, "the SDK asked for this resource (RFC 8707)");
        assert.equal(authorization?.searchParams.get("code_challenge_method"), "S256");
        assert.ok(desktop.tokens?.refresh_token, "a refresh token for the desktop client");

        const person = new Client({ name: "desk-assistant", version: "1.0.0" });
        await person.connect(transportFor());
        const tools = (await person.listTools()).tools.map((t) => t.name).sort();
        assert.deepEqual(tools, ["add_note", "delete_note", "list_notes", "whoami"]);
        const personSeen = toolJson(await person.callTool({ name: "whoami", arguments: {} }));
        assert.equal(personSeen.kind, "person");
        assert.equal(personSeen.issuer, "proto-trust");
        assert.equal(typeof personSeen.subject, "string");
        await person.close();

        // The same person's agent, headless: the agent SDK's provider, the JWT-bearer grant.
        const headless = await connectMcp(agent, mcpUrl);
        assert.deepEqual((await headless.listTools()).tools.map((t) => t.name).sort(), tools);
        const agentSeen = toolJson(await headless.callTool({ name: "whoami", arguments: {} }));
        assert.equal(agentSeen.kind, "agent");
        assert.equal(agentSeen.agent_did, agent.did);
        assert.equal(agentSeen.subject, personSeen.subject, "one person, one subject, whichever way they come");
        const added = toolJson(await headless.callTool({ name: "add_note", arguments: { text: "from MCP" } }));
        assert.equal(added.text, "from MCP");
        const listed = toolJson(await headless.callTool({ name: "list_notes", arguments: {} }));
        assert.deepEqual(
          (listed.notes as { text: string }[]).map((n) => n.text),
          ["from MCP"],
        );
        // Deleting needs notes:delete, which the person has not granted this agent: the tool says
        // so, naming what to ask for and where.
        const refused = await headless.callTool({ name: "delete_note", arguments: { id: String(added.id) } });
        assert.equal(refused.isError, true);
        const envelope = toolJson(refused).error as { code: string; details: Record<string, unknown> };
        assert.equal(envelope.code, "insufficient_permission");
        assert.deepEqual(envelope.details.missing, ["notes:delete"]);
        assert.equal(envelope.details.attestor, trustUrl);
        await headless.close();

        // The person sees the agent's account (it acts for them) and its note.
        const again = new Client({ name: "desk-assistant", version: "1.0.0" });
        await again.connect(transportFor());
        const personNotes = toolJson(await again.callTool({ name: "list_notes", arguments: {} }));
        assert.deepEqual(
          (personNotes.notes as { text: string }[]).map((n) => n.text),
          ["from MCP"],
        );
        await again.close();
      } finally {
        await desktop.close();
        await context.close();
      }
    });
  });
}

after(async () => {
  await launched.browser?.close();
});
