import { createTestCA, DISCOVERY_PATH, type HttpsHost, PROOF_PATH, startHttpsHost, type TestCA } from "@proto/testkit";
import { buildDirectoryApp, type DirectoryApp } from "../../src/directory/app.js";
import { readDirectoryConfig } from "../../src/directory/config.js";
import { dropRedisPrefix, type HttpResult, httpRequest, quietLog, type RequestOptions } from "./http.js";
import { createTestDatabase, REDIS_URL, type StoreVariant, type TestDatabase, uniquePrefix } from "./stores.js";

export type { HttpResult, RequestOptions };

export const ADMIN_TOKEN = "admin-token-for-tests-0123456789";

/** One service host the directory can fetch from: its own hostname, proof and discovery document. */
export interface Site {
  hostname: string;
  /** `hostname:port` as it appears in URLs. */
  authority: string;
  discoveryUrl: string;
  proofUrl: string;
  /** `did:web:{hostname}%3A{port}`: the DID a well-formed document of this host declares. */
  did: string;
  /** A valid discovery document for this host, with overrides merged at the top level. */
  document(overrides?: Record<string, unknown>): Record<string, unknown>;
  serveProof(token: string): void;
  serveDiscovery(doc: unknown): void;
  /** Replaces the handling of one of the two paths (misbehaviours, counters). */
  setHandler(path: typeof PROOF_PATH | typeof DISCOVERY_PATH, handler: SiteHandler): void;
  /** How often each path was fetched. */
  hits: { proof: number; discovery: number };
}

export type SiteHandler = (req: import("node:http").IncomingMessage, res: import("node:http").ServerResponse) => void;

export interface DirectoryHarness {
  url: string;
  /** The store's URL (`sqlite:PATH` or `postgres://...`), for tests that write to it from outside. */
  databaseUrl: string;
  variant: StoreVariant;
  ca: TestCA;
  app: DirectoryApp;
  /** Sites for this suite; each call hands out a fresh one. */
  site(): Site;
  request(method: string, path: string, options?: RequestOptions): Promise<HttpResult>;
  /** Moves the directory's clock forward through the test hook. */
  advance(seconds: number): Promise<void>;
  revalidate(): Promise<Record<string, number>>;
  /** Challenge, proof, submit: a listed site with its session token. */
  register(site?: Site, extra?: Record<string, unknown>): Promise<{ site: Site; token: string; did: string }>;
  close(): Promise<void>;
}

export interface DirectoryHarnessOptions {
  /** How many sites the suite may use (each is a name pinned through PROTO_FETCH_RESOLVE). */
  sites?: number;
  env?: Record<string, string>;
  /**
   * More `host:port:address` entries for PROTO_FETCH_RESOLVE, after the ones pinning the suite's
   * sites (names that must resolve somewhere else: a closed port, a sentinel, another HTTPS host).
   */
  extraResolve?: string[];
}

