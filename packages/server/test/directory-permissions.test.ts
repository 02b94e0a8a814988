/**
 * Issue 38: the permissions a listed service declares (the discovery document's `permissions`).
 * The directory keeps them in the listing's `discovery_doc` as published and shows them on the
 * listing's page: each name, the service's description as text, and what granting it means.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { MAX_PERMISSIONS, permissionsSection } from "../src/directory/pages/permissions.js";
import { type DirectoryHarness, didPath, startDirectoryHarness } from "./support/directory.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";

reportSkippedVariants();

const pagePath = (did: string) => `/listings/${encodeURIComponent(did)}`;

const PERMISSIONS = {
  "notes:read": { description: "Read your notes", default: true },
  "notes:delete": { description: "Delete your notes", phishing_resistant: true },
  purchase: { description: "Pay for pinned notes", currency: "EUR" },
};

/** The rendered item of one permission, as the page holds it. */
function item(text: string, name: string): string {
  const start = text.indexOf(`<li data-permission="${name}">`);
  assert.ok(start >= 0, `the page lists ${name}`);
  return text.slice(start, text.indexOf("</li>", start));
}

for (const variant of STORE_VARIANTS) {
  describe(`directory: a listing's declared permissions (${variant.name})`, () => {
    let h: DirectoryHarness;
    before(async () => {
      h = await startDirectoryHarness(variant, { sites: 4 });
    });
    after(() => h?.close());

    test("each permission shows with its name, description and what granting it takes; the API keeps them as published", async () => {
      const site = h.site();
      site.serveDiscovery(site.document({ permissions: PERMISSIONS }));
      const { did } = await h.register(site, { title: "Notes" });

      const api = await h.request("GET", didPath(did));
      assert.equal(api.status, 200);
      assert.deepEqual(api.json.discovery_doc.permissions, PERMISSIONS);

      const page = await h.request("GET", pagePath(did));
      assert.equal(page.status, 200);
      assert.ok(page.text.includes(`<h3 id="d-permissions">Permissions</h3>`), "the section is there");

      const read = item(page.text, "notes:read");
      assert.ok(read.includes(`<code class="permission-name">notes:read</code>`), read);
      assert.ok(read.includes("Read your notes"), read);
      assert.ok(read.includes("Granted at sign-up"), read);
      assert.ok(!read.includes("passkey") && !read.includes("Spending"), read);

      const del = item(page.text, "notes:delete");
      assert.ok(del.includes("Delete your notes"), del);
      assert.ok(del.includes("Needs a passkey to approve"), del);
      assert.ok(!del.includes("Granted at sign-up"), del);

      const purchase = item(page.text, "purchase");
      assert.ok(purchase.includes("Pay for pinned notes"), purchase);
      assert.ok(purchase.includes("Spending, in EUR"), purchase);
      assert.ok(!purchase.includes("Granted at sign-up") && !purchase.includes("passkey"), purchase);
    });

    test("a listing that declares none has no Permissions section", async () => {
      const { did } = await h.register();
      const page = await h.request("GET", pagePath(did));
      assert.equal(page.status, 200);
      assert.ok(!page.text.includes("d-permissions"), "no section");
      assert.ok(!page.text.includes(">Permissions<"), "no heading");
    });

    test("a description holding markup is shown as text", async () => {
      const site = h.site();
      const hostile = `<script>alert(1)</script> & "more"`;
      site.serveDiscovery(site.document({ permissions: { "notes:read": { description: hostile } } }));
      const { did } = await h.register(site);
      const page = await h.request("GET", pagePath(did));
      assert.equal(page.status, 200);
      const read = item(page.text, "notes:read");
      assert.ok(read.includes("&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;more&quot;"), read);
      assert.ok(!/<script/i.test(page.text), "no script element on the page");
    });
  });
}

describe("directory: permissions from a document that predates their schema", () => {
  test("only well-formed entries are shown, the rest are counted, and nothing throws", () => {
    const out = permissionsSection({
      "notes:read": { description: "Read your notes", default: true },
      "Bad Name": { description: "Upper case and a space" },
      "notes:write": { description: 42 },
      "notes:share": { description: "Share", default: "yes" },
      "notes:pin": { description: "Pin", currency: "euro" },
      "notes:tag": { description: "Two\nlines" },
      "notes:list": null,
      "notes:copy": { description: "x".repeat(201) },
    }).toString();
    assert.ok(out.includes(`<li data-permission="notes:read">`), out);
    assert.equal(out.match(/<li /g)?.length, 1, out);
    assert.ok(out.includes("7 more entries are not shown"), out);
  });

  test("at most the first 64 are shown; a member that is no object is named as such", () => {
    const many = Object.fromEntries(
      Array.from({ length: MAX_PERMISSIONS + 6 }, (_, i) => [`p${i}`, { description: `Permission ${i}` }]),
    );
    const out = permissionsSection(many).toString();
    assert.equal(out.match(/<li /g)?.length, MAX_PERMISSIONS);
    assert.ok(out.includes("6 more entries are not shown"), out);

    for (const odd of ["notes:read", ["notes:read"], 7, null, true]) {
      const text = permissionsSection(odd).toString();
      assert.ok(text.includes("Not a set of declarations"), text);
      assert.ok(!text.includes("<li"), text);
    }
    assert.equal(permissionsSection(undefined), "");
    assert.equal(permissionsSection({}), "");
  });
});
