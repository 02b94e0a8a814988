/**
 * Search and tag filters on a store large enough that a first look at a few hundred listings does
 * not settle them, so every way the store finds a page is taken (on PostgreSQL: the scan carried
 * on, a tag walked, all candidates of the keys index, and windows of list order narrowed by their
 * spans of hours, days or weeks; on SQLite: the ordered full-text index). Each query is walked over
 * HTTP (to its end, or for a dozen pages) and compared, page by page, with the answer worked out
 * by brute force.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { sql } from "kysely";
import { listingBody } from "../src/directory/listing.js";
import { type DirectorySchema, directoryMigrations } from "../src/directory/migrations.js";
import { type Database, openDatabase } from "../src/platform/database.js";
import { type DirectoryHarness, startDirectoryHarness } from "./support/directory.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";

reportSkippedVariants();

const COUNT = 40_000;
const DAY = 86_400_000;
const HOUR = 3_600_000;
/** 2026-01-01T00:00:00Z. */
const START = Date.UTC(2026, 0, 1);

interface Row {
  service_did: string;
  title: string | null;
  description: string | null;
  tags: string[];
  status: "active" | "stale" | "deleted";
  updated_at: number;
}

/** A small deterministic generator (mulberry32), so a failure can be replayed. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS =
  "data service team secure fast cloud tools agent api search index market weather ledger orbit cable bcast".split(" ");

/**
 * Listings whose list order bunches like a real store's: most spread over ten months, a fifth in
 * one hour (a bulk import), a tenth in the last two days, some on the same millisecond. Rare words
 * are planted at known rates, and decoys hold every piece of a word without the word
 * ("zeph" in the title and "ephyr" in the description hold all of "zephyr"'s pieces of four).
 */
function generate(): Row[] {
  const next = random(20261126);
  const pick = <T>(items: readonly T[]) => items[Math.floor(next() * items.length)] as T;
  const rows: Row[] = [];
  for (let i = 0; i < COUNT; i++) {
    const roll = next();
    let updatedAt: number;
    if (roll < 0.7) updatedAt = START + Math.floor(next() * 300 * DAY);
    else if (roll < 0.9) updatedAt = START + 150 * DAY + 5 * HOUR + Math.floor(next() * HOUR);
    else if (roll < 0.97) updatedAt = START + 298 * DAY + Math.floor(next() * 2 * DAY);
    else updatedAt = START + 200 * DAY;
    const words = (n: number) => Array.from({ length: n }, () => pick(WORDS));
    const title = words(2);
    const description = words(6);
    const plant = (rate: number, word: string, where: string[] = description) => {
      if (next() < rate) where.splice(Math.floor(next() * where.length), 0, word);
    };
    plant(0.01, "zephyr");
    plant(0.01, "Zephyrus", title);
    plant(0.002, "tronne");
    plant(0.004, "aqxb");
    plant(0.006, "xabcx");
    plant(0.003, "50%_off");
    // Characters with a meaning in PostgreSQL array literals, which the search keys travel in.
    plant(0.002, '{x,"y"}\\z');
    let decoy = false;
    if (next() < 0.01) {
      title.push("zeph");
      description.unshift("ephyr");
      decoy = true;
    }
    const tags: string[] = [];
    if (next() < 0.4) tags.push("ai");
    if (next() < 0.08) tags.push("tools");
    if (next() < 0.005) tags.push("rare");
    const status = next() < 0.85 ? "active" : next() < 0.66 ? "stale" : "deleted";
    rows.push({
      service_did: `did:web:s${String(i).padStart(5, "0")}.example`,
      // Some listings have no title or description, and the decoys keep their pieces apart.
      title: !decoy && next() < 0.02 ? null : title.join(" "),
      description: !decoy && next() < 0.02 ? null : description.join(" "),
      tags,
      status,
      updated_at: updatedAt,
    });
  }
  return rows;
}

/** Writes the rows straight into the store, as `insertListing` does, many to a statement. */
async function load(url: string, rows: readonly Row[]): Promise<void> {
  const database: Database<DirectorySchema> = await openDatabase<DirectorySchema>(url, {
    migrations: directoryMigrations,
    migrationTable: "directory_migrations",
  });
  try {
    for (let from = 0; from < rows.length; from += 500) {
      const batch = rows.slice(from, from + 500);
      await database.db.transaction().execute(async (trx) => {
        const inserted = await trx
          .insertInto("dir_listings")
          .values(
            batch.map((row) => {
              const host = row.service_did.slice("did:web:".length);
              const fields = {
                service_did: row.service_did,
                discovery_url: `https://${host}/.well-known/proto`,
                discovery_doc: "{}",
                fetched_at: row.updated_at,
                first_listed_at: row.updated_at,
                updated_at: row.updated_at,
                status: row.status,
                tags: JSON.stringify(row.tags),
                title: row.title,
                description: row.description,
              };
              return {
                ...fields,
                host,
                failure_count: 0,
                stale_since: row.status === "active" ? null : row.updated_at,
                next_check_at: row.updated_at + DAY,
                lease_until: null,
                body: listingBody(fields),
              };
            }),
          )
          .returning(["id", "service_did", "updated_at", "status", "tags"])
          .execute();
        const tagRows = inserted.flatMap((row) =>
          (JSON.parse(row.tags) as string[]).map((tag) => ({
            tag,
            listing_id: row.id,
            updated_at: row.updated_at,
            service_did: row.service_did,
            status: row.status,
          })),
        );
        if (tagRows.length > 0) await trx.insertInto("dir_listing_tags").values(tagRows).execute();
      });
    }
    // The statistics a live store has (PostgreSQL's planner and our search planner read them).
    await sql`analyze`.execute(database.db);
  } finally {
    await database.close();
  }
}

