/**
 * The agent as an MCP client: the MCP SDK's `Client` and `StreamableHTTPClientTransport` with the
 * agent's auth provider (JWT-bearer grant signed by the agent's key), against real attestors and
 * an MCP server built with the SDK that verifies the access tokens against the attestor's keys;
 * and `proto mcp` as a child process.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { createTestCA, type TestCA, type TestFetch, testFetch } from "@proto/testkit";
import { subjectOf } from "../src/cli/documents.js";
import {
  Agent,
  AgentError,
  AttestorError,
  AuthError,
  connectMcp,
  createMcpAuthProvider,
  type FetchFunction,
  NetworkError,
} from "../src/index.js";
import { type Attestor, type CliResult, closedPort, jsonOf, runCli, startAttestor, tempHome } from "./support/env.js";
import { startMcpServer, type TestMcpServer } from "./support/mcp-server.js";

function rejectsWith(code: string, type: new (...args: never[]) => AgentError = AgentError) {
  return (error: unknown) => {
    assert.ok(error instanceof type, `expected ${type.name}, got ${String(error)}`);
    assert.equal((error as AgentError).code, code, (error as Error).message);
    return true;
  };
}

/** One line on stderr in the CLI's format, with this code and exit code, and no stack trace. */
function oneLineError(result: CliResult, exitCode: number, code: string): string {
  assert.equal(result.code, exitCode, `exit code\nstdout: ${result.stdout}\nstderr: ${result.stderr}`);
  const lines = result.stderr.split("\n").filter((line) => line !== "");
  assert.equal(lines.length, 1, `one stderr line expected, got:\n${result.stderr}`);
  assert.match(lines[0] ?? "", new RegExp(`^proto: ${code}: \\S`));
  assert.doesNotMatch(result.stderr, /\n\s+at /, "no stack trace");
  return lines[0] ?? "";
}

const textOf = (result: Awaited<ReturnType<Client["callTool"]>>) =>
  (Array.isArray(result.content) ? result.content : []).map((block) => (block.type === "text" ? block.text : ""));

