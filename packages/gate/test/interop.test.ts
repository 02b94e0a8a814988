/**
 * Issue 40, proto-gate with code from the other side of the protocol:
 *
 * - MCP: the MCP SDK's server, behind a gate whose `mcp:` path (/mcp) is an OAuth protected
 *   resource of OUR attestor, reached by the MCP SDK's client with a bearer token from that
 *   attestor: an agent's (the agent SDK's JWT-bearer provider) and a person's (the OAuth flow, the
 *   person signing in at the attestor and allowing the client). The server trusts the gate and
 *   answers the `Proto-Gate-*` headers it received.
 * - Conformance: `proto-conformance service`, run as a user runs it, against a gate in front of the
 *   Python standard-library app (test/support/echo_app.py).
 * - Web Bot Auth: an operator signing with Cloudflare's npm `web-bot-auth`, its key directory on
 *   its own HTTPS host, recognised by a gate in front of the Python app as a signed agent.
 *
 * Each gate serves HTTPS itself (a test CA made here) and is started from its proto-gate.yaml.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { Agent, connectMcp, discoverService, type ServiceClient } from "@proto/agent";
import { parseResolveOverrides } from "@proto/protocol";
import { createTestCA, freePort, type TestCA, type TestFetch, testFetch } from "@proto/testkit";
import { type EchoApp, startEchoApp } from "./support/echo-app.js";
import {
  type Attestor,
  type McpApp,
  PersonClient,
  type RunningGate,
  startAttestor,
  startGate,
  startMcpApp,
  startWebBotAuthOperator,
  type WebBotAuthOperator,
} from "./support/interop-stack.js";

const MCP_HOST = "gate.test";
/** The gate in front of the Python app that Web Bot Auth callers reach, and their operator's host. */
const WBA_HOST = "wba.test";
const AGENTS_HOST = "agents.test";
const CONFORMANCE_DIR = fileURLToPath(new URL("../../conformance/", import.meta.url));
/** `proto-conformance` from source (bin/proto-conformance.js runs its compiled form), as its own tests run it. */
const CONFORMANCE_CLI = join(CONFORMANCE_DIR, "src/cli.ts");

/** What the MCP app's `whoami` tool answers. */
interface Seen {
  identity: Record<string, string>;
  authorization: boolean;
}

function seenIn(result: Awaited<ReturnType<Client["callTool"]>>): Seen {
  const content = result.content as { type: string; text: string }[];
  assert.equal(content[0]?.type, "text", JSON.stringify(result));
  return JSON.parse(content[0]?.text ?? "null") as Seen;
}

/** The gate's file in front of the MCP app: /mcp protected by our attestor, scope notes:read. */
function mcpGateYaml(publicUrl: string, appPort: number, trustUrl: string): string {
  const url = new URL(publicUrl);
  return `service:
  did: did:web:${url.hostname}%3A${url.port}
  name: Interop MCP
  public_url: ${publicUrl}
  unclaimed_mode: free
upstream:
  url: http://127.0.0.1:${appPort}
attestors:
  proto-trust:
    url: ${trustUrl}
store:
  database: sqlite:./gate.db
permissions:
  notes:read:
    description: Read your notes
    default: true
routes:
  - path: /
    access: agents
mcp:
  - path: /mcp
    scopes: [notes:read]
log_level: warn
`;
}

/**
 * The gate's file in front of the Python app, for the conformance run: attested_only (the agent
 * probes' own keys can create nothing), and a route needing a permission no agent holds unless its
 * person approves it (the authority probe calls it).
 */
function conformanceGateYaml(publicUrl: string, appPort: number, trustUrl: string): string {
  const url = new URL(publicUrl);
  return `service:
  did: did:web:${url.hostname}%3A${url.port}
  name: Echo
  public_url: ${publicUrl}
  unclaimed_mode: attested_only
upstream:
  url: http://127.0.0.1:${appPort}
attestors:
  proto-trust:
    url: ${trustUrl}
store:
  database: sqlite:./gate.db
permissions:
  notes:read:
    description: Read your notes
    default: true
  notes:delete:
    description: Delete your notes
routes:
  - path: /notes/
    methods: [DELETE]
    access: agents
    permissions: [notes:delete]
  - path: /
    access: agents
log_level: warn
`;
}

/**
 * The gate's file for Web Bot Auth callers, in front of the Python app: /open/ optional (a signed
 * agent passes as itself), the rest for agents with an account.
 */
