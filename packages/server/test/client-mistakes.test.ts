import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Browserless, field } from "./support/browser-session.js";
import { type DirectoryHarness, startDirectoryHarness } from "./support/directory.js";
import type { HttpResult } from "./support/http.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";
import { assertError, startTrustHarness, type TrustHarness } from "./support/trust.js";

/**
 * Issue 13: a client's mistake is a 4xx of the route's own kind, never a 500: an HTML page on the
 * pages for people, the error envelope on the API, OAuth error JSON on the OAuth endpoints. A
 * query parameter given more than once is one such mistake, on every route alike.
 */

reportSkippedVariants();

const RP = "did:web:rp.example";

/** The trust attestor with every optional part on, so every route it can have exists. */
const FULL_TRUST_ENV = {
  TRUST_OIDC_CLIENTS: JSON.stringify([{ client_id: RP, service_did: RP, redirect_uris: ["https://rp.example/cb"] }]),
  TRUST_PAYMENT_API_URL: "http://127.0.0.1:9",
  TRUST_PAYMENT_API_KEY: "payment-api-key",
  TRUST_PAYMENT_WEBHOOK_SECRET: "payment-webhook-secret-0123456789",
  TRUST_UPSTREAM_OIDC_ISSUER: "https://login.example.invalid",
  TRUST_UPSTREAM_OIDC_CLIENT_ID: "client-1",
  TRUST_UPSTREAM_OIDC_CLIENT_SECRET: "client-secret-1",
};

type Kind = "page" | "envelope" | "oauth";

function assertPage(result: HttpResult, status: number, what: string): void {
  assert.equal(result.status, status, `${what}: ${result.text.slice(0, 300)}`);
  assert.match(result.headers.get("content-type") ?? "", /^text\/html/, what);
  assert.match(result.headers.get("content-security-policy") ?? "", /default-src 'none'/, what);
  assert.match(result.text, /<h1>[^<]+<\/h1>/, what);
}

function assertKind(result: HttpResult, kind: Kind, what: string): void {
  assert.equal(result.status, 400, `${what}: ${result.text.slice(0, 300)}`);
  if (kind === "page") assertPage(result, 400, what);
  else if (kind === "envelope") assertError(result, 400, "invalid_request");
  else {
    assert.match(result.headers.get("content-type") ?? "", /^application\/json/, what);
    assert.equal(result.json.error, "invalid_request", what);
  }
}

/** Every route of a service, from its OpenAPI document, with its parameters filled in. */
async function routesOf(request: (method: string, path: string) => Promise<HttpResult>) {
  const doc = await request("GET", "/openapi.json");
  assert.equal(doc.status, 200);
  const routes: { method: string; path: string; pattern: string; tags: string[] }[] = [];
  for (const [pattern, operations] of Object.entries(doc.json.paths as Record<string, Record<string, unknown>>)) {
    for (const [method, operation] of Object.entries(operations)) {
      const path = pattern.replace(/\{did\}/g, "did:web:example.com").replace(/\{[^}]+\}/g, "x");
      const tags = ((operation as { tags?: string[] }).tags ?? []) as string[];
      routes.push({ method: method.toUpperCase(), path, pattern, tags });
    }
  }
  return routes;
}

/** What kind of error a route answers with. */
function kindOf(route: { pattern: string; tags: string[] }): Kind {
  if (route.pattern === "/oidc/authorize" || route.pattern === "/oidc/consent") return "page";
  if (route.pattern.startsWith("/oidc/")) return "oauth";
  if (route.pattern.startsWith("/webhooks/")) return "envelope";
  return route.tags.includes("pages") || route.tags.includes("payment") ? "page" : "envelope";
}