describe("MCP with the agent's key (JWT-bearer grant)", () => {
  let ca: TestCA;
  let caFile: string;
  let dir: string;
  let attestor: Attestor;
  /** An attestor the linked agents are not linked with. */
  let other: Attestor;
  let mcp: TestMcpServer;
  let baseFetch: TestFetch;
  /** Every token request the in-process agents sent. */
  const tokenRequests: string[] = [];
  const fetch: FetchFunction = (input, init) => {
    const url = input instanceof Request ? input.url : String(input);
    if (url.endsWith("/oidc/token")) tokenRequests.push(url);
    return baseFetch(input as string, init as Parameters<TestFetch>[1]) as unknown as Promise<Response>;
  };
  const newAgent = (home = tempHome()) => Agent.init({ home, fetch }).agent;

  /** Links the agent at the attestor: the person confirms (test hook), one poll delivers the binding. */
  async function link(agent: Agent, at: Attestor, email: string): Promise<string> {
    const client = agent.attestor(at.url);
    const request = await client.linkStart({ label: "mcp test" });
    const confirmed = await at.hook("/__test/link/confirm", { req_id: request.req_id, email });
    assert.equal(confirmed.status, 200);
    assert.equal((await client.pollOnce(request.req_id)).state, "confirmed");
    return String(confirmed.json.binding_id);
  }

  let linked: Agent;

  before(async () => {
    ca = await createTestCA();
    caFile = ca.writeCertFile();
    dir = mkdtempSync(join(tmpdir(), "proto-mcp-test-"));
    attestor = await startAttestor(ca, dir);
    other = await startAttestor(ca, dir);
    baseFetch = testFetch(ca);
    mcp = await startMcpServer(ca, [attestor.url, other.url]);
    linked = newAgent();
    await link(linked, attestor, "dana@example.com");
  });
  after(async () => {
    await mcp.close();
    await attestor.close();
    await other.close();
    await baseFetch.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const reset = (authorizationServers: string[]) => {
    mcp.authorizationServers = authorizationServers;
    mcp.serveMetadata = true;
    mcp.refuseTokens = false;
    mcp.accepted.length = 0;
    tokenRequests.length = 0;
  };

  test("the SDK's Client and transport with the agent's provider: tools listed and called, one token for all", async () => {
    reset([attestor.url]);
    const provider = createMcpAuthProvider(linked);
    const transport = new StreamableHTTPClientTransport(new URL(mcp.url), {
      authProvider: provider,
      fetch: provider.fetch,
    });
    const client = new Client({ name: "test", version: "1.0.0" });
    await client.connect(transport);
    try {
      const { tools } = await client.listTools();
      assert.deepEqual(tools.map((t) => t.name).sort(), ["echo", "fail", "whoami"]);
      assert.deepEqual(textOf(await client.callTool({ name: "echo", arguments: { text: "hello" } })), ["hello"]);

      // The tool sees the person's pseudonym for this server's host (the sub_h the same attestor
      // puts in attestations for did:web of that host) and the agent acting for them.
      const who = JSON.parse(textOf(await client.callTool({ name: "whoami" }))[0] ?? "{}");
      const audience = `did:web:${new URL(mcp.url).host.replace(":", "%3A")}`;
      const attestation = await linked.attestor(attestor.url).token(audience);
      assert.deepEqual(who, {
        sub: subjectOf(attestation.jwt),
        act_sub: linked.did,
        client_id: linked.did,
        scope: "tools",
      });
      assert.notEqual(who.sub, linked.did);

      // One token request; every request after the first 401 carried the same cached token.
      assert.deepEqual(tokenRequests, [`${attestor.url}/oidc/token`]);
      assert.ok(mcp.accepted.length >= 4);
      assert.equal(new Set(mcp.accepted.map((claims) => claims.jti)).size, 1);
      assert.equal(mcp.accepted[0]?.iss, attestor.url);
      assert.equal(mcp.accepted[0]?.aud, mcp.url);
    } finally {
      await client.close();
    }
  });

  test("connectMcp: a token about to expire is not sent; the server's 401 brings a new one", async () => {
    reset([attestor.url]);
    let offset = 0;
    const client = await connectMcp(linked, mcp.url, { now: () => Date.now() + offset });
    try {
      assert.deepEqual(textOf(await client.callTool({ name: "echo", arguments: { text: "one" } })), ["one"]);
      assert.equal(tokenRequests.length, 1);
      // Ten minutes to live, renewed in the last minute.
      offset = 541_000;
      assert.deepEqual(textOf(await client.callTool({ name: "echo", arguments: { text: "two" } })), ["two"]);
      assert.equal(tokenRequests.length, 2);
      assert.equal(new Set(mcp.accepted.map((claims) => claims.jti)).size, 2);
    } finally {
      await client.close();
    }
  });

  test("an agent linked with no attestor: a clear error, and no token request", async () => {
    reset([attestor.url]);
    const unlinked = newAgent();
    await assert.rejects(connectMcp(unlinked, mcp.url), (error: unknown) => {
      rejectsWith("not_linked", AuthError)(error);
      assert.equal(
        (error as Error).message,
        `this agent is linked with no attestor; the MCP server ${mcp.url} accepts tokens from ${attestor.url}: run \`proto trust link --attestor ${attestor.url}\``,
      );
      return true;
    });
    assert.deepEqual(tokenRequests, []);
  });

  test("an attestor the agent is not linked with is refused; of several listed, the linked one is used", async () => {
    reset([other.url]);
    await assert.rejects(connectMcp(linked, mcp.url), (error: unknown) => {
      rejectsWith("attestor_not_accepted", AuthError)(error);
      assert.equal(
        (error as Error).message,
        `the MCP server ${mcp.url} accepts tokens from ${other.url}; this agent's attestors: ${attestor.url}. Link one it accepts with \`proto trust link --attestor URL\``,
      );
      return true;
    });
    assert.deepEqual(tokenRequests, [], "nothing signed for an attestor the agent is not linked with");

    // The SDK takes the first attestor listed; the provider has it retry with the linked one.
    reset([other.url, attestor.url]);
    const client = await connectMcp(linked, mcp.url);
    try {
      assert.deepEqual(textOf(await client.callTool({ name: "echo", arguments: { text: "via the second" } })), [
        "via the second",
      ]);
    } finally {
      await client.close();
    }
    assert.deepEqual(tokenRequests, [`${attestor.url}/oidc/token`]);
    assert.equal(mcp.accepted[0]?.iss, attestor.url);

    // An explicit attestor the agent is not linked with.
    await assert.rejects(connectMcp(linked, mcp.url, { attestor: other.url }), rejectsWith("not_linked", AuthError));
  });

  test("a server with no protected resource metadata is not one an attestor vouches for", async () => {
    reset([attestor.url]);
    mcp.serveMetadata = false;
    await assert.rejects(connectMcp(linked, mcp.url), (error: unknown) => {
      rejectsWith("not_protected_by_attestor")(error);
      assert.equal((error as AgentError).kind, "incompatible");
      return true;
    });
    assert.deepEqual(tokenRequests, []);
  });

  test("a server that refuses the attestor's token, a server nobody answers at: one-line errors", async () => {
    reset([attestor.url]);
    mcp.refuseTokens = true;
    await assert.rejects(connectMcp(linked, mcp.url), (error: unknown) => {
      rejectsWith("token_refused", AuthError)(error);
      assert.equal(
        (error as Error).message,
        `${mcp.url} refused the access token from this agent's attestor (HTTP 401): it may not trust that attestor`,
      );
      return true;
    });
    assert.equal(tokenRequests.length, 1, "one new token, then no loop");

    const port = await closedPort();
    await assert.rejects(connectMcp(linked, `https://127.0.0.1:${port}/mcp`), (error: unknown) => {
      rejectsWith("unreachable", NetworkError)(error);
      assert.equal((error as Error).message, `cannot reach https://127.0.0.1:${port}: connection refused`);
      return true;
    });
  });

  test("a binding the person revoked: the attestor's refusal as binding_revoked, recorded in the home", async () => {
    reset([attestor.url]);
    const agent = newAgent();
    const bindingId = await link(agent, attestor, "erin@example.com");
    assert.equal((await attestor.hook("/__test/bindings/revoke", { binding_id: bindingId })).status, 200);
    await assert.rejects(connectMcp(agent, mcp.url), (error: unknown) => {
      rejectsWith("binding_revoked", AttestorError)(error);
      assert.equal((error as AttestorError).status, 400);
      assert.match((error as Error).message, new RegExp(`^${attestor.url} refused the token: `));
      return true;
    });
    assert.equal(tokenRequests.length, 1, "the refusal is final: no second assertion");
    assert.equal(agent.store.getBinding(attestor.url, agent.did)?.state, "revoked");
    // From then on the agent knows without asking.
    await assert.rejects(connectMcp(agent, mcp.url), rejectsWith("binding_revoked", AuthError));
    assert.equal(tokenRequests.length, 1);
  });

  describe("proto mcp", () => {
    let home: string;
    const cli = (...args: string[]) => runCli(["mcp", ...args], { home, caFile });

    before(async () => {
      home = tempHome();
      await link(newAgent(home), attestor, "dana@example.com");
    });

    test("lists the tools: a table of names and descriptions", async () => {
      reset([attestor.url]);
      const result = await cli(mcp.url);
      assert.equal(result.code, 0, result.stderr);
      assert.deepEqual(result.stdout.split("\n"), [
        "TOOL    DESCRIPTION",
        "echo    Repeats the text it is given",
        "whoami  Who calls: the person's pseudonym and the agent acting for them",
        "fail    Always answers with an error",
        "",
      ]);
      assert.equal(result.stderr, `Call one with: proto mcp ${mcp.url} TOOL '{"name": "value"}'\n`);

      const json = jsonOf(await cli(mcp.url, "--json"));
      assert.equal(json.url, mcp.url);
      assert.deepEqual(json.server, { name: "test-mcp", version: "1.0.0" });
      assert.deepEqual(json.tools[0].inputSchema.required, ["text"]);
    });

    test("calls a tool: its text as text; --json prints the result as the server sent it", async () => {
      reset([attestor.url]);
      const result = await cli(mcp.url, "echo", '{"text": "hello from the CLI"}');
      assert.equal(result.code, 0, result.stderr);
      assert.equal(result.stdout, "hello from the CLI\n");
      assert.equal(result.stderr, "");

      const json = jsonOf(await cli(mcp.url, "whoami", "--json"));
      assert.equal(json.content[0].type, "text");
      assert.equal(
        JSON.parse(json.content[0].text).act_sub,
        jsonOf(await runCli(["whoami", "--json"], { home, caFile })).did,
      );

      const failed = await cli(mcp.url, "fail");
      assert.equal(failed.code, 1);
      assert.equal(failed.stdout, "this tool always fails\n");
      assert.equal(failed.stderr, "proto: tool_error: the tool fail answered with an error\n");
    });

    test("errors: an unknown tool, arguments that are not a JSON object, no link, an attestor not accepted", async () => {
      reset([attestor.url]);
      assert.equal(
        oneLineError(await cli(mcp.url, "nope"), 2, "unknown_tool"),
        `proto: unknown_tool: ${mcp.url} has no tool "nope"; its tools: echo, whoami, fail`,
      );
      assert.match(oneLineError(await cli(mcp.url, "echo", "{text: 1}"), 2, "invalid_json"), /are not JSON: /);
      assert.equal(
        oneLineError(await cli(mcp.url, "echo", '["hello"]'), 2, "invalid_json"),
        `proto: invalid_json: the tool's arguments must be a JSON object, like '{"text": "hello"}'`,
      );
      assert.equal(jsonOf(await cli(mcp.url, "echo", "nope", "--json")).error.code, "invalid_json");

      const unlinkedHome = tempHome();
      assert.equal((await runCli(["init"], { home: unlinkedHome, caFile })).code, 0);
      const unlinked = await runCli(["mcp", mcp.url], { home: unlinkedHome, caFile });
      assert.equal(
        oneLineError(unlinked, 4, "not_linked"),
        `proto: not_linked: this agent is linked with no attestor; the MCP server ${mcp.url} accepts tokens from ${attestor.url}: run \`proto trust link --attestor ${attestor.url}\``,
      );

      reset([other.url]);
      assert.match(
        oneLineError(await cli(mcp.url), 4, "attestor_not_accepted"),
        new RegExp(`accepts tokens from ${other.url}; this agent's attestors: ${attestor.url}\\.`),
      );
      assert.equal(oneLineError(await cli("http://mcp.example/mcp"), 2, "insecure_url").length > 0, true);
    });
  });
});
