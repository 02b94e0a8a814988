/**
 * What servers write cannot drive the user's terminal: `proto` run as a child process against a
 * hostile MCP server (the MCP SDK's, behind a real attestor's tokens), a hostile directory and a
 * hostile service (testkit HTTPS hosts), whose names, titles, tags, bodies and errors carry OSC 52
 * (clipboard), OSC 8 (disguised links), CSI 2J (clear screen), cursor moves, a C1 CSI and bidi
 * overrides. The human output shows each as a visible escape; `--json` keeps the strings as sent.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { createTestCA, type HttpsHost, startHttpsHost, type TestCA, testFetch } from "@proto/testkit";
import { Agent, type FetchFunction } from "../src/index.js";
import { type Attestor, type CliResult, jsonOf, runCli, startAttestor, tempHome } from "./support/env.js";
import { startMcpServer, type TestMcpServer } from "./support/mcp-server.js";

const OSC52 = "\u001b]52;c;cHduZWQ=\u0007";
const OSC8 = "\u001b]8;;https://evil.example/\u001b\\docs\u001b]8;;\u001b\\";
const CLEAR = "\u001b[2J\u001b[H";
const CURSOR_UP = "\u001b[2A\u001b[2K";
const C1_CSI = "\u009b2J";
const BIDI = "\u202etxt.exe\u202c";

/** The same sequences as the CLI shows them. */
const SHOWN = {
  osc52: "\\x1b]52;c;cHduZWQ=\\x07",
  osc8: "\\x1b]8;;https://evil.example/\\x1b\\docs\\x1b]8;;\\x1b\\",
  clear: "\\x1b[2J\\x1b[H",
  cursorUp: "\\x1b[2A\\x1b[2K",
  c1: "\\x9b2J",
  bidi: "\\u202etxt.exe\\u202c",
};

const TOOL = `notes${CLEAR}${OSC52}`;
const DESCRIPTION = `Reads your notes${CURSOR_UP}${OSC8}${C1_CSI}${BIDI}\nsecond line`;
const RESULT = `first line${CLEAR}\nsecond line${OSC52}\r\nthird\rforged${CURSOR_UP}\tend${BIDI}`;

/** No byte a terminal acts on: ESC, C1 (CSI 0x9b among them), BEL, CR, other C0 but LF and tab, bidi controls. */
function assertInert(text: string, where: string): void {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: looking for control characters is the point
  const unsafe = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/u.exec(text);
  assert.equal(unsafe, null, `${where} holds U+${unsafe?.[0].charCodeAt(0).toString(16).padStart(4, "0")}:\n${text}`);
}

function assertShown(result: CliResult, ...shown: string[]): void {
  assertInert(result.stdout, "stdout");
  assertInert(result.stderr, "stderr");
  for (const each of shown) assert.ok(result.stdout.includes(each), `stdout lacks ${each}:\n${result.stdout}`);
}

