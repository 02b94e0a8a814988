/**
 * RFC 9421 `@target-uri` as the notes service receives it: the service's configured public origin
 * followed by the request-target exactly as it crossed the wire. Requests go over a raw TLS socket
 * (request line and headers written byte for byte) so that no URL parser rewrites what the agent
 * signed; each is signed with our `signRequest` and its `target` (the bytes on the request line).
 * The service runs over real HTTPS (test CA) on SQLite and, with TEST_POSTGRES_URL, on PostgreSQL;
 * the agent is a fresh did:key, attested by OUR attestor (in process) at signup.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { connect } from "node:tls";
import { parseWwwAuthenticate, signRequest } from "@proto/protocol";
import { createTestCA, createTestDatabase, TEST_POSTGRES_URL, type TestDatabase } from "@proto/testkit";
import {
  freePort,
  newAgent,
  RELAXED_RATE_LIMITS,
  startTrustHarness,
  type TrustHarness,
} from "../../../packages/server/test/support/trust.js";
import { buildNotesService, type NotesService } from "../src/app.js";

const NOTES_HOST = "notes.test";
/** The configured public origin: the default HTTPS port, whatever port the process listens on. */
const PUBLIC_URL = `https://${NOTES_HOST}`;
const ATTESTOR = { name: "sqlite", engine: "sqlite" as const, redis: false };

interface RawResponse {
  status: number;
  headers: Headers;
  text: string;
  // biome-ignore lint/suspicious/noExplicitAny: answers of many shapes, asserted field by field
  json: any;
}

/** The body of a chunked message: sizes in hex, each chunk, a zero-size chunk, trailers ignored. */
function dechunk(bytes: Buffer): Buffer {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const lineEnd = bytes.indexOf("\r\n", at);
    assert.ok(lineEnd !== -1, "a chunk size line ends in CRLF");
    const size = Number.parseInt(bytes.subarray(at, lineEnd).toString("latin1").split(";")[0] ?? "", 16);
    assert.ok(Number.isInteger(size) && size >= 0, "a chunk size is hex");
    if (size === 0) return Buffer.concat(parts);
    parts.push(bytes.subarray(lineEnd + 2, lineEnd + 2 + size));
    at = lineEnd + 2 + size + 2;
  }
}

/** Splits one HTTP/1.1 response (the server closes after it: every request says `Connection: close`). */
function parseResponse(bytes: Buffer): RawResponse {
  const headEnd = bytes.indexOf("\r\n\r\n");
  assert.ok(headEnd !== -1, `a complete response head, got ${JSON.stringify(bytes.toString("latin1"))}`);
  const [statusLine = "", ...fieldLines] = bytes.subarray(0, headEnd).toString("latin1").split("\r\n");
  const status = /^HTTP\/1\.1 (\d{3})/.exec(statusLine)?.[1];
  assert.ok(status !== undefined, `a status line, got ${JSON.stringify(statusLine)}`);
  const headers = new Headers();
  for (const line of fieldLines) {
    const colon = line.indexOf(":");
    headers.append(line.slice(0, colon), line.slice(colon + 1).trim());
  }
  const rest = bytes.subarray(headEnd + 4);
  const length = headers.get("content-length");
  const body = /chunked/i.test(headers.get("transfer-encoding") ?? "")
    ? dechunk(rest)
    : length === null
      ? rest
      : rest.subarray(0, Number(length));
  const text = body.toString("utf8");
  let json: unknown;
  try {
    json = text.length > 0 ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: Number(status), headers, text, json };
}

interface RawClient {
  /** Writes `head` (request line and field lines, CRLF-terminated, no blank line) and `body` as given. */
  exchange(head: string, body?: string): Promise<RawResponse>;
}

