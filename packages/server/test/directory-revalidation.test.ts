/**
 * Revalidation, black-box: the clock moves through `/__test/clock` and passes run through
 * `/__test/revalidate` (or the operator's `POST /admin/revalidate`); nothing sleeps. What a client
 * sees is checked: status, `updated_at`, `fetched_at`, `discovery_doc`, list visibility, and how
 * often the site's discovery document was fetched.
 */
import assert from "node:assert/strict";
import type { ServerResponse } from "node:http";
import { describe, test } from "node:test";
import { DISCOVERY_PATH } from "@proto/testkit";
import { ADMIN_TOKEN, type DirectoryHarness, didPath, startDirectoryHarness } from "./support/directory.js";
import { reportSkippedVariants, STORE_VARIANTS, type StoreVariant } from "./support/stores.js";

reportSkippedVariants();

const DAY = 86400;

interface Listing {
  service_did: string;
  discovery_doc: Record<string, unknown>;
  fetched_at: string;
  updated_at: string;
  status: "active" | "stale" | "deleted";
  title: string | null;
}

/** A fresh directory per test, so pass counts and the clock belong to that test alone. */
async function withHarness(variant: StoreVariant, run: (h: DirectoryHarness) => Promise<void>): Promise<void> {
  const h = await startDirectoryHarness(variant, { sites: 6 });
  try {
    await run(h);
  } finally {
    await h.close();
  }
}

async function read(h: DirectoryHarness, did: string): Promise<Listing> {
  const res = await h.request("GET", didPath(did));
  assert.equal(res.status, 200, res.text);
  return res.json;
}

