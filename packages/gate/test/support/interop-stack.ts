/**
 * What the interop tests put together (test/interop.test.ts): OUR attestor in this process (test
 * hooks on, plain http on loopback, its outbound fetches allowed to the test's HTTPS hosts), gates
 * started from the proto-gate.yaml an operator writes and serving HTTPS themselves with a test CA,
 * and, as the application behind one of them, an MCP server written with the MCP SDK only. Also
 * the person's side of the OAuth flow at the attestor, driven through its pages without a browser,
 * and a Web Bot Auth operator we do not run: keys and signatures from Cloudflare's npm
 * `web-bot-auth`, its key directory on a local HTTPS host under the test CA.
 */
import { generateKeyPairSync, sign } from "node:crypto";
import { writeFileSync } from "node:fs";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import { join } from "node:path";
import type { OAuthClientProvider } from "@modelcontextprotocol/sdk/client/auth.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import type {
  OAuthClientInformationMixed,
  OAuthClientMetadata,
  OAuthTokens,
} from "@modelcontextprotocol/sdk/shared/auth.js";
import type { Agent } from "@proto/agent";
import { encodeDidKey, rawPublicKey } from "@proto/protocol";
import { buildTrustApp, readTrustConfig } from "@proto/server";
import { freePort, type HttpsHost, quietStream, startHttpsHost, type TestCA } from "@proto/testkit";
import pino from "pino";
import { HTTP_MESSAGE_SIGNATURES_DIRECTORY, MediaType, signatureHeaders } from "web-bot-auth";
import { signerFromJWK } from "web-bot-auth/crypto";
import type { OutboxMailer } from "../../../server/src/trust/mail.js";
import { Browserless, field } from "../../../server/test/support/browser-session.js";
import { answerConsent } from "../../../server/test/support/people.js";
import { loadConfigFile } from "../../src/config.js";
import { createGate, type Gate, type GateOptions } from "../../src/gate.js";

/** Everything comes from 127.0.0.1: limits no test meets (the limiter stays on). */
const RELAXED_TRUST_LIMITS = "link_start=100000/60,link_start_agent=100000/3600,link_poll=100000/60,token=100000/60";

type TrustApp = Awaited<ReturnType<typeof buildTrustApp>>;

export interface Attestor {
  /** The attestor's `{trust_url}`: `http://127.0.0.1:PORT`. */
  url: string;
  app: TrustApp;
  /** POSTs to one of its test hooks (`/__test/link/confirm`: a person confirms a link). */
  hook(path: string, body: Record<string, unknown>): Promise<{ status: number; json: Record<string, unknown> }>;
  /** A key made here, linked to the person `email` through the test hook: its PEM, for `--agent-key`. */
  linkKey(email: string): Promise<{ did: string; pem: string }>;
  close(): Promise<void>;
}

export interface AttestorOptions {
  dir: string;
  /** The test CA, which the attestor's outbound fetches (a service's discovery document) trust. */
  caPem: string;
  /** `host:port:address` entries its fetches resolve by (curl `--resolve`), for the gates' names. */
  resolve: string[];
}