function rawClient(port: number, ca: string): RawClient {
  return {
    exchange(head, body) {
      return new Promise((resolve, reject) => {
        const socket = connect({ host: "127.0.0.1", port, servername: NOTES_HOST, ca });
        const chunks: Buffer[] = [];
        socket.setTimeout(10_000, () => socket.destroy(new Error("no answer within 10 s")));
        socket.on("secureConnect", () => {
          socket.write(Buffer.from(`${head}\r\n`, "latin1"));
          if (body !== undefined) socket.write(Buffer.from(body, "utf8"));
        });
        socket.on("data", (chunk: Buffer) => chunks.push(chunk));
        socket.on("error", reject);
        socket.on("end", () => {
          try {
            resolve(parseResponse(Buffer.concat(chunks)));
          } catch (error) {
            reject(error);
          }
        });
      });
    },
  };
}

/** The error envelope: JSON, `{error: {code, message}}` and nothing else at the top. */
function assertEnvelope(response: RawResponse, status: number, code?: string): void {
  assert.equal(response.status, status, response.text);
  assert.match(response.headers.get("content-type") ?? "", /^application\/json/, response.text);
  assert.deepEqual(Object.keys(response.json ?? {}), ["error"], response.text);
  assert.equal(typeof response.json.error.code, "string", response.text);
  assert.ok(typeof response.json.error.message === "string" && response.json.error.message.length > 0);
  if (code !== undefined) assert.equal(response.json.error.code, code, response.text);
}

/** The notes list: the request reached the handler, so its signature was accepted. */
function assertNotesList(response: RawResponse): void {
  assert.equal(response.status, 200, response.text);
  assert.ok(Array.isArray(response.json?.notes), response.text);
}

/** A path the router does not know: 404 in the envelope, the signature never refused. */
function assertRoutedNotFound(response: RawResponse): void {
  assert.notEqual(response.status, 401, response.text);
  assertEnvelope(response, 404, "not_found");
}

interface Engine {
  name: string;
  engine: "sqlite" | "postgres";
  skip?: string;
}

const ENGINES: Engine[] = [
  { name: "SQLite", engine: "sqlite" },
  TEST_POSTGRES_URL
    ? { name: "PostgreSQL", engine: "postgres" }
    : { name: "PostgreSQL", engine: "postgres", skip: "TEST_POSTGRES_URL is not set" },
];
for (const engine of ENGINES) {
  if (engine.skip !== undefined) process.stdout.write(`${engine.name} suite skipped: ${engine.skip}\n`);
}