/** DIDs in the default list (every page). */
async function listed(h: DirectoryHarness, query = ""): Promise<Listing[]> {
  const out: Listing[] = [];
  let cursor: string | null = null;
  do {
    const sep = query === "" ? "" : "&";
    const path: string = `/v1/listings?limit=100${sep}${query}${cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`}`;
    const res = await h.request("GET", path);
    assert.equal(res.status, 200, res.text);
    out.push(...res.json.listings);
    cursor = res.json.next_cursor;
  } while (cursor !== null);
  return out;
}

const down = (_req: unknown, res: ServerResponse) => {
  res.writeHead(500, { "content-type": "text/plain" });
  res.end("down");
};

/** Serves `body` as the discovery document with the right type. */
const serving = (body: string) => (_req: unknown, res: ServerResponse) => {
  res.writeHead(200, { "content-type": "application/json" });
  res.end(body);
};

/** One day later, one pass. */
async function nextDay(h: DirectoryHarness): Promise<Record<string, number>> {
  await h.advance(DAY);
  return h.revalidate();
}

const ms = (iso: string) => Date.parse(iso);

for (const variant of STORE_VARIANTS) {
  describe(`directory revalidation (${variant.name})`, () => {
    test("a listing is re-fetched once per day, not before, and once per pass", () =>
      withHarness(variant, async (h) => {
        const { site } = await h.register();
        assert.equal(site.hits.discovery, 1, "fetched once at submission");

        let counts = await h.revalidate();
        assert.equal(counts.checked, 0);
        assert.equal(site.hits.discovery, 1, "not due right after listing");

        await h.advance(DAY - 120);
        counts = await h.revalidate();
        assert.equal(counts.checked, 0);
        assert.equal(site.hits.discovery, 1, "not due before a day has passed");

        await h.advance(120);
        counts = await h.revalidate();
        assert.equal(counts.checked, 1);
        assert.equal(counts.succeeded, 1);
        assert.equal(site.hits.discovery, 2, "fetched once when due");

        counts = await h.revalidate();
        assert.equal(counts.checked, 0);
        assert.equal(site.hits.discovery, 2, "a second pass without time passing fetches nothing");

        await nextDay(h);
        assert.equal(site.hits.discovery, 3, "and again the next day");
      }));

    test("after a long gap one pass fetches a listing once, not once per missed day", () =>
      withHarness(variant, async (h) => {
        const { site, did } = await h.register();
        site.setHandler(DISCOVERY_PATH, down);
        await h.advance(5 * DAY);
        const counts = await h.revalidate();
        assert.equal(site.hits.discovery, 2, "one fetch for the whole gap");
        assert.equal(counts.checked, 1);
        assert.equal(counts.failed, 1);
        assert.equal(counts.became_stale, 0);
        assert.equal((await read(h, did)).status, "active", "one failed fetch is one failure, not three");
        // The next scheduler ticks (every minute by default) find nothing due until a day has passed.
        for (const seconds of [0, 2, 60, 3600, DAY - 3600 - 62 - 60]) {
          await h.advance(seconds);
          assert.equal((await h.revalidate()).checked, 0, `${seconds} s later`);
        }
        assert.equal(site.hits.discovery, 2, "no second fetch within the day after catching up");
        await h.advance(60);
        await h.revalidate();
        assert.equal(site.hits.discovery, 3, "the cadence goes on from there, daily");
        assert.equal((await read(h, did)).status, "active", "two failures, a day apart");
      }));

    test("1 and 2 failures keep active; the 3rd consecutive failure makes it stale, still listed", () =>
      withHarness(variant, async (h) => {
        const { site, did } = await h.register();
        const initial = await read(h, did);
        site.setHandler(DISCOVERY_PATH, down);

        for (const day of [1, 2]) {
          const counts = await nextDay(h);
          assert.equal(counts.failed, 1);
          const listing = await read(h, did);
          assert.equal(listing.status, "active", `after ${day} failure(s)`);
          assert.equal(listing.updated_at, initial.updated_at, "a failure alone changes nothing a reader sees");
          assert.equal(listing.fetched_at, initial.fetched_at, "fetched_at is the last successful fetch");
        }

        const counts = await nextDay(h);
        assert.equal(counts.failed, 1);
        assert.equal(counts.became_stale, 1);
        assert.equal(site.hits.discovery, 4);
        const stale = await read(h, did);
        assert.equal(stale.status, "stale");
        assert.ok(ms(stale.updated_at) > ms(initial.updated_at), "becoming stale is a change readers see");
        assert.equal(stale.fetched_at, initial.fetched_at);
        assert.deepEqual(stale.discovery_doc, initial.discovery_doc, "the last good document stays");

        const inList = (await listed(h)).find((l) => l.service_did === did);
        assert.equal(inList?.status, "stale", "a stale listing stays in the default list");
        assert.deepEqual(inList, stale);
        // A mirror polling updated_since sees the change.
        const since = await listed(h, `updated_since=${encodeURIComponent(stale.updated_at)}`);
        assert.deepEqual(
          since.map((l) => l.service_did),
          [did],
        );

        // Stale listings are still fetched daily.
        await nextDay(h);
        assert.equal(site.hits.discovery, 5);
        assert.equal((await read(h, did)).status, "stale");
      }));

    test("a success resets the failure count, and brings a stale listing back to active", () =>
      withHarness(variant, async (h) => {
        const { site, did } = await h.register();
        const good = serving(JSON.stringify(site.document()));

        // fail, fail, succeed, fail, fail: never three in a row.
        for (const [handler, label] of [
          [down, "fail 1"],
          [down, "fail 2"],
          [good, "success"],
          [down, "fail 1 again"],
          [down, "fail 2 again"],
        ] as const) {
          site.setHandler(DISCOVERY_PATH, handler);
          await nextDay(h);
          assert.equal((await read(h, did)).status, "active", label);
        }
        site.setHandler(DISCOVERY_PATH, down);
        await nextDay(h);
        const stale = await read(h, did);
        assert.equal(stale.status, "stale", "the third consecutive failure");

        site.setHandler(DISCOVERY_PATH, good);
        await h.advance(DAY);
        const counts = await h.revalidate();
        assert.equal(counts.succeeded, 1);
        const back = await read(h, did);
        assert.equal(back.status, "active");
        assert.ok(ms(back.updated_at) > ms(stale.updated_at), "returning to active is a visible change");
        assert.ok(ms(back.fetched_at) > ms(stale.fetched_at));
        assert.equal(back.updated_at, back.fetched_at, "both are the time of that fetch");

        // The count started again: two failures do not make it stale.
        site.setHandler(DISCOVERY_PATH, down);
        await nextDay(h);
        await nextDay(h);
        assert.equal((await read(h, did)).status, "active");
      }));

    test("30 days in stale soft-deletes the listing; it leaves the default list and is no longer fetched", () =>
      withHarness(variant, async (h) => {
        const { site, did, token } = await h.register();
        site.setHandler(DISCOVERY_PATH, down);
        for (let day = 1; day <= 3; day++) await nextDay(h);
        const stale = await read(h, did);
        assert.equal(stale.status, "stale");

        for (let day = 1; day < 30; day++) {
          const counts = await nextDay(h);
          assert.equal(counts.deleted, 0, `day ${day} in stale`);
          assert.equal((await read(h, did)).status, "stale", `day ${day} in stale`);
        }
        const counts = await nextDay(h);
        assert.equal(counts.deleted, 1);
        const deleted = await read(h, did);
        assert.equal(deleted.status, "deleted", "after 30 days in stale");
        assert.ok(ms(deleted.updated_at) > ms(stale.updated_at));

        assert.ok(!(await listed(h)).some((l) => l.service_did === did), "hidden from the default list");
        assert.equal((await listed(h, "include_deleted=true")).find((l) => l.service_did === did)?.status, "deleted");
        assert.deepEqual(
          (await listed(h, "status=deleted")).map((l) => l.service_did),
          [did],
        );

        const hits = site.hits.discovery;
        await nextDay(h);
        assert.equal(site.hits.discovery, hits, "a deleted listing is not revalidated");
        // Its owner cannot act on it any more.
        const patch = await h.request("PATCH", didPath(did), { token, body: { title: "x" } });
        assert.ok(patch.status === 401 || patch.status === 404, `PATCH after soft-delete: ${patch.status}`);
      }));

    test("a document declaring another service_did counts as a failure", () =>
      withHarness(variant, async (h) => {
        const { site, did } = await h.register();
        const original = await read(h, did);
        const foreign = site.document({ service_did: "did:web:elsewhere.test" });
        site.setHandler(DISCOVERY_PATH, serving(JSON.stringify(foreign)));
        for (const day of [1, 2]) {
          const counts = await nextDay(h);
          assert.equal(counts.failed, 1, `day ${day}`);
          assert.equal((await read(h, did)).status, "active");
        }
        const counts = await nextDay(h);
        assert.equal(counts.became_stale, 1);
        const stale = await read(h, did);
        assert.equal(stale.status, "stale");
        assert.deepEqual(stale.discovery_doc, original.discovery_doc, "the foreign document is never served");
        assert.equal(stale.service_did, did);
      }));

    test("an invalid document (not JSON, schema-invalid, a redirect) counts as a failure", () =>
      withHarness(variant, async (h) => {
        const { site, did } = await h.register();
        const original = await read(h, did);
        const { endpoints: _dropped, ...withoutEndpoints } = site.document();
        const failures = [
          serving("{ this is not json"),
          serving(JSON.stringify(withoutEndpoints)),
          (_req: unknown, res: ServerResponse) => {
            res.writeHead(302, { location: "/elsewhere" });
            res.end();
          },
        ];
        for (const [i, handler] of failures.entries()) {
          site.setHandler(DISCOVERY_PATH, handler);
          const counts = await nextDay(h);
          assert.equal(counts.failed, 1, `failure ${i + 1}`);
          assert.equal(counts.succeeded, 0);
        }
        const stale = await read(h, did);
        assert.equal(stale.status, "stale", "three invalid documents in a row");
        assert.deepEqual(stale.discovery_doc, original.discovery_doc);
        assert.equal(stale.fetched_at, original.fetched_at);
      }));

    test("an unchanged document moves fetched_at but not updated_at; a changed one moves both and is served", () =>
      withHarness(variant, async (h) => {
        const { site, did } = await h.register();
        const first = await read(h, did);

        await nextDay(h);
        const same = await read(h, did);
        assert.equal(same.status, "active");
        assert.equal(same.updated_at, first.updated_at, "nothing a reader sees changed (decisions §9)");
        assert.ok(ms(same.fetched_at) > ms(first.fetched_at), "fetched_at is the last successful fetch");
        assert.deepEqual(
          (await listed(h)).find((l) => l.service_did === did),
          same,
          "lists serve the same bytes as the single read",
        );
        assert.deepEqual(
          await listed(h, `updated_since=${encodeURIComponent(new Date(ms(first.updated_at) + 1).toISOString())}`),
          [],
          "a mirror polling updated_since is not flooded",
        );

        // Endpoints may turn into absolute URLs (upstream §4.3), even on another host.
        const changed = site.document({
          features: ["attestation", "key_rotation"],
          endpoints: {
            ...(site.document().endpoints as object),
            accounts: `https://${site.authority}/proto/v1/accounts`,
            claim_completion: "https://api.elsewhere.test/proto/v1/claim",
            key_rotation: "/proto/v1/keys/rotate",
          },
          unknown_future_field: { kept: true },
        });
        site.setHandler(DISCOVERY_PATH, serving(JSON.stringify(changed)));
        await nextDay(h);
        const updated = await read(h, did);
        assert.deepEqual(updated.discovery_doc, changed, "the new document is served");
        assert.ok(ms(updated.updated_at) > ms(same.updated_at), "a changed document is a visible change");
        assert.ok(ms(updated.fetched_at) > ms(same.fetched_at));
        assert.equal(updated.updated_at, updated.fetched_at);
        const since = await listed(h, `updated_since=${encodeURIComponent(updated.updated_at)}`);
        assert.deepEqual(since, [updated], "a mirror sees the change");

        // Served again unchanged: only fetched_at moves.
        await nextDay(h);
        const again = await read(h, did);
        assert.equal(again.updated_at, updated.updated_at);
        assert.ok(ms(again.fetched_at) > ms(updated.fetched_at));
      }));

    test("an update by the owner while the document is being fetched is kept", () =>
      withHarness(variant, async (h) => {
        const { site, did, token } = await h.register(undefined, { title: "Before" });
        // Once with the same document (bookkeeping only), once with a changed one (a visible change).
        for (const [round, doc] of [
          [1, site.document()],
          [2, site.document({ features: ["attestation"] })],
        ] as const) {
          let patched: number | undefined;
          site.setHandler(DISCOVERY_PATH, (_req, res) => {
            h.request("PATCH", didPath(did), { token, body: { title: `During ${round}` } })
              .then((r) => {
                patched = r.status;
              })
              .finally(() => serving(JSON.stringify(doc))(_req, res));
          });
          const counts = await nextDay(h);
          assert.equal(patched, 200, "the PATCH went through during the fetch");
          assert.equal(counts.succeeded, 1);
          const after = await read(h, did);
          assert.equal(after.title, `During ${round}`, `round ${round}: the owner's update survives revalidation`);
          assert.deepEqual(after.discovery_doc, doc);
          assert.equal((await listed(h)).find((l) => l.service_did === did)?.title, `During ${round}`);
        }
      }));

    test("a withdrawal while the document is being fetched stays withdrawn", () =>
      withHarness(variant, async (h) => {
        const { site, did, token } = await h.register();
        let withdrawn: number | undefined;
        site.setHandler(DISCOVERY_PATH, (_req, res) => {
          h.request("DELETE", didPath(did), { token })
            .then((r) => {
              withdrawn = r.status;
            })
            .finally(() => serving(JSON.stringify(site.document({ features: ["attestation"] })))(_req, res));
        });
        await nextDay(h);
        assert.equal(withdrawn, 204);
        const after = await read(h, did);
        assert.equal(after.status, "deleted", "a successful fetch does not bring a withdrawn listing back");
        assert.deepEqual(after.discovery_doc, site.document());
        assert.ok(!(await listed(h)).some((l) => l.service_did === did));
        const hits = site.hits.discovery;
        await nextDay(h);
        assert.equal(site.hits.discovery, hits, "nor is it revalidated afterwards");
      }));

    test("POST /admin/revalidate needs the admin bearer token and answers the pass counts", () =>
      withHarness(variant, async (h) => {
        const ok = await h.register();
        const failing = await h.register();
        failing.site.setHandler(DISCOVERY_PATH, down);
        await h.advance(DAY);

        const refused: Record<string, string>[] = [
          {},
          { authorization: "Bearer wrong-token-wrong-token-0000" },
          { authorization: `Bearer ${ADMIN_TOKEN}x` },
          { authorization: `Basic ${Buffer.from(`admin:${ADMIN_TOKEN}`).toString("base64")}` },
          { authorization: ADMIN_TOKEN },
          { authorization: "Bearer " },
        ];
        for (const headers of refused) {
          const res = await h.request("POST", "/admin/revalidate", { headers, body: {} });
          assert.equal(res.status, 401, JSON.stringify(headers));
          assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
          assert.equal(res.json?.error?.code, "unauthorized");
          assert.equal(typeof res.json.error.message, "string");
        }
        assert.equal(ok.site.hits.discovery, 1, "refused calls run no pass");

        const res = await h.request("POST", "/admin/revalidate", { token: ADMIN_TOKEN, body: {} });
        assert.equal(res.status, 200, res.text);
        assert.deepEqual(res.json, { checked: 2, succeeded: 1, failed: 1, became_stale: 0, deleted: 0 });
        assert.equal(ok.site.hits.discovery, 2);
        assert.equal(failing.site.hits.discovery, 2);
        // Without a body too; nothing is due now.
        const again = await h.request("POST", "/admin/revalidate", { token: ADMIN_TOKEN });
        assert.equal(again.status, 200, again.text);
        assert.deepEqual(again.json, { checked: 0, succeeded: 0, failed: 0, became_stale: 0, deleted: 0 });
      }));
  });
}