export async function startAttestor(options: AttestorOptions): Promise<Attestor> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const app = await buildTrustApp(
    readTrustConfig({
      PROTO_TEST_HOOKS: "1",
      TRUST_PUBLIC_URL: url,
      TRUST_DATABASE_URL: `sqlite:${join(options.dir, "trust.db")}`,
      TRUST_KEY_ENCRYPTION_KEY: Buffer.alloc(32, 7).toString("base64url"),
      TRUST_PSEUDONYM_KEY: Buffer.alloc(32, 9).toString("base64url"),
      TRUST_RATE_LIMITS: RELAXED_TRUST_LIMITS,
      LOG_LEVEL: "warn",
      // The attestor reads a resource's declared permissions (the scopes it may grant) from the
      // gate's discovery document: on this machine, under the test CA.
      PROTO_FETCH_ALLOW_PRIVATE: "1",
      PROTO_FETCH_RESOLVE: options.resolve.join(","),
    }),
    { logStream: quietStream(), fetchCa: options.caPem },
  );
  await app.app.listen({ port, host: "127.0.0.1" });

  const post = async (path: string, body: Record<string, unknown>) => {
    const response = await fetch(`${url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    return { status: response.status, json: (await response.json()) as Record<string, unknown> };
  };
  const expectOk = (what: string, answer: { status: number; json: Record<string, unknown> }) => {
    if (answer.status !== 200) throw new Error(`${what} answered ${answer.status}: ${JSON.stringify(answer.json)}`);
    return answer.json;
  };

  return {
    url,
    app,
    hook: post,
    async linkKey(email) {
      const { privateKey, publicKey } = generateKeyPairSync("ed25519");
      const raw = rawPublicKey(publicKey);
      const did = encodeDidKey(raw);
      const started = expectOk(
        "link start",
        await post("/v1/link/start", { agent_did: did, agent_pubkey_b64: Buffer.from(raw).toString("base64url") }),
      );
      const reqId = String(started.req_id);
      expectOk("link confirm", await post("/__test/link/confirm", { req_id: reqId, email }));
      const signature = sign(null, Buffer.from(reqId, "utf8"), privateKey).toString("base64url");
      const polled = expectOk("link poll", await post("/v1/link/poll", { req_id: reqId, sig_b64: signature }));
      if (polled.state !== "confirmed") throw new Error(`the link did not confirm: ${JSON.stringify(polled)}`);
      return { did, pem: privateKey.export({ type: "pkcs8", format: "pem" }).toString() };
    },
    close: () => app.close(),
  };
}

/** Links an SDK agent to the person `email` at `attestor`, confirmed through its test hook. */
export async function linkAgent(agent: Agent, attestor: Attestor, email: string): Promise<void> {
  const request = await agent.attestor().linkStart({ label: "gate test agent" });
  const confirmed = await attestor.hook("/__test/link/confirm", { req_id: request.req_id, email });
  if (confirmed.status !== 200)
    throw new Error(`link confirm answered ${confirmed.status}: ${JSON.stringify(confirmed.json)}`);
  const polled = await agent.attestor().pollOnce(request.req_id);
  if (polled.state !== "confirmed") throw new Error(`the link did not confirm: ${polled.state}`);
}

export interface RunningGate {
  gate: Gate;
  close(): Promise<void>;
}

/**
 * A gate started from `yaml`, written to `dir/proto-gate.yaml` and loaded as `proto-gate` loads
 * it, serving HTTPS itself on 127.0.0.1:`port` with the certificate given. `webBotAuth`: where the
 * kit may fetch Web Bot Auth key directories (here: a host on this machine, under the test CA).
 */
export async function startGate(
  dir: string,
  yaml: string,
  port: number,
  tls: { cert: string; key: string },
  options: Pick<GateOptions, "webBotAuth"> = {},
): Promise<RunningGate> {
  const file = join(dir, "proto-gate.yaml");
  writeFileSync(file, yaml);
  const gate = await createGate(loadConfigFile(file, {}), {
    logger: pino({ level: "silent" }),
    tls,
    ...(options.webBotAuth === undefined ? {} : { webBotAuth: options.webBotAuth }),
  });
  await new Promise<void>((resolve) => gate.server.listen(port, "127.0.0.1", resolve));
  return { gate, close: () => gate.close() };
}

// --- a Web Bot Auth operator we do not run ---

export interface WebBotAuthOperator {
  /** Its key directory's URL: `https://HOST:PORT/.well-known/http-message-signatures-directory`. */
  directory: string;
  /** The did:key of its Ed25519 key (what a verifier names a signed agent by). */
  did: string;
  /** The key's RFC 7638 thumbprint, its signatures' `keyid` and its `kid` in the directory. */
  keyid: string;
  /** The HTTPS host serving the directory, with every request it received. */
  host: HttpsHost;
  /**
   * Headers of a request to `url` signed by `web-bot-auth` with its defaults (`@authority` and
   * `signature-agent`, tag `web-bot-auth`), `Signature-Agent` naming the directory (dictionary form).
   */
  sign(method: string, url: string): Promise<Record<string, string>>;
  close(): Promise<void>;
}

/**
 * A Web Bot Auth operator: an Ed25519 key made and used by `web-bot-auth` (its `signerFromJWK`),
 * listed in a key directory served at the well-known path of an HTTPS host named `hostname`
 * (certificate from `ca`; pin it with `host.resolveEntries()`).
 */
export async function startWebBotAuthOperator(ca: TestCA, hostname: string): Promise<WebBotAuthOperator> {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const privateJwk = privateKey.export({ format: "jwk" });
  const signer = await signerFromJWK(privateJwk);
  const host = await startHttpsHost({ ca, hostnames: [hostname] });
  const { kty, crv, x } = privateJwk;
  host.route(HTTP_MESSAGE_SIGNATURES_DIRECTORY, {
    headers: { "content-type": MediaType.HTTP_MESSAGE_SIGNATURES_DIRECTORY, "cache-control": "max-age=300" },
    body: JSON.stringify({ keys: [{ kty, crv, x, kid: signer.keyid, use: "sig" }] }),
  });
  const directory = `${host.origin()}${HTTP_MESSAGE_SIGNATURES_DIRECTORY}`;
  return {
    directory,
    did: encodeDidKey(rawPublicKey(publicKey)),
    keyid: signer.keyid,
    host,
    async sign(method, url) {
      // The package covers Signature-Agent only when the message already carries it.
      const headers = { "signature-agent": `sig1="${directory}"` };
      const created = new Date();
      const signed = await signatureHeaders({ method, url, headers }, signer, {
        created,
        expires: new Date(created.getTime() + 60_000),
      });
      return { ...headers, signature: signed.Signature, "signature-input": signed["Signature-Input"] };
    },
    close: () => host.close(),
  };
}

// --- the MCP application behind a gate ---

export interface McpApp {
  port: number;
  stop(): Promise<void>;
}

/** The identity headers of a request, by lower-case name (what the `whoami` tool answers). */
function identityOf(headers: IncomingHttpHeaders): Record<string, string> {
  const seen: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (name.startsWith("proto-gate-") && value !== undefined) seen[name] = String(value);
  }
  return seen;
}