export async function startDirectoryHarness(
  variant: StoreVariant,
  options: DirectoryHarnessOptions = {},
): Promise<DirectoryHarness> {
  const siteCount = options.sites ?? 24;
  const ca = await createTestCA();
  const hostnames = Array.from({ length: siteCount }, (_, i) => `site${i}.test`);
  const host: HttpsHost = await startHttpsHost({ ca, hostnames });
  const handlers = new Map<string, Map<string, SiteHandler>>();
  const hits = new Map<string, { proof: number; discovery: number }>();
  for (const path of [PROOF_PATH, DISCOVERY_PATH]) {
    host.route(path, (req, res) => {
      const name = (req.headers.host ?? "").split(":")[0] ?? "";
      const counter = hits.get(name);
      if (counter) counter[path === PROOF_PATH ? "proof" : "discovery"]++;
      const handler = handlers.get(name)?.get(path);
      if (handler === undefined) {
        res.writeHead(404, { "content-type": "text/plain" });
        res.end("not found");
        return;
      }
      handler(req, res);
    });
  }

  const database: TestDatabase = await createTestDatabase(variant.engine);
  const redisPrefix = uniquePrefix("dir");
  const env: Record<string, string> = {
    PROTO_TEST_HOOKS: "1",
    PROTO_FETCH_ALLOW_PRIVATE: "1",
    PROTO_FETCH_RESOLVE: [host.resolveEntries(), ...(options.extraResolve ?? [])].join(","),
    DIRECTORY_DATABASE_URL: database.url,
    DIRECTORY_PUBLIC_URL: "https://directory.test",
    DIRECTORY_ADMIN_TOKEN: ADMIN_TOKEN,
    DIRECTORY_REVALIDATE_TICK_SECONDS: "0",
    LOG_LEVEL: "warn",
    ...(variant.redis && REDIS_URL ? { REDIS_URL } : {}),
    ...options.env,
  };
  const app = await buildDirectoryApp(readDirectoryConfig(env), {
    logStream: quietLog(),
    fetchCa: ca.certPem,
    redisPrefix,
  });
  await app.app.listen({ port: 0, host: "127.0.0.1" });
  const address = app.app.server.address();
  if (address === null || typeof address === "string") throw new Error("no address");
  const url = `http://127.0.0.1:${address.port}`;

  let next = 0;
  const harness: DirectoryHarness = {
    url,
    databaseUrl: database.url,
    variant,
    ca,
    app,
    site() {
      if (next >= siteCount) throw new Error(`the suite asked for more than ${siteCount} sites`);
      const hostname = hostnames[next++]!;
      const authority = `${hostname}:${host.port}`;
      const own = new Map<string, SiteHandler>();
      handlers.set(hostname, own);
      const counter = { proof: 0, discovery: 0 };
      hits.set(hostname, counter);
      const did = `did:web:${hostname}%3A${host.port}`;
      return {
        hostname,
        authority,
        discoveryUrl: `https://${authority}${DISCOVERY_PATH}`,
        proofUrl: `https://${authority}${PROOF_PATH}`,
        did,
        hits: counter,
        document: (overrides = {}) => ({
          proto_version: "0.1",
          service_did: did,
          endpoints: {
            accounts: "/proto/v1/accounts",
            owner_invitation: "/proto/v1/accounts/me/owner-invitation",
            claim_page: `https://${authority}/claim`,
            claim_completion: "/proto/v1/claim",
          },
          signature_algorithms: ["ed25519"],
          ...overrides,
        }),
        serveProof(token) {
          own.set(PROOF_PATH, (_req, res) => {
            res.writeHead(200, { "content-type": "text/plain" });
            res.end(token);
          });
        },
        serveDiscovery(doc) {
          own.set(DISCOVERY_PATH, (_req, res) => {
            res.writeHead(200, { "content-type": "application/json" });
            res.end(typeof doc === "string" ? doc : JSON.stringify(doc));
          });
        },
        setHandler(path, handler) {
          own.set(path, handler);
        },
      };
    },
    request: (method, path, options) => httpRequest(url, method, path, options),
    async advance(seconds) {
      const result = await harness.request("POST", "/__test/clock", { body: { advance_seconds: seconds } });
      if (result.status !== 200) throw new Error(`clock hook answered ${result.status}`);
    },
    async revalidate() {
      const result = await harness.request("POST", "/__test/revalidate", { body: {} });
      if (result.status !== 200) throw new Error(`revalidate hook answered ${result.status}: ${result.text}`);
      return result.json;
    },
    async register(site = harness.site(), extra = {}) {
      const challenge = await harness.request("POST", "/v1/listings/challenge", {
        body: { discovery_url: site.discoveryUrl },
      });
      if (challenge.status !== 200) throw new Error(`challenge failed: ${challenge.text}`);
      site.serveProof(challenge.json.challenge_token);
      if (!handlers.get(site.hostname)?.has(DISCOVERY_PATH)) site.serveDiscovery(site.document());
      const created = await harness.request("POST", "/v1/listings", {
        body: { discovery_url: site.discoveryUrl, challenge_token: challenge.json.challenge_token, ...extra },
      });
      if (created.status !== 201 && created.status !== 200) throw new Error(`submit failed: ${created.text}`);
      return { site, token: created.json.session_token, did: created.json.service_did };
    },
    async close() {
      await app.close();
      await host.close();
      await database.drop();
      if (variant.redis) await dropRedisPrefix(redisPrefix);
    },
  };
  return harness;
}

/** `encodeURIComponent`, the way a client puts a DID in a path. */
export const didPath = (did: string) => `/v1/listings/${encodeURIComponent(did)}`;
