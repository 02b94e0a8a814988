/**
 * The discovery document names the service's MCP endpoint (`mcp`) once the kit has a protected
 * resource, so an agent given only the service's URL finds it (docs/discovery-mcp.md). Read as
 * an agent reads it: `GET /.well-known/proto` through the kit's Fetch handler.
 */
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { type DiscoveryDocument, validateDiscoveryDocument } from "@proto/protocol";
import { createKit, type Kit, type KitStore, openKitStore } from "../src/index.js";
import { advertiseMcp } from "../src/mcp-discovery.js";
import { createTestDatabase, ENGINES, reportSkippedEngines, type TestDatabase } from "./support/env.js";

reportSkippedEngines();

const ORIGIN = "https://notes.example";

async function discoveryOf(kit: Kit): Promise<Record<string, unknown>> {
  const response = await kit.handle(new Request(`${ORIGIN}/.well-known/proto`));
  assert.equal(response?.status, 200);
  const doc = (await response?.json()) as Record<string, unknown>;
  // What the kit serves always passes the schema the directory and agents apply.
  assert.deepEqual(validateDiscoveryDocument(doc).valid ? [] : doc, []);
  return doc;
}

for (const engine of ENGINES) {
  describe(`kit: the discovery document names the MCP endpoint (${engine})`, () => {
    const opened: { database: TestDatabase; store: KitStore; kit: Kit }[] = [];
    after(async () => {
      for (const { database, store, kit } of opened) {
        await kit.close();
        await store.close();
        await database.drop();
      }
    });

    async function newKit(discovery: Record<string, unknown> = {}): Promise<Kit> {
      const database = await createTestDatabase(engine);
      const store = await openKitStore(database.url);
      const kit = await createKit({
        publicUrl: ORIGIN,
        discovery: { service_did: "did:web:notes.example", recipient_types: ["oidc"], ...discovery },
        attestors: { "proto-trust": { url: "https://trust.example" } },
        store,
      });
      opened.push({ database, store, kit });
      return kit;
    }

    test("a protected resource is written as mcp: its URL and its RFC 9728 metadata; the first one only", async () => {
      const kit = await newKit();
      assert.equal((await discoveryOf(kit)).mcp, undefined, "no MCP endpoint until one is configured");
      kit.protectedResource({ path: "/mcp" });
      kit.protectedResource({ path: "/tools/mcp", rootMetadata: false });
      assert.deepEqual((await discoveryOf(kit)).mcp, {
        url: `${ORIGIN}/mcp`,
        resource_metadata: `${ORIGIN}/.well-known/oauth-protected-resource/mcp`,
      });
      assert.deepEqual(kit.discovery.mcp?.url, `${ORIGIN}/mcp`);
    });

    test("advertise: false leaves it out; an mcp the configuration gives is kept as given", async () => {
      const quiet = await newKit();
      quiet.protectedResource({ path: "/mcp", advertise: false });
      assert.equal((await discoveryOf(quiet)).mcp, undefined);

      const own = { url: "https://mcp.notes.example/v1" };
      const given = await newKit({ mcp: own });
      given.protectedResource({ path: "/mcp" });
      assert.deepEqual((await discoveryOf(given)).mcp, own);
    });

    test("an mcp that is no https URL or path is refused when the kit is made", async () => {
      await assert.rejects(newKit({ mcp: { url: "http://notes.example/mcp" } }), /mcp\.url: must be a path/);
    });
  });
}

describe("advertiseMcp", () => {
  test("on a plain-http origin (development) the member holds paths, which resolve against it", () => {
    const doc: DiscoveryDocument = {
      proto_version: "0.1",
      service_did: "did:web:localhost%3A3000",
      endpoints: { accounts: "/a", owner_invitation: "/o", claim_page: "/c", claim_completion: "/cc" },
      signature_algorithms: ["ed25519"],
    };
    const written = advertiseMcp(doc, {
      resource: "http://localhost:3000/mcp",
      path: "/mcp",
      metadataUrl: "http://localhost:3000/.well-known/oauth-protected-resource/mcp",
    });
    assert.equal(written, true);
    assert.deepEqual(doc.mcp, { url: "/mcp", resource_metadata: "/.well-known/oauth-protected-resource/mcp" });
    assert.ok(validateDiscoveryDocument(doc).valid);
  });
});