/**
 * An MCP server at `/mcp` (Streamable HTTP, stateless: a server and a transport per request, as
 * the notes example runs it) that trusts the gate in front: it checks no token itself, and its
 * `whoami` tool answers the `Proto-Gate-*` headers the request carried, and whether the request
 * still carried an `Authorization` header. Answers are server-sent event streams (the SDK's
 * default), so they pass back through the gate streamed.
 */
export async function startMcpApp(port: number): Promise<McpApp> {
  const server: Server = createServer((request, response) => {
    if (new URL(request.url ?? "/", "http://app").pathname !== "/mcp") {
      response.writeHead(404, { "content-type": "text/plain" }).end("not here");
      return;
    }
    const seen = { identity: identityOf(request.headers), authorization: request.headers.authorization !== undefined };
    const mcp = new McpServer({ name: "gate-interop", version: "0.1.0" });
    mcp.registerTool(
      "whoami",
      { title: "Who am I", description: "The caller as the gate in front of this server named it." },
      async () => ({ content: [{ type: "text", text: JSON.stringify(seen) }] }),
    );
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    response.on("close", () => {
      void transport.close();
      void mcp.close();
    });
    mcp
      .connect(transport)
      .then(() => transport.handleRequest(request, response))
      .catch((error: unknown) => {
        if (!response.headersSent) response.writeHead(500, { "content-type": "text/plain" });
        response.end(error instanceof Error ? error.message : String(error));
      });
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  return {
    port,
    stop: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

// --- a person's MCP client, authorised at the attestor ---

/**
 * The person's MCP client, as a desktop assistant would be: it registers itself (RFC 7591) and
 * sends the person to the authorization URL; the person signs in at the attestor by the link it
 * mails (its development outbox) and allows the client, with no browser but a cookie jar. The
 * code comes back in the redirect to the client's loopback callback, read off its Location.
 */
export class PersonClient {
  readonly #attestor: Attestor;
  readonly #email: string;
  readonly #redirect = "http://127.0.0.1:9/callback";
  #client: OAuthClientInformationMixed | undefined;
  #tokens: OAuthTokens | undefined;
  #verifier = "";
  #code: string | undefined;
  /** The authorization URLs the SDK sent the person to. */
  readonly authorizations: URL[] = [];

  constructor(attestor: Attestor, email: string) {
    this.#attestor = attestor;
    this.#email = email;
  }

  /** The code of the last authorization the person allowed. */
  code(): string {
    if (this.#code === undefined) throw new Error("the person allowed no authorization yet");
    return this.#code;
  }

  provider(): OAuthClientProvider {
    const self = this;
    return {
      get redirectUrl() {
        return self.#redirect;
      },
      get clientMetadata(): OAuthClientMetadata {
        return {
          client_name: "Desk Assistant",
          redirect_uris: [self.#redirect],
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
        self.authorizations.push(url);
        self.#code = await self.#authorize(url);
      },
      saveCodeVerifier: (verifier: string) => {
        self.#verifier = verifier;
      },
      codeVerifier: () => self.#verifier,
    };
  }

  /** The person at the attestor: signed out, so sign in by e-mail, then Allow on the consent page. */
  async #authorize(url: URL): Promise<string> {
    const attestor = this.#attestor;
    const b = new Browserless(attestor.url);
    const first = await b.get(url.href);
    if (first.status !== 303 || !first.location?.startsWith("/signin")) {
      throw new Error(`the authorization URL answered ${first.status} to ${first.location}: ${first.text}`);
    }
    const page = await b.get(first.location);
    const sent = await b.send("POST", "/signin/email", {
      form: { _csrf: field(page.text, "_csrf"), next: field(page.text, "next"), email: this.#email },
    });
    if (sent.status !== 200) throw new Error(`the sign-in form answered ${sent.status}: ${sent.text}`);
    const mail = (attestor.app.mailer as OutboxMailer).entries.find((m) => m.to === this.#email);
    const link =
      mail === undefined ? undefined : /https?:\/\/\S+\/signin\/email\/verify\?token=\S+/.exec(mail.text)?.[0];
    if (link === undefined) throw new Error(`no sign-in link was mailed to ${this.#email}`);
    const opened = await b.get(link);
    const signedIn = await b.send("POST", "/signin/email/verify", {
      form: { _csrf: field(opened.text, "_csrf"), token: field(opened.text, "token") },
    });
    if (signedIn.status !== 303 || signedIn.location === undefined) {
      throw new Error(`signing in answered ${signedIn.status}: ${signedIn.text}`);
    }
    const consent = await b.get(signedIn.location);
    const allowed = await answerConsent(b, consent, "allow");
    const back = allowed.location === undefined ? undefined : new URL(allowed.location);
    const code = back?.searchParams.get("code");
    if (back === undefined || !back.href.startsWith(this.#redirect) || !code) {
      throw new Error(`allowing answered ${allowed.status} to ${allowed.location}: ${allowed.text}`);
    }
    return code;
  }
}
