/**
 * The read side of the directory, black-box over HTTP: the paginated list (page sizes, order,
 * cursors, traversal under writes), search and filters, the single read, the exact headers and
 * listing shape, the sitemap, the published discovery schema and the health endpoints.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { DISCOVERY_SCHEMA } from "@proto/protocol";
import {
  type DirectoryHarness,
  didPath,
  type HttpResult,
  makeStale,
  startDirectoryHarness,
} from "./support/directory.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";

reportSkippedVariants();

/** Raised so that the many reads and registrations of these suites never meet the rate limiter. */
const GENEROUS_LIMITS = {
  DIRECTORY_RATE_LIMITS:
    "challenge=100000/60,create=100000/60,write=100000/60,read=100000/60,sitemap=100000/60,pages=100000/60",
};

const LIST_CACHE = "public, max-age=30, s-maxage=120";
const ITEM_CACHE = "public, max-age=60, s-maxage=300";

/** Every field of a listing, and nothing else (spec "Listing", decisions §7, §11). */
const LISTING_FIELDS = [
  "_meta",
  "description",
  "discovery_doc",
  "discovery_url",
  "fetched_at",
  "first_listed_at",
  "service_did",
  "status",
  "tags",
  "title",
  "updated_at",
];

interface Listing {
  service_did: string;
  discovery_url: string;
  discovery_doc: Record<string, unknown>;
  fetched_at: string;
  first_listed_at: string;
  updated_at: string;
  status: "active" | "stale" | "deleted";
  tags: string[];
  title: string | null;
  description: string | null;
  _meta: Record<string, never>;
}

type Query = Record<string, string | number | boolean | undefined>;

/** `/v1/listings?...`, every value percent-encoded (so `+02:00` arrives as a plus, not a space). */
function listPath(query: Query = {}): string {
  const parts = Object.entries(query)
    .filter((entry): entry is [string, string | number | boolean] => entry[1] !== undefined)
    .map(([key, value]) => `${encodeURIComponent(key)}=${encodeURIComponent(String(value))}`);
  return parts.length === 0 ? "/v1/listings" : `/v1/listings?${parts.join("&")}`;
}

async function listPage(h: DirectoryHarness, query: Query = {}): Promise<{ listings: Listing[]; next: string | null }> {
  const res = await h.request("GET", listPath(query));
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(Object.keys(res.json).sort(), ["listings", "next_cursor"]);
  assert.ok(Array.isArray(res.json.listings));
  assert.ok(res.json.next_cursor === null || typeof res.json.next_cursor === "string");
  return { listings: res.json.listings, next: res.json.next_cursor };
}

/** A traversal this long means the cursor loops. */
const MAX_PAGES = 400;

/**
 * Follows `next_cursor` to the end, calling `between` after each page that has a successor.
 * Asserts that the traversal terminates.
 */
async function traverse(
  h: DirectoryHarness,
  query: Query,
  between?: (page: number, seen: Listing[]) => Promise<void>,
): Promise<Listing[]> {
  const seen: Listing[] = [];
  let cursor: string | undefined;
  for (let page = 1; ; page++) {
    assert.ok(page <= MAX_PAGES, `the traversal did not end after ${MAX_PAGES} pages`);
    const { listings, next } = await listPage(h, { ...query, cursor });
    assert.ok(listings.length <= Number(query.limit ?? 50), "a page is never larger than limit");
    seen.push(...listings);
    if (next === null) return seen;
    assert.ok(listings.length > 0, "a page with a next_cursor is never empty");
    cursor = next;
    if (between !== undefined) await between(page, seen);
  }
}

async function listAll(h: DirectoryHarness, query: Query = {}): Promise<Listing[]> {
  return traverse(h, { ...query, limit: 100 });
}

const dids = (listings: readonly Listing[]) => listings.map((l) => l.service_did);
const sorted = (values: readonly string[]) => [...values].sort();

/** Decisions §8: `updated_at` ascending, then `service_did`; strictly, so nothing appears twice. */
function assertListOrder(listings: readonly Listing[]): void {
  for (let i = 1; i < listings.length; i++) {
    const a = listings[i - 1]!;
    const b = listings[i]!;
    const ta = Date.parse(a.updated_at);
    const tb = Date.parse(b.updated_at);
    assert.ok(
      ta < tb || (ta === tb && a.service_did < b.service_did),
      `out of order at ${i}: ${a.updated_at} ${a.service_did} then ${b.updated_at} ${b.service_did}`,
    );
  }
}

function assertInvalidRequest(res: HttpResult, what: string): void {
  assert.equal(res.status, 400, `${what}: ${res.status} ${res.text}`);
  assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
  assert.equal(res.json?.error?.code, "invalid_request", `${what}: ${res.text}`);
  assert.equal(typeof res.json.error.message, "string");
}

/** Listing DIDs with exactly one occurrence each; fails on a repeat. */
function assertNoRepeats(listings: readonly Listing[]): void {
  const counts = new Map<string, number>();
  for (const did of dids(listings)) counts.set(did, (counts.get(did) ?? 0) + 1);
  const repeated = [...counts].filter(([, n]) => n > 1).map(([did]) => did);
  assert.deepEqual(repeated, [], "listings repeated within one traversal");
}

