import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { type DirectoryHarness, startDirectoryHarness } from "./support/directory.js";
import type { HttpResult } from "./support/http.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";
import { assertError, newAgent, startTrustHarness, type TrustHarness } from "./support/trust.js";

/**
 * Issue 13: NUL is valid in none of our text inputs (PostgreSQL cannot store it, SQLite's FTS5
 * cannot search it), and identifiers and single-line values take no control character at all:
 * each is a 400 `invalid_request` (a 400 page on pages), on both engines. Descriptions, free
 * text, keep their line breaks.
 */

reportSkippedVariants();

function assertPage(result: HttpResult, status: number): void {
  assert.equal(result.status, status, result.text.slice(0, 300));
  assert.match(result.headers.get("content-type") ?? "", /^text\/html/);
}

describe("control characters in client input", () => {
  for (const variant of STORE_VARIANTS) {
    describe(`(${variant.name})`, { timeout: 120_000 }, () => {
      let trust: TrustHarness;
      let directory: DirectoryHarness;
      before(async () => {
        trust = await startTrustHarness(variant);
        directory = await startDirectoryHarness(variant, { sites: 2 });
      });
      after(async () => {
        await trust?.close();
        await directory?.close();
      });

      test("directory queries and path DIDs with NUL or another control are 400", async () => {
        for (const control of ["%00", "%01", "%0A", "%7F"]) {
          for (const path of [
            `/v1/listings?search=a${control}b`,
            `/v1/listings?tag=a${control}b`,
            `/v1/listings?cursor=a${control}b`,
            `/v1/listings/did%3Aweb%3Aexample.com${control}`,
          ]) {
            assertError(await directory.request("GET", path), 400, "invalid_request");
          }
          assertPage(await directory.request("GET", `/?search=a${control}b`), 400);
          assertPage(await directory.request("GET", `/?tag=a${control}b`), 400);
          assertPage(await directory.request("GET", `/listings/did%3Aweb%3Aexample.com${control}`), 400);
        }
        // The same searches without the control run.
        assert.equal((await directory.request("GET", "/v1/listings?search=ab&tag=ab")).status, 200);
        assert.equal((await directory.request("GET", "/?search=ab")).status, 200);
      });

      test("listing bodies: NUL nowhere, no control in titles and tags, descriptions keep line breaks", async () => {
        const { did, token } = await directory.register(undefined, { description: "first line\nsecond line" });
        const path = `/v1/listings/${encodeURIComponent(did)}`;
        const read = await directory.request("GET", path);
        assert.equal(read.json.description, "first line\nsecond line");
        for (const body of [
          { title: "a\u0000b" },
          { title: "two\nlines" },
          { description: "a\u0000b" },
          { description: "bell\u0007" },
          { tags: ["a\u0000b"] },
          { tags: ["tab\tbed"] },
        ]) {
          assertError(await directory.request("PATCH", path, { body, token }), 400, "invalid_request");
        }
        const updated = await directory.request("PATCH", path, { body: { description: "a\tb\r\nc" }, token });
        assert.equal(updated.status, 200, updated.text);
        assert.equal(updated.json.description, "a\tb\r\nc");
        // A NUL in a submission is refused before any fetch.
        const site = directory.site();
        const refused = await directory.request("POST", "/v1/listings", {
          body: { discovery_url: site.discoveryUrl, challenge_token: "x", title: "a\u0000" },
        });
        assertError(refused, 400, "invalid_request");
      });

      test("trust: agent_label and req_id with NUL or a control are 400", async () => {
        const agent = newAgent();
        for (const label of ["a\u0000b", "two\nlines", "\u001b[31mred"]) {
          assertError(await trust.startLink(agent, { agent_label: label }), 400, "invalid_request");
        }
        for (const reqId of ["lr_\u0000", "lr_a\nb"]) {
          const polled = await trust.request("POST", "/v1/link/poll", { body: { req_id: reqId, sig_b64: "AAAA" } });
          assertError(polled, 400, "invalid_request");
        }
        // Anywhere in a JSON body, even a field no schema names.
        const extra = await trust.startLink(agent, { agent_label: "ok", extra: { deep: ["\u0000"] } });
        assertError(extra, 400, "invalid_request");
        assert.equal((await trust.startLink(agent, { agent_label: "ok" })).status, 200);
      });

      test("trust pages: a NUL in a query or a form field is a 400 page", async () => {
        assertPage(await trust.request("GET", "/link?req=lr_%00"), 400);
        assertPage(await trust.request("GET", "/signin/email/verify?token=ml_%00"), 400);
        assertPage(await trust.request("GET", "/signin?next=%2Faccount%00"), 400);
        const form = { "content-type": "application/x-www-form-urlencoded" };
        assertPage(await trust.request("POST", "/link/confirm", { rawBody: "_csrf=x&req=lr_%00", headers: form }), 400);
        assertPage(
          await trust.request("POST", "/signin/email", { rawBody: "_csrf=x&email=a%40b.c&next=%2F%00", headers: form }),
          400,
        );
      });
    });
  }
});
