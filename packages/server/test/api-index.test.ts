/**
 * `GET /` on both services, as `curl` and a browser ask for it: a client that does not ask for
 * HTML (curl's `Accept: *\/*`, `application/json`, no `Accept` at all) gets a short JSON index of
 * the API (name, version, the main endpoints and the OpenAPI document and docs as absolute URLs);
 * a browser gets the page it always got. HEAD answers the same headers, and the OpenAPI document
 * describes both answers.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { type DirectoryHarness, startDirectoryHarness } from "./support/directory.js";
import type { HttpResult, RequestOptions } from "./support/http.js";
import { STORE_VARIANTS } from "./support/stores.js";
import { startTrustHarness, type TrustHarness } from "./support/trust.js";

const VARIANT = STORE_VARIANTS[0] ?? { name: "sqlite", engine: "sqlite" as const, redis: false };
const VERSION = (JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string })
  .version;
/** What Chromium and Firefox send for a page. */
const BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";

type Requester = (method: string, path: string, options?: RequestOptions) => Promise<HttpResult>;

/** The clients that get the index: curl (`*\/*`), a JSON client, one that prefers JSON, none at all. */
const API_CLIENTS: [string, RequestOptions][] = [
  ["curl's */*", { headers: { accept: "*/*" } }],
  ["application/json", { headers: { accept: "application/json" } }],
  ["JSON before HTML", { headers: { accept: "application/json, text/html;q=0.5" } }],
  // node:http sends no Accept of its own (fetch would add `*/*`).
  ["no Accept", { from: "127.0.0.1" }],
];

async function checkIndex(request: Requester, publicUrl: string, name: string, endpoints: string[]) {
  const doc = (await request("GET", "/openapi.json")).json;
  // Path parameters compared as `{}`: the spec and the document may name them differently.
  const shape = (path: string) => path.replace(/\{[^}]+\}/g, "{}");
  const documented = new Set(Object.keys(doc.paths as Record<string, unknown>).map(shape));
  for (const [client, options] of API_CLIENTS) {
    const res = await request("GET", "/", options);
    assert.equal(res.status, 200, `${client}: ${res.text.slice(0, 200)}`);
    assert.equal(res.headers.get("content-type"), "application/json; charset=utf-8", client);
    assert.equal(res.headers.get("vary"), "accept", client);
    assert.ok(res.text.endsWith("}\n"), `${client}: the index ends with a newline for the terminal`);
    const index = res.json;
    assert.deepEqual(Object.keys(index), ["name", "version", "description", "endpoints", "openapi", "docs"], client);
    assert.equal(index.name, name);
    assert.equal(index.version, VERSION);
    assert.equal(index.openapi, `${publicUrl}/openapi.json`);
    assert.equal(index.docs, `${publicUrl}/docs`);
    assert.deepEqual(Object.keys(index.endpoints), endpoints, client);
    for (const url of Object.values<string>(index.endpoints)) {
      assert.ok(url.startsWith(`${publicUrl}/`), `${url} is absolute on the public URL`);
      const path = url.slice(publicUrl.length);
      assert.ok(documented.has(shape(path)), `${path} is in the OpenAPI document`);
    }
  }
  // HEAD: the same answer without the body.
  const head = await request("HEAD", "/");
  assert.equal(head.status, 200);
  assert.equal(head.headers.get("content-type"), "application/json; charset=utf-8");
  assert.equal(head.text, "");
  // The document describes `GET /`'s two answers.
  const home = doc.paths["/"]?.get;
  assert.ok(home, "GET / is documented");
  assert.equal(typeof home.summary, "string");
  assert.ok(home.responses["200"].content["application/json"].schema.properties.endpoints);
  assert.ok(home.responses["200"].content["text/html"]);
}

async function checkPage(request: Requester, heading: RegExp) {
  for (const accept of [BROWSER_ACCEPT, "text/html"]) {
    const page = await request("GET", "/", { headers: { accept } });
    assert.equal(page.status, 200, accept);
    assert.equal(page.headers.get("content-type"), "text/html; charset=utf-8", accept);
    assert.equal(page.headers.get("vary"), "accept", accept);
    assert.ok(page.text.startsWith("<!doctype html>"), accept);
    assert.match(page.text, heading, accept);
  }
  const head = await request("HEAD", "/", { headers: { accept: BROWSER_ACCEPT } });
  assert.equal(head.status, 200);
  assert.equal(head.headers.get("content-type"), "text/html; charset=utf-8");
  assert.equal(head.text, "");
}

describe(`GET / on the directory (${VARIANT.name})`, () => {
  let h: DirectoryHarness;
  before(async () => {
    h = await startDirectoryHarness(VARIANT, { sites: 1 });
  });
  after(() => h?.close());

  test("curl and JSON clients get the index of the API", async () => {
    await checkIndex(h.request, "https://directory.test", "proto listing directory", [
      "listings",
      "listing",
      "challenge",
      "sitemap",
      "discovery_schema",
    ]);
    // A search on `/` is the page's: the index does not change with it.
    const searched = await h.request("GET", "/?search=weather");
    assert.equal(searched.json.name, "proto listing directory");
  });

  test("a browser gets the browse page, as before", async () => {
    await checkPage(h.request, /<h1>Service directory<\/h1>/);
  });
});

describe(`GET / on the attestor (${VARIANT.name})`, () => {
  let h: TrustHarness;
  before(async () => {
    h = await startTrustHarness(VARIANT);
  });
  after(() => h?.close());

  test("curl and JSON clients get the index of the API, not a 404", async () => {
    await checkIndex(h.request, h.publicUrl, "proto trust attestor", [
      "jwks",
      "openid_configuration",
      "link_start",
      "link_poll",
      "token",
      "binding",
      "grants",
      "approvals",
      "approval",
      "authorize",
      "oidc_token",
    ]);
    // Other unknown paths keep the API's not-found envelope.
    const missing = await h.request("GET", "/no/such/page");
    assert.equal(missing.status, 404);
    assert.equal(missing.json.error.code, "not_found");
  });

  test("a browser gets the start page, as before", async () => {
    await checkPage(h.request, /<h1>proto trust<\/h1>/);
  });
});
