/**
 * Issue 8 (operations): Prometheus metrics behind a token, the OpenAPI document and its docs page,
 * and the configuration that refuses unsafe production settings.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { buildDirectoryApp } from "../src/directory/app.js";
import { readDirectoryConfig } from "../src/directory/config.js";
import { ConfigError, type Env } from "../src/platform/env.js";
import { PAGE_CSP } from "../src/platform/html.js";
import { buildTrustApp } from "../src/trust/app.js";
import { readTrustConfig } from "../src/trust/config.js";
import { type DirectoryHarness, didPath, startDirectoryHarness } from "./support/directory.js";
import { type HttpResult, quietLog } from "./support/http.js";
import { createTestDatabase, reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";
import { RELAXED_RATE_LIMITS, startTrustHarness, type TrustHarness } from "./support/trust.js";

reportSkippedVariants();

const METRICS_TOKEN = "metrics-token-for-tests-0123456789";
const KEK = Buffer.alloc(32, 7).toString("base64url");
const PSEUDONYM = Buffer.alloc(32, 9).toString("base64url");

// ---------------------------------------------------------------------------------------------
// Prometheus text

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

function parseMetrics(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(match, `not a Prometheus sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const pair of (match[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[pair[1]!] = pair[2]!;
    }
    samples.push({ name: match[1]!, labels, value: Number(match[3]) });
  }
  return samples;
}

/** The value of the one sample of `name` whose labels include `labels`; undefined when none. */
function sampleValue(samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  const found = samples.filter(
    (s) => s.name === name && Object.entries(labels).every(([key, value]) => s.labels[key] === value),
  );
  assert.ok(found.length <= 1, `${name} ${JSON.stringify(labels)} matches ${found.length} samples`);
  return found[0]?.value;
}

function names(samples: Sample[]): Set<string> {
  return new Set(samples.map((s) => s.name));
}

const COMMON_METRICS = [
  "proto_http_requests_total",
  "proto_http_request_duration_seconds_bucket",
  "proto_http_request_duration_seconds_sum",
  "proto_http_request_duration_seconds_count",
  "proto_rate_limit_rejections_total",
  // Default process metrics.
  "process_cpu_seconds_total",
  "process_start_time_seconds",
  "nodejs_heap_size_used_bytes",
  "nodejs_eventloop_lag_seconds",
];

