/**
 * The real attestor and directory (built from @proto/server, test hooks on), each behind a TLS
 * front on 127.0.0.1 with a certificate from the test CA, so agents reach them over HTTPS as in
 * production; and service hosts (testkit HTTPS hosts) that serve discovery documents, the proof
 * file from a folder the CLI writes, and an API that verifies signatures and attestations.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { connect, createServer as createNetServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { Writable } from "node:stream";
import { createServer as createTlsServer } from "node:tls";
import { fileURLToPath } from "node:url";
import {
  ATTESTATION_HEADER,
  createAttestationVerifier,
  createRequestVerifier,
  errorEnvelope,
  MemoryNonceStore,
  ProtoError,
  protoError,
  RemoteKeySet,
} from "@proto/protocol";
import { buildDirectoryApp, buildTrustApp, readDirectoryConfig, readTrustConfig } from "@proto/server";
import {
  createTestCA,
  DISCOVERY_PATH,
  type HttpsHost,
  PROOF_PATH,
  startHttpsHost,
  type TestCA,
  type TestFetch,
  testFetch,
} from "@proto/testkit";

/** What `buildTrustApp` answers. */
export type TrustApp = Awaited<ReturnType<typeof buildTrustApp>>;

export const AGENT_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const CLI = join(AGENT_DIR, "src/cli.ts");

const quiet = () =>
  new Writable({
    write(_chunk, _encoding, done) {
      done();
    },
  });

/** Everything from 127.0.0.1: limits high enough that no suite meets them (the limiter stays on). */
const RELAXED_TRUST_LIMITS = "link_start=100000/60,link_start_agent=100000/3600,link_poll=100000/60,token=100000/60";

export interface TlsFront {
  port: number;
  url: string;
  close(): Promise<void>;
}

