/**
 * Web Bot Auth end to end, with a verifier and a signer we did not write: Cloudflare's npm
 * `web-bot-auth` 0.1.3 and dhensby's `http-message-signatures` 1.0.6.
 *
 * - A Web Bot Auth operator we do not run: keys made and requests signed by `web-bot-auth`, its key
 *   directory on a local HTTPS host (`agents.test`, test CA). The notes service (real HTTPS,
 *   `notes.test`) fetches that directory through the kit's SSRF-safe fetch (`agents.test` pinned to
 *   127.0.0.1, private addresses allowed, the test CA trusted) and takes the caller for a signed
 *   agent; a bad tag, key, time, redirect or size is refused with a challenge.
 * - OUR agent (the @proto/agent SDK) linked at OUR attestor, whose person published its key on
 *   `/account`: the attestor, behind a TLS front (`trust.test`) as in production, lists it in its
 *   key directory. The exact requests the SDK sends are recorded: in the working group's dictionary
 *   form (the default) `http-message-signatures` verifies them (`web-bot-auth` 0.1.3 cannot resolve
 *   a member's `key`), in the older string form `web-bot-auth` does; the notes service, in the same
 *   run, lets them act for the agent's account (the SDK adds the Proto-Attestation it needs).
 * - Every `Signature-Agent` form at the kit (typed -00 members signed by `http-message-signatures`),
 *   the tagged signature chosen among two, and the budget of new key directories per client address
 *   (requests sent from distinct loopback addresses), with Retry-After on its refusals.
 * - Two signatures (proto `sig1` + Web Bot Auth `sig2`): the service uses `sig1`; `web-bot-auth`
 *   0.1.3 refuses any request with more than one signature (measured below); `http-message-signatures`
 *   verifies `sig2` on its own.
 * - A Web Bot Auth signature that does not bind the request cannot act for an account, attested or not.
 *
 * The service's clock is the real one plus an offset the tests move: `web-bot-auth` dates
 * signatures and checks them with the real clock.
 */
import assert from "node:assert/strict";
import {
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type JsonWebKey,
  type JsonWebKeyInput,
  type KeyObject,
} from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { createServer as createHttpsServer, request as httpsRequest } from "node:https";
import type { AddressInfo, Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Agent, type ServiceClient } from "@proto/agent";
import { findProtoChallenge, parseResolveOverrides, signWebBotAuth } from "@proto/protocol";
import {
  createTestCA,
  createTestDatabase,
  field,
  type HttpsHost,
  startHttpsHost,
  TEST_POSTGRES_URL,
  type TestCA,
  type TestDatabase,
  type TestFetch,
  testFetch,
} from "@proto/testkit";
import { createSigner, createVerifier, httpbis, type VerifyingKey } from "http-message-signatures";
import {
  HTTP_MESSAGE_SIGNATURES_DIRECTORY,
  MediaType,
  signatureHeaders,
  verify as webBotAuthVerify,
} from "web-bot-auth";
import { signerFromJWK, verifierFromJWK } from "web-bot-auth/crypto";
import type { OutboxMailer } from "../../../packages/server/src/trust/mail.js";
import { Browserless } from "../../../packages/server/test/support/browser-session.js";
import {
  freePort,
  RELAXED_RATE_LIMITS,
  startTrustHarness,
  type TrustHarness,
} from "../../../packages/server/test/support/trust.js";
import { buildNotesService, type NotesService } from "../src/app.js";

const NOTES_HOST = "notes.test";
const AGENTS_HOST = "agents.test";
const TRUST_HOST = "trust.test";
const ATTESTOR = { name: "sqlite", engine: "sqlite" as const, redis: false };
const DIRECTORY_MEDIA_TYPE: string = MediaType.HTTP_MESSAGE_SIGNATURES_DIRECTORY;

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
  if (engine.skip !== undefined) process.stdout.write(`# ${engine.name} suite skipped: ${engine.skip}\n`);
}

/** An answer of the notes service, read whole. */
interface Answer {
  status: number;
  headers: Headers;
  text: string;
  // biome-ignore lint/suspicious/noExplicitAny: answers of many shapes, asserted field by field
  json: any;
}

async function read(response: Response): Promise<Answer> {
  const text = await response.text();
  let json: unknown;
  try {
    json = text.length > 0 ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: response.status, headers: response.headers, text, json };
}

/** A request as it goes on the wire: what a verifier is handed. */
interface WireRequest {
  method: string;
  url: string;
  /** Lower-case names. */
  headers: Record<string, string>;
  body?: string | Uint8Array;
}

/** An Ed25519 key made outside our code, as `web-bot-auth` takes it: a JWK, its signer and thumbprint. */
interface OperatorKey {
  privateJwk: JsonWebKey;
  /** What a key directory lists: the public members and `kid` = the RFC 7638 thumbprint. */
  directoryJwk: JsonWebKey & { kid: string };
  keyid: string;
}

