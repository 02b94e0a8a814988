/**
 * Issue 36: what node refuses before any route is known (a malformed request line, bad header
 * bytes, oversized headers, broken framing), a Host that cannot stand and a request-target that
 * names no path answer in the kit's error envelope on Express and Hono too, once the server is
 * handed to `protoClientErrors` (as the Fastify adapter's `protoServerOptions()` does). fetch
 * cannot send these, so they go over a raw socket; testkit's fuzz wire reads the answer.
 */
import assert from "node:assert/strict";
import { createServer as createHttp2Server } from "node:http2";
import { after, before, describe, test } from "node:test";
import { header, type RawAnswer, sendRaw } from "@proto/testkit/fuzz";
import { createKit, type Kit, protoClientErrors } from "../src/index.js";
import { type AdapterApp, expressApp, honoApp, startExpress, startHono } from "./support/adapter-apps.js";

async function raw(app: AdapterApp, request: string): Promise<RawAnswer> {
  const { hostname, port } = new URL(app.url);
  const result = await sendRaw(hostname, Number(port), Buffer.from(request, "latin1"), request.split(" ")[0] ?? "");
  assert.ok("answer" in result, "error" in result ? result.error : "");
  return result.answer;
}

function assertEnvelope(answer: RawAnswer, status: number): void {
  const body = answer.body.toString("utf8");
  assert.equal(answer.status, status, body);
  assert.match(header(answer, "content-type") ?? "", /^application\/json/, body);
  const json = JSON.parse(body) as { error?: { code?: unknown; message?: unknown } };
  assert.deepEqual(Object.keys(json), ["error"], body);
  assert.equal(json.error?.code, "malformed_request", body);
  assert.equal(typeof json.error?.message, "string");
  assert.equal(Number(header(answer, "content-length")), answer.body.length);
}

const END = "Connection: close\r\n\r\n";
const REFUSED: [string, string, number][] = [
  ["a malformed request line", `GET /api/whoami HTTP/9.x\r\nHost: a\r\n${END}`, 400],
  ["a space in the request-target", `GET /api/who ami HTTP/1.1\r\nHost: a\r\n${END}`, 400],
  ["a control byte in a header value", `GET /api/whoami HTTP/1.1\r\nHost: a\r\nX-A: b\x01c\r\n${END}`, 400],
  ["a header name with a space", `GET /api/whoami HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n${END}`, 400],
  [
    "two different Content-Lengths",
    `POST /api/notes HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n${END}x`,
    400,
  ],
  ["broken chunked framing", `POST /api/notes HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n${END}zz\r\n`, 400],
  ["headers over node's limit", `GET /api/whoami HTTP/1.1\r\nHost: a\r\nX-Big: ${"a".repeat(20_000)}\r\n${END}`, 431],
  ["no Host on HTTP/1.1", `GET /api/whoami HTTP/1.1\r\n${END}`, 400],
  ["two Host headers", `GET /api/whoami HTTP/1.1\r\nHost: a\r\nHost: b\r\n${END}`, 400],
  ["a Host that is no host", `GET /api/whoami HTTP/1.1\r\nHost: a/b\r\n${END}`, 400],
  ["a Host whose name is not canonical", `GET /api/whoami HTTP/1.1\r\nHost: a%41\r\n${END}`, 400],
  ["a request-target that is no path", `GET api/whoami HTTP/1.1\r\nHost: a\r\n${END}`, 400],
  ["a backslash in the path", `GET /\\evil.example/api HTTP/1.1\r\nHost: a\r\n${END}`, 400],
];

describe("refusals before routing answer in the envelope on Express and Hono", { timeout: 60_000 }, () => {
  let kit: Kit;
  const apps: [string, AdapterApp][] = [];
  before(async () => {
    kit = await createKit({
      publicUrl: "https://notes.example",
      database: "sqlite::memory:",
      discovery: { service_did: "did:web:notes.example", billing: { unclaimed_mode: "free" } },
      onInvitation: () => undefined,
      webBotAuth: false,
    });
    apps.push(["Express", await startExpress(expressApp(kit))], ["Hono", await startHono(honoApp(kit))]);
  });
  after(async () => {
    for (const [, app] of apps) await app.close();
    await kit?.close();
  });

  for (const [what, request, status] of REFUSED) {
    test(`${what}: ${status} malformed_request`, async () => {
      for (const [name, app] of apps) {
        await assert.doesNotReject(async () => assertEnvelope(await raw(app, request), status), name);
      }
    });
  }

  test("a well-formed request still reaches the kit and the application", async () => {
    for (const [, app] of apps) {
      const discovery = await raw(app, `GET /.well-known/proto HTTP/1.1\r\nHost: a\r\n${END}`);
      assert.equal(discovery.status, 200, discovery.body.toString("utf8"));
      const unsigned = await raw(app, `GET /api/whoami HTTP/1.1\r\nHost: a\r\n${END}`);
      assert.equal(unsigned.status, 401);
      assert.match(unsigned.body.toString("utf8"), /"invalid_signature"/);
      const options = await raw(app, `OPTIONS * HTTP/1.1\r\nHost: a\r\n${END}`);
      assert.ok(options.status < 500, `OPTIONS * answered ${options.status}`);
    }
  });
});

// `serve()` of @hono/node-server is typed to return an HTTP/2 server too (given node:http2's
// createServer), so protoClientErrors takes one; it must say so rather than guard it wrongly.
test("an HTTP/2 server is refused by name", () => {
  const server = createHttp2Server((_request, response) => response.end());
  assert.throws(() => protoClientErrors(server), {
    name: "TypeError",
    message: "protoClientErrors: not a node:http or node:https server (HTTP/2 servers are not supported)",
  });
});