function webBotAuthGateYaml(publicUrl: string, appPort: number, trustUrl: string): string {
  const url = new URL(publicUrl);
  return `service:
  did: did:web:${url.hostname}%3A${url.port}
  name: Web Bot Auth
  public_url: ${publicUrl}
  unclaimed_mode: free
upstream:
  url: http://127.0.0.1:${appPort}
attestors:
  proto-trust:
    url: ${trustUrl}
store:
  database: sqlite:./gate.db
routes:
  - path: /open/
    access: optional
  - path: /
    access: agents
log_level: warn
`;
}

/** What the Python app echoes: the request it received, with its Proto-Gate-* and X-Forwarded-* headers. */
interface Echoed {
  method: string;
  path: string;
  headers: Record<string, string>;
}

interface ConformanceReport {
  summary: { passed: number; failed: number; skipped: number };
  results: { id: string; status: string; message: string }[];
}

/** `proto-conformance ARGS --json` as a user runs it, trusting the test CA; killed if it wedges. */
function conformance(args: string[], caFile: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const env: NodeJS.ProcessEnv = { ...process.env, NODE_EXTRA_CA_CERTS: caFile };
  for (const name of ["NODE_TEST_CONTEXT", "NODE_OPTIONS"]) delete env[name];
  const child = spawn(process.execPath, ["--conditions=source", "--import", "tsx", CONFORMANCE_CLI, ...args], {
    cwd: CONFORMANCE_DIR,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const output = { stdout: "", stderr: "" };
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    output.stdout += chunk;
  });
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
    output.stderr += chunk;
  });
  const killer = setTimeout(() => child.kill("SIGKILL"), 120_000);
  return new Promise((resolve) => {
    child.once("close", (code) => {
      clearTimeout(killer);
      resolve({ code, ...output });
    });
  });
}