async function operatorKey(privateKey: KeyObject = generateKeyPairSync("ed25519").privateKey): Promise<OperatorKey> {
  const privateJwk = privateKey.export({ format: "jwk" }) as JsonWebKey;
  const signer = await signerFromJWK(privateJwk);
  const { kty, crv, x } = privateJwk;
  return {
    privateJwk,
    directoryJwk: { kty, crv, x, kid: signer.keyid, use: "sig" } as OperatorKey["directoryJwk"],
    keyid: signer.keyid,
  };
}

/**
 * Signs with `web-bot-auth`'s `signatureHeaders`. The package covers `Signature-Agent` only when
 * the message already carries it, so it is set first; whatever form it has, the whole field is
 * covered (0.1.3 knows no `key` parameter).
 */
async function signWithPackage(request: WireRequest, key: OperatorKey, validitySeconds = 60): Promise<WireRequest> {
  // Its default components: @authority, and signature-agent when the message has one.
  const created = new Date();
  const expires = new Date(created.getTime() + validitySeconds * 1000);
  const signed = await signatureHeaders(
    { method: request.method, url: request.url, headers: request.headers },
    await signerFromJWK(key.privateJwk),
    { created, expires },
  );
  return {
    ...request,
    headers: { ...request.headers, signature: signed.Signature, "signature-input": signed["Signature-Input"] },
  };
}

/** `web-bot-auth`'s `verify`, with the key found by `keyid` in a directory read over HTTPS. */
async function verifyWithPackage(request: WireRequest, directory: () => Promise<JsonWebKey[]>): Promise<string> {
  let verifiedKeyid = "";
  await webBotAuthVerify(
    { method: request.method, url: request.url, headers: request.headers },
    async (data, signature, params) => {
      const jwk = (await directory()).find((entry) => (entry as { kid?: string }).kid === params.keyid);
      if (jwk === undefined) throw new Error(`no key ${params.keyid} in the directory`);
      await (await verifierFromJWK(jwk))(data, signature, params);
      verifiedKeyid = params.keyid;
    },
  );
  return verifiedKeyid;
}

/**
 * Signs with dhensby's `http-message-signatures`, which resolves a `key` parameter (RFC 9421
 * §2.1.2), so it can cover one `Signature-Agent` member as the working group's draft asks. Signing
 * a request that already carries a signature adds a second one.
 */
async function signWithDhensby(
  request: WireRequest,
  key: OperatorKey,
  options: { name: string; fields: string[]; tag?: string },
): Promise<WireRequest> {
  const created = new Date();
  const signed = await httpbis.signMessage(
    {
      key: createSigner(
        createPrivateKey({ key: key.privateJwk as JsonWebKeyInput["key"], format: "jwk" }),
        "ed25519",
        key.keyid,
      ),
      name: options.name,
      fields: options.fields,
      params: ["created", "expires", "keyid", "alg", "tag"],
      paramValues: {
        created,
        expires: new Date(created.getTime() + 60_000),
        tag: options.tag ?? "web-bot-auth",
      },
    },
    { method: request.method, url: request.url, headers: { ...request.headers } },
  );
  // It names the headers it adds `Signature` and `Signature-Input`; a wire request's are lower-case.
  const headers = Object.fromEntries(
    Object.entries(signed.headers as Record<string, string>).map(([name, value]) => [name.toLowerCase(), value]),
  );
  return { ...request, headers };
}

/** dhensby's `verifyMessage`, with the key found by `keyid` in a directory, for the web-bot-auth-tagged signature. */
async function verifyWithDhensby(request: WireRequest, directory: () => Promise<JsonWebKey[]>): Promise<boolean> {
  const keys = await directory();
  const verified = await httpbis.verifyMessage(
    {
      keyLookup: async (params): Promise<VerifyingKey | null> => {
        const jwk = keys.find((entry) => (entry as { kid?: string }).kid === params.keyid);
        if (params.tag !== "web-bot-auth" || jwk === undefined) return null;
        return {
          id: String(params.keyid),
          algs: ["ed25519"],
          verify: createVerifier(createPublicKey({ key: jwk as JsonWebKeyInput["key"], format: "jwk" }), "ed25519"),
        };
      },
    },
    { method: request.method, url: request.url, headers: request.headers },
  );
  return verified === true;
}

/** The error envelope of a refusal: status, code, a message; JSON with `error` only. */
function assertEnvelope(answer: Answer, status: number, code: string): void {
  assert.equal(answer.status, status, answer.text);
  assert.match(answer.headers.get("content-type") ?? "", /^application\/json/, answer.text);
  assert.deepEqual(Object.keys(answer.json ?? {}), ["error"], answer.text);
  assert.equal(answer.json.error.code, code, answer.text);
  assert.ok(typeof answer.json.error.message === "string" && answer.json.error.message.length > 0, answer.text);
}

