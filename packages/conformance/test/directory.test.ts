import assert from "node:assert/strict";
import { after, before, describe as suite, test } from "node:test";
import { directoryProbes } from "../src/index.js";
import { describe, run } from "./support/run.js";
import {
  type Answer,
  type Breakage,
  bodyOf,
  type Exchange,
  editJson,
  pathOf,
  queryOf,
  type StandIn,
  startStandIn,
} from "./support/stand-in.js";
import { type Directory, startDirectory } from "./support/targets.js";

const ids = directoryProbes.map((p) => p.id);
const MIRROR_ONLY = "directory.mirror.read-only";
/** Probes that a mirror skips (it takes no challenge requests) and a non-mirror run skips. */
const CHALLENGES = ids.filter((id) => id.startsWith("directory.challenge."));

const isList = (e: Exchange) => e.method === "GET" && pathOf(e) === "/v1/listings";
const isItem = (e: Exchange) => e.method === "GET" && pathOf(e).startsWith("/v1/listings/");
const isChallenge = (e: Exchange) => e.method === "POST" && pathOf(e) === "/v1/listings/challenge";

/** A listing that matches no filter the probes send, added to a filtered page. */
function addStranger(a: Answer, change: Record<string, unknown>): Answer {
  return editJson(a, (b) => {
    const listings = b.listings as Record<string, unknown>[];
    listings.push({ ...listings[0], service_did: "did:web:stranger.example", ...change });
  });
}

const filtered = (param: string, change: Record<string, unknown>): Breakage => ({
  response: (e, a) => (isList(e) && queryOf(e).has(param) && a.status === 200 ? addStranger(a, change) : undefined),
});

const BREAKAGES: { id: string; how: string; breakage: Breakage }[] = [
  {
    id: "directory.listings.read",
    how: "a listing with a status outside the contract",
    breakage: {
      response: (e, a) =>
        isList(e) && e.path === "/v1/listings"
          ? editJson(a, (b) => {
              (b.listings as Record<string, unknown>[])[0]!.status = "live";
            })
          : undefined,
    },
  },
  {
    id: "directory.listings.headers",
    how: "no CORS header on the list",
    breakage: {
      response: (e, a) => {
        if (!(isList(e) && e.path === "/v1/listings")) return undefined;
        const { "access-control-allow-origin": _dropped, ...headers } = a.headers;
        return { ...a, headers };
      },
    },
  },
  {
    id: "directory.listings.pagination",
    how: "next_cursor handing back the cursor it was given",
    breakage: {
      response: (e, a) => {
        const cursor = queryOf(e).get("cursor");
        if (!isList(e) || cursor === null || a.status !== 200) return undefined;
        return editJson(a, (b) => {
          b.next_cursor = cursor;
        });
      },
    },
  },
  {
    id: "directory.listings.bad-limit",
    how: "limit=0 and limit=101 ignored",
    breakage: {
      request: (e) => (isList(e) && ["0", "101"].includes(queryOf(e).get("limit") ?? "") ? "/v1/listings" : undefined),
    },
  },
  {
    id: "directory.listings.bad-filter",
    how: "invalid status and updated_since ignored",
    breakage: {
      request: (e) =>
        isList(e) &&
        (queryOf(e).get("status") === "proto-conformance" || queryOf(e).get("updated_since") === "yesterday")
          ? "/v1/listings"
          : undefined,
    },
  },
  {
    id: "directory.listings.cursor.tampered",
    how: "a bad cursor answered as an empty last page",
    breakage: {
      response: (e, a) =>
        isList(e) && queryOf(e).has("cursor") && a.status === 400
          ? { status: 200, headers: a.headers, body: JSON.stringify({ listings: [], next_cursor: null }) }
          : undefined,
    },
  },
  {
    id: "directory.listings.filter.tag",
    how: "an untagged listing in a tag query",
    breakage: filtered("tag", { tags: [] }),
  },
  {
    id: "directory.listings.filter.search",
    how: "an unrelated listing in a search",
    breakage: filtered("search", { title: "zzz", description: null }),
  },
  {
    id: "directory.listings.filter.status",
    how: "a deleted listing in a status query",
    breakage: filtered("status", { status: "deleted" }),
  },
  {
    id: "directory.listings.filter.updated-since",
    how: "an old listing in an updated_since query",
    breakage: filtered("updated_since", { updated_at: "2000-01-01T00:00:00Z" }),
  },
  {
    id: "directory.listing.read",
    how: "a single read answering another DID",
    breakage: {
      response: (e, a) =>
        isItem(e) && a.status === 200
          ? editJson(a, (b) => {
              b.service_did = "did:web:someone-else.example";
            })
          : undefined,
    },
  },
  {
    id: "directory.listing.headers",
    how: "a single listing cached ten minutes",
    breakage: {
      response: (e, a) =>
        isItem(e) && a.status === 200
          ? { ...a, headers: { ...a.headers, "cache-control": "public, max-age=600, s-maxage=300" } }
          : undefined,
    },
  },
  {
    id: "directory.listing.unknown",
    how: "another code for an unknown DID",
    breakage: {
      response: (e, a) =>
        isItem(e) && a.status === 404
          ? editJson(a, (b) => {
              b.error = { code: "listing_not_found", message: "no" };
            })
          : undefined,
    },
  },
  {
    id: "directory.sitemap",
    how: "the sitemap served as HTML",
    breakage: {
      response: (e, a) =>
        pathOf(e) === "/sitemap.xml" ? { ...a, headers: { ...a.headers, "content-type": "text/html" } } : undefined,
    },
  },
  {
    id: "directory.challenge.missing-url",
    how: "422 for a body without discovery_url",
    breakage: {
      response: (e, a) => (isChallenge(e) && bodyOf(e).discovery_url === undefined ? { ...a, status: 422 } : undefined),
    },
  },
  {
    id: "directory.challenge.not-https",
    how: "a plain-text refusal of an http:// URL",
    breakage: {
      response: (e) =>
        isChallenge(e) && String(bodyOf(e).discovery_url).startsWith("http://")
          ? { status: 400, headers: { "content-type": "text/plain" }, body: "no" }
          : undefined,
    },
  },
  {
    id: "directory.challenge.wrong-path",
    how: "a challenge issued for a URL that is not the discovery path",
    breakage: {
      response: (e, a) =>
        isChallenge(e) && String(bodyOf(e).discovery_url).includes("/somewhere")
          ? { status: 200, headers: a.headers, body: JSON.stringify({ challenge_token: "ch_x" }) }
          : undefined,
    },
  },
  {
    id: "directory.challenge.valid",
    how: "a challenge whose proof_url is on another path",
    breakage: {
      response: (e, a) =>
        isChallenge(e) && a.status === 200
          ? editJson(a, (b) => {
              b.proof_url = String(b.proof_url).replace("proto-registry-proof", "proof.txt");
            })
          : undefined,
    },
  },
];

