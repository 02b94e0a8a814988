/**
 * A listed service's MCP endpoint (the discovery document's `mcp`, docs/discovery-mcp.md): the
 * directory validates it with the rest of the document, keeps it in the listing's
 * `discovery_doc`, and shows it on the listing's page, resolved as an agent resolves it.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { type DirectoryHarness, didPath, startDirectoryHarness } from "./support/directory.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";

reportSkippedVariants();

const pagePath = (did: string) => `/listings/${encodeURIComponent(did)}`;

for (const variant of STORE_VARIANTS) {
  describe(`directory: a listing's MCP endpoint (${variant.name})`, () => {
    let h: DirectoryHarness;
    before(async () => {
      h = await startDirectoryHarness(variant, { sites: 4 });
    });
    after(() => h?.close());

    test("a path is kept as published in the API and shown resolved on the page, with its metadata", async () => {
      const site = h.site();
      const mcp = { url: "/mcp", resource_metadata: "/.well-known/oauth-protected-resource/mcp" };
      site.serveDiscovery(site.document({ mcp }));
      const { did } = await h.register(site, { title: "Notes" });

      const api = await h.request("GET", didPath(did));
      assert.equal(api.status, 200);
      assert.deepEqual(api.json.discovery_doc.mcp, mcp);

      const page = await h.request("GET", pagePath(did));
      assert.equal(page.status, 200);
      assert.match(page.text, new RegExp(`<dt>MCP endpoint</dt><dd><code>https://${site.authority}/mcp</code></dd>`));
      assert.ok(
        page.text.includes(`href="https://${site.authority}/.well-known/oauth-protected-resource/mcp"`),
        "the metadata is a link",
      );
    });

    test("one on another host says so; a listing without one says it advertises none", async () => {
      const site = h.site();
      site.serveDiscovery(site.document({ mcp: { url: "https://tools.example/v1/mcp" } }));
      const { did } = await h.register(site);
      const page = await h.request("GET", pagePath(did));
      assert.match(
        page.text,
        /<dt>MCP endpoint<\/dt><dd><code>https:\/\/tools\.example\/v1\/mcp<\/code> <span class="muted other-host">on another host, tools\.example<\/span>/,
      );

      const plain = await h.register();
      const plainPage = await h.request("GET", pagePath(plain.did));
      assert.ok(plainPage.text.includes("Does not advertise an MCP endpoint."), plainPage.text);
    });

    test("an mcp that is no https URL or path is refused with the rest of the document (discovery_invalid)", async () => {
      const site = h.site();
      site.serveDiscovery(site.document({ mcp: { url: "http://tools.example/mcp" } }));
      const challenge = await h.request("POST", "/v1/listings/challenge", {
        body: { discovery_url: site.discoveryUrl },
      });
      site.serveProof(challenge.json.challenge_token);
      const refused = await h.request("POST", "/v1/listings", {
        body: { discovery_url: site.discoveryUrl, challenge_token: challenge.json.challenge_token },
      });
      assert.equal(refused.status, 400);
      assert.equal(refused.json.error.code, "discovery_invalid");
      assert.deepEqual(
        refused.json.error.details.errors.map((e: { path: string }) => e.path),
        ["/mcp/url"],
      );
      assert.match(refused.json.error.details.errors[0].message, /^mcp\.url: must be a path on the service host/);
    });
  });
}