/** 401 with the reserved code, a `Proto` challenge naming it, and `Accept-Signature` for Web Bot Auth. */
function assertRefused(answer: Answer, code: string, message?: RegExp): void {
  assertEnvelope(answer, 401, code);
  if (message !== undefined) assert.match(answer.json.error.message, message);
  const challenge = findProtoChallenge(answer.headers.get("www-authenticate"));
  assert.ok(challenge !== undefined, `a Proto challenge, got ${answer.headers.get("www-authenticate")}`);
  assert.equal(challenge.error, code);
  assertAcceptSignature(answer);
}

/** RFC 9421 §5: the signatures the service would take, a Web Bot Auth one among them. */
function assertAcceptSignature(answer: Answer, withBody = false): void {
  const accept = answer.headers.get("accept-signature") ?? "";
  assert.match(accept, /(^|, )web-bot-auth=\(/, `Accept-Signature names a web-bot-auth signature: ${accept}`);
  assert.match(accept, /"signature-agent"/, accept);
  assert.equal(/"content-digest"/.test(accept), withBody, accept);
}

/**
 * A TLS front for the attestor, which speaks plain HTTP behind a proxy in production: every
 * request is passed on as received (method, path, headers, body), every answer passed back.
 */
async function tlsFront(
  ca: TestCA,
  hostname: string,
  upstreamPort: number,
): Promise<{ port: number; close(): Promise<void> }> {
  const { certPem, keyPem } = await ca.issue([hostname]);
  const sockets = new Set<Socket>();
  const server = createHttpsServer({ key: keyPem, cert: certPem }, (req, res) => {
    const upstream = httpRequest(
      { host: "127.0.0.1", port: upstreamPort, method: req.method, path: req.url, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on("error", () => res.destroy());
    req.pipe(upstream);
  });
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const socket of sockets) socket.destroy();
      }),
  };
}