describe("proto-gate with the other side's code", { timeout: 240_000 }, () => {
  const email = `person-${randomBytes(4).toString("hex")}@mail.test`;
  let temp: string;
  let ca: TestCA;
  let caFile: string;
  let attestor: Attestor;
  let mcpApp: McpApp;
  let echoApp: EchoApp;
  const gates: RunningGate[] = [];
  let mcpUrl: string;
  let mcpPublicUrl: string;
  let echoPublicUrl: string;
  let wbaPublicUrl: string;
  let operator: WebBotAuthOperator;
  let fetch: TestFetch;
  let agent: Agent;

  before(async () => {
    temp = mkdtempSync(join(tmpdir(), "proto-gate-interop-"));
    ca = await createTestCA();
    caFile = ca.writeCertFile(temp);
    const mcpGatePort = await freePort();
    const echoGatePort = await freePort();
    const wbaGatePort = await freePort();
    mcpPublicUrl = `https://${MCP_HOST}:${mcpGatePort}`;
    mcpUrl = `${mcpPublicUrl}/mcp`;
    // `localhost`, which the conformance command, a child process, resolves by itself.
    echoPublicUrl = `https://localhost:${echoGatePort}`;
    wbaPublicUrl = `https://${WBA_HOST}:${wbaGatePort}`;
    attestor = await startAttestor({
      dir: temp,
      caPem: ca.certPem,
      resolve: [`${MCP_HOST}:${mcpGatePort}:127.0.0.1`, `localhost:${echoGatePort}:127.0.0.1`],
    });

    mcpApp = await startMcpApp(await freePort());
    echoApp = await startEchoApp(await freePort());
    const mcpDir = join(temp, "mcp-gate");
    const echoDir = join(temp, "echo-gate");
    const wbaDir = join(temp, "wba-gate");
    mkdirSync(mcpDir);
    mkdirSync(echoDir);
    mkdirSync(wbaDir);
    const mcpCert = await ca.issue([MCP_HOST]);
    gates.push(
      await startGate(mcpDir, mcpGateYaml(mcpPublicUrl, mcpApp.port, attestor.url), mcpGatePort, {
        cert: mcpCert.certPem,
        key: mcpCert.keyPem,
      }),
    );
    const echoCert = await ca.issue(["localhost"]);
    gates.push(
      await startGate(echoDir, conformanceGateYaml(echoPublicUrl, echoApp.port, attestor.url), echoGatePort, {
        cert: echoCert.certPem,
        key: echoCert.keyPem,
      }),
    );

    operator = await startWebBotAuthOperator(ca, AGENTS_HOST);
    const wbaCert = await ca.issue([WBA_HOST]);
    gates.push(
      await startGate(
        wbaDir,
        webBotAuthGateYaml(wbaPublicUrl, echoApp.port, attestor.url),
        wbaGatePort,
        { cert: wbaCert.certPem, key: wbaCert.keyPem },
        // Key directories through the kit's own SSRF-safe fetch, let reach the operator's host.
        {
          webBotAuth: {
            fetch: {
              allowPrivate: true,
              resolve: parseResolveOverrides(operator.host.resolveEntries()),
              ca: ca.certPem,
            },
          },
        },
      ),
    );

    fetch = testFetch(ca, {
      resolve: `${MCP_HOST}:${mcpGatePort}:127.0.0.1,${WBA_HOST}:${wbaGatePort}:127.0.0.1`,
    });
    agent = Agent.init({ home: join(temp, "agent-home"), fetch, attestorUrl: attestor.url }).agent;
    const request = await agent.attestor().linkStart({ label: "gate interop agent" });
    const confirmed = await attestor.hook("/__test/link/confirm", { req_id: request.req_id, email });
    assert.equal(confirmed.status, 200, JSON.stringify(confirmed.json));
    assert.equal((await agent.attestor().pollOnce(request.req_id)).state, "confirmed");
  });

  after(async () => {
    for (const gate of gates) await gate.close();
    await mcpApp?.stop();
    await echoApp?.stop();
    await operator?.close();
    await attestor?.close();
    await fetch?.close();
    if (temp) rmSync(temp, { recursive: true, force: true });
  });

  describe("MCP: the SDK's server behind the gate, the SDK's client with a token from our attestor", () => {
    /** The agent's person's pairwise subject at the MCP resource, as the gate forwarded it. */
    let agentPersonSubject: string | undefined;

    test("the gate names /mcp in its discovery document and serves its RFC 9728 metadata; no token is a Bearer challenge", async () => {
      const discovery = await discoverService(mcpPublicUrl, { fetch });
      assert.deepEqual(discovery.mcp, {
        url: mcpUrl,
        resourceMetadata: `${mcpPublicUrl}/.well-known/oauth-protected-resource/mcp`,
      });
      const metadata = await fetch(`${mcpPublicUrl}/.well-known/oauth-protected-resource/mcp`);
      assert.equal(metadata.status, 200);
      const document = (await metadata.json()) as Record<string, unknown>;
      assert.equal(document.resource, mcpUrl);
      assert.deepEqual(document.authorization_servers, [attestor.url]);
      assert.deepEqual(document.scopes_supported, ["notes:read"]);

      const refused = await fetch(mcpUrl, {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
      });
      assert.equal(refused.status, 401);
      const challenge = refused.headers.get("www-authenticate") ?? "";
      assert.match(challenge, /Bearer .*resource_metadata="[^"]+\/\.well-known\/oauth-protected-resource\/mcp"/);
      assert.match(challenge, /scope="notes:read"/);
    });

    test("an agent (JWT-bearer grant): lists and calls the tool; the app sees the agent, its account and its permissions", async () => {
      const client = await connectMcp(agent, mcpUrl);
      let seen: Seen;
      try {
        const { tools } = await client.listTools();
        assert.deepEqual(
          tools.map((tool) => tool.name),
          ["whoami"],
        );
        seen = seenIn(await client.callTool({ name: "whoami", arguments: {} }));
      } finally {
        await client.close();
      }
      const { identity } = seen;
      assert.equal(seen.authorization, false, "the bearer token is the gate's resource's, not passed through");
      assert.equal(identity["proto-gate-caller"], "agent");
      assert.equal(identity["proto-gate-via"], "bearer");
      assert.equal(identity["proto-gate-agent-did"], agent.did);
      assert.equal(identity["proto-gate-attestor"], "proto-trust");
      assert.equal(identity["proto-gate-permissions"], "notes:read");
      assert.equal(identity["proto-gate-account-state"], "UNCLAIMED");
      assert.match(identity["proto-gate-person-subject"] ?? "", /\S/);
      agentPersonSubject = identity["proto-gate-person-subject"];

      // The account its bearer token reached is the one its signed requests reach.
      const service: ServiceClient = await agent.service(mcpPublicUrl);
      const me = await service.fetch(service.endpoint("accounts", "/me"));
      assert.equal(me.status, 200, await me.clone().text());
      assert.equal(((await me.json()) as { account_id: string }).account_id, identity["proto-gate-account"]);
    });

    test("a person's client (the OAuth flow, sign-in and consent at our attestor): the app sees the person, the same subject", async () => {
      const person = new PersonClient(attestor, email);
      const transport = () =>
        new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: person.provider(), fetch });
      const first = new Client({ name: "desk-assistant", version: "1.0.0" });
      await assert.rejects(first.connect(transport()), UnauthorizedError, "the first connection needs the person");
      await transport().finishAuth(person.code());
      assert.equal(person.authorizations.length, 1);
      assert.equal(person.authorizations[0]?.searchParams.get("resource"), mcpUrl);

      const client = new Client({ name: "desk-assistant", version: "1.0.0" });
      await client.connect(transport());
      let seen: Seen;
      try {
        seen = seenIn(await client.callTool({ name: "whoami", arguments: {} }));
      } finally {
        await client.close();
      }
      const { identity } = seen;
      assert.equal(seen.authorization, false, "the bearer token is the gate's resource's, not passed through");
      assert.equal(identity["proto-gate-caller"], "person");
      assert.equal(identity["proto-gate-via"], "bearer");
      assert.equal(identity["proto-gate-attestor"], "proto-trust");
      assert.equal(identity["proto-gate-permissions"], "notes:read");
      assert.equal(identity["proto-gate-account"], undefined);
      assert.equal(identity["proto-gate-agent-did"], undefined);
      // The agent of the previous test acts for this same person: one pairwise subject here.
      assert.ok(agentPersonSubject !== undefined, "the agent's test ran first");
      assert.equal(identity["proto-gate-person-subject"], agentPersonSubject);
    });
  });

  describe("Web Bot Auth: an operator signing with web-bot-auth, the gate in front of the Python app", () => {
    test("an optional route: the app sees a signed agent, named by its key and its key directory", async () => {
      const url = `${wbaPublicUrl}/open/page`;
      const response = await fetch(url, { headers: await operator.sign("GET", url) });
      const text = await response.text();
      assert.equal(response.status, 200, text);
      assert.equal(response.headers.get("x-echo-app"), "python");
      const echoed = JSON.parse(text) as Echoed;
      assert.equal(echoed.path, "/open/page");
      assert.equal(echoed.headers["proto-gate-caller"], "signed-agent");
      assert.equal(echoed.headers["proto-gate-via"], "web-bot-auth");
      assert.equal(echoed.headers["proto-gate-signature-agent"], operator.directory);
      assert.equal(echoed.headers["proto-gate-agent-did"], operator.did);
      // A signed agent has no account here.
      assert.equal(echoed.headers["proto-gate-account"], undefined);
      // The gate fetched the directory the request named, by that name.
      const fetched = operator.host.requests.filter((r) => r.path === new URL(operator.directory).pathname);
      assert.equal(fetched.length, 1);
      assert.equal(fetched[0]?.servername, AGENTS_HOST);
    });

    test("an agents route, no attestation: refused with 403 kit_signature_required and Accept-Signature, never forwarded", async () => {
      const url = `${wbaPublicUrl}/notes`;
      const response = await fetch(url, { headers: await operator.sign("GET", url) });
      const text = await response.text();
      assert.equal(response.status, 403, text);
      assert.equal(response.headers.get("x-echo-app"), null);
      const body = JSON.parse(text) as { error: { code: string; message: string } };
      assert.equal(body.error.code, "kit_signature_required", text);
      const accept = response.headers.get("accept-signature") ?? "";
      assert.match(accept, /(^|, )web-bot-auth=\(/, accept);
      assert.match(accept, /"signature-agent"/, accept);
    });
  });

  describe("conformance: proto-conformance service against the gate in front of the Python app", () => {
    test("every probe passes, with --write, a linked agent and the route that needs notes:delete", async () => {
      const keyFile = join(temp, "conformance-agent.pem");
      writeFileSync(keyFile, (await attestor.linkKey(`conformance-${randomBytes(3).toString("hex")}@mail.test`)).pem);
      const run = await conformance(
        [
          "service",
          echoPublicUrl,
          "--write",
          "--agent-key",
          keyFile,
          "--attestor",
          attestor.url,
          "--permission-route",
          "DELETE /notes/x notes:delete",
          "--json",
        ],
        caFile,
      );
      assert.equal(run.stderr, "");
      const report = JSON.parse(run.stdout) as ConformanceReport;
      assert.deepEqual(
        report.results.filter((r) => r.status !== "pass").map((r) => `${r.id}: ${r.status}: ${r.message}`),
        [],
        run.stdout,
      );
      assert.equal(report.summary.failed, 0);
      assert.ok(report.summary.passed > 0);
      assert.equal(run.code, 0);
    });
  });
});