for (const variant of STORE_VARIANTS) {
  describe(`directory list pagination and order (${variant.name})`, () => {
    let h: DirectoryHarness;
    /** Every listing, in registration order. */
    const all: string[] = [];
    const tokens = new Map<string, string>();

    before(async () => {
      h = await startDirectoryHarness(variant, { sites: 64, env: GENEROUS_LIMITS });
      for (let i = 0; i < 55; i++) {
        const { did, token } = await h.register(undefined, { title: `Listing ${String(i).padStart(2, "0")}` });
        all.push(did);
        tokens.set(did, token);
      }
    });
    after(() => h.close());

    test("the default page is 50 listings; next_cursor leads to the rest, then null", async () => {
      const first = await listPage(h);
      assert.equal(first.listings.length, 50);
      assert.equal(typeof first.next, "string");
      const second = await listPage(h, { cursor: first.next! });
      assert.equal(second.listings.length, 5);
      assert.equal(second.next, null);
      const seen = [...first.listings, ...second.listings];
      assertNoRepeats(seen);
      assert.deepEqual(sorted(dids(seen)), sorted(all));
    });

    test("limit takes 1 to 100; next_cursor is null when nothing follows, even on an exactly full page", async () => {
      const one = await listPage(h, { limit: 1 });
      assert.equal(one.listings.length, 1);
      assert.equal(typeof one.next, "string");
      const hundred = await listPage(h, { limit: 100 });
      assert.equal(hundred.listings.length, 55);
      assert.equal(hundred.next, null);
      const exact = await listPage(h, { limit: 55 });
      assert.equal(exact.listings.length, 55);
      assert.equal(exact.next, null, "no cursor to an empty page");
      const almost = await listPage(h, { limit: 54 });
      assert.equal(almost.listings.length, 54);
      const last = await listPage(h, { limit: 54, cursor: almost.next! });
      assert.equal(last.listings.length, 1);
      assert.equal(last.next, null);
    });

    test("a limit outside 1..100 or not an integer is 400 invalid_request", async () => {
      for (const limit of ["0", "101", "-1", "abc", "1.5", "1000000"]) {
        assertInvalidRequest(await h.request("GET", `/v1/listings?limit=${limit}`), `limit=${limit}`);
      }
    });

    test("listings are ordered by updated_at, then service_did", async () => {
      const listings = (await listPage(h, { limit: 100 })).listings;
      assert.equal(listings.length, 55);
      assertListOrder(listings);
      // Registration order is update order here.
      assert.deepEqual(dids(listings), all);
    });

    test("a cursor that was altered, truncated, made up or does not decode is 400 invalid_request", async () => {
      const { next } = await listPage(h, { limit: 2 });
      const cursor = next!;
      const flip = (c: string) => (c === "A" ? "B" : "A");
      for (let i = 0; i < cursor.length; i++) {
        const altered = cursor.slice(0, i) + flip(cursor[i]!) + cursor.slice(i + 1);
        assertInvalidRequest(await h.request("GET", listPath({ limit: 2, cursor: altered })), `cursor altered at ${i}`);
      }
      const dot = cursor.indexOf(".");
      const forged = `${Buffer.from(JSON.stringify([0, "did:web:a"])).toString("base64url")}.AAAAAAAAAAAAAAAA`;
      for (const bad of [
        cursor.slice(0, -1),
        cursor.slice(0, dot >= 0 ? dot : 5),
        cursor.slice(1),
        cursor.slice(0, 8),
        `${cursor}A`,
        `${cursor}.A`,
        "abc",
        "garbage!",
        "....",
        "%%%",
        "null",
        "eyJ9",
        forged,
        "x".repeat(5000),
      ]) {
        assertInvalidRequest(await h.request("GET", listPath({ limit: 2, cursor: bad })), `cursor ${bad.slice(0, 40)}`);
      }
    });

    test("a cursor reused with other filters is 400 invalid_request; the same cursor again gives the same page", async () => {
      const { next } = await listPage(h, { limit: 3 });
      const cursor = next!;
      for (const other of [
        { search: "listing" },
        { tag: "x" },
        { status: "active" },
        { include_deleted: true },
        { updated_since: "1970-01-01T00:00:00Z" },
      ] as Query[]) {
        assertInvalidRequest(
          await h.request("GET", listPath({ limit: 3, cursor, ...other })),
          `cursor with ${JSON.stringify(other)}`,
        );
      }
      const once = await listPage(h, { limit: 3, cursor });
      const twice = await listPage(h, { limit: 3, cursor });
      assert.deepEqual(twice, once);
      // The page size is not a filter: a client may change it between pages.
      const wider = await listPage(h, { limit: 5, cursor });
      assert.deepEqual(dids(wider.listings.slice(0, 3)), dids(once.listings));
    });

    test("a cursor from a filtered traversal carries on with the same filters", async () => {
      const seen = await traverse(h, { limit: 2, search: "listing 1" });
      assertNoRepeats(seen);
      assert.deepEqual(sorted(dids(seen)), sorted(all.slice(10, 20)));
    });

    test("after several PATCHes a limit=1 traversal ends and sees every listing once, updated ones last", async () => {
      const patchedOrder = [all[40]!, all[3]!, all[17]!, all[0]!, all[54]!];
      for (const did of patchedOrder) {
        const res = await h.request("PATCH", didPath(did), { token: tokens.get(did)!, body: { description: "moved" } });
        assert.equal(res.status, 200, res.text);
      }
      const seen = await traverse(h, { limit: 1 });
      assertNoRepeats(seen);
      assert.equal(seen.length, all.length);
      assert.deepEqual(sorted(dids(seen)), sorted(all));
      assertListOrder(seen);
      assert.deepEqual(dids(seen.slice(-patchedOrder.length)), patchedOrder);
      // Searches page in the same order: listings updated within a second of each other, their
      // ids out of order, on either side of every page boundary.
      for (const query of [
        { search: "listing" },
        { search: "moved" },
        { search: "ing 1" },
        { search: "g" },
      ] as Query[]) {
        const expected = dids(seen).filter((did) => {
          const listing = seen.find((l) => l.service_did === did)!;
          const term = String(query.search).toLowerCase();
          return (
            `${listing.title ?? ""}`.toLowerCase().includes(term) ||
            `${listing.description ?? ""}`.toLowerCase().includes(term)
          );
        });
        for (const limit of [1, 2, 3]) {
          const searched = await traverse(h, { ...query, limit });
          assertListOrder(searched);
          assert.deepEqual(dids(searched), expected, `${JSON.stringify(query)}, limit ${limit}`);
        }
      }
    });

    test("listings registered and updated during a traversal: it ends, sees each earlier listing once, repeats none", async () => {
      const before = dids(await listAll(h));
      assert.equal(before.length, all.length);
      const added: string[] = [];
      const updatedAhead: string[] = [];
      const seen = await traverse(h, { limit: 4 }, async (page, soFar) => {
        if (page % 2 === 1 && added.length < 5) {
          const { did } = await h.register(undefined, { title: `Added ${added.length}` });
          added.push(did);
        }
        if (page % 3 === 0) {
          // An update to a listing the traversal has not reached yet moves it ahead, still once.
          const seenSet = new Set(dids(soFar));
          const target = before.find((did) => !seenSet.has(did) && !updatedAhead.includes(did));
          if (target !== undefined) {
            const res = await h.request("PATCH", didPath(target), {
              token: tokens.get(target)!,
              body: { title: "updated mid-traversal" },
            });
            assert.equal(res.status, 200, res.text);
            updatedAhead.push(target);
          }
        }
      });
      assert.ok(added.length > 0 && updatedAhead.length > 0, "the traversal was long enough to write between pages");
      assertNoRepeats(seen);
      const seenSet = new Set(dids(seen));
      for (const did of before) assert.ok(seenSet.has(did), `pre-existing ${did} was skipped`);
      // Written after the cursor position, the new listings come later in the order, so they are seen.
      for (const did of added) assert.ok(seenSet.has(did), `new ${did} was not reached`);
      assert.equal(seen.length, before.length + added.length);
      assertListOrder(seen);
      all.push(...added);
    });
  });

  describe(`directory search and filters (${variant.name})`, () => {
    let h: DirectoryHarness;
    interface Fixture {
      key: string;
      title?: string;
      description?: string;
      tags?: string[];
      status: "active" | "stale" | "deleted";
      did?: string;
    }
    const fixtures: Fixture[] = [
      {
        key: "weather",
        title: "Weather Station",
        description: "Forecasts at 50% off for members",
        tags: ["weather", "Outdoor"],
        status: "active",
      },
      { key: "club", title: "500 Club", tags: ["club"], status: "active" },
      {
        key: "snake",
        title: 'snake_case "tools"',
        description: "Rename identifiers",
        tags: ["dev", "weather-tools"],
        status: "active",
      },
      { key: "library", description: "A quiet LIBRARY of notes", tags: [], status: "active" },
      { key: "icecream", title: "xy", description: "ice cream and sorbet at C:\\shop", status: "active" },
      { key: "plain", status: "active" },
      { key: "unicode", title: "École Über", status: "active" },
      { key: "archive", title: "Weather archive", tags: ["weather"], status: "deleted" },
      { key: "backup", title: "Weather backup", description: "Mirrors forecasts", tags: ["weather"], status: "stale" },
    ];
    const byKey = (key: string) => fixtures.find((f) => f.key === key)!;
    const didsOf = (...keys: string[]) => sorted(keys.map((k) => byKey(k).did!));
    const visible = (f: Fixture) => f.status !== "deleted";
    /** The reference: case-insensitive substring on title and description. */
    const matches = (f: Fixture, term: string) =>
      [f.title, f.description].some((text) => text?.toLowerCase().includes(term.toLowerCase()) ?? false);

    before(async () => {
      h = await startDirectoryHarness(variant, { sites: 16, env: GENEROUS_LIMITS });
      for (const f of fixtures) {
        const extra: Record<string, unknown> = {};
        if (f.title !== undefined) extra.title = f.title;
        if (f.description !== undefined) extra.description = f.description;
        if (f.tags !== undefined) extra.tags = f.tags;
        const { did, token, site } = await h.register(undefined, extra);
        f.did = did;
        if (f.status === "deleted") {
          const res = await h.request("DELETE", didPath(did), { token });
          assert.equal(res.status, 204, res.text);
        }
        if (f.status === "stale") await makeStale(h, site);
      }
      for (const f of fixtures) {
        const res = await h.request("GET", didPath(f.did!));
        assert.equal(res.json.status, f.status, `fixture ${f.key}`);
      }
    });
    after(() => h.close());

    test("search is a case-insensitive substring match on title and description", async () => {
      for (const term of [
        "weather",
        "WEATHER",
        "wEaThEr",
        "station",
        "forecasts",
        "library",
        "LIBRARY",
        "quiet library",
        "notes",
        "500",
        "club",
        "ice c",
        "rename ID",
      ]) {
        const expected = sorted(fixtures.filter((f) => visible(f) && matches(f, term)).map((f) => f.did!));
        assert.ok(expected.length > 0, `fixture check for ${term}`);
        assert.deepEqual(sorted(dids(await listAll(h, { search: term }))), expected, `search=${term}`);
      }
    });

    test("search takes % _ \\ and quotes literally: 50% does not match 500", async () => {
      const cases: [string, string[]][] = [
        ["50%", ["weather"]],
        ["%", ["weather"]],
        ["0%", ["weather"]],
        ["0% off", ["weather"]],
        ["5_0", []],
        ["_", ["snake"]],
        ["e_c", ["snake"]],
        ["e c", ["icecream"]],
        ["\\", ["icecream"]],
        [":\\s", ["icecream"]],
        ['"tools"', ["snake"]],
        ['tools"', ["snake"]],
        ['"', ["snake"]],
      ];
      for (const [term, keys] of cases) {
        assert.deepEqual(sorted(dids(await listAll(h, { search: term }))), didsOf(...keys), `search=${term}`);
      }
    });

    test("one- and two-character search terms work", async () => {
      for (const term of ["xy", "XY", "q", "Q", "qu", "y", "50", "c:"]) {
        const expected = sorted(fixtures.filter((f) => visible(f) && matches(f, term)).map((f) => f.did!));
        assert.ok(expected.length > 0, `fixture check for ${term}`);
        assert.deepEqual(sorted(dids(await listAll(h, { search: term }))), expected, `search=${term}`);
      }
    });

    test("short search terms fold non-ASCII case like long ones", async () => {
      for (const term of ["éc", "ÉC", "Éc", "üb", "ÜB", "école", "ÉCOLE", "über"]) {
        assert.deepEqual(dids(await listAll(h, { search: term })), didsOf("unicode"), `search=${term}`);
      }
    });

    test("a search without a match is an empty list with no cursor", async () => {
      for (const term of ["zzz", "z", "qq", "weather stationx", "100%"]) {
        const page = await listPage(h, { search: term });
        assert.deepEqual(page, { listings: [], next: null }, `search=${term}`);
      }
    });

    test("search reaches deleted listings only with include_deleted", async () => {
      assert.deepEqual(dids(await listAll(h, { search: "archive" })), []);
      assert.deepEqual(dids(await listAll(h, { search: "archive", include_deleted: true })), didsOf("archive"));
    });

    test("tag is an exact, case-sensitive match", async () => {
      const cases: [string, string[]][] = [
        ["weather", ["weather", "backup"]],
        ["Weather", []],
        ["WEATHER", []],
        ["weath", []],
        ["eather", []],
        ["Outdoor", ["weather"]],
        ["outdoor", []],
        ["weather-tools", ["snake"]],
        ["tools", []],
        ["club", ["club"]],
      ];
      for (const [tag, keys] of cases) {
        assert.deepEqual(sorted(dids(await listAll(h, { tag }))), didsOf(...keys), `tag=${tag}`);
      }
      // Page by page, in list order, through the tag's own index.
      const paged = await traverse(h, { tag: "weather", include_deleted: true, limit: 1 });
      assertNoRepeats(paged);
      assertListOrder(paged);
      assert.deepEqual(sorted(dids(paged)), didsOf("weather", "backup", "archive"));
    });

    test("search and tag combine", async () => {
      const cases: [Query, string[]][] = [
        [{ search: "station", tag: "weather" }, ["weather"]],
        [{ search: "FORECASTS", tag: "weather" }, ["weather", "backup"]],
        [{ search: "station", tag: "club" }, []],
        [{ search: "500", tag: "club" }, ["club"]],
        [{ search: "%", tag: "weather" }, ["weather"]],
        [{ search: "archive", tag: "weather", include_deleted: true }, ["archive"]],
        [{ search: "weather", tag: "weather", status: "stale" }, ["backup"]],
      ];
      for (const [query, keys] of cases) {
        assert.deepEqual(sorted(dids(await listAll(h, query))), didsOf(...keys), JSON.stringify(query));
      }
    });

    test("status filters; the default hides deleted listings; include_deleted shows them", async () => {
      const keysWith = (pred: (f: Fixture) => boolean) => sorted(fixtures.filter(pred).map((f) => f.did!));
      const check = async (query: Query, expected: string[]) => {
        const listings = await listAll(h, query);
        assert.deepEqual(sorted(dids(listings)), expected, JSON.stringify(query));
        for (const l of listings) {
          const f = fixtures.find((x) => x.did === l.service_did)!;
          assert.equal(l.status, f.status, `${f.key} in ${JSON.stringify(query)}`);
        }
      };
      await check({}, keysWith(visible));
      await check({ include_deleted: false }, keysWith(visible));
      await check(
        { include_deleted: true },
        keysWith(() => true),
      );
      await check(
        { status: "active" },
        keysWith((f) => f.status === "active"),
      );
      await check({ status: "stale" }, didsOf("backup"));
      await check({ status: "deleted" }, didsOf("archive"));
      await check({ status: "deleted", include_deleted: true }, didsOf("archive"));
      await check(
        { status: "active", include_deleted: true },
        keysWith((f) => f.status === "active"),
      );
      await check({ status: "deleted", tag: "weather" }, didsOf("archive"));
      await check({ status: "stale", tag: "weather" }, didsOf("backup"));
      await check({ include_deleted: true, tag: "weather" }, didsOf("weather", "backup", "archive"));
    });

    test("a stale listing stays in the default list with status stale", async () => {
      const listings = await listAll(h);
      const stale = listings.find((l) => l.service_did === byKey("backup").did);
      assert.equal(stale?.status, "stale");
    });

    test("status, include_deleted, tag or search of the wrong kind are 400 invalid_request", async () => {
      for (const query of [
        "status=gone",
        "status=ACTIVE",
        "include_deleted=maybe",
        `tag=${"t".repeat(41)}`,
        `search=${"s".repeat(201)}`,
      ]) {
        assertInvalidRequest(await h.request("GET", `/v1/listings?${query}`), query);
      }
    });

    test("updated_since is inclusive and takes Z, offsets and fractions", async () => {
      const listings = await listAll(h, { include_deleted: true });
      assertListOrder(listings);
      const pivot = listings[Math.floor(listings.length / 2)]!;
      const t = Date.parse(pivot.updated_at);
      const fromPivot = dids(listings.filter((l) => Date.parse(l.updated_at) >= t));
      const afterPivot = dids(listings.filter((l) => Date.parse(l.updated_at) > t));
      assert.ok(fromPivot.includes(pivot.service_did));
      assert.ok(!afterPivot.includes(pivot.service_did));

      /** `t` written with a UTC offset of `minutes`. */
      const withOffset = (ms: number, minutes: number, fraction = true) => {
        const local = new Date(ms + minutes * 60_000).toISOString().slice(0, fraction ? 23 : 19);
        const sign = minutes < 0 ? "-" : "+";
        const abs = Math.abs(minutes);
        return `${local}${sign}${String(Math.floor(abs / 60)).padStart(2, "0")}:${String(abs % 60).padStart(2, "0")}`;
      };
      const since = async (value: string, extra: Query = {}) =>
        dids(await listAll(h, { updated_since: value, include_deleted: true, ...extra }));

      assert.deepEqual(await since(pivot.updated_at), fromPivot, "Z, inclusive");
      assert.deepEqual(await since(pivot.updated_at.toLowerCase()), fromPivot, "lowercase t and z");
      assert.deepEqual(await since(withOffset(t, 120)), fromPivot, "+02:00");
      assert.deepEqual(await since(withOffset(t, -330)), fromPivot, "-05:30");
      assert.deepEqual(await since(withOffset(t, 0).replace("+00:00", "-00:00")), fromPivot, "-00:00");
      assert.deepEqual(await since(pivot.updated_at.replace("Z", "000Z")), fromPivot, "microseconds, same instant");
      assert.deepEqual(await since(pivot.updated_at.replace("Z", "0001Z")), afterPivot, "just after the instant");
      assert.deepEqual(await since(new Date(t + 1).toISOString()), afterPivot, "one millisecond later");
      assert.deepEqual(await since(withOffset(t + 1, 120)), afterPivot, "one millisecond later, +02:00");
      // Whole seconds: everything updated in or after that second.
      const second = Math.floor(t / 1000) * 1000;
      assert.deepEqual(
        await since(withOffset(second, 60, false)),
        dids(listings.filter((l) => Date.parse(l.updated_at) >= second)),
        "no fraction, +01:00",
      );
      assert.deepEqual(await since("1970-01-01T00:00:00Z"), dids(listings));
      assert.deepEqual(await since("2999-01-01T00:00:00+02:00"), []);
      const tagged = listings.filter((l) => l.tags.includes("weather"));
      assert.deepEqual(
        await since(withOffset(t, 120), { tag: "weather" }),
        dids(tagged.filter((l) => Date.parse(l.updated_at) >= t)),
        "with a tag",
      );
      // With other filters and through pages.
      const paged = await traverse(h, { updated_since: withOffset(t, 120), include_deleted: true, limit: 1 });
      assert.deepEqual(dids(paged), fromPivot);
    });

    test("an updated_since that is not an RFC 3339 date-time is 400 invalid_request", async () => {
      for (const value of [
        "yesterday",
        "",
        "2024-01-01",
        "2024-01-01T00:00:00",
        "2024-01-01 00:00",
        "2024-13-01T00:00:00Z",
        "2024-02-30T00:00:00Z",
        "2023-02-29T00:00:00Z",
        "2024-01-01T24:00:00Z",
        "2024-01-01T00:60:00Z",
        "2024-01-01T00:00:00+2:00",
        "2024-01-01T00:00:00+0200",
        "1704067200",
        "2024-01-01T00:00:00.Z",
      ]) {
        assertInvalidRequest(
          await h.request("GET", listPath({ updated_since: value })),
          `updated_since=${JSON.stringify(value)}`,
        );
      }
    });
  });

  describe(`directory single reads, headers, shape, sitemap, schema, health (${variant.name})`, () => {
    let h: DirectoryHarness;
    /** Characters XML must escape, in the operator's public URL, which every sitemap location starts with. */
    const publicUrl = "https://directory.test/a&b'c";

    before(async () => {
      h = await startDirectoryHarness(variant, {
        sites: 16,
        env: { ...GENEROUS_LIMITS, DIRECTORY_PUBLIC_URL: publicUrl },
      });
    });
    after(() => h.close());

    test("an empty directory has an empty list and an empty, valid sitemap", async () => {
      assert.deepEqual(await listPage(h), { listings: [], next: null });
      const res = await h.request("GET", "/sitemap.xml");
      assert.equal(res.status, 200);
      const root = parseXml(res.text);
      assert.equal(root.name, "urlset");
      assert.equal(root.attributes.xmlns, SITEMAP_NS);
      assert.deepEqual(root.children, []);
    });

    test("list and single reads carry exactly the spec's Cache-Control and Access-Control-Allow-Origin", async () => {
      const { did } = await h.register(undefined, { title: "Headers" });
      for (const path of [
        "/v1/listings",
        listPath({ limit: 1 }),
        listPath({ search: "head", tag: "x", status: "active" }),
        listPath({ include_deleted: true }),
      ]) {
        const res = await h.request("GET", path);
        assert.equal(res.status, 200, path);
        assert.equal(res.headers.get("cache-control"), LIST_CACHE, path);
        assert.equal(res.headers.get("access-control-allow-origin"), "*", path);
        assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
      }
      const item = await h.request("GET", didPath(did));
      assert.equal(item.status, 200);
      assert.equal(item.headers.get("cache-control"), ITEM_CACHE);
      assert.equal(item.headers.get("access-control-allow-origin"), "*");
      assert.match(item.headers.get("content-type") ?? "", /^application\/json/);
    });

    test("every public read answers a browser's CORS preflight", async () => {
      const { did } = await h.register(undefined, { title: "Preflight" });
      for (const path of [
        "/v1/listings",
        listPath({ search: "pre", tag: "x" }),
        didPath(did),
        "/schemas/discovery-0.1.json",
      ]) {
        const res = await h.request("OPTIONS", path, {
          headers: {
            origin: "https://reader.example",
            "access-control-request-method": "GET",
            "access-control-request-headers": "if-none-match",
          },
        });
        assert.equal(res.status, 204, `${path}: ${res.text}`);
        assert.equal(res.text, "", path);
        assert.equal(res.headers.get("access-control-allow-origin"), "*", path);
        assert.equal(res.headers.get("access-control-allow-methods"), "GET, HEAD, OPTIONS", path);
        assert.equal(res.headers.get("access-control-allow-headers"), "Accept, If-None-Match", path);
        assert.equal(res.headers.get("access-control-max-age"), "86400", path);
      }
    });

    test("reads carry an ETag; If-None-Match naming it is 304 with ETag and Cache-Control and no body", async () => {
      const { did, token } = await h.register(undefined, { title: "Tagged" });
      const reads: [string, string][] = [
        [listPath({ search: "tagged" }), LIST_CACHE],
        [didPath(did), ITEM_CACHE],
        ["/schemas/discovery-0.1.json", "public, max-age=86400"],
      ];
      for (const [path, cache] of reads) {
        const full = await h.request("GET", path);
        assert.equal(full.status, 200, path);
        const etag = full.headers.get("etag") ?? "";
        assert.match(etag, /^"[A-Za-z0-9_-]{43}"$/, path);
        assert.equal(full.headers.get("access-control-expose-headers"), "ETag, Retry-After", path);
        assert.equal((await h.request("GET", path)).headers.get("etag"), etag, `${path}: same bytes, same tag`);
        for (const ifNoneMatch of [etag, `W/${etag}`, `"other", ${etag}`, "*"]) {
          const again = await h.request("GET", path, { headers: { "if-none-match": ifNoneMatch } });
          assert.equal(again.status, 304, `${path} If-None-Match: ${ifNoneMatch}`);
          assert.equal(again.text, "", path);
          assert.equal(again.headers.get("etag"), etag, path);
          assert.equal(again.headers.get("cache-control"), cache, path);
          assert.equal(again.headers.get("access-control-allow-origin"), "*", path);
          assert.equal(again.headers.get("content-type"), null, path);
          assert.equal(again.headers.get("content-length"), null, path);
        }
        for (const ifNoneMatch of ['"other"', etag.slice(1, -1)]) {
          const other = await h.request("GET", path, { headers: { "if-none-match": ifNoneMatch } });
          assert.equal(other.status, 200, `${path} If-None-Match: ${ifNoneMatch}`);
          assert.equal(other.text, full.text, path);
        }
      }
      // A change makes the earlier tag stale: the reader gets the new body.
      const before = await h.request("GET", didPath(did));
      assert.equal((await h.request("PATCH", didPath(did), { token, body: { title: "Retagged" } })).status, 200);
      const after = await h.request("GET", didPath(did), {
        headers: { "if-none-match": before.headers.get("etag") ?? "" },
      });
      assert.equal(after.status, 200);
      assert.equal(after.json.title, "Retagged");
      assert.notEqual(after.headers.get("etag"), before.headers.get("etag"));
    });

    test("a single read of an unknown DID is 404 not_found in the error envelope", async () => {
      for (const path of [
        didPath("did:web:nobody.test"),
        "/v1/listings/did:web:nobody.test",
        didPath("did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"),
      ]) {
        const res = await h.request("GET", path);
        assert.equal(res.status, 404, path);
        assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
        assert.deepEqual(Object.keys(res.json), ["error"]);
        assert.equal(res.json.error.code, "not_found");
        assert.equal(typeof res.json.error.message, "string");
      }
    });

    test("a listing has exactly the spec's fields; absent title and description are null, absent tags []", async () => {
      const bare = await h.register();
      const full = await h.register(undefined, {
        title: "Full listing",
        description: "With every writeable field",
        tags: ["a", "b"],
      });
      const bareRead = await h.request("GET", didPath(bare.did));
      const fullRead = await h.request("GET", didPath(full.did));
      for (const [read, site] of [
        [bareRead, bare.site],
        [fullRead, full.site],
      ] as const) {
        assert.equal(read.status, 200);
        const listing = read.json as Listing;
        assert.deepEqual(Object.keys(listing).sort(), LISTING_FIELDS);
        assert.equal(listing.service_did, site.did);
        assert.equal(listing.discovery_url, site.discoveryUrl);
        assert.deepEqual(listing.discovery_doc, site.document());
        assert.equal(listing.status, "active");
        assert.deepEqual(listing._meta, {});
        for (const field of ["fetched_at", "first_listed_at", "updated_at"] as const) {
          assert.match(listing[field], /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/, field);
        }
        assert.ok(Date.parse(listing.first_listed_at) <= Date.parse(listing.updated_at));
      }
      assert.equal(bareRead.json.title, null);
      assert.equal(bareRead.json.description, null);
      assert.deepEqual(bareRead.json.tags, []);
      assert.equal(fullRead.json.title, "Full listing");
      assert.equal(fullRead.json.description, "With every writeable field");
      assert.deepEqual(fullRead.json.tags, ["a", "b"]);

      // A list entry is the same object as the single read.
      const listed = await listAll(h);
      assert.deepEqual(
        listed.find((l) => l.service_did === bare.did),
        bareRead.json,
      );
      assert.deepEqual(
        listed.find((l) => l.service_did === full.did),
        fullRead.json,
      );
      for (const l of listed) assert.deepEqual(Object.keys(l).sort(), LISTING_FIELDS);
    });

    test("a DID in the path works percent-encoded and with raw colons (decisions §10)", async () => {
      const { did } = await h.register();
      assert.match(did, /%3A/, "the harness DIDs carry a percent-encoded port");
      const encoded = await h.request("GET", didPath(did));
      const raw = await h.request("GET", `/v1/listings/${did.replaceAll("%", "%25")}`);
      assert.equal(encoded.status, 200);
      assert.equal(raw.status, 200, raw.text);
      assert.deepEqual(raw.json, encoded.json);
      assert.equal(raw.json.service_did, did);
    });

    test("a deleted listing still reads 200 with status deleted and the single-read headers", async () => {
      const { did, token } = await h.register(undefined, { title: "Going away" });
      assert.equal((await h.request("DELETE", didPath(did), { token })).status, 204);
      const res = await h.request("GET", didPath(did));
      assert.equal(res.status, 200);
      assert.equal(res.json.status, "deleted");
      assert.equal(res.json.title, "Going away");
      assert.deepEqual(Object.keys(res.json).sort(), LISTING_FIELDS);
      assert.equal(res.headers.get("cache-control"), ITEM_CACHE);
      assert.equal(res.headers.get("access-control-allow-origin"), "*");
      assert.ok(!dids(await listAll(h)).includes(did));
    });

    test("the sitemap is application/xml, a sitemaps.org urlset with one escaped <loc> per active listing's page", async () => {
      const activeOne = await h.register(undefined, { title: "In the sitemap" });
      const activeTwo = await h.register();
      const stale = await h.register(undefined, { title: "Stale, not in the sitemap" });
      const deleted = await h.register(undefined, { title: "Deleted, not in the sitemap" });
      assert.equal((await h.request("DELETE", didPath(deleted.did), { token: deleted.token })).status, 204);
      await makeStale(h, stale.site);
      assert.equal((await h.request("GET", didPath(stale.did))).json.status, "stale");

      const res = await h.request("GET", "/sitemap.xml");
      assert.equal(res.status, 200, res.text);
      assert.match(res.headers.get("content-type") ?? "", /^application\/xml(;|$)/);
      const root = parseXml(res.text);
      assert.equal(root.name, "urlset");
      assert.equal(root.attributes.xmlns, SITEMAP_NS);
      const locs: string[] = [];
      for (const url of root.children) {
        assert.equal(url.name, "url");
        const loc = url.children.filter((c) => c.name === "loc");
        assert.equal(loc.length, 1, "one <loc> per <url>");
        assert.deepEqual(loc[0]!.children, []);
        locs.push(loc[0]!.text);
        for (const child of url.children) assert.ok(["loc", "lastmod", "changefreq", "priority"].includes(child.name));
        const lastmod = url.children.find((c) => c.name === "lastmod");
        if (lastmod !== undefined) assert.ok(!Number.isNaN(Date.parse(lastmod.text)), lastmod.text);
      }
      // Escaped in the document, plain once parsed.
      assert.ok(res.text.includes("a&amp;b"), "& is escaped");
      assert.ok(!/&(?!amp;|lt;|gt;|quot;|apos;|#)/.test(res.text), "no bare &");
      const active = dids(await listAll(h, { status: "active" }));
      assert.ok(active.includes(activeOne.did) && active.includes(activeTwo.did));
      assert.equal(locs.length, active.length);
      // Each location is the listing's page for people (issue 9): /listings/{encoded DID}.
      const pageOf = (did: string) => `${publicUrl}/listings/${encodeURIComponent(did)}`;
      const locDids = locs.map((loc) => {
        assert.doesNotThrow(() => new URL(loc));
        const did = active.find((d) => loc === pageOf(d));
        assert.ok(did !== undefined, `${loc} is not the page of an active listing`);
        return did;
      });
      assert.deepEqual(sorted(locDids), sorted(active));
      assert.ok(!locDids.includes(stale.did) && !locDids.includes(deleted.did));
      // And each opens that listing's page (the harness serves the public URL's paths at its root).
      for (const loc of locs) {
        const page = await h.request("GET", loc.slice(publicUrl.length));
        assert.equal(page.status, 200, loc);
        assert.match(page.headers.get("content-type") ?? "", /^text\/html/, loc);
      }
    });

    test("GET /schemas/discovery-0.1.json serves the discovery JSON Schema (2020-12)", async () => {
      const res = await h.request("GET", "/schemas/discovery-0.1.json");
      assert.equal(res.status, 200);
      assert.match(res.headers.get("content-type") ?? "", /^application\/(schema\+)?json/);
      const schema = res.json;
      assert.equal(schema.$schema, "https://json-schema.org/draft/2020-12/schema");
      assert.equal(schema.type, "object");
      assert.deepEqual(
        sorted(schema.required),
        sorted(["proto_version", "service_did", "endpoints", "signature_algorithms"]),
      );
      for (const field of [
        "proto_version",
        "service_did",
        "endpoints",
        "signature_algorithms",
        "features",
        "recipient_types",
        "limits",
        "billing",
        "x402",
      ]) {
        assert.ok(field in schema.properties, field);
      }
      assert.deepEqual(
        sorted(schema.properties.endpoints.required),
        sorted(["accounts", "owner_invitation", "claim_page", "claim_completion"]),
      );
      assert.ok("key_rotation" in schema.properties.endpoints.properties);
      assert.deepEqual(schema, JSON.parse(JSON.stringify(DISCOVERY_SCHEMA)));
    });

    test("/healthz and /readyz answer 200", async () => {
      const health = await h.request("GET", "/healthz");
      assert.equal(health.status, 200);
      assert.equal(health.json.status, "ok");
      const ready = await h.request("GET", "/readyz");
      assert.equal(ready.status, 200, ready.text);
      assert.equal(ready.json.status, "ready");
    });
  });
}

// ---- a small, strict XML reader: enough to check the sitemap is well-formed ------------------

const SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9";

interface XmlElement {
  name: string;
  attributes: Record<string, string>;
  children: XmlElement[];
  /** Text content, entities decoded. */
  text: string;
}

const ENTITIES: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'" };

function decodeEntities(raw: string): string {
  assert.ok(!raw.includes("<"), "a raw < in character data");
  return raw.replace(/&([^;]*);|&/g, (whole, name: string | undefined) => {
    assert.ok(name !== undefined, "a bare & in character data");
    if (name in ENTITIES) return ENTITIES[name]!;
    const numeric = /^#(x[0-9a-fA-F]+|[0-9]+)$/.exec(name);
    assert.ok(numeric !== null, `unknown entity ${whole}`);
    const code = name[1] === "x" ? Number.parseInt(name.slice(2), 16) : Number(name.slice(1));
    return String.fromCodePoint(code);
  });
}

/** Parses a document of elements, attributes and text (no DTD, comments, CDATA or PIs but the declaration). */
function parseXml(source: string): XmlElement {
  let at = 0;
  const declaration = /^<\?xml\s+version="1\.[0-9]"(\s+encoding="UTF-8")?(\s+standalone="(yes|no)")?\s*\?>/i.exec(
    source,
  );
  if (declaration !== null) at = declaration[0].length;
  const skipSpace = () => {
    while (at < source.length && /\s/.test(source[at]!)) at++;
  };
  const name = () => {
    const match = /^[A-Za-z_][\w.:-]*/.exec(source.slice(at));
    assert.ok(match !== null, `a name at ${at}`);
    at += match[0].length;
    return match[0];
  };
  const element = (): XmlElement => {
    assert.equal(source[at], "<", `an element at ${at}`);
    at++;
    const el: XmlElement = { name: name(), attributes: {}, children: [], text: "" };
    for (;;) {
      skipSpace();
      if (source.startsWith("/>", at)) {
        at += 2;
        return el;
      }
      if (source[at] === ">") {
        at++;
        break;
      }
      const attribute = name();
      skipSpace();
      assert.equal(source[at], "=");
      at++;
      skipSpace();
      const quote = source[at];
      assert.ok(quote === '"' || quote === "'", "a quoted attribute value");
      const end = source.indexOf(quote, at + 1);
      assert.ok(end > at);
      assert.ok(!(attribute in el.attributes), `duplicate attribute ${attribute}`);
      el.attributes[attribute] = decodeEntities(source.slice(at + 1, end));
      at = end + 1;
    }
    for (;;) {
      const next = source.indexOf("<", at);
      assert.ok(next >= 0, `unclosed <${el.name}>`);
      el.text += decodeEntities(source.slice(at, next));
      at = next;
      if (source.startsWith("</", at)) {
        at += 2;
        assert.equal(name(), el.name, "mismatched closing tag");
        skipSpace();
        assert.equal(source[at], ">");
        at++;
        if (el.children.length > 0) assert.equal(el.text.trim(), "", `mixed content in <${el.name}>`);
        return el;
      }
      assert.ok(!source.startsWith("<!", at) && !source.startsWith("<?", at), "unexpected markup");
      el.children.push(element());
    }
  };
  skipSpace();
  const root = element();
  skipSpace();
  assert.equal(at, source.length, "content after the root element");
  return root;
}