interface Query {
  search?: string;
  tag?: string;
  status?: string;
  include_deleted?: boolean;
  updated_since?: string;
  limit?: number;
}

function expected(rows: readonly Row[], q: Query): string[] {
  const statuses =
    q.status !== undefined ? [q.status] : q.include_deleted ? ["active", "stale", "deleted"] : ["active", "stale"];
  const since = q.updated_since === undefined ? undefined : Date.parse(q.updated_since);
  const needle = q.search?.toLowerCase();
  return rows
    .filter(
      (r) =>
        statuses.includes(r.status) &&
        (q.tag === undefined || r.tags.includes(q.tag)) &&
        (since === undefined || r.updated_at >= since) &&
        (needle === undefined ||
          (r.title ?? "").toLowerCase().includes(needle) ||
          (r.description ?? "").toLowerCase().includes(needle)),
    )
    .sort((a, b) => a.updated_at - b.updated_at || (a.service_did < b.service_did ? -1 : 1))
    .map((r) => r.service_did);
}

/** Pages walked at most: enough to cross windows of list order, not all of a common term's. */
const PAGES = 12;

/**
 * The query walked over HTTP to its end or for PAGES pages, against the brute-force answer: the
 * same listings in the same order, and a cursor exactly when more remain.
 */
async function walkMatches(h: DirectoryHarness, rows: readonly Row[], q: Query): Promise<void> {
  const want = expected(rows, q);
  const seen: string[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < PAGES; page++) {
    const params = new URLSearchParams();
    for (const [key, value] of Object.entries(q)) params.set(key, String(value));
    if (cursor !== undefined) params.set("cursor", cursor);
    const res = await h.request("GET", `/v1/listings?${params}`);
    assert.equal(res.status, 200, `${JSON.stringify(q)}: ${res.text}`);
    seen.push(...(res.json.listings as { service_did: string }[]).map((l) => l.service_did));
    assert.deepEqual(seen, want.slice(0, seen.length), `${JSON.stringify(q)}, page ${page + 1}`);
    const more = seen.length < want.length;
    assert.equal(res.json.next_cursor !== null, more, `${JSON.stringify(q)}, page ${page + 1}: cursor`);
    if (!more) return;
    assert.equal(seen.length, (page + 1) * (q.limit ?? 50), `${JSON.stringify(q)}: a short page before the end`);
    cursor = res.json.next_cursor;
  }
}

const TERMS = [
  "zephyr",
  "zephyrus",
  "zeph",
  "tronne",
  "qx",
  "abc",
  "50%_",
  '{x,"y"}\\z',
  'x,"y',
  "data",
  "e",
  "z",
  "nowhere",
];
const TAGS = [undefined, "ai", "tools", "rare"];
const STATUSES: Query[] = [{}, { include_deleted: true }, { status: "stale" }];

for (const variant of STORE_VARIANTS) {
  describe(`directory search at scale (${variant.name})`, () => {
    let h: DirectoryHarness;
    const rows = generate();
    before(async () => {
      h = await startDirectoryHarness(variant, {
        sites: 1,
        env: { DIRECTORY_RATE_LIMITS: "read=1000000/60,pages=1000000/60" },
      });
      await load(h.databaseUrl, rows);
    });
    after(async () => {
      await h?.close();
    });

    test(`every search, tag and status walked page by page equals the brute-force answer (${COUNT} listings)`, async () => {
      let compared = 0;
      for (const search of TERMS) {
        for (const tag of TAGS) {
          for (const statuses of STATUSES) {
            const q: Query = { search, ...statuses, ...(tag === undefined ? {} : { tag }) };
            await walkMatches(h, rows, q);
            compared++;
          }
        }
      }
      assert.equal(compared, TERMS.length * TAGS.length * STATUSES.length);
    });

    test("small and large pages, and updated_since inside the bulk import and the last days", async () => {
      const cases: Query[] = [];
      for (const search of ["zephyr", "tronne", "qx", "abc", "data"]) {
        for (const limit of [1, 7, 100]) cases.push({ search, limit });
        cases.push({ search, updated_since: new Date(START + 150 * DAY + 5 * HOUR + 30 * 60_000).toISOString() });
        cases.push({ search, tag: "ai", updated_since: new Date(START + 298 * DAY + 7 * HOUR).toISOString() });
      }
      for (const q of cases) await walkMatches(h, rows, q);
    });

    test("the data holds what the queries are about", () => {
      // Guards the generator: rare terms are rare, common ones common, decoys exist.
      const count = (q: Query) => expected(rows, { ...q, include_deleted: true }).length;
      const share = (q: Query) => count(q) / COUNT;
      assert.ok(share({ search: "tronne" }) > 0.001 && share({ search: "tronne" }) < 0.004);
      assert.ok(share({ search: "data" }) > 0.3);
      assert.ok(count({ search: "zeph" }) > count({ search: "zephyr" }));
      assert.ok(share({ search: '{x,"y"}\\z' }) > 0.001);
      assert.ok(share({ tag: "rare" }) > 0.003 && share({ tag: "rare" }) < 0.008);
    });
  });
}
