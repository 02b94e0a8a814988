import assert from "node:assert/strict";
import { connect } from "node:net";
import { after, before, describe, test } from "node:test";
import { type DirectoryHarness, startDirectoryHarness } from "./support/directory.js";
import { parseJsonBody } from "./support/http.js";
import { STORE_VARIANTS } from "./support/stores.js";
import { startTrustHarness, type TrustHarness } from "./support/trust.js";

/**
 * Issue 13: requests refused before any route is chosen (by node's HTTP parser or Fastify's
 * router) still answer with the error envelope, JSON, and a fitting status. fetch cannot send
 * these, so they go over a raw socket.
 */

interface RawAnswer {
  status: number;
  headers: Map<string, string>;
  body: string;
}

/** Writes `request` as is and reads the answer until the server closes the connection. */
function rawRequest(baseUrl: string, request: string): Promise<RawAnswer> {
  const { hostname, port } = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    const chunks: Buffer[] = [];
    socket.setTimeout(10_000, () => socket.destroy(new Error("no answer within 10 s")));
    socket.on("data", (chunk) => chunks.push(chunk));
    socket.on("error", reject);
    socket.on("close", () => {
      const text = Buffer.concat(chunks).toString("latin1");
      const split = text.indexOf("\r\n\r\n");
      if (split === -1) return reject(new Error(`no complete answer: ${JSON.stringify(text)}`));
      const [statusLine = "", ...lines] = text.slice(0, split).split("\r\n");
      const headers = new Map<string, string>();
      for (const line of lines) {
        const colon = line.indexOf(":");
        headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
      }
      resolve({ status: Number(statusLine.split(" ")[1]), headers, body: text.slice(split + 4) });
    });
    socket.write(request);
  });
}

function assertEnvelope(answer: RawAnswer, status: number): void {
  assert.equal(answer.status, status, answer.body);
  assert.match(answer.headers.get("content-type") ?? "", /^application\/json/);
  const json = parseJsonBody(answer.body) as { error?: { code?: unknown; message?: unknown } } | undefined;
  assert.ok(json !== undefined, `a JSON body: ${answer.body}`);
  assert.deepEqual(Object.keys(json), ["error"], answer.body);
  assert.equal(json.error?.code, "invalid_request", answer.body);
  assert.equal(typeof json.error?.message, "string");
  assert.equal(Number(answer.headers.get("content-length")), Buffer.byteLength(answer.body));
}

const variant = STORE_VARIANTS[0];
assert.ok(variant);

describe("errors before routing answer with the envelope", { timeout: 60_000 }, () => {
  let trust: TrustHarness;
  let directory: DirectoryHarness;
  before(async () => {
    trust = await startTrustHarness(variant);
    directory = await startDirectoryHarness(variant, { sites: 1 });
  });
  after(async () => {
    await trust?.close();
    await directory?.close();
  });

  test("a path that does not percent-decode is 400", async () => {
    for (const request of [
      "DELETE /v1/bindings/%E0 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
      "GET /v1/listings/%E0%A4 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    ]) {
      assertEnvelope(await rawRequest(trust.url, request), 400);
      assertEnvelope(await rawRequest(directory.url, request.replace("DELETE /v1/bindings", "GET /v1/listings")), 400);
    }
  });

  test("a path parameter over the router's limit is 414", async () => {
    const long = "a".repeat(3000);
    assertEnvelope(
      await rawRequest(trust.url, `DELETE /v1/bindings/${long} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n`),
      414,
    );
    assertEnvelope(
      await rawRequest(
        directory.url,
        `GET /v1/listings/did:web:${long} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n`,
      ),
      414,
    );
  });

  test("headers over node's limit are 431", async () => {
    const big = `X-Big: ${"b".repeat(20_000)}\r\n`;
    assertEnvelope(await rawRequest(trust.url, `GET /v1/listings HTTP/1.1\r\nHost: a\r\n${big}\r\n`), 431);
    assertEnvelope(await rawRequest(directory.url, `GET /v1/listings HTTP/1.1\r\nHost: a\r\n${big}\r\n`), 431);
  });

  test("two Content-Length headers are 400", async () => {
    for (const lengths of [
      [2, 3],
      [2, 2],
    ]) {
      const request =
        "POST /v1/link/poll HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n" +
        `Content-Length: ${lengths[0]}\r\nContent-Length: ${lengths[1]}\r\n\r\n{}`;
      assertEnvelope(await rawRequest(trust.url, request), 400);
    }
  });

  test("an HTTP/1.1 request without Host is 400, on fast routes too", async () => {
    assertEnvelope(await rawRequest(trust.url, "GET /v1/listings HTTP/1.1\r\nConnection: close\r\n\r\n"), 400);
    assertEnvelope(await rawRequest(directory.url, "GET /v1/listings HTTP/1.1\r\nConnection: close\r\n\r\n"), 400);
    const item = "GET /v1/listings/did:web:example.com HTTP/1.1\r\nConnection: close\r\n\r\n";
    assertEnvelope(await rawRequest(directory.url, item), 400);
    // HTTP/1.0 has no Host requirement.
    const old = await rawRequest(directory.url, "GET /v1/listings HTTP/1.0\r\n\r\n");
    assert.equal(old.status, 200, old.body);
  });

  test("a Host that cannot stand (two of them, empty, with a path or userinfo, not a host) is 400; hosts that can are served", async () => {
    for (const hosts of [["a", "b"], [""], ["a/x?y"], ["user@a"], ["a b"], ["[::1"], ["a:port"]]) {
      const fields = hosts.map((host) => `Host: ${host}\r\n`).join("");
      const request = `GET /v1/listings HTTP/1.1\r\n${fields}Connection: close\r\n\r\n`;
      const refused = await rawRequest(directory.url, request);
      assertEnvelope(refused, 400);
      assert.match(refused.body, hosts.length > 1 ? /more than one Host/ : /not a host/);
      assertEnvelope(await rawRequest(trust.url, request.replace("/v1/listings", "/.well-known/jwks.json")), 400);
    }
    for (const host of [
      "a",
      "directory.example:8443",
      "127.0.0.1:1",
      "[::1]:80",
      "EXAMPLE.com.",
      "xn--bcher-kva.example",
    ]) {
      const served = await rawRequest(
        directory.url,
        `GET /v1/listings HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`,
      );
      assert.equal(served.status, 200, `${host}: ${served.body}`);
    }
  });

  test("broken request framing is 400", async () => {
    assertEnvelope(await rawRequest(trust.url, "GET /v1/listings HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n"), 400);
  });
});