async function scrape(
  request: (
    m: string,
    p: string,
    o?: { token?: string },
  ) => Promise<{ status: number; text: string; headers: Headers }>,
) {
  const result = await request("GET", "/metrics", { token: METRICS_TOKEN });
  assert.equal(result.status, 200, result.text);
  assert.match(result.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
  assert.equal(result.headers.get("cache-control"), "no-store");
  return { text: result.text, samples: parseMetrics(result.text) };
}

// ---------------------------------------------------------------------------------------------
// OpenAPI and the docs page

const DIRECTORY_SPEC_OPERATIONS = [
  "post /v1/listings/challenge",
  "post /v1/listings",
  "patch /v1/listings/{}",
  "delete /v1/listings/{}",
  "get /v1/listings",
  "get /v1/listings/{}",
  "get /sitemap.xml",
];

const TRUST_SPEC_OPERATIONS = [
  "get /.well-known/jwks.json",
  "post /v1/link/start",
  "post /v1/link/poll",
  "post /v1/token",
  "delete /v1/bindings/{}",
  "get /.well-known/openid-configuration",
  "get /oidc/authorize",
  "post /oidc/token",
];

/** The main endpoints carry a summary, tags and a documented success response. */
const MAIN_ENDPOINTS = {
  directory: DIRECTORY_SPEC_OPERATIONS.filter((op) => op.includes("/v1/")),
  trust: TRUST_SPEC_OPERATIONS.filter((op) => op.includes("/v1/") || op.includes("jwks")),
};

type Requester = (method: string, path: string) => Promise<HttpResult>;

interface Operation {
  summary?: string;
  tags?: string[];
  responses?: Record<string, unknown>;
  parameters?: { in: string }[];
}

async function checkOpenApi(request: Requester, publicUrl: string, expected: string[], main: string[]) {
  const result = await request("GET", "/openapi.json");
  assert.equal(result.status, 200, result.text);
  assert.match(result.headers.get("content-type") ?? "", /^application\/json/);
  const doc = result.json;
  assert.equal(doc.openapi, "3.1.0");
  assert.equal(typeof doc.info?.title, "string");
  assert.equal(typeof doc.info?.version, "string");
  assert.deepEqual(
    doc.servers.map((s: { url: string }) => s.url),
    [publicUrl],
  );
  assert.equal(typeof doc.paths, "object");
  // Every operation, with path parameters written `{}` (the spec names them `{service_did}`).
  const operations = new Map<string, Operation>();
  for (const [path, item] of Object.entries<Record<string, Operation>>(doc.paths)) {
    assert.ok(path.startsWith("/"), path);
    for (const [method, operation] of Object.entries(item)) {
      operations.set(`${method} ${path.replace(/\{[^}]+\}/g, "{}")}`, operation);
      assert.ok(operation.responses && Object.keys(operation.responses).length > 0, `${method} ${path} has responses`);
    }
  }
  for (const op of expected) assert.ok(operations.has(op), `the document lists ${op}`);
  for (const op of main) {
    const operation = operations.get(op);
    assert.ok(operation, op);
    assert.equal(typeof operation.summary, "string", `${op} has a summary`);
    assert.ok((operation.tags?.length ?? 0) > 0, `${op} has tags`);
    assert.ok(
      Object.keys(operation.responses ?? {}).some((status) => /^2\d\d$/.test(status)),
      `${op} documents its success`,
    );
  }
  const declaredTags = new Set(doc.tags.map((t: { name: string }) => t.name));
  for (const [op, operation] of operations) {
    for (const tag of operation.tags ?? []) assert.ok(declaredTags.has(tag), `${op}: tag ${tag} is declared`);
  }
  for (const path of Object.keys(doc.paths)) {
    assert.doesNotMatch(path, /^\/(__test|dev)\//, `${path} is internal`);
    assert.ok(!["/metrics", "/openapi.json"].includes(path) && !path.startsWith("/docs"), `${path} is internal`);
  }
  // Path parameters are documented as such.
  for (const [op, operation] of operations) {
    if (!op.includes("{}")) continue;
    assert.ok(
      operation.parameters?.some((p: { in: string }) => p.in === "path"),
      `${op} documents its path parameter`,
    );
  }
  return doc;
}

async function checkDocsPage(baseUrl: string) {
  for (const path of ["/docs", "/docs/"]) {
    const page = await fetch(`${baseUrl}${path}`);
    assert.equal(page.status, 200);
    assert.match(page.headers.get("content-type") ?? "", /^text\/html/);
    const csp = page.headers.get("content-security-policy") ?? "";
    const directives = new Map(
      csp.split(";").map((d) => {
        const [name, ...values] = d.trim().split(/\s+/);
        return [name, values] as const;
      }),
    );
    assert.deepEqual(directives.get("script-src"), ["'self'"], csp);
    assert.deepEqual(directives.get("default-src"), ["'none'"], csp);
    assert.ok(directives.get("connect-src")?.includes("'self'"), csp);
    assert.deepEqual(directives.get("frame-ancestors"), ["'none'"], csp);
    assert.equal(page.headers.get("x-content-type-options"), "nosniff");
    const html = await page.text();
    assert.match(html, /<div id="swagger-ui">/);
    // Inline scripts would be blocked by script-src 'self': the page has none.
    for (const tag of html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)) {
      assert.match(tag[1]!, /\bsrc="/, "every script is a file");
      assert.equal(tag[2]!.trim(), "", "no inline script");
    }
    const assets = [...html.matchAll(/\b(?:src|href)="([^"]+)"/g)].map((m) => new URL(m[1]!, page.url));
    assert.ok(assets.some((u) => u.pathname.endsWith(".js")));
    assert.ok(assets.some((u) => u.pathname.endsWith(".css")));
    for (const asset of assets) {
      assert.equal(asset.origin, new URL(baseUrl).origin, `${asset.href} comes from this server`);
      const response = await fetch(asset);
      assert.equal(response.status, 200, asset.href);
      if (asset.pathname.endsWith(".js")) assert.match(response.headers.get("content-type") ?? "", /javascript/);
      if (asset.pathname.endsWith(".css")) assert.match(response.headers.get("content-type") ?? "", /^text\/css/);
      await response.arrayBuffer();
    }
    // The initializer points the UI at this server's document, not anywhere else.
    const init = await (await fetch(new URL("./static/swagger-initializer.js", `${baseUrl}/docs/`))).text();
    assert.match(init, /url: resolveUrl\('\.\/json'\)/, "the UI reads this server's document");
    assert.match(init, /validatorUrl: null/, "no third-party validator is called");
  }
  const json = await fetch(`${baseUrl}/docs/json`);
  assert.equal(json.status, 200);
  assert.equal(((await json.json()) as { openapi: string }).openapi, "3.1.0");
}

// ---------------------------------------------------------------------------------------------

for (const variant of STORE_VARIANTS) {
  describe(`directory operations (${variant.name})`, () => {
    let h: DirectoryHarness;
    before(async () => {
      h = await startDirectoryHarness(variant, {
        sites: 4,
        env: { METRICS_TOKEN, DIRECTORY_RATE_LIMITS: "sitemap=1/60" },
      });
    });
    after(() => h.close());

    test("/metrics answers only to the bearer token", async () => {
      const attempts: Record<string, string>[] = [
        {},
        { authorization: `Bearer ${METRICS_TOKEN}x` },
        { authorization: METRICS_TOKEN },
      ];
      for (const headers of attempts) {
        const denied = await h.request("GET", "/metrics", { headers });
        assert.equal(denied.status, 401, denied.text);
        assert.equal(denied.json.error.code, "unauthorized");
        assert.doesNotMatch(denied.text, /proto_http/);
      }
      await scrape(h.request);
    });

    test("after traffic: requests by route pattern, a 429 by scope, revalidation outcomes", async () => {
      const { did, site } = await h.register();
      assert.equal((await h.request("GET", didPath(did))).status, 200);
      assert.equal((await h.request("GET", "/no/such/path-7f3a")).status, 404);
      // One sitemap hit per minute: of three, at least one is refused (at most one window boundary falls between).
      const statuses = [];
      for (let i = 0; i < 3; i++) statuses.push((await h.request("GET", "/sitemap.xml")).status);
      const refused = statuses.filter((s) => s === 429).length;
      assert.ok(refused >= 1, `statuses ${statuses}`);
      await h.advance(86400 + 1);
      const counts = await h.revalidate();
      assert.equal(counts.succeeded, 1);

      const { text, samples } = await scrape(h.request);
      for (const name of [
        ...COMMON_METRICS,
        "proto_directory_revalidations_total",
        "proto_directory_revalidation_transitions_total",
        "proto_directory_revalidation_passes_total",
        "proto_directory_revalidation_last_pass_timestamp_seconds",
      ]) {
        assert.ok(names(samples).has(name), `${name} is exposed`);
      }
      const service = { service: "directory" };
      if (process.platform === "linux") {
        // Resident memory split by kind: the process's own (anon) apart from mapped file pages.
        const rss = sampleValue(samples, "process_resident_memory_bytes", service) as number;
        const anon = sampleValue(samples, "proto_process_resident_memory_bytes", { ...service, kind: "anon" });
        const file = sampleValue(samples, "proto_process_resident_memory_bytes", { ...service, kind: "file" });
        assert.ok(anon !== undefined && anon > 0 && anon < rss * 1.5, `anon ${anon} of ${rss}`);
        assert.ok(file !== undefined && file > 0 && file < rss * 1.5, `file ${file} of ${rss}`);
      }
      assert.equal(
        sampleValue(samples, "proto_http_requests_total", {
          ...service,
          method: "GET",
          route: "/v1/listings/:did",
          status: "200",
        }),
        1,
      );
      assert.equal(
        sampleValue(samples, "proto_http_request_duration_seconds_count", {
          method: "GET",
          route: "/v1/listings/:did",
          status: "200",
        }),
        1,
      );
      assert.equal(
        sampleValue(samples, "proto_http_requests_total", { method: "POST", route: "/v1/listings", status: "201" }),
        1,
      );
      assert.equal(
        sampleValue(samples, "proto_http_requests_total", { method: "GET", route: "/sitemap.xml", status: "429" }),
        refused,
      );
      assert.equal(sampleValue(samples, "proto_rate_limit_rejections_total", { scope: "dir.sitemap" }), refused);
      assert.equal(sampleValue(samples, "proto_http_requests_total", { route: "unmatched", status: "404" }), 1);
      // Labels are route patterns: neither the DID nor the unknown path appears anywhere.
      assert.ok(!text.includes("path-7f3a"), "no raw URL in the labels");
      assert.ok(!text.includes(site.hostname), "no DID in the labels");
      assert.equal(sampleValue(samples, "proto_directory_revalidations_total", { outcome: "succeeded" }), 1);
      assert.equal(sampleValue(samples, "proto_directory_revalidations_total", { outcome: "failed" }), 0);
      assert.equal(sampleValue(samples, "proto_directory_revalidation_passes_total", { result: "completed" }), 1);
      assert.ok(
        (sampleValue(samples, "proto_directory_revalidation_last_pass_timestamp_seconds") ?? 0) > 0,
        "the last pass is stamped",
      );
      // Every sample carries the service label (its own registry).
      assert.ok(samples.every((s) => s.labels.service === "directory"));
    });

    test("a failing listing counts as failed, then stale", async () => {
      const { site } = await h.register();
      site.setHandler("/.well-known/proto", (_req, res) => {
        res.writeHead(500);
        res.end();
      });
      const before = parseMetrics((await scrape(h.request)).text);
      const failedBefore = sampleValue(before, "proto_directory_revalidations_total", { outcome: "failed" }) ?? 0;
      for (let i = 0; i < 3; i++) {
        await h.advance(86400 + 1);
        await h.revalidate();
      }
      const { samples } = await scrape(h.request);
      assert.ok(
        (sampleValue(samples, "proto_directory_revalidations_total", { outcome: "failed" }) ?? 0) >= failedBefore + 3,
      );
      assert.ok(
        (sampleValue(samples, "proto_directory_revalidation_transitions_total", { status: "stale" }) ?? 0) >= 1,
      );
    });

    test("/openapi.json is OpenAPI 3.1 listing the spec's paths, nothing internal", async () => {
      const doc = await checkOpenApi(
        h.request,
        "https://directory.test",
        DIRECTORY_SPEC_OPERATIONS,
        MAIN_ENDPOINTS.directory,
      );
      assert.ok(doc.paths["/healthz"]?.get, "operations routes are documented");
      assert.equal((await h.request("GET", "/openapi.json")).headers.get("access-control-allow-origin"), "*");
    });

    test("/docs serves the UI from this server under its own CSP", async () => {
      await checkDocsPage(h.url);
    });

    test("documenting responses changes no body: a listing keeps every field it had", async () => {
      const { did } = await h.register();
      const read = await h.request("GET", didPath(did));
      assert.deepEqual(read.json._meta, {});
      assert.equal(read.json.discovery_doc.proto_version, "0.1");
      const challenge = await h.request("POST", "/v1/listings/challenge", { body: { discovery_url: "ftp://x" } });
      assert.equal(challenge.status, 400);
      assert.deepEqual(Object.keys(challenge.json), ["error"]);
    });

    test("mirror mode reports its sync state", async () => {
      assert.ok((await h.request("GET", "/v1/listings")).json.listings.length > 0, "the upstream has listings");
      const database = await createTestDatabase("sqlite");
      const mirror = await buildDirectoryApp(
        readDirectoryConfig({
          PROTO_TEST_HOOKS: "1",
          DIRECTORY_DATABASE_URL: database.url,
          DIRECTORY_PUBLIC_URL: "https://mirror.test",
          DIRECTORY_MIRROR_OF: h.url,
          DIRECTORY_MIRROR_POLL_SECONDS: "0",
          LOG_LEVEL: "warn",
          METRICS_TOKEN,
        }),
        { logStream: quietLog() },
      );
      const scrapeMirror = async () => {
        const response = await mirror.app.inject({
          url: "/metrics",
          headers: { authorization: `Bearer ${METRICS_TOKEN}` },
        });
        assert.equal(response.statusCode, 200);
        return parseMetrics(response.body);
      };
      try {
        const before = await scrapeMirror();
        assert.equal(sampleValue(before, "proto_directory_mirror_ready"), 0);
        assert.ok(
          Number.isNaN(sampleValue(before, "proto_directory_mirror_lag_seconds")),
          "no lag before a first pass",
        );
        const synced = await mirror.app.inject({ method: "POST", url: "/__test/mirror/sync", payload: {} });
        assert.equal(synced.statusCode, 200, synced.body);
        const after = await scrapeMirror();
        assert.equal(sampleValue(after, "proto_directory_mirror_ready"), 1);
        assert.ok((sampleValue(after, "proto_directory_mirror_lag_seconds") ?? -1) >= 0);
        assert.equal(sampleValue(after, "proto_directory_mirror_consecutive_failures"), 0);
        assert.ok((sampleValue(after, "proto_directory_mirror_passes_total") ?? 0) >= 1);
        assert.equal(sampleValue(after, "proto_directory_mirror_failed_passes_total"), 0);
        assert.ok((sampleValue(after, "proto_directory_mirror_listings_applied_total") ?? 0) >= 1);
      } finally {
        await mirror.close();
        await database.drop();
      }
    });
  });

  describe(`attestor operations (${variant.name})`, () => {
    let h: TrustHarness;
    before(async () => {
      h = await startTrustHarness(variant, {
        env: { METRICS_TOKEN, TRUST_RATE_LIMITS: `${RELAXED_RATE_LIMITS},read=1/60` },
      });
    });
    after(() => h.close());

    test("/metrics answers only to the bearer token", async () => {
      assert.equal((await h.request("GET", "/metrics")).status, 401);
      assert.equal((await h.request("GET", "/metrics", { token: "wrong-token-0123456789" })).status, 401);
      await scrape(h.request);
    });

    test("after traffic: a mint by method, a 429 by scope, the key set's age", async () => {
      const { agent } = await h.link();
      const minted = await h.mint(agent, "did:web:service.example");
      assert.equal(minted.status, 200, minted.text);
      assert.equal(minted.json.verification, "email");
      const statuses = [];
      for (let i = 0; i < 3; i++) statuses.push((await h.request("GET", "/.well-known/jwks.json")).status);
      const refused = statuses.filter((s) => s === 429).length;
      assert.ok(refused >= 1, `statuses ${statuses}`);

      const { samples } = await scrape(h.request);
      for (const name of [
        ...COMMON_METRICS,
        "proto_trust_mints_total",
        "proto_trust_key_set_age_seconds",
        "proto_trust_published_keys",
      ]) {
        assert.ok(names(samples).has(name), `${name} is exposed`);
      }
      assert.equal(sampleValue(samples, "proto_trust_mints_total", { service: "trust", verification: "email" }), 1);
      assert.equal(sampleValue(samples, "proto_trust_mints_total", { verification: "payment" }), 0);
      assert.equal(
        sampleValue(samples, "proto_http_requests_total", { method: "POST", route: "/v1/token", status: "200" }),
        1,
      );
      assert.equal(sampleValue(samples, "proto_rate_limit_rejections_total", { scope: "trust.read" }), refused);
      assert.equal(
        sampleValue(samples, "proto_http_requests_total", { route: "/.well-known/jwks.json", status: "429" }),
        refused,
      );
      assert.equal(sampleValue(samples, "proto_trust_published_keys"), 1);
      assert.ok(samples.every((s) => s.labels.service === "trust"));
    });

    test("the key set's age follows the clock and resets when a rotation publishes a key", async () => {
      await h.advance(5000);
      const aged = sampleValue((await scrape(h.request)).samples, "proto_trust_key_set_age_seconds") ?? -1;
      assert.ok(aged >= 5000, `age ${aged}`);
      assert.equal((await h.hook("/__test/keys/rotate", {})).status, 200);
      const { samples } = await scrape(h.request);
      const fresh = sampleValue(samples, "proto_trust_key_set_age_seconds") ?? -1;
      assert.ok(fresh >= 0 && fresh < aged, `age ${fresh} after rotation, ${aged} before`);
      assert.equal(sampleValue(samples, "proto_trust_published_keys"), 2);
    });

    test("the per-binding daily limit counts as a rejection of its own scope", async () => {
      const own = await startTrustHarness(variant, {
        env: { METRICS_TOKEN, TRUST_PER_BINDING_DAILY_TOKEN_LIMIT: "1", TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS },
      });
      try {
        const { agent } = await own.link();
        await own.alignTo(86400);
        assert.equal((await own.mint(agent, "did:web:service.example")).status, 200);
        const refused = await own.mint(agent, "did:web:service.example");
        assert.equal(refused.status, 429, refused.text);
        const { samples } = await scrape(own.request);
        assert.equal(sampleValue(samples, "proto_rate_limit_rejections_total", { scope: "trust.token_binding" }), 1);
        assert.equal(sampleValue(samples, "proto_trust_mints_total", { verification: "email" }), 1);
      } finally {
        await own.close();
      }
    });

    test("/openapi.json is OpenAPI 3.1 listing the spec's paths, nothing internal", async () => {
      const doc = await checkOpenApi(h.request, h.publicUrl, TRUST_SPEC_OPERATIONS, MAIN_ENDPOINTS.trust);
      assert.ok(!Object.keys(doc.paths).some((p) => p.startsWith("/assets/")), "static assets are left out");
      assert.ok(doc.components.securitySchemes.httpSignature, "the mint's signature is described");
    });

    test("/docs serves the UI from this server; other pages keep their CSP", async () => {
      await checkDocsPage(h.url);
      const signin = await h.request("GET", "/signin");
      assert.equal(signin.status, 200);
      // The sign-in page's passkey script may call this origin, and nothing else changes.
      assert.equal(signin.headers.get("content-security-policy"), `${PAGE_CSP}; connect-src 'self'`);
      const jwks = await h.request("GET", "/openapi.json");
      assert.equal(jwks.headers.get("content-security-policy"), null);
    });
  });
}

describe("metrics without METRICS_TOKEN", () => {
  test("/metrics does not exist on either service, and both run side by side in one process", async () => {
    const directory = await buildDirectoryApp(
      readDirectoryConfig({
        DIRECTORY_DATABASE_URL: "sqlite::memory:",
        DIRECTORY_REVALIDATE_TICK_SECONDS: "0",
        LOG_LEVEL: "silent",
      }),
      { logStream: quietLog() },
    );
    const trust = await buildTrustApp(
      readTrustConfig({
        TRUST_DATABASE_URL: "sqlite::memory:",
        TRUST_KEY_ENCRYPTION_KEY: KEK,
        TRUST_PSEUDONYM_KEY: PSEUDONYM,
        LOG_LEVEL: "silent",
      }),
      { logStream: quietLog() },
    );
    try {
      for (const app of [directory.app, trust.app]) {
        const response = await app.inject({
          method: "GET",
          url: "/metrics",
          headers: { authorization: `Bearer ${METRICS_TOKEN}` },
        });
        assert.equal(response.statusCode, 404);
        assert.equal(response.json().error.code, "not_found");
        assert.equal((await app.inject("/openapi.json")).statusCode, 200);
      }
    } finally {
      await directory.close();
      await trust.close();
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Configuration

function problemsOf(read: () => unknown): string[] {
  try {
    read();
  } catch (error) {
    assert.ok(error instanceof ConfigError, String(error));
    return error.problems;
  }
  return [];
}

/** Asserts exactly one problem matches `pattern` and none quotes `secret`. */
function assertProblem(problems: string[], pattern: RegExp, secret?: string): void {
  assert.equal(problems.filter((p) => pattern.test(p)).length, 1, `${pattern} in ${JSON.stringify(problems)}`);
  if (secret !== undefined) assert.ok(!problems.some((p) => p.includes(secret)), "no problem quotes the secret");
}

describe("production refuses unsafe configuration", () => {
  const directoryProduction: Env = {
    NODE_ENV: "production",
    DIRECTORY_PUBLIC_URL: "https://directory.example",
    DIRECTORY_DATABASE_URL: "postgres://directory@db.internal/directory",
  };
  const trustProduction: Env = {
    NODE_ENV: "production",
    TRUST_PUBLIC_URL: "https://trust.example",
    TRUST_DATABASE_URL: "postgres://trust@db.internal/trust",
    TRUST_KEY_ENCRYPTION_KEY: KEK,
    TRUST_PSEUDONYM_KEY: PSEUDONYM,
    SMTP_URL: "smtps://mail.example",
  };

  test("a safe production configuration is accepted", () => {
    assert.deepEqual(
      problemsOf(() =>
        readDirectoryConfig({
          ...directoryProduction,
          METRICS_TOKEN,
          DIRECTORY_ADMIN_TOKEN: "admin-token-0123456789abcdef",
        }),
      ),
      [],
    );
    const trust = readTrustConfig({ ...trustProduction, METRICS_TOKEN });
    assert.equal(trust.platform.metricsToken, METRICS_TOKEN);
    assert.equal(trust.platform.production, true);
  });

  const platformCases: [string, Env, RegExp][] = [
    ["test hooks", { PROTO_TEST_HOOKS: "1" }, /PROTO_TEST_HOOKS must not be set when NODE_ENV=production/],
    [
      "private fetches",
      { PROTO_FETCH_ALLOW_PRIVATE: "1" },
      /PROTO_FETCH_ALLOW_PRIVATE must not be set when NODE_ENV=production/,
    ],
    [
      "pinned names",
      { PROTO_FETCH_RESOLVE: "example.com:443:127.0.0.1" },
      /PROTO_FETCH_RESOLVE must not be set when NODE_ENV=production/,
    ],
  ];
  for (const [what, env, pattern] of platformCases) {
    test(`${what} are refused by both services`, () => {
      assertProblem(
        problemsOf(() => readDirectoryConfig({ ...directoryProduction, ...env })),
        pattern,
      );
      assertProblem(
        problemsOf(() => readTrustConfig({ ...trustProduction, ...env })),
        pattern,
      );
    });
  }

  test("NODE_ENV names production in any case and with surrounding spaces", () => {
    for (const spelling of ["Production", "PRODUCTION", " production ", "\tProDuction\n"]) {
      const env = { PROTO_TEST_HOOKS: "1", NODE_ENV: spelling };
      const directory = problemsOf(() => readDirectoryConfig({ ...directoryProduction, ...env }));
      assertProblem(directory, /PROTO_TEST_HOOKS must not be set when NODE_ENV=production/);
      const trust = problemsOf(() => readTrustConfig({ ...trustProduction, ...env, TRUST_PSEUDONYM_KEY: undefined }));
      assertProblem(trust, /PROTO_TEST_HOOKS must not be set when NODE_ENV=production/);
      assertProblem(trust, /TRUST_PSEUDONYM_KEY is required when NODE_ENV=production/);
    }
    assert.equal(readTrustConfig({ ...trustProduction, NODE_ENV: " Production " }).platform.production, true);
    assert.equal(readTrustConfig({ ...trustProduction, NODE_ENV: "development" }).platform.production, false);
  });

  test("an http public URL is refused", () => {
    assertProblem(
      problemsOf(() =>
        readDirectoryConfig({ ...directoryProduction, DIRECTORY_PUBLIC_URL: "http://directory.example" }),
      ),
      /DIRECTORY_PUBLIC_URL must be https when NODE_ENV=production/,
    );
    assertProblem(
      problemsOf(() => readTrustConfig({ ...trustProduction, TRUST_PUBLIC_URL: "http://trust.example" })),
      /TRUST_PUBLIC_URL must be https when NODE_ENV=production/,
    );
  });

  test("missing attestor secrets and mail are refused", () => {
    const problems = problemsOf(() =>
      readTrustConfig({
        ...trustProduction,
        TRUST_KEY_ENCRYPTION_KEY: undefined,
        TRUST_PSEUDONYM_KEY: undefined,
        SMTP_URL: undefined,
      }),
    );
    assertProblem(problems, /TRUST_KEY_ENCRYPTION_KEY is required when NODE_ENV=production/);
    assertProblem(problems, /TRUST_PSEUDONYM_KEY is required when NODE_ENV=production/);
    assertProblem(problems, /SMTP_URL is required when NODE_ENV=production/);
  });

  test("one key for both attestor secrets is refused", () => {
    assertProblem(
      problemsOf(() => readTrustConfig({ ...trustProduction, TRUST_PSEUDONYM_KEY: KEK })),
      /TRUST_KEY_ENCRYPTION_KEY and TRUST_PSEUDONYM_KEY must be different keys/,
      KEK,
    );
  });

  test("an in-memory database is refused", () => {
    assertProblem(
      problemsOf(() => readDirectoryConfig({ ...directoryProduction, DIRECTORY_DATABASE_URL: "sqlite::memory:" })),
      /DIRECTORY_DATABASE_URL must not be sqlite::memory: when NODE_ENV=production/,
    );
    assertProblem(
      problemsOf(() => readTrustConfig({ ...trustProduction, TRUST_DATABASE_URL: "sqlite::memory:" })),
      /TRUST_DATABASE_URL must not be sqlite::memory: when NODE_ENV=production/,
    );
  });

  test("short or malformed operator tokens are refused, without quoting them", () => {
    for (const token of ["short-token", "has spaces in the middle of it"]) {
      assertProblem(
        problemsOf(() => readDirectoryConfig({ ...directoryProduction, DIRECTORY_ADMIN_TOKEN: token })),
        /^DIRECTORY_ADMIN_TOKEN must be/,
        token,
      );
      assertProblem(
        problemsOf(() => readDirectoryConfig({ ...directoryProduction, METRICS_TOKEN: token })),
        /^METRICS_TOKEN must be/,
        token,
      );
      assertProblem(
        problemsOf(() => readTrustConfig({ ...trustProduction, METRICS_TOKEN: token })),
        /^METRICS_TOKEN must be/,
        token,
      );
    }
  });

  test("every problem is reported at once", () => {
    const problems = problemsOf(() =>
      readTrustConfig({
        NODE_ENV: "production",
        PROTO_TEST_HOOKS: "1",
        PROTO_FETCH_ALLOW_PRIVATE: "1",
        TRUST_PUBLIC_URL: "http://trust.example",
        TRUST_DATABASE_URL: "sqlite::memory:",
        METRICS_TOKEN: "short",
      }),
    );
    for (const variable of [
      "PROTO_TEST_HOOKS",
      "PROTO_FETCH_ALLOW_PRIVATE",
      "TRUST_PUBLIC_URL",
      "TRUST_DATABASE_URL",
      "TRUST_KEY_ENCRYPTION_KEY",
      "TRUST_PSEUDONYM_KEY",
      "SMTP_URL",
      "METRICS_TOKEN",
    ]) {
      assert.ok(
        problems.some((p) => p.startsWith(variable)),
        `${variable} in ${JSON.stringify(problems)}`,
      );
    }
  });
});

describe("trusted proxies are checked at start", () => {
  // Secrets given, so development does not generate its secrets file.
  const readTrust = (env: Env) =>
    readTrustConfig({ TRUST_KEY_ENCRYPTION_KEY: KEK, TRUST_PSEUDONYM_KEY: PSEUDONYM, ...env });
  test("TRUSTED_PROXIES takes IPv4 and IPv6 addresses, CIDRs and the named ranges", () => {
    const value = " 10.0.0.5, 10.1.0.0/16 ,fd00::/8, ::1, loopback ";
    assert.deepEqual(readDirectoryConfig({ TRUSTED_PROXIES: value }).platform.trustedProxies, [
      "10.0.0.5",
      "10.1.0.0/16",
      "fd00::/8",
      "::1",
      "loopback",
    ]);
    assert.deepEqual(readTrust({ TRUSTED_PROXIES: value, TRUSTED_PROXY_HOPS: "2" }).platform.trustedProxies, [
      "10.0.0.5",
      "10.1.0.0/16",
      "fd00::/8",
      "::1",
      "loopback",
    ]);
  });

  test("a bad entry is one problem naming every bad entry", () => {
    for (const read of [readDirectoryConfig, readTrust]) {
      const problems = problemsOf(() =>
        read({ TRUSTED_PROXIES: "10.0.0.5, proxy.internal, 10.0.0.0/33, 0.0.0.0/0, ::/0, 10.0.0.0/x, 10" }),
      );
      assertProblem(problems, /^TRUSTED_PROXIES: /);
      const problem = problems.find((p) => p.startsWith("TRUSTED_PROXIES"));
      for (const entry of ["proxy.internal", "10.0.0.0/33", "0.0.0.0/0", "::/0", "10.0.0.0/x", '"10"']) {
        assert.ok(problem?.includes(entry), `${entry} in ${problem}`);
      }
      assert.ok(!problem?.includes('"10.0.0.5"'), problem);
      assertProblem(
        problemsOf(() => read({ TRUSTED_PROXIES: " , " })),
        /^TRUSTED_PROXIES: lists no address/,
      );
    }
  });

  test("TRUSTED_PROXY_HOPS without TRUSTED_PROXIES is refused in every environment", () => {
    for (const env of [{}, { NODE_ENV: "production" }]) {
      assertProblem(
        problemsOf(() => readDirectoryConfig({ ...env, TRUSTED_PROXY_HOPS: "1" })),
        /^TRUSTED_PROXY_HOPS needs TRUSTED_PROXIES/,
      );
      assertProblem(
        problemsOf(() => readTrust({ ...env, TRUSTED_PROXY_HOPS: "1" })),
        /^TRUSTED_PROXY_HOPS needs TRUSTED_PROXIES/,
      );
    }
    assert.equal(readDirectoryConfig({ TRUSTED_PROXY_HOPS: "0" }).platform.trustedProxyHops, 0);
  });
});