suite("directory probes", () => {
  let directory: Directory;
  let standIn: StandIn;
  let mirror: { url: string };
  let mirrorStandIn: StandIn;
  before(async () => {
    directory = await startDirectory();
    standIn = await startStandIn(directory.url);
    mirror = await directory.mirror();
    mirrorStandIn = await startStandIn(mirror.url);
  });
  after(async () => {
    await standIn.close();
    await mirrorStandIn.close();
    await directory.close();
  });

  test("every probe passes against our directory with --write (the mirror probe is skipped: not a mirror)", async () => {
    const r = await run(directoryProbes, directory.url, { write: true });
    assert.deepEqual(
      r.results.map((x) => `${x.id}: ${x.status}`),
      ids.map((id) => `${id}: ${id === MIRROR_ONLY ? "skipped" : "pass"}`),
      describe(r.results),
    );
    assert.match(r.byId(MIRROR_ONLY).message, /--mirror/);
    // Three listings, one per page: the walk followed two cursors to the end.
    assert.deepEqual(r.byId("directory.listings.pagination").notes, []);
  });

  test("against our mirror with --mirror, the mirror probe passes and the challenge probes are skipped", async () => {
    const r = await run(directoryProbes, mirror.url, { write: true, mirror: true });
    assert.deepEqual(
      r.results.map((x) => `${x.id}: ${x.status}`),
      ids.map((id) => `${id}: ${CHALLENGES.includes(id) ? "skipped" : "pass"}`),
      describe(r.results),
    );
  });

  test("without --write the valid challenge is skipped", async () => {
    const r = await run(directoryProbes, directory.url);
    assert.equal(r.byId("directory.challenge.valid").status, "skipped");
    assert.equal(r.results.filter((x) => x.status === "fail").length, 0, describe(r.results));
  });

  test("a walk stopped by --max-pages passes with a note saying so", async () => {
    const r = await run(directoryProbes, directory.url, { maxPages: 2 });
    const result = r.byId("directory.listings.pagination");
    assert.equal(result.status, "pass");
    assert.match(result.notes.join("\n"), /stopped after 2 pages/);
  });

  test("the breakage table covers every directory probe but the mirror's (tested below)", () => {
    assert.deepEqual(BREAKAGES.map((b) => b.id).sort(), ids.filter((id) => id !== MIRROR_ONLY).sort());
  });

  for (const { id, how, breakage } of BREAKAGES) {
    test(`${id} fails on ${how}, and no other probe does`, async () => {
      standIn.breakWith(breakage);
      const { results } = await run(directoryProbes, standIn.url, { write: true });
      assert.deepEqual(
        results.filter((r) => r.status === "fail").map((r) => r.id),
        [id],
        describe(results),
      );
      assert.ok(results.find((r) => r.id === id)?.exchange, "the failure shows the exchange");
    });
  }

  test(`${MIRROR_ONLY} fails on a mirror that issues a challenge, and no other probe does`, async () => {
    mirrorStandIn.breakWith({
      response: (e, a) =>
        isChallenge(e)
          ? {
              status: 200,
              headers: { "content-type": "application/json" },
              body: JSON.stringify({ challenge_token: "ch_x" }),
            }
          : a,
    });
    const { results } = await run(directoryProbes, mirrorStandIn.url, { mirror: true });
    assert.deepEqual(
      results.filter((r) => r.status === "fail").map((r) => r.id),
      [MIRROR_ONLY],
      describe(results),
    );
  });
});
