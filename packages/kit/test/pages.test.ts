/**
 * The words on the kit's pages come from its configuration: `serviceName`, `ownerPage` and each
 * attestor's `displayName` are checked when the kit starts, and default to something a person can
 * read (a host, never a URL or an issuer name). The browser walk is `pages.browser.test.ts`.
 */
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { createKit, type Kit, type KitOptions } from "../src/index.js";

const BASE: KitOptions = {
  publicUrl: "https://notes.example",
  discovery: { service_did: "did:web:notes.example", recipient_types: ["oidc"] },
  attestors: { "proto-trust": { url: "https://trust.example/" } },
  database: "sqlite::memory:",
};

describe("the kit's page configuration", () => {
  const kits: Kit[] = [];
  after(async () => {
    for (const kit of kits) await kit.close();
  });

  async function kit(options: Partial<KitOptions>): Promise<Kit> {
    const made = await createKit({ ...BASE, ...options });
    kits.push(made);
    return made;
  }

  test("an attestor is called by its displayName, else by the host of its url", async () => {
    assert.equal((await kit({})).attestors.get("proto-trust")?.displayName, "trust.example");
    const named = await kit({
      attestors: { "proto-trust": { url: "https://trust.example", displayName: " Example Trust " } },
    });
    assert.equal(named.attestors.get("proto-trust")?.displayName, "Example Trust");
  });

  test("createKit refuses an empty or overlong name, and an owner page on another origin", async () => {
    await assert.rejects(kit({ serviceName: " " }), /serviceName must be 1 to 60 characters/);
    await assert.rejects(kit({ serviceName: "x".repeat(61) }), /serviceName must be 1 to 60 characters/);
    await assert.rejects(
      kit({ attestors: { "proto-trust": { url: "https://trust.example", displayName: "" } } }),
      /displayName must be 1 to 60 characters/,
    );
    await assert.rejects(kit({ ownerPage: "https://elsewhere.example/owner" }), /ownerPage must be a path or a URL on/);
    await assert.rejects(kit({ ownerPage: "//elsewhere.example/owner" }), /ownerPage must be a path or a URL on/);
    await kit({ serviceName: "Notes", ownerPage: "https://notes.example/owner?tab=agents" });
  });

  test("an unknown claim link is a page naming the service, styled by a hashed stylesheet only", async () => {
    const named = await kit({ serviceName: "Notes <&>" });
    const response = await named.handle(new Request("https://notes.example/proto/claim?token=nope"));
    assert.ok(response !== undefined, "the kit answers its claim page");
    assert.equal(response.status, 404);
    const csp = response.headers.get("content-security-policy") ?? "";
    assert.match(csp, /style-src 'sha256-[A-Za-z0-9+/]+='/);
    assert.doesNotMatch(csp, /unsafe-inline/);
    const page = await response.text();
    assert.ok(page.includes(`<header class="site">Notes &lt;&amp;&gt;</header>`), "the name, escaped");
    assert.ok(page.includes("ask the agent for a new invitation"), "says what to do next");
  });
});
