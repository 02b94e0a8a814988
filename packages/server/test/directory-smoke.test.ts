import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { type DirectoryHarness, didPath, startDirectoryHarness } from "./support/directory.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";

reportSkippedVariants();

for (const variant of STORE_VARIANTS) {
  describe(`directory happy path (${variant.name})`, () => {
    let h: DirectoryHarness;
    before(async () => {
      h = await startDirectoryHarness(variant);
    });
    after(() => h.close());

    test("register, read, update, list, delete", async () => {
      const { site, token, did } = await h.register(undefined, { title: "Notes", tags: ["notes"] });
      assert.equal(did, site.did);
      const read = await h.request("GET", didPath(did));
      assert.equal(read.status, 200);
      assert.equal(read.json.title, "Notes");
      assert.equal(read.json.status, "active");
      assert.deepEqual(read.json._meta, {});
      const patched = await h.request("PATCH", didPath(did), { token, body: { description: "A notes service" } });
      assert.equal(patched.status, 200, patched.text);
      const again = await h.request("GET", didPath(did));
      assert.deepEqual(patched.json, again.json);
      const list = await h.request("GET", "/v1/listings?search=notes%20serv");
      assert.equal(list.status, 200);
      assert.equal(list.json.listings.length, 1);
      const deleted = await h.request("DELETE", didPath(did), { token });
      assert.equal(deleted.status, 204);
      assert.equal((await h.request("GET", didPath(did))).json.status, "deleted");
    });
  });
}