describe("proto CLI: escape sequences from servers reach the terminal as visible text", () => {
  let ca: TestCA;
  let caFile: string;
  let dir: string;
  let attestor: Attestor;
  let mcp: TestMcpServer;
  let directory: HttpsHost;
  let service: HttpsHost;
  let home: string;
  const fetch = (() => {
    let base: ReturnType<typeof testFetch> | undefined;
    const call: FetchFunction = (input, init) => {
      base ??= testFetch(ca);
      return base(input as string, init as Parameters<typeof base>[1]) as unknown as Promise<Response>;
    };
    return { call, close: () => base?.close() };
  })();
  const cli = (...args: string[]) => runCli(args, { home, caFile });

  const listing = {
    service_did: "did:web:evil.example",
    discovery_url: "https://evil.example/.well-known/proto",
    discovery_doc: {},
    fetched_at: "2026-01-01T00:00:00.000Z",
    first_listed_at: "2026-01-01T00:00:00.000Z",
    updated_at: "2026-01-01T00:00:00.000Z",
    status: "active",
    tags: [`shop${OSC52}`, `a${C1_CSI}\nb`],
    title: `Widgets${CLEAR}${CURSOR_UP}\nactive  did:web:forged.example  Forged`,
    description: `Line one${OSC8}\nLine two${BIDI}`,
    _meta: {},
  };

  before(async () => {
    ca = await createTestCA();
    caFile = ca.writeCertFile();
    dir = mkdtempSync(join(tmpdir(), "proto-terminal-test-"));
    attestor = await startAttestor(ca, dir);
    mcp = await startMcpServer(ca, [attestor.url], {
      // Wire-level handlers: the SDK's registerTool would only warn about such a name.
      tools(server) {
        server.server.registerCapabilities({ tools: {} });
        server.server.setRequestHandler(ListToolsRequestSchema, async () => ({
          tools: [{ name: TOOL, description: DESCRIPTION, inputSchema: { type: "object" } }],
        }));
        server.server.setRequestHandler(CallToolRequestSchema, async () => ({
          content: [{ type: "text", text: RESULT }],
        }));
      },
    });

    directory = await startHttpsHost({ ca, hostnames: ["localhost"] });
    directory.route("/v1/listings", { body: { listings: [listing], next_cursor: null } });
    directory.route(`/v1/listings/${encodeURIComponent(listing.service_did)}`, { body: listing });

    service = await startHttpsHost({ ca, hostnames: ["localhost"] });
    const origin = service.origin();
    service.serveDiscovery({
      proto_version: "0.1",
      service_did: `did:web:localhost%3A${service.port}`,
      endpoints: {
        accounts: "/proto/v1/accounts",
        owner_invitation: "/proto/v1/accounts/me/owner-invitation",
        claim_page: `${origin}/claim`,
        claim_completion: "/proto/v1/claim",
      },
      signature_algorithms: ["ed25519"],
      billing: { unclaimed_mode: "free" },
    });
    service.route("/hostile", { body: RESULT });
    service.route("/refused", {
      status: 403,
      body: { error: { code: `denied${CLEAR}`, message: `go away${OSC52}${C1_CSI}${BIDI}` } },
    });
    service.route("/proto/v1/accounts/me", {
      body: {
        account_id: `acct_${OSC8}`,
        agent_did: `did:key:z6Mk${CURSOR_UP}`,
        state: "CLAIMED",
        created_at: `2026-01-01${C1_CSI}`,
        owner: { identity: { type: "email", value: `eve@example.com${CLEAR}` }, claimed_at: `now${BIDI}` },
      },
    });

    home = tempHome();
    const agent = Agent.init({ home, fetch: fetch.call }).agent;
    const client = agent.attestor(attestor.url);
    const request = await client.linkStart({ label: "terminal test" });
    const confirmed = await attestor.hook("/__test/link/confirm", {
      req_id: request.req_id,
      email: "dana@example.com",
    });
    assert.equal(confirmed.status, 200);
    assert.equal((await client.pollOnce(request.req_id)).state, "confirmed");
  });
  after(async () => {
    await mcp.close();
    await directory.close();
    await service.close();
    await attestor.close();
    await fetch.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test("proto mcp lists a hostile tool: its name and description escaped, on its row", async () => {
    const listed = await cli("mcp", mcp.url);
    assert.equal(listed.code, 0, listed.stderr);
    assertShown(listed, SHOWN.clear, SHOWN.osc52, SHOWN.cursorUp, SHOWN.osc8, SHOWN.c1, SHOWN.bidi);
    assert.deepEqual(listed.stdout.split("\n"), [
      `TOOL${" ".repeat(`notes${SHOWN.clear}${SHOWN.osc52}`.length - 2)}DESCRIPTION`,
      `notes${SHOWN.clear}${SHOWN.osc52}  Reads your notes${SHOWN.cursorUp}${SHOWN.osc8}${SHOWN.c1}${SHOWN.bidi}`,
      "",
    ]);

    const json = await cli("mcp", mcp.url, "--json");
    assertInert(json.stdout.replace(/\n/g, ""), "--json stdout");
    assert.equal(jsonOf(json).tools[0].name, TOOL);
    assert.equal(jsonOf(json).tools[0].description, DESCRIPTION);
  });

  test("proto mcp calls it: the result's lines kept, every control character escaped", async () => {
    const called = await cli("mcp", mcp.url, TOOL);
    assert.equal(called.code, 0, called.stderr);
    assertShown(called);
    assert.equal(
      called.stdout,
      `first line${SHOWN.clear}\nsecond line${SHOWN.osc52}\nthird\\rforged${SHOWN.cursorUp}\tend${SHOWN.bidi}\n`,
    );
    const json = await cli("mcp", mcp.url, TOOL, "--json");
    assertInert(json.stdout.replace(/\n/g, ""), "--json stdout");
    assert.equal(jsonOf(json).content[0].text, RESULT);
  });

  test("proto directory list and show: a hostile directory's titles and tags escaped, one listing a line", async () => {
    const directoryUrl = directory.origin();
    const list = await cli("directory", "list", "--search", "widgets", "--directory", directoryUrl);
    assert.equal(list.code, 0, list.stderr);
    assertShown(list);
    assert.deepEqual(list.stdout.split("\n"), [
      `active  did:web:evil.example  Widgets${SHOWN.clear}${SHOWN.cursorUp}\\nactive  did:web:forged.example  Forged  [shop${SHOWN.osc52}, a${SHOWN.c1}\\nb]`,
      "",
    ]);

    const show = await cli("directory", "show", listing.service_did, "--directory", directoryUrl);
    assert.equal(show.code, 0, show.stderr);
    assertShown(show, `  Line one${SHOWN.osc8}\n  Line two${SHOWN.bidi}\n`);

    const json = await cli("directory", "list", "--directory", directoryUrl, "--json");
    assertInert(json.stdout.replace(/\n/g, ""), "--json stdout");
    assert.deepEqual(jsonOf(json).listings[0], listing);
  });

  test("proto call and account show: a hostile body, error and account escaped; --json as sent", async () => {
    const origin = service.origin();
    const body = await cli("call", `${origin}/hostile`);
    assert.equal(body.code, 0, body.stderr);
    assertShown(body);
    assert.equal(
      body.stdout,
      `HTTP 200 OK\nfirst line${SHOWN.clear}\nsecond line${SHOWN.osc52}\nthird\\rforged${SHOWN.cursorUp}\tend${SHOWN.bidi}\n`,
    );
    assert.equal(jsonOf(await cli("call", `${origin}/hostile`, "--json")).body, RESULT);

    const refused = await cli("call", `${origin}/refused`);
    assert.equal(refused.code, 4);
    assertShown(refused);
    assert.equal(refused.stderr, `proto: denied${SHOWN.clear}: go away${SHOWN.osc52}${SHOWN.c1}${SHOWN.bidi}\n`);

    const account = await cli("account", "show", origin);
    assert.equal(account.code, 0, account.stderr);
    assertShown(account);
    assert.deepEqual(account.stdout.split("\n"), [
      `CLAIMED account acct_${SHOWN.osc8} for did:key:z6Mk${SHOWN.cursorUp}`,
      `  created   2026-01-01${SHOWN.c1}`,
      `  owner     email eve@example.com${SHOWN.clear} since now${SHOWN.bidi}`,
      "",
    ]);
    const json = await cli("account", "show", origin, "--json");
    assertInert(json.stdout.replace(/\n/g, ""), "--json stdout");
    assert.equal(jsonOf(json).owner.identity.value, `eve@example.com${CLEAR}`);
  });
});
