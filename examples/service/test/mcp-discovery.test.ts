/**
 * An agent that knows only the notes service's URL finds its MCP endpoint: the kit writes it into
 * the discovery document (`mcp`, docs/discovery-mcp.md), the agent SDK exposes it, and
 * `proto mcp https://localhost:PORT list_notes` reads it from there. The notes service over real
 * HTTPS (test CA, trusted by the CLI through NODE_EXTRA_CA_CERTS), OUR attestor in process; on
 * SQLite, and on PostgreSQL + Redis when TEST_POSTGRES_URL and TEST_REDIS_URL are set.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { Agent, connectMcp, discoverService, findMcpEndpoint, ServiceClient } from "@proto/agent";
import { buildTrustApp, readTrustConfig } from "@proto/server";
import {
  createTestCA,
  createTestDatabase,
  freePort,
  quietStream,
  type TestDatabase,
  type TestFetch,
  testFetch,
} from "@proto/testkit";
import { buildNotesService, type NotesService } from "../src/app.js";

const POSTGRES = process.env.TEST_POSTGRES_URL;
const REDIS = process.env.TEST_REDIS_URL;
const VARIANTS = [
  { name: "SQLite", postgres: false },
  ...(POSTGRES && REDIS ? [{ name: "PostgreSQL + Redis", postgres: true }] : []),
];
if (!POSTGRES || !REDIS)
  process.stdout.write("# TEST_POSTGRES_URL or TEST_REDIS_URL not set: the PostgreSQL run is skipped\n");

const AGENT_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "../../../packages/agent");

/** `proto ...` as a person runs it: its own home, the test CA trusted through NODE_EXTRA_CA_CERTS. */
function proto(
  args: string[],
  env: { home: string; caFile: string },
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, PROTO_HOME: env.home, NODE_EXTRA_CA_CERTS: env.caFile };
  for (const name of ["PROTO_ATTESTOR_URL", "PROTO_DIRECTORY_URL", "NODE_TEST_CONTEXT", "NODE_OPTIONS"])
    delete childEnv[name];
  const child = spawn(
    process.execPath,
    ["--conditions=source", "--import", "tsx", join(AGENT_DIR, "src/cli.ts"), ...args],
    {
      cwd: AGENT_DIR,
      env: childEnv,
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  const output = { stdout: "", stderr: "" };
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    output.stdout += chunk;
  });
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
    output.stderr += chunk;
  });
  return new Promise((done) => child.once("close", (code) => done({ code, ...output })));
}