describe("client mistakes are 4xx of the route's kind", () => {
  for (const variant of STORE_VARIANTS) {
    describe(`(${variant.name})`, { timeout: 120_000 }, () => {
      let trust: TrustHarness;
      let directory: DirectoryHarness;
      before(async () => {
        trust = await startTrustHarness(variant, { env: FULL_TRUST_ENV });
        directory = await startDirectoryHarness(variant, { sites: 1 });
      });
      after(async () => {
        await trust?.close();
        await directory?.close();
      });

      test("a repeated req or token on the link and sign-in pages is a 400 page", async () => {
        assertPage(await trust.request("GET", "/link?req=a&req=b"), 400, "/link");
        assertPage(await trust.request("GET", "/signin/email/verify?token=a&token=b"), 400, "/signin/email/verify");
        const page = await trust.request("GET", "/signin/email/verify?token=ml_a&token=ml_b");
        assert.match(page.text, /given more than once/);
      });

      test("every route of both services refuses a repeated parameter with a 400 of its kind", async () => {
        const services = [
          { name: "trust", request: trust.request },
          { name: "directory", request: directory.request },
        ];
        let checked = 0;
        for (const service of services) {
          for (const route of await routesOf(service.request)) {
            const kind = kindOf(route);
            const what = `${service.name} ${route.method} ${route.pattern}`;
            const repeated = await service.request(route.method, `${route.path}?x=1&x=2`);
            assertKind(repeated, kind, `${what} ?x=1&x=2`);
            const control = await service.request(route.method, `${route.path}?x=a%00b`);
            assertKind(control, kind, `${what} ?x=a%00b`);
            checked++;
          }
        }
        // The upstream sign-in, payment and OpenID routes are among them.
        assert.ok(checked >= 35, `${checked} routes swept`);
      });

      test("a repeated form field is a 400 page", async () => {
        const b = new Browserless(trust.url);
        const page = await b.get("/signin");
        const csrf = field(page.text, "_csrf");
        const body = `_csrf=${encodeURIComponent(csrf)}&email=a%40example.com&email=b%40example.com`;
        const repeated = await trust.request("POST", "/signin/email", {
          rawBody: body,
          headers: { "content-type": "application/x-www-form-urlencoded", cookie: cookieHeader(b) },
        });
        assertPage(repeated, 400, "a repeated e-mail field");
      });

      test("Fastify's own refusals on page routes are pages with their status", async () => {
        const form = { "content-type": "application/x-www-form-urlencoded" };
        assertPage(
          await trust.request("POST", "/signin/email", { rawBody: `email=${"a".repeat(70_000)}`, headers: form }),
          413,
          "an oversized form",
        );
        assertPage(
          await trust.request("POST", "/signin/email", { rawBody: "email=a", headers: { "content-type": "text/csv" } }),
          415,
          "a form of another type",
        );
        assertPage(
          await trust.request("POST", "/link/confirm", { rawBody: "_csrf=forged&req=lr_x", headers: form }),
          403,
          "a forged CSRF token",
        );
        assertPage(
          await trust.request("POST", "/link/confirm", {
            rawBody: "{",
            headers: { "content-type": "application/json" },
          }),
          400,
          "broken JSON sent to a form",
        );
        // The OAuth token endpoint keeps OAuth's error JSON; its discovery document, the envelope.
        const token = await trust.request("POST", "/oidc/token", {
          rawBody: "{",
          headers: { "content-type": "application/json" },
        });
        assertKind(token, "oauth", "broken JSON to /oidc/token");
        assertKind(await trust.request("GET", "/.well-known/openid-configuration?a=1&a=2"), "envelope", "discovery");
      });

      test("the directory's pages: a repeated search is a 400 page that says why", async () => {
        const page = await directory.request("GET", "/?search=a&search=b");
        assertPage(page, 400, "/?search=a&search=b");
        assert.match(page.text, /each given once/);
        assertPage(await directory.request("GET", "/listings/did:web:example.com?x=1&x=2"), 400, "/listings/{did}");
      });
    });
  }
});

function cookieHeader(b: Browserless): string {
  return [...b.cookies].map(([name, value]) => `${name}=${value}`).join("; ");
}