for (const engine of ENGINES) {
  describe(`Web Bot Auth against the notes service, checked by web-bot-auth 0.1.3 (${engine.name})`, {
    skip: engine.skip ?? false,
    timeout: 120_000,
  }, () => {
    let temp: string;
    let ca: TestCA;
    let database: TestDatabase;
    let agents: HttpsHost;
    let attestor: TrustHarness;
    let front: { port: number; close(): Promise<void> };
    let trustUrl: string;
    let notes: NotesService;
    let notesUrl: string;
    /** The network as the test's clients see it: the test CA, and the three names pinned to 127.0.0.1. */
    let net: TestFetch;
    /** Moved by the expiry case; the service's clock is the real one plus this. */
    let clockOffsetMs = 0;
    let operator: OperatorKey;

    before(async () => {
      temp = mkdtempSync(join(tmpdir(), "proto-notes-wba-"));
      ca = await createTestCA();
      agents = await startHttpsHost({ ca, hostnames: [AGENTS_HOST] });

      // OUR attestor on its own port, reached at https://trust.test:<front> (its public URL).
      const trustPort = await freePort();
      front = await tlsFront(ca, TRUST_HOST, trustPort);
      trustUrl = `https://${TRUST_HOST}:${front.port}`;
      attestor = await startTrustHarness(ATTESTOR, {
        port: trustPort,
        env: { TRUST_PUBLIC_URL: trustUrl, TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS },
      });

      const notesPort = await freePort();
      notesUrl = `https://${NOTES_HOST}:${notesPort}`;
      const pins = `${NOTES_HOST}:${notesPort}:127.0.0.1,${TRUST_HOST}:${front.port}:127.0.0.1,${agents.resolveEntries()}`;
      net = testFetch(ca, { resolve: pins });
      database = await createTestDatabase(engine.engine, "proto_notes_wba");
      const { certPem, keyPem } = await ca.issue([NOTES_HOST]);
      notes = await buildNotesService({
        publicUrl: notesUrl,
        database: database.url,
        attestorUrl: trustUrl,
        https: { key: keyPem, cert: certPem },
        mail: { developmentOutbox: true },
        now: () => Date.now() + clockOffsetMs,
        // The attestor's keys come over HTTPS under the test CA.
        fetch: net as unknown as typeof globalThis.fetch,
        // Key directories: the kit's own SSRF-safe fetch, allowed to reach the local hosts.
        webBotAuth: {
          fetch: {
            allowPrivate: true,
            resolve: parseResolveOverrides(`${TRUST_HOST}:${front.port}:127.0.0.1,${agents.resolveEntries()}`),
            ca: ca.certPem,
          },
        },
      });
      await notes.app.listen({ port: notesPort, host: "127.0.0.1" });

      operator = await operatorKey();
      agents.route(HTTP_MESSAGE_SIGNATURES_DIRECTORY, {
        headers: { "content-type": DIRECTORY_MEDIA_TYPE, "cache-control": "max-age=300" },
        body: JSON.stringify({ keys: [operator.directoryJwk] }),
      });
    });

    after(async () => {
      await notes?.close();
      await attestor?.close();
      await front?.close();
      await agents?.close();
      await net?.close();
      await database?.drop();
      if (temp) rmSync(temp, { recursive: true, force: true });
    });

    async function send(request: WireRequest): Promise<Answer> {
      return read(
        await net(request.url, {
          method: request.method,
          headers: request.headers,
          ...(request.body === undefined ? {} : { body: request.body }),
          redirect: "manual",
        }),
      );
    }

    /** A request the operator signs with `web-bot-auth`, naming its directory in `Signature-Agent`. */
    function operatorRequest(path: string, signatureAgent: string, method = "GET"): WireRequest {
      return { method, url: `${notesUrl}${path}`, headers: { "signature-agent": signatureAgent } };
    }

    const legacyAgent = () => `"${agents.origin()}"`;

    describe("a Web Bot Auth operator signing with web-bot-auth 0.1.3", () => {
      test("legacy Signature-Agent string: GET /whoami answers caller signed_agent, the operator's origin and thumbprint", async () => {
        const request = await signWithPackage(operatorRequest("/whoami", legacyAgent()), operator);
        const answer = await send(request);
        assert.equal(answer.status, 200, answer.text);
        assert.equal(answer.json.caller, "signed_agent");
        assert.equal(answer.json.signer_origin, agents.origin());
        assert.equal(answer.json.thumbprint, operator.keyid);
        assert.match(answer.json.did, /^did:key:z6Mk/);
        // The service fetched the directory the string names (origin + well-known path), by name.
        const fetched = agents.requests.filter((r) => r.path === HTTP_MESSAGE_SIGNATURES_DIRECTORY);
        assert.equal(fetched.length, 1, "fetched once, then cached");
        assert.equal(fetched[0]?.servername, AGENTS_HOST);
        // The package's own verifier agrees on the same request.
        assert.equal(await verifyWithPackage(request, async () => [operator.directoryJwk]), operator.keyid);
      });

      test("dictionary Signature-Agent (-01 form, whole field covered): also caller signed_agent", async () => {
        const url = `${agents.origin()}${HTTP_MESSAGE_SIGNATURES_DIRECTORY}`;
        const request = await signWithPackage(operatorRequest("/whoami", `sig1="${url}"`), operator);
        assert.match(request.headers["signature-input"] ?? "", /^sig1=\("@authority" "signature-agent"\);/);
        const answer = await send(request);
        assert.equal(answer.status, 200, answer.text);
        assert.equal(answer.json.caller, "signed_agent");
        assert.equal(answer.json.signer_origin, agents.origin());
        assert.equal(answer.json.signature_agent, url);
        assert.equal(answer.json.thumbprint, operator.keyid);
      });

      test("GET /notes (an account's route) with the same kind of request: 403 kit_signature_required with Accept-Signature", async () => {
        const answer = await send(await signWithPackage(operatorRequest("/notes", legacyAgent()), operator));
        assertEnvelope(answer, 403, "kit_signature_required");
        assertAcceptSignature(answer);
      });

      test("a signature whose tag is edited (web-bot-auth -> web-bot-auth-x): 401 invalid_signature", async () => {
        const signed = await signWithPackage(operatorRequest("/whoami", legacyAgent()), operator);
        const input = signed.headers["signature-input"] ?? "";
        assert.ok(input.endsWith(';tag="web-bot-auth"'), input);
        const edited = {
          ...signed,
          headers: {
            ...signed.headers,
            "signature-input": input.replace(/tag="web-bot-auth"$/, 'tag="web-bot-auth-x"'),
          },
        };
        assertRefused(await send(edited), "invalid_signature", /no signature is tagged "web-bot-auth"/);
      });

      test("a key the directory does not list: 401 invalid_signature", async () => {
        const stranger = await operatorKey();
        const answer = await send(await signWithPackage(operatorRequest("/whoami", legacyAgent()), stranger));
        assertRefused(answer, "invalid_signature", /no key with this keyid/);
      });

      test("an expired signature (the service's clock moved past expires + 60 s skew): 401 expired_signature", async () => {
        const request = await signWithPackage(operatorRequest("/whoami", legacyAgent()), operator, 60);
        clockOffsetMs = (60 + 60 + 1) * 1000;
        try {
          assertRefused(await send(request), "expired_signature");
        } finally {
          clockOffsetMs = 0;
        }
      });

      test("a directory that redirects (302): 401 invalid_signature, the redirect not followed", async () => {
        const path = `/redirecting${HTTP_MESSAGE_SIGNATURES_DIRECTORY}`;
        agents.route(path, {
          headers: { "content-type": DIRECTORY_MEDIA_TYPE },
          body: JSON.stringify({ keys: [operator.directoryJwk] }),
        });
        // The directory moves to /moved<path>, where a client that followed would find the key.
        agents.misbehave(path, "redirect");
        const answer = await send(
          await signWithPackage(operatorRequest("/whoami", `"${agents.origin()}${path}"`), operator),
        );
        assertRefused(answer, "invalid_signature", /redirect/);
        assert.ok(agents.requests.some((r) => r.path === path));
        assert.ok(!agents.requests.some((r) => r.path === `/moved${path}`), "the redirect was not followed");
      });

      test("a directory larger than the kit's 256 KiB cap: 401 invalid_signature", async () => {
        const path = `/oversized${HTTP_MESSAGE_SIGNATURES_DIRECTORY}`;
        agents.route(path, { headers: { "content-type": DIRECTORY_MEDIA_TYPE }, body: JSON.stringify({ keys: [] }) });
        agents.misbehave(path, "oversized", { size: 256 * 1024 + 1024 });
        const answer = await send(
          await signWithPackage(operatorRequest("/whoami", `"${agents.origin()}${path}"`), operator),
        );
        assertRefused(answer, "invalid_signature", /key directory could not be used/);
        assert.ok(agents.requests.some((r) => r.path === path));
      });
    });

    describe("Signature-Agent forms and the budget of new key directories", () => {
      /** Sends from a loopback address of its own: the kit charges new directories per client address. */
      function sendFrom(localAddress: string, request: WireRequest): Promise<Answer> {
        const url = new URL(request.url);
        return new Promise((resolve, reject) => {
          const outgoing = httpsRequest(
            {
              host: "127.0.0.1",
              port: Number(url.port),
              path: `${url.pathname}${url.search}`,
              method: request.method,
              servername: url.hostname,
              ca: ca.certPem,
              localAddress,
              headers: { host: url.host, ...request.headers },
            },
            (incoming) => {
              const chunks: Buffer[] = [];
              incoming.on("data", (chunk: Buffer) => chunks.push(chunk));
              incoming.on("end", () => {
                const headers = new Headers();
                for (const [name, value] of Object.entries(incoming.headers)) {
                  if (typeof value === "string") headers.set(name, value);
                  else if (Array.isArray(value)) for (const item of value) headers.append(name, item);
                }
                const text = Buffer.concat(chunks).toString("utf8");
                let json: unknown;
                try {
                  json = text.length > 0 ? JSON.parse(text) : undefined;
                } catch {
                  json = undefined;
                }
                resolve({ status: incoming.statusCode ?? 0, headers, text, json });
              });
            },
          );
          outgoing.on("error", reject);
          outgoing.end(request.body);
        });
      }

      /** A directory of the operator's key on a path of its own, so that the service has not cached it. */
      function freshDirectory(name: string): string {
        const path = `/${name}-${engine.engine}${HTTP_MESSAGE_SIGNATURES_DIRECTORY}`;
        agents.route(path, {
          headers: { "content-type": DIRECTORY_MEDIA_TYPE },
          body: JSON.stringify({ keys: [operator.directoryJwk] }),
        });
        return `${agents.origin()}${path}`;
      }

      const fetchesOf = (prefix: string) => agents.requests.filter((r) => r.path.startsWith(prefix)).length;

      test("one client's junk Signature-Agent URLs use up its own share: after 10 it is 429 with Retry-After, and a genuine agent at another address whose directory is not cached is served", async () => {
        // The service's clock at the start of a minute, so that the whole flood falls in one window.
        clockOffsetMs = 60_000 - (Date.now() % 60_000) + 500;
        try {
          const junkKey = generateKeyPairSync("ed25519").privateKey;
          const prefix = `/junk-${engine.engine}/`;
          const answers: Answer[] = [];
          for (let i = 0; i < 61; i += 1) {
            const signed = signWebBotAuth(
              { method: "GET", url: `${notesUrl}/whoami` },
              {
                privateKey: junkKey,
                signatureAgent: `${agents.origin()}${prefix}${i}`,
                signatureAgentForm: "string",
                now: () => Date.now() + clockOffsetMs,
              },
            );
            answers.push(
              await sendFrom("127.0.0.3", { method: "GET", url: `${notesUrl}/whoami`, headers: signed.headers }),
            );
          }
          // Its first ten directories were fetched (and are not directories); then it was told to wait.
          for (const answer of answers.slice(0, 10)) assertRefused(answer, "invalid_signature", /key directory/);
          for (const answer of answers.slice(10)) {
            assertEnvelope(answer, 429, "rate_limit_exceeded");
            const retryAfter = Number(answer.headers.get("retry-after"));
            assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60, `Retry-After ${retryAfter}`);
          }
          assert.equal(fetchesOf(prefix), 10, "only the client's share was fetched");

          const genuine = await signWithPackage(operatorRequest("/whoami", `"${freshDirectory("genuine")}"`), operator);
          const answer = await sendFrom("127.0.0.2", genuine);
          assert.equal(answer.status, 200, answer.text);
          assert.equal(answer.json.caller, "signed_agent");
          assert.equal(answer.json.thumbprint, operator.keyid);
        } finally {
          clockOffsetMs = 0;
        }
      });

      test("a signature that could never verify costs no fetch: a keyid that is no thumbprint, a signature that is not Ed25519", async () => {
        const directory = freshDirectory("never-fetched");
        const signed = await signWithPackage(operatorRequest("/whoami", `"${directory}"`), operator);
        const input = signed.headers["signature-input"] ?? "";
        const junkKeyid = { ...signed.headers, "signature-input": input.replace(/keyid="[^"]+"/, 'keyid="junk"') };
        assertRefused(await sendFrom("127.0.0.4", { ...signed, headers: junkKeyid }), "invalid_signature", /keyid/);
        const label = input.slice(0, input.indexOf("="));
        const short = { ...signed.headers, signature: `${label}=:AAAA:` };
        assertRefused(await sendFrom("127.0.0.4", { ...signed, headers: short }), "invalid_signature", /Ed25519/);
        assert.equal(fetchesOf(new URL(directory).pathname), 0, "the directory was never fetched");
      });

      test("the working group's dictionary (-00), each signature covering its own member: an origin (untyped or type=directory) and a JWK Set (type=jwks_uri), signed by http-message-signatures", async () => {
        const jwksUrl = freshDirectory("typed").replace(HTTP_MESSAGE_SIGNATURES_DIRECTORY, "/keys.json");
        agents.route(new URL(jwksUrl).pathname, {
          headers: { "content-type": "application/jwk-set+json" },
          body: JSON.stringify({ keys: [operator.directoryJwk] }),
        });
        for (const member of [
          `"${agents.origin()}"`,
          `"${agents.origin()}";type=directory`,
          `"${jwksUrl}";type=jwks_uri`,
        ]) {
          const request = await signWithDhensby(operatorRequest("/whoami", `sig1=${member}`), operator, {
            name: "sig1",
            fields: ["@authority", 'signature-agent;key="sig1"'],
          });
          assert.match(request.headers["signature-input"] ?? "", /^sig1=\("@authority" "signature-agent";key="sig1"\)/);
          const answer = await send(request);
          assert.equal(answer.status, 200, `${member}: ${answer.text}`);
          assert.equal(answer.json.caller, "signed_agent");
          assert.equal(answer.json.thumbprint, operator.keyid);
        }
        // A type this kit does not resolve (a signature agent card) is refused, not fetched.
        const card = await signWithDhensby(
          operatorRequest("/whoami", `sig1="${agents.origin()}/card.json";type=cimd`),
          operator,
          { name: "sig1", fields: ["@authority", 'signature-agent;key="sig1"'] },
        );
        assertRefused(await send(card), "invalid_signature", /type must be directory or jwks_uri/);
      });

      test("two signatures, the first tagged otherwise: the service verifies the one tagged web-bot-auth", async () => {
        const stranger = await operatorKey();
        const directory = freshDirectory("second-signature");
        const first = await signWithDhensby(
          operatorRequest("/whoami", `a="https://elsewhere.test", b="${directory}"`),
          stranger,
          { name: "a", fields: ["@authority", 'signature-agent;key="a"'], tag: "other-profile" },
        );
        const both = await signWithDhensby(first, operator, {
          name: "b",
          fields: ["@authority", 'signature-agent;key="b"'],
        });
        assert.match(both.headers["signature-input"] ?? "", /^a=.*tag="other-profile", b=.*tag="web-bot-auth"$/);
        const answer = await send(both);
        assert.equal(answer.status, 200, answer.text);
        assert.equal(answer.json.caller, "signed_agent");
        assert.equal(answer.json.thumbprint, operator.keyid);
        assert.equal(answer.json.signature_agent, directory);
      });
    });

    describe("OUR agent, its key published by OUR attestor", () => {
      let agent: Agent;
      let signatureAgent: string;
      /** Every request the SDK sent to the notes service, as it went out. */
      const sent: WireRequest[] = [];

      /** The attestor's directory, read over HTTPS as any verifier reads it. */
      async function attestorDirectory(): Promise<JsonWebKey[]> {
        const response = await net(signatureAgent, { headers: { accept: DIRECTORY_MEDIA_TYPE } });
        assert.equal(response.status, 200);
        assert.equal(response.headers.get("content-type"), DIRECTORY_MEDIA_TYPE);
        return ((await response.json()) as { keys: JsonWebKey[] }).keys;
      }

      /** The one request the SDK sent for `method path` since the last call. */
      function lastSent(method: string, path: string): WireRequest {
        const found = sent.filter((r) => r.method === method && new URL(r.url).pathname === path);
        assert.equal(found.length, 1, `one ${method} ${path} sent, got ${found.length}`);
        sent.length = 0;
        return found[0] as WireRequest;
      }

      before(async () => {
        // The SDK's fetch records what it sends to the notes service, then sends exactly that.
        const recording = (async (input: string | URL | Request, init?: RequestInit) => {
          const url = String(input);
          if (url.startsWith(`${notesUrl}/`)) {
            const headers = Object.fromEntries(new Headers(init?.headers).entries());
            const body = init?.body instanceof Uint8Array ? init.body : undefined;
            sent.push({ method: init?.method ?? "GET", url, headers, ...(body === undefined ? {} : { body }) });
          }
          return net(url, init as Parameters<TestFetch>[1]);
        }) as unknown as typeof globalThis.fetch;
        agent = Agent.init({ home: join(temp, "agent-home"), fetch: recording, attestorUrl: trustUrl, env: {} }).agent;

        // Linked at our attestor, confirmed as a person with an e-mail address.
        const email = `wba-owner-${Math.random().toString(36).slice(2, 10)}@mail.test`;
        const link = await agent.attestor().linkStart({ label: "wba agent" });
        const confirmed = await attestor.hook("/__test/link/confirm", { req_id: link.req_id, email });
        assert.equal(confirmed.status, 200, confirmed.text);
        assert.equal((await agent.attestor().pollOnce(link.req_id)).state, "confirmed");

        // The person signs in on the attestor's pages and publishes the agent's key from /account.
        const person = new Browserless(attestor.url);
        const signin = await person.get("/signin");
        const mailed = await person.post("/signin/email", {
          _csrf: field(signin.text, "_csrf"),
          next: "/account",
          email,
        });
        assert.equal(mailed.status, 200, mailed.text);
        // The outbox keeps the newest mail first; the link names the public (TLS) origin, and the
        // pages are the same on the attestor's own listener.
        const mail = (attestor.app.mailer as OutboxMailer).entries.find((m) => m.to === email);
        const signinLink = /https:\/\/\S+\/signin\/email\/verify\?token=\S+/.exec(mail?.text ?? "")?.[0];
        assert.ok(signinLink !== undefined, "a sign-in mail");
        const { pathname, search } = new URL(signinLink);
        const verifyPage = await person.get(`${pathname}${search}`);
        const signedIn = await person.post("/signin/email/verify", {
          _csrf: field(verifyPage.text, "_csrf"),
          token: field(verifyPage.text, "token"),
        });
        assert.equal(signedIn.status, 303, signedIn.text);
        const account = await person.get("/account");
        const action = /action="(\/account\/bindings\/[^"/]+\/wba\/publish)"/.exec(account.text)?.[1];
        assert.ok(action !== undefined, "a publish button on /account");
        const published = await person.post(action, { _csrf: field(account.text, "_csrf") });
        assert.equal(published.status, 303, published.text);

        signatureAgent = `${trustUrl}${HTTP_MESSAGE_SIGNATURES_DIRECTORY}`;
        const listed = await attestorDirectory();
        assert.equal(listed.length, 1);
        assert.equal(listed[0]?.x, agent.identity.publicKeyB64);
      });

      describe("mode single: one signature tagged web-bot-auth, Signature-Agent in the working group's dictionary form (the default)", () => {
        let client: ServiceClient;

        before(async () => {
          client = await agent.service(notesUrl, { webBotAuth: { signatureAgent, mode: "single" } });
          sent.length = 0;
        });

        test("GET /whoami: the attestor's origin as member sig1, covered alone; http-message-signatures verifies it, web-bot-auth 0.1.3 cannot (no key parameter); the service answers caller account", async () => {
          const answer = await read(await client.fetch("/whoami"));
          const request = lastSent("GET", "/whoami");
          assert.match(
            request.headers["signature-input"] ?? "",
            /^sig1=\([^)]* "signature-agent";key="sig1"[^)]*\);[^,]*tag="web-bot-auth"$/,
          );
          assert.ok(request.headers["proto-attestation"], "the SDK attested (attested_only)");
          assert.equal(request.headers["signature-agent"], `sig1="${trustUrl}"`);
          assert.equal(await verifyWithDhensby(request, attestorDirectory), true);
          // Measured: 0.1.3 recomputes the whole field where the member's value was signed.
          await assert.rejects(verifyWithPackage(request, attestorDirectory), /invalid signature/);

          assert.equal(answer.status, 200, answer.text);
          assert.equal(answer.json.caller, "account");
          assert.equal(answer.json.agent_did, agent.did);
          assert.equal(answer.json.attested, true);
          assert.deepEqual(answer.json.web_bot_auth, { signer_origin: trustUrl });
        });

        test("POST /notes creates a note; http-message-signatures verifies the same request (content-digest covered)", async () => {
          const answer = await read(
            await client.fetch("/notes", {
              method: "POST",
              headers: { "content-type": "application/json" },
              body: JSON.stringify({ text: "signed by web bot auth" }),
            }),
          );
          const request = lastSent("POST", "/notes");
          assert.match(request.headers["signature-input"] ?? "", /"content-digest"/);
          assert.equal(await verifyWithDhensby(request, attestorDirectory), true);
          assert.equal(answer.status, 201, answer.text);
          assert.equal(answer.json.note.text, "signed by web bot auth");

          const list = await read(await client.fetch("/notes"));
          assert.equal(list.status, 200, list.text);
          assert.deepEqual(
            list.json.notes.map((note: { text: string }) => note.text),
            ["signed by web bot auth"],
          );
          sent.length = 0;
        });
      });

      describe("mode single with the older string form (signatureAgentForm: string)", () => {
        test("GET /whoami: the directory URL as a bare string, the field covered whole; web-bot-auth 0.1.3 verifies it and the service answers caller account", async () => {
          const client = await agent.service(notesUrl, {
            webBotAuth: { signatureAgent, mode: "single", signatureAgentForm: "string" },
          });
          sent.length = 0;
          const answer = await read(await client.fetch("/whoami"));
          const request = lastSent("GET", "/whoami");
          assert.equal(request.headers["signature-agent"], `"${signatureAgent}"`);
          assert.match(request.headers["signature-input"] ?? "", /^sig1=\([^)]* "signature-agent"[ )]/);
          assert.match(await verifyWithPackage(request, attestorDirectory), /^[A-Za-z0-9_-]{43}$/);
          assert.equal(answer.status, 200, answer.text);
          assert.equal(answer.json.caller, "account");
          assert.equal(answer.json.agent_did, agent.did);
        });
      });

      describe("mode both: proto sig1 + Web Bot Auth sig2", () => {
        let client: ServiceClient;

        before(async () => {
          client = await agent.service(notesUrl, { webBotAuth: { signatureAgent, mode: "both" } });
          sent.length = 0;
        });

        test("the service acts on sig1 (caller account, no Web Bot Auth identity); web-bot-auth 0.1.3 refuses: 'Multiple signatures is not supported'; http-message-signatures verifies sig2", async () => {
          const answer = await read(await client.fetch("/whoami"));
          assert.equal(answer.status, 200, answer.text);
          assert.equal(answer.json.caller, "account");
          assert.equal(answer.json.agent_did, agent.did);
          assert.equal(answer.json.web_bot_auth, null, "the proto signature was the one used");

          const request = lastSent("GET", "/whoami");
          assert.match(request.headers["signature-input"] ?? "", /^sig1=.*, sig2=.*tag="web-bot-auth"/);
          // Measured: the package takes one signature per request only.
          await assert.rejects(verifyWithPackage(request, attestorDirectory), /Multiple signatures is not supported/);

          // dhensby's library checks each label; the key is given for the Web Bot Auth one only.
          const directory = await attestorDirectory();
          const offered: { tag: unknown; keyid: unknown; given: boolean }[] = [];
          const verified = await httpbis.verifyMessage(
            {
              keyLookup: async (params): Promise<VerifyingKey | null> => {
                const jwk = directory.find((entry) => (entry as { kid?: string }).kid === params.keyid);
                const given = params.tag === "web-bot-auth" && jwk !== undefined;
                offered.push({ tag: params.tag, keyid: params.keyid, given });
                if (!given) return null;
                return {
                  id: String(params.keyid),
                  algs: ["ed25519"],
                  verify: createVerifier(
                    createPublicKey({ key: jwk as JsonWebKeyInput["key"], format: "jwk" }),
                    "ed25519",
                  ),
                };
              },
            },
            { method: request.method, url: request.url, headers: request.headers },
          );
          assert.equal(verified, true);
          assert.deepEqual(
            offered.map((o) => o.given),
            [false, true],
          );
          assert.equal(offered[0]?.keyid, agent.did, "sig1 is the proto signature, keyid the did:key");
        });
      });

      test("a Web Bot Auth signature that does not bind the request (web-bot-auth's defaults: @authority, signature-agent) with an attestation: POST /notes is 401 invalid_signature", async () => {
        const key = await operatorKey(agent.identity.privateKey);
        const { jwt } = await agent.attestor().token(notes.serviceDid);
        const body = JSON.stringify({ text: "never stored" });
        const request = await signWithPackage(
          {
            method: "POST",
            url: `${notesUrl}/notes`,
            headers: {
              "signature-agent": `"${signatureAgent}"`,
              "content-type": "application/json",
              "proto-attestation": jwt,
            },
            body,
          },
          key,
        );
        assert.match(request.headers["signature-input"] ?? "", /^sig1=\("@authority" "signature-agent"\);/);
        // A valid Web Bot Auth signature for the package, by the published key...
        assert.equal(await verifyWithPackage(request, attestorDirectory), key.keyid);
        // ...that cannot act for the account: it covers neither the method, the target nor the body.
        const answer = await send(request);
        assertEnvelope(answer, 401, "invalid_signature");
        assert.match(answer.json.error.message, /must cover @method, @target-uri and \(with a body\) content-digest/);
        assert.equal(findProtoChallenge(answer.headers.get("www-authenticate"))?.error, "invalid_signature");
        // The signature it is asked for covers the body, though this one sent no Content-Digest.
        assertAcceptSignature(answer, true);

        // Without the attestation the same kind of signature is a signed agent, vouched for by the attestor.
        const plain = await signWithPackage(
          { method: "GET", url: `${notesUrl}/whoami`, headers: { "signature-agent": `"${signatureAgent}"` } },
          key,
        );
        const who = await send(plain);
        assert.equal(who.status, 200, who.text);
        assert.equal(who.json.caller, "signed_agent");
        assert.equal(who.json.signer_origin, trustUrl);
        assert.equal(who.json.did, agent.did);

        const list = await read(await (await agent.service(notesUrl)).fetch("/notes"));
        assert.deepEqual(
          list.json.notes.map((note: { text: string }) => note.text),
          ["signed by web bot auth"],
          "nothing was stored",
        );
      });
    });
  });
}