for (const variant of VARIANTS) {
  describe(`the notes service's MCP endpoint, found from its URL (${variant.name})`, { timeout: 120_000 }, () => {
    let temp: string;
    let trust: Awaited<ReturnType<typeof buildTrustApp>>;
    let notes: NotesService;
    let publicUrl: string;
    let caFile: string;
    let home: string;
    let fetch: TestFetch;
    let agent: Agent;
    const databases: TestDatabase[] = [];

    before(async () => {
      temp = mkdtempSync(join(tmpdir(), "proto-notes-mcp-discovery-"));
      const ca = await createTestCA();
      caFile = ca.writeCertFile(temp);
      const engine = variant.postgres ? "postgres" : "sqlite";
      const trustDb = await createTestDatabase(engine, "mcp_disc_trust");
      const notesDb = await createTestDatabase(engine, "mcp_disc_notes");
      databases.push(trustDb, notesDb);

      const trustPort = await freePort();
      const trustUrl = `http://127.0.0.1:${trustPort}`;
      trust = await buildTrustApp(
        readTrustConfig({
          PROTO_TEST_HOOKS: "1",
          TRUST_PUBLIC_URL: trustUrl,
          TRUST_DATABASE_URL: trustDb.url,
          TRUST_KEY_ENCRYPTION_KEY: Buffer.alloc(32, 7).toString("base64url"),
          TRUST_PSEUDONYM_KEY: Buffer.alloc(32, 9).toString("base64url"),
          LOG_LEVEL: "warn",
          // The attestor reads the notes service's declared permissions (the scopes it may grant)
          // from its discovery document, on this machine, over HTTPS with the test CA.
          PROTO_FETCH_ALLOW_PRIVATE: "1",
          ...(variant.postgres && REDIS ? { REDIS_URL: REDIS } : {}),
        }),
        {
          logStream: quietStream(),
          redisPrefix: `proto:test:mcpd:${randomBytes(4).toString("hex")}:`,
          fetchCa: ca.certPem,
        },
      );
      await trust.app.listen({ port: trustPort, host: "127.0.0.1" });

      // `localhost`, which the CLI resolves by itself; the service DID is its did:web.
      const notesPort = await freePort();
      publicUrl = `https://localhost:${notesPort}`;
      const { certPem, keyPem } = await ca.issue(["localhost"]);
      notes = await buildNotesService({
        publicUrl,
        database: notesDb.url,
        attestorUrl: trustUrl,
        https: { key: keyPem, cert: certPem },
        mail: { developmentOutbox: true },
      });
      await notes.app.listen({ port: notesPort, host: "127.0.0.1" });

      // The agent's home, linked once through the SDK; the CLI runs in the same home.
      fetch = testFetch(ca);
      home = join(temp, "agent-home");
      agent = Agent.init({ home, fetch, attestorUrl: trustUrl }).agent;
      const request = await agent.attestor().linkStart({ label: "mcp discovery" });
      const confirmed = await fetch(`${trustUrl}/__test/link/confirm`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ req_id: request.req_id, email: `mcpd-${randomBytes(4).toString("hex")}@mail.test` }),
      });
      assert.equal(confirmed.status, 200);
      assert.equal((await agent.attestor().pollOnce(request.req_id)).state, "confirmed");
    });

    after(async () => {
      await notes?.close();
      await trust?.close();
      await fetch?.close();
      for (const db of databases) await db.drop();
      if (temp) rmSync(temp, { recursive: true, force: true });
    });

    test("the SDK: discovery names the endpoint, ServiceClient.mcpEndpoint() and findMcpEndpoint give it", async () => {
      const mcpUrl = `${publicUrl}/mcp`;
      const discovery = await discoverService(publicUrl, { fetch });
      assert.deepEqual(discovery.mcp, {
        url: mcpUrl,
        resourceMetadata: `${publicUrl}/.well-known/oauth-protected-resource/mcp`,
      });
      const service = await ServiceClient.connect(publicUrl, { fetch, identity: agent.identity });
      assert.equal(service.mcpEndpoint(), mcpUrl);
      assert.deepEqual(await findMcpEndpoint(publicUrl, { fetch }), { url: mcpUrl, from: "discovery" });
      assert.deepEqual(await findMcpEndpoint(`${publicUrl}/.well-known/proto`, { fetch }), {
        url: mcpUrl,
        from: "discovery",
      });
      // A URL with a path is the endpoint itself, as MCP clients take it.
      assert.deepEqual(await findMcpEndpoint(mcpUrl, { fetch }), { url: mcpUrl, from: "given" });

      const client = await connectMcp(agent, service.mcpEndpoint());
      try {
        const { tools } = await client.listTools();
        assert.ok(
          tools.some((tool) => tool.name === "list_notes"),
          JSON.stringify(tools),
        );
      } finally {
        await client.close();
      }
    });

    test("proto mcp with the service's URL: the tools of the endpoint its discovery document names", async () => {
      const listed = await proto(["mcp", publicUrl], { home, caFile });
      assert.equal(listed.code, 0, listed.stderr);
      assert.match(listed.stdout, /^TOOL +DESCRIPTION\n/);
      assert.match(listed.stdout, /\nlist_notes +The newest notes/);
      assert.equal(listed.stderr, `Call one with: proto mcp ${publicUrl} TOOL '{"name": "value"}'\n`);

      const added = await proto(["mcp", publicUrl, "add_note", '{"text": "Found without guessing /mcp"}'], {
        home,
        caFile,
      });
      assert.equal(added.code, 0, added.stderr);
      const called = await proto(["mcp", publicUrl, "list_notes", "--json"], { home, caFile });
      assert.equal(called.code, 0, called.stderr);
      const result = JSON.parse(called.stdout) as { content: { type: string; text: string }[] };
      const listedNotes = JSON.parse(result.content[0]?.text ?? "{}") as { notes: { text: string }[] };
      assert.deepEqual(
        listedNotes.notes.map((note) => note.text),
        ["Found without guessing /mcp"],
      );
    });
  });
}
