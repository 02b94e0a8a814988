import { createTestCA, DISCOVERY_PATH, type TestCA } from "@proto/testkit";
import { buildDirectoryApp, type DirectoryApp } from "../../src/directory/app.js";
import { readDirectoryConfig } from "../../src/directory/config.js";
import { dropRedisPrefix, type HttpResult, httpRequest, listenLocal, quietLog, type RequestOptions } from "./http.js";
import { type Site, type SiteHost, startSiteHost } from "./sites.js";
import { createTestDatabase, REDIS_URL, type StoreVariant, type TestDatabase, uniquePrefix } from "./stores.js";

export type { HttpResult, RequestOptions, Site };

export const ADMIN_TOKEN = "admin-token-for-tests-0123456789";

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
  /**
   * Another directory instance on the same store and configuration, `env` added (closed with the
   * harness).
   */
  replica(env?: Record<string, string>): Promise<DirectoryReplica>;
  close(): Promise<void>;
}

export interface DirectoryReplica {
  app: DirectoryApp;
  request(method: string, path: string, options?: RequestOptions): Promise<HttpResult>;
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
  const ca = await createTestCA();
  const sites: SiteHost = await startSiteHost(ca, options.sites ?? 24);

  const database: TestDatabase = await createTestDatabase(variant.engine);
  const redisPrefix = uniquePrefix("dir");
  const env: Record<string, string> = {
    PROTO_TEST_HOOKS: "1",
    PROTO_FETCH_ALLOW_PRIVATE: "1",
    PROTO_FETCH_RESOLVE: [sites.resolveEntries(), ...(options.extraResolve ?? [])].join(","),
    DIRECTORY_DATABASE_URL: database.url,
    DIRECTORY_PUBLIC_URL: "https://directory.test",
    DIRECTORY_ADMIN_TOKEN: ADMIN_TOKEN,
    DIRECTORY_REVALIDATE_TICK_SECONDS: "0",
    LOG_LEVEL: "warn",
    ...(variant.redis && REDIS_URL ? { REDIS_URL } : {}),
    ...options.env,
  };
  const build = (extra: Record<string, string> = {}) =>
    buildDirectoryApp(readDirectoryConfig({ ...env, ...extra }), {
      logStream: quietLog(),
      fetchCa: ca.certPem,
      redisPrefix,
    });
  const app = await build();
  const url = await listenLocal(app.app);
  const replicas: DirectoryReplica[] = [];

  const harness: DirectoryHarness = {
    url,
    databaseUrl: database.url,
    variant,
    ca,
    app,
    site: () => sites.site(),
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
      if (!site.handles(DISCOVERY_PATH)) site.serveDiscovery(site.document());
      const created = await harness.request("POST", "/v1/listings", {
        body: { discovery_url: site.discoveryUrl, challenge_token: challenge.json.challenge_token, ...extra },
      });
      if (created.status !== 201 && created.status !== 200) throw new Error(`submit failed: ${created.text}`);
      return { site, token: created.json.session_token, did: created.json.service_did };
    },
    async replica(extra = {}) {
      const other = await build(extra);
      const otherUrl = await listenLocal(other.app);
      let closed: Promise<void> | undefined;
      const replica: DirectoryReplica = {
        app: other,
        request: (method, path, options) => httpRequest(otherUrl, method, path, options),
        close: () => {
          closed ??= other.close();
          return closed;
        },
      };
      replicas.push(replica);
      return replica;
    },
    async close() {
      for (const replica of replicas) await replica.close();
      await app.close();
      await sites.close();
      await database.drop();
      if (variant.redis) await dropRedisPrefix(redisPrefix);
    },
  };
  return harness;
}

/** `encodeURIComponent`, the way a client puts a DID in a path. */
export const didPath = (did: string) => `/v1/listings/${encodeURIComponent(did)}`;

const DAY = 86400;

/** A site whose discovery document now fails, made stale by three daily revalidation passes. */
export async function makeStale(h: DirectoryHarness, site: Site): Promise<void> {
  site.setHandler(DISCOVERY_PATH, (_req, res) => {
    res.writeHead(500, { "content-type": "text/plain" });
    res.end("down");
  });
  for (let day = 0; day < 3; day++) {
    await h.advance(DAY);
    await h.revalidate();
  }
}