/** Terminates TLS on 127.0.0.1 (IP SAN certificate) and pipes the bytes to a plain HTTP port. */
export async function startTlsFront(ca: TestCA, upstreamPort: () => number): Promise<TlsFront> {
  const { certPem, keyPem } = await ca.issue(["127.0.0.1"]);
  const sockets = new Set<Socket>();
  const server = createTlsServer({ key: keyPem, cert: certPem }, (socket) => {
    const upstream = connect(upstreamPort(), "127.0.0.1");
    sockets.add(upstream);
    upstream.once("close", () => sockets.delete(upstream));
    socket.pipe(upstream).pipe(socket);
    socket.on("error", () => upstream.destroy());
    upstream.on("error", () => socket.destroy());
    socket.on("close", () => upstream.destroy());
    upstream.on("close", () => socket.destroy());
  });
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  server.on("tlsClientError", () => {});
  await new Promise<void>((ready) => server.listen(0, "127.0.0.1", ready));
  const { port } = server.address() as { port: number };
  return {
    port,
    url: `https://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((done) => {
        server.close(() => done());
        for (const socket of sockets) socket.destroy();
      }),
  };
}

/** A real attestor (our trust server, test hooks on) behind its TLS front. */
export interface Attestor {
  /** `{trust_url}`: `https://127.0.0.1:PORT`. */
  url: string;
  /** The attestor itself: its domain service and database, for what a person does on its pages. */
  trust: TrustApp;
  hook(path: string, body: Record<string, unknown>): Promise<{ status: number; json: Record<string, unknown> }>;
  close(): Promise<void>;
}

/** Starts an attestor with its own database in `dir` (its signing keys are its own). */
export async function startAttestor(ca: TestCA, dir: string): Promise<Attestor> {
  let port = 0;
  const front = await startTlsFront(ca, () => port);
  const trust = await buildTrustApp(
    readTrustConfig({
      PROTO_TEST_HOOKS: "1",
      TRUST_PUBLIC_URL: front.url,
      TRUST_DATABASE_URL: `sqlite:${join(dir, `trust-${front.port}.db`)}`,
      TRUST_KEY_ENCRYPTION_KEY: Buffer.alloc(32, 7).toString("base64url"),
      TRUST_PSEUDONYM_KEY: Buffer.alloc(32, 9).toString("base64url"),
      TRUST_RATE_LIMITS: RELAXED_TRUST_LIMITS,
      // The services whose permissions it reads (approvals) run on this machine, under the test CA.
      PROTO_FETCH_ALLOW_PRIVATE: "1",
      LOG_LEVEL: "warn",
    }),
    { logStream: quiet(), fetchCa: ca.certPem },
  );
  await trust.app.listen({ port: 0, host: "127.0.0.1" });
  port = (trust.app.server.address() as { port: number }).port;
  const fetch = testFetch(ca, {});
  return {
    url: front.url,
    trust,
    async hook(path, body) {
      const response = await fetch(`${front.url}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      return { status: response.status, json: (await response.json()) as Record<string, unknown> };
    },
    async close() {
      await trust.close();
      await front.close();
      await fetch.close();
    },
  };
}

export interface ServiceSite {
  host: HttpsHost;
  origin: string;
  did: string;
  discoveryUrl: string;
  /** The folder whose `.well-known/proto-registry-proof` the host serves (the CLI's `--proof-dir`). */
  proofDir: string;
  /** Requests the API accepted, with what the verifiers said (`attestor`: whose key verified the attestation). */
  accepted: {
    keyid: string;
    attested: boolean;
    verification: string | undefined;
    attestor: string | undefined;
    body: string;
  }[];
  document(overrides?: Record<string, unknown>): Record<string, unknown>;
}

export interface TestEnv {
  ca: TestCA;
  /** The CA file for NODE_EXTRA_CA_CERTS of spawned CLIs. */
  caFile: string;
  /** A fetch trusting the test CA, with the `*.test` names pinned. */
  fetch: TestFetch;
  trustUrl: string;
  /** The attestor at `trustUrl`. */
  attestor: Attestor;
  directoryUrl: string;
  /** `https://localhost:PORT`: reachable by name from a spawned CLI, attested_only. */
  site: ServiceSite;
  /** Names `a.test`, `b.test`, `c.test`, `free.test` on one host (SDK tests; reached through `fetch`). */
  named: Record<string, ServiceSite>;
  /** `https://localhost:PORT2`, serving a malformed discovery document. */
  broken: HttpsHost;
  /**
   * `https://localhost:PORT3`, attested_only, whose discovery document (in the upstream SDK's
   * style) gives absolute endpoint URLs: `accounts` on another host (`splitApi`),
   * `owner_invitation` on its own origin, `claim_completion` as a path, `claim_page` on a third
   * host nobody serves. Reachable by name from a spawned CLI.
   */
  split: ServiceSite;
  /** `https://localhost:PORT4`: the API host of `split` (its `did` is split's, the audience). */
  splitApi: ServiceSite;
  trustHook(path: string, body: Record<string, unknown>): Promise<{ status: number; json: Record<string, unknown> }>;
  /** Another attestor, whose attestations the sites accept too (closed with the environment). */
  startAttestor(): Promise<Attestor>;
  close(): Promise<void>;
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}

function makeDocument(origin: string, did: string, overrides: Record<string, unknown>): Record<string, unknown> {
  return {
    proto_version: "0.1",
    service_did: did,
    endpoints: {
      accounts: "/proto/v1/accounts",
      owner_invitation: "/proto/v1/accounts/me/owner-invitation",
      claim_page: `${origin}/claim`,
      claim_completion: "/proto/v1/claim",
    },
    signature_algorithms: ["ed25519"],
    billing: { unclaimed_mode: "attested_only" },
    ...overrides,
  };
}

export async function startTestEnv(): Promise<TestEnv> {
  const ca = await createTestCA();
  const caFile = ca.writeCertFile();
  const temp = mkdtempSync(join(tmpdir(), "proto-agent-test-"));

  // --- the attestor, behind its TLS front ---
  const attestor = await startAttestor(ca, temp);
  const attestors = [attestor];

  // --- service hosts ---
  const fetch = testFetch(ca, {});
  const verifierOf = (url: string) =>
    createAttestationVerifier({
      keySet: new RemoteKeySet(`${url}/.well-known/jwks.json`, { fetch: testFetch(ca) }),
    });
  /** Attestation verifiers, one per attestor the sites accept (by key set: all say iss proto-trust). */
  const trusted = [{ url: attestor.url, verifier: verifierOf(attestor.url) }];
  const verifyAttestation = async (jwt: string, expected: { audience: string; agentDid: string }) => {
    let refusal: unknown;
    for (const { url, verifier } of trusted) {
      try {
        return { attestor: url, verified: await verifier.verify(jwt, expected) };
      } catch (error) {
        refusal = error;
      }
    }
    throw refusal;
  };

  const siteHost = await startHttpsHost({ ca, hostnames: ["localhost"] });
  const namedHost = await startHttpsHost({ ca, hostnames: ["a.test", "b.test", "c.test", "free.test"] });
  const broken = await startHttpsHost({ ca, hostnames: ["localhost"] });
  broken.serveDiscovery({ proto_version: "0.1", service_did: "did:web:localhost", endpoints: {} });

  const makeSite = (host: HttpsHost, hostname: string): ServiceSite => {
    const origin = host.origin(hostname);
    const did = `did:web:${hostname}%3A${host.port}`;
    const proofDir = mkdtempSync(join(temp, `site-${hostname}-`));
    const site: ServiceSite = {
      host,
      origin,
      did,
      discoveryUrl: `${origin}${DISCOVERY_PATH}`,
      proofDir,
      accepted: [],
      document: (overrides = {}) => makeDocument(origin, did, overrides),
    };
    return site;
  };

  /** The API of a site: verifies the signature, and the attestation when one is required or sent. */
  const api =
    (site: ServiceSite, requireAttestation: boolean) =>
    async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
      const verifier = apiVerifiers.get(site) ?? createRequestVerifier({ nonceStore: new MemoryNonceStore() });
      apiVerifiers.set(site, verifier);
      try {
        const body = await readBody(req);
        const verified = await verifier.verify({
          method: req.method ?? "GET",
          url: `${site.origin}${req.url ?? "/"}`,
          headers: req.headers,
          body,
        });
        const jwt = req.headers[ATTESTATION_HEADER];
        let verification: string | undefined;
        let attestorUrl: string | undefined;
        if (typeof jwt === "string") {
          const result = await verifyAttestation(jwt, { audience: site.did, agentDid: verified.keyid });
          verification = result.verified.verification;
          attestorUrl = result.attestor;
        } else if (requireAttestation) {
          throw protoError("attestation_required");
        }
        const text = body.toString("utf8");
        site.accepted.push({
          keyid: verified.keyid,
          attested: typeof jwt === "string",
          verification,
          attestor: attestorUrl,
          body: text,
        });
        sendJson(res, 200, { agent: verified.keyid, verification: verification ?? null, echo: text });
      } catch (error) {
        if (error instanceof ProtoError) sendJson(res, error.status, error.toEnvelope());
        else sendJson(res, 500, errorEnvelope("internal_error", String(error)));
      }
    };
  const apiVerifiers = new Map<ServiceSite, ReturnType<typeof createRequestVerifier>>();

  const site = makeSite(siteHost, "localhost");
  siteHost.serveDiscovery(site.document());
  siteHost.route(PROOF_PATH, (_req, res) => {
    try {
      const token = readFileSync(join(site.proofDir, ".well-known", "proto-registry-proof"));
      res.writeHead(200, { "content-type": "text/plain" }).end(token);
    } catch {
      res.writeHead(404, { "content-type": "text/plain" }).end("no proof");
    }
  });
  siteHost.route("/proto/v1/hello", api(site, true));

  // A service whose signed endpoints are absolute URLs, one of them on an API host of its own.
  const splitHost = await startHttpsHost({ ca, hostnames: ["localhost"] });
  const splitApiHost = await startHttpsHost({ ca, hostnames: ["localhost"] });
  const split = makeSite(splitHost, "localhost");
  const splitApi: ServiceSite = { ...makeSite(splitApiHost, "localhost"), did: split.did };
  splitHost.serveDiscovery(
    split.document({
      endpoints: {
        accounts: `${splitApi.origin}/proto/v1/accounts`,
        owner_invitation: `${split.origin}/proto/v1/hello`,
        claim_page: "https://claims.example/claim",
        claim_completion: "/proto/v1/claim",
      },
    }),
  );
  splitHost.route("/proto/v1/hello", api(split, true));
  for (const path of ["/proto/v1/accounts", "/proto/v1/accounts/me"]) splitApiHost.route(path, api(splitApi, true));

  // Named sites share one host: routes dispatch on the Host header.
  const named: Record<string, ServiceSite> = {};
  for (const name of namedHost.hostnames) named[name.replace(/\.test$/, "")] = makeSite(namedHost, name);
  const byHost = (req: IncomingMessage) => named[(req.headers.host ?? "").split(":")[0]?.replace(/\.test$/, "") ?? ""];
  namedHost.route(DISCOVERY_PATH, (req, res) => {
    const target = byHost(req);
    if (target === undefined) return sendJson(res, 404, errorEnvelope("not_found", "no such site"));
    const free = target === named.free;
    sendJson(res, 200, target.document(free ? { billing: { unclaimed_mode: "free" } } : {}));
  });
  namedHost.route(PROOF_PATH, (req, res) => {
    const target = byHost(req);
    try {
      const token = readFileSync(join(target?.proofDir ?? "/nonexistent", ".well-known", "proto-registry-proof"));
      res.writeHead(200, { "content-type": "text/plain" }).end(token);
    } catch {
      res.writeHead(404, { "content-type": "text/plain" }).end("no proof");
    }
  });
  namedHost.route("/proto/v1/hello", (req, res) => {
    const target = byHost(req);
    if (target === undefined) return sendJson(res, 404, errorEnvelope("not_found", "no such site"));
    return api(target, true)(req, res);
  });

  // --- the directory, behind its TLS front ---
  let directoryPort = 0;
  const directoryFront = await startTlsFront(ca, () => directoryPort);
  const directory = await buildDirectoryApp(
    readDirectoryConfig({
      PROTO_TEST_HOOKS: "1",
      PROTO_FETCH_ALLOW_PRIVATE: "1",
      PROTO_FETCH_RESOLVE: [siteHost.resolveEntries(), namedHost.resolveEntries()].join(","),
      DIRECTORY_DATABASE_URL: `sqlite:${join(temp, "directory.db")}`,
      DIRECTORY_PUBLIC_URL: directoryFront.url,
      DIRECTORY_ADMIN_TOKEN: "admin-token-for-tests-0123456789",
      DIRECTORY_REVALIDATE_TICK_SECONDS: "0",
      LOG_LEVEL: "warn",
    }),
    { logStream: quiet(), fetchCa: ca.certPem },
  );
  await directory.app.listen({ port: 0, host: "127.0.0.1" });
  directoryPort = (directory.app.server.address() as { port: number }).port;

  const pinnedFetch = testFetch(ca, { resolve: namedHost.resolveEntries() });

  return {
    ca,
    caFile,
    fetch: pinnedFetch,
    trustUrl: attestor.url,
    attestor,
    directoryUrl: directoryFront.url,
    site,
    named,
    broken,
    split,
    splitApi,
    trustHook: (path, body) => attestor.hook(path, body),
    async startAttestor() {
      const another = await startAttestor(ca, temp);
      attestors.push(another);
      trusted.push({ url: another.url, verifier: verifierOf(another.url) });
      return another;
    },
    async close() {
      for (const each of attestors) await each.close();
      await directory.close();
      await directoryFront.close();
      await siteHost.close();
      await namedHost.close();
      await broken.close();
      await splitHost.close();
      await splitApiHost.close();
      await fetch.close();
      await pinnedFetch.close();
      rmSync(temp, { recursive: true, force: true });
    },
  };
}

// --- the CLI as a child process ---

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface CliOptions {
  home: string;
  caFile: string;
  env?: Record<string, string>;
  input?: string;
}

export interface RunningCli {
  /** Resolves with the first line (of stdout or stderr) that matches. */
  line(stream: "stdout" | "stderr", match: (line: string) => boolean): Promise<string>;
  done: Promise<CliResult>;
  kill(): void;
  /** Ctrl-C: SIGINT, as a terminal sends it. */
  interrupt(): void;
}

/** Starts `proto ...` (TypeScript through tsx) with its own PROTO_HOME and the test CA trusted. */
export function startCli(args: string[], options: CliOptions): RunningCli {
  const env: NodeJS.ProcessEnv = { ...process.env, PROTO_HOME: options.home, NODE_EXTRA_CA_CERTS: options.caFile };
  for (const name of ["PROTO_ATTESTOR_URL", "PROTO_DIRECTORY_URL", "NODE_TEST_CONTEXT", "NODE_OPTIONS"])
    delete env[name];
  Object.assign(env, options.env);
  const child = spawn(process.execPath, ["--conditions=source", "--import", "tsx", CLI, ...args], {
    cwd: AGENT_DIR,
    env,
    stdio: ["pipe", "pipe", "pipe"],
  });
  const output = { stdout: "", stderr: "" };
  const waiters: { stream: "stdout" | "stderr"; match: (line: string) => boolean; resolve: (line: string) => void }[] =
    [];
  const check = (stream: "stdout" | "stderr") => {
    const lines = output[stream].split("\n");
    for (const waiter of [...waiters]) {
      if (waiter.stream !== stream) continue;
      const found = lines.find((line) => waiter.match(line));
      if (found !== undefined) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve(found);
      }
    }
  };
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    output.stdout += chunk;
    check("stdout");
  });
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
    output.stderr += chunk;
    check("stderr");
  });
  child.stdin.end(options.input ?? "");
  // A wedged child must not hang the suite.
  const killer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  const done = new Promise<CliResult>((resolveDone) => {
    child.once("close", (code) => {
      clearTimeout(killer);
      resolveDone({ code, ...output });
    });
  });
  return {
    line(stream, match) {
      return new Promise<string>((resolveLine, reject) => {
        waiters.push({ stream, match, resolve: resolveLine });
        check(stream);
        done.then((result) =>
          reject(new Error(`the CLI exited (${result.code}) first:\n${result.stdout}\n${result.stderr}`)),
        );
      });
    },
    done,
    kill: () => child.kill("SIGKILL"),
    interrupt: () => child.kill("SIGINT"),
  };
}

export function runCli(args: string[], options: CliOptions): Promise<CliResult> {
  return startCli(args, options).done;
}

/** Parses the stdout JSON document of a `--json` run. */
// biome-ignore lint/suspicious/noExplicitAny: CLI documents of many shapes, asserted field by field
export function jsonOf(result: CliResult): any {
  try {
    return JSON.parse(result.stdout);
  } catch {
    throw new Error(`stdout is not one JSON document (exit ${result.code}):\n${result.stdout}\n${result.stderr}`);
  }
}

/** A fresh agent home folder (removed at exit). */
export function tempHome(): string {
  const dir = mkdtempSync(join(tmpdir(), "proto-home-"));
  process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
  return join(dir, "home");
}

/** A loopback port nothing listens on (connections to it are refused). */
export async function closedPort(): Promise<number> {
  const server = createNetServer();
  await new Promise<void>((ready) => server.listen(0, "127.0.0.1", ready));
  const { port } = server.address() as { port: number };
  await new Promise<void>((done) => server.close(() => done()));
  return port;
}