for (const engine of ENGINES) {
  describe(`the notes service checks signatures over the raw request-target (${engine.name})`, {
    skip: engine.skip ?? false,
    timeout: 60_000,
  }, () => {
    const agent = newAgent();
    let database: TestDatabase;
    let attestor: TrustHarness;
    let notes: NotesService;
    let client: RawClient;

    interface Send {
      /**
       * What `signRequest` is given instead of what is sent (by default exactly what is sent);
       * `target: null` gives it no target, so it signs the URL as `fetch` would send it.
       */
      signed?: { method?: string; url?: string; target?: string | null };
      host?: string;
      body?: string;
      /** Field lines added after the signature's (already CRLF-free, written as given). */
      fields?: string[];
      /** Rewrites the Content-Digest field line as written (the value the signature covers). */
      digestLine?: (digest: string) => string;
    }

    /** Signs with `signRequest` and its `target`, then writes the request byte for byte. */
    function send(method: string, target: string, options: Send = {}): Promise<RawResponse> {
      const signedAs = options.signed ?? {};
      const signedTarget = signedAs.target === undefined ? target : signedAs.target;
      const { headers } = signRequest(
        {
          method: signedAs.method ?? method,
          url: signedAs.url ?? PUBLIC_URL,
          ...(signedTarget === null ? {} : { target: signedTarget }),
          ...(options.body === undefined ? {} : { body: options.body }),
        },
        { keyid: agent.did, privateKey: agent.privateKey },
      );
      const lines = [
        `${method} ${target} HTTP/1.1`,
        `Host: ${options.host ?? NOTES_HOST}`,
        `Signature-Input: ${headers["signature-input"]}`,
        `Signature: ${headers.signature}`,
        ...(headers["content-digest"] === undefined
          ? []
          : [(options.digestLine ?? ((digest) => `Content-Digest: ${digest}`))(headers["content-digest"])]),
        ...(options.body === undefined
          ? ["Content-Length: 0"]
          : ["Content-Type: application/json", `Content-Length: ${Buffer.byteLength(options.body)}`]),
        ...(options.fields ?? []),
        "Connection: close",
        "",
      ];
      return client.exchange(lines.join("\r\n"), options.body);
    }

    before(async () => {
      const ca = await createTestCA();
      const port = await freePort();
      const trustPort = await freePort();
      const trustUrl = `http://127.0.0.1:${trustPort}`;
      attestor = await startTrustHarness(ATTESTOR, {
        port: trustPort,
        env: { TRUST_PUBLIC_URL: trustUrl, TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS },
      });
      database = await createTestDatabase(engine.engine, "proto_notes_raw");
      const { certPem, keyPem } = await ca.issue([NOTES_HOST]);
      notes = await buildNotesService({
        publicUrl: PUBLIC_URL,
        database: database.url,
        attestorUrl: trustUrl,
        https: { key: keyPem, cert: certPem },
        mail: { developmentOutbox: true },
      });
      await notes.app.listen({ port, host: "127.0.0.1" });
      client = rawClient(port, ca.certPem);

      // The fresh key signs up with an attestation from our attestor, over the raw socket too.
      await attestor.link(agent);
      const minted = await attestor.mint(agent, notes.serviceDid);
      assert.equal(minted.status, 200, minted.text);
      const signup = await send("POST", "/proto/v1/accounts", { fields: [`Proto-Attestation: ${minted.json.jwt}`] });
      assert.equal(signup.status, 201, signup.text);
      assert.equal(signup.json.agent_did, agent.did);
    });

    after(async () => {
      await notes?.close();
      await attestor?.close();
      await database?.drop();
    });

    test("a plain signed GET /notes is accepted (the baseline)", async () => {
      assertNotesList(await send("GET", "/notes"));
    });

    test("' in a query is signed and checked as sent, not as a URL parser would encode it (%27)", async () => {
      assertNotesList(await send("GET", "/notes?q=it's"));
    });

    test("+ in a query is accepted as itself", async () => {
      assertNotesList(await send("GET", "/notes?q=oat+milk"));
    });

    test("an empty query (a lone ?) is accepted: the ? is part of what was signed", async () => {
      assertNotesList(await send("GET", "/notes?"));
    });

    test("%7E and ~ in a query are each accepted as themselves", async () => {
      assertNotesList(await send("GET", "/notes?who=%7Eada"));
      assertNotesList(await send("GET", "/notes?who=~ada"));
    });

    test("a signature over ~ sent as %7E is refused: 401 invalid_signature with a Proto challenge", async () => {
      const response = await send("GET", "/notes?who=%7Eada", { signed: { target: "/notes?who=~ada" } });
      assertEnvelope(response, 401, "invalid_signature");
      const challenges = parseWwwAuthenticate(response.headers.get("www-authenticate"));
      const proto = challenges.find((challenge) => challenge.scheme.toLowerCase() === "proto");
      assert.ok(proto !== undefined, response.headers.get("www-authenticate") ?? "no WWW-Authenticate");
      assert.equal(proto.params.error, "invalid_signature");
      assert.equal(proto.params.discovery, `${PUBLIC_URL}/.well-known/proto`);
    });

    test("%2e%2e in a query is accepted as itself (never resolved as a dot segment)", async () => {
      assertNotesList(await send("GET", "/notes?next=a/%2e%2e/b"));
    });

    test("a %2e%2e path segment: the router has no such path (404 envelope), the signature is not refused", async () => {
      assertRoutedNotFound(await send("GET", "/x/%2e%2e/notes"));
    });

    test("a percent-encoded letter in the path (/%6Eotes): the router decodes it to /notes, the signature covers it as sent", async () => {
      assertNotesList(await send("GET", "/%6Eotes"));
    });

    test("// in the path: the router has no such path (404 envelope), the signature is not refused", async () => {
      assertRoutedNotFound(await send("GET", "//notes"));
    });

    test("a POST with a body is accepted; its Content-Digest is covered", async () => {
      const response = await send("POST", "/notes?draft=it's", { body: JSON.stringify({ text: "raw socket note" }) });
      assert.equal(response.status, 201, response.text);
      assert.equal(response.json.note.text, "raw socket note");
    });

    test("a lower-case method given to signRequest is signed upper-case: sent as POST it is accepted", async () => {
      const response = await send("POST", "/notes", {
        body: JSON.stringify({ text: "signed as post" }),
        signed: { method: "post" },
      });
      assert.equal(response.status, 201, response.text);
    });

    test("a URL with userinfo given to signRequest: userinfo is never signed, so it is accepted", async () => {
      assertNotesList(await send("GET", "/notes?q=1", { signed: { url: `https://agent:secret@${NOTES_HOST}` } }));
      // Without a target too: the signer takes the URL as fetch would send it, userinfo dropped.
      const url = `https://agent:secret@${NOTES_HOST}/notes?q=1`;
      assertNotesList(await send("GET", "/notes?q=1", { signed: { url, target: null } }));
    });

    test("Host in another case with an explicit default port: the configured public origin decides", async () => {
      const signed = { url: `https://${NOTES_HOST.toUpperCase()}:443` };
      assertNotesList(await send("GET", "/notes", { host: "Notes.TEST:443", signed }));
    });

    test("a Host naming another service entirely: still the configured public origin that is checked", async () => {
      assertNotesList(await send("GET", "/notes", { host: "elsewhere.example" }));
    });

    test("a Host that is no host (empty, with a path, two of them): 400 envelope, on every route, MCP's too", async () => {
      for (const path of ["/notes", "/mcp"]) {
        for (const options of [{ host: "" }, { host: `${NOTES_HOST}/x?y` }, { fields: ["Host: elsewhere.example"] }]) {
          const refused = await send("GET", path, options);
          assertEnvelope(refused, 400, "malformed_request");
          assert.match(refused.text, /Host/);
        }
      }
    });

    test("an absolute-form request-target naming another host: the configured public origin decides", async () => {
      const target = "https://other.example/notes?abs";
      assertNotesList(await send("GET", target));
      // A signature made for the host it names does not verify here.
      const forOther = await send("GET", target, { signed: { url: "https://other.example" } });
      assertEnvelope(forOther, 401, "invalid_signature");
    });

    test("bytes no request line may carry (raw UTF-8 in the query): 400 envelope, no 500", async () => {
      // Latin-1 writes each code unit as one byte: these two are the UTF-8 encoding of é.
      const response = await send("GET", "/notes?q=\xc3\xa9", { signed: { target: "/notes?q=%C3%A9" } });
      assertEnvelope(response, 400, "malformed_request");
    });

    test("the covered Content-Digest with white space around its value is accepted (RFC 9421 §2.1 trims it)", async () => {
      const response = await send("POST", "/notes", {
        body: JSON.stringify({ text: "spaced digest" }),
        digestLine: (digest) => `Content-Digest: \t ${digest} \t`,
      });
      assert.equal(response.status, 201, response.text);
    });

    test("the covered Content-Digest folded onto two lines (obs-fold): node's parser refuses it, 400 envelope, no 500", async () => {
      const response = await send("POST", "/notes", {
        body: JSON.stringify({ text: "folded digest" }),
        digestLine: (digest) => `Content-Digest:\r\n ${digest}`,
      });
      assertEnvelope(response, 400, "malformed_request");
    });

    test("the kit's own endpoint (GET /proto/v1/accounts/me) with ' in its query is accepted", async () => {
      const response = await send("GET", "/proto/v1/accounts/me?who=it's");
      assert.equal(response.status, 200, response.text);
      assert.equal(response.json.agent_did, agent.did);
    });

    test("after every case the service still answers: the notes written over the raw socket are there", async () => {
      const response = await send("GET", "/notes");
      assertNotesList(response);
      assert.deepEqual(
        response.json.notes.map((note: { text: string }) => note.text).sort(),
        ["raw socket note", "signed as post", "spaced digest"].sort(),
      );
    });
  });
}
