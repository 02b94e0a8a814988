/**
 * A store written by an earlier release: its listings are found by search and tag once the
 * directory's later migrations have run on it, and writes after the upgrade keep search in step.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { listingBody } from "../src/directory/listing.js";
import { type DirectorySchema, directoryMigrations } from "../src/directory/migrations.js";
import { DirectoryService } from "../src/directory/service.js";
import { DEFAULT_DIRECTORY_SETTINGS } from "../src/directory/settings.js";
import { insertListing, saveListing } from "../src/directory/store.js";
import { systemClock } from "../src/platform/clock.js";
import { type Database, type Engine, openDatabase } from "../src/platform/database.js";
import { createTestDatabase, reportSkippedVariants, STORE_VARIANTS, type TestDatabase } from "./support/stores.js";

reportSkippedVariants();

/** The migrations of the release before search was keyed in list order. */
const EARLIER = ["0001_initial", "0002_search_indexes", "0003_mirror", "0004_postgres_search"];

const open = (url: string, only?: readonly string[]) =>
  openDatabase<DirectorySchema>(url, {
    migrations: (engine: Engine) =>
      Object.fromEntries(
        Object.entries(directoryMigrations(engine)).filter(([name]) => only === undefined || only.includes(name)),
      ),
    migrationTable: "directory_migrations",
  });

const serviceOf = (database: Database<DirectorySchema>) =>
  new DirectoryService({
    database,
    clock: systemClock,
    fetcher: {
      get: async () => {
        throw new Error("no fetches in this suite");
      },
    },
    settings: DEFAULT_DIRECTORY_SETTINGS,
  });

const START = Date.UTC(2025, 0, 1);

/** Listing `i`: several per second (their order by DID differs from their ids'), two kinds of title. */
function row(i: number) {
  const updated = START + Math.floor(i / 4) * 700 + (i % 4);
  const fields = {
    service_did: `did:web:site-${String((i * 7) % 40).padStart(2, "0")}-${i}.example`,
    host: `site-${i}.example`,
    discovery_url: `https://site-${i}.example/.well-known/proto`,
    discovery_doc: "{}",
    title: i % 3 === 0 ? `Harbour tides ${i}` : `Mountain weather ${i}`,
    description: i % 2 === 0 ? "Forecasts for sailors" : null,
    tags: JSON.stringify(i % 5 === 0 ? ["sea", "weather"] : ["weather"]),
    status: "active",
    fetched_at: updated,
    first_listed_at: updated,
    updated_at: updated,
    failure_count: 0,
    stale_since: null,
    next_check_at: START + 86_400_000,
    lease_until: null,
  };
  return { ...fields, body: listingBody(fields) };
}

for (const variant of STORE_VARIANTS) {
  describe(`directory store upgrade (${variant.name})`, () => {
    let store: TestDatabase;
    let database: Database<DirectorySchema>;
    let service: DirectoryService;
    const all = Array.from({ length: 40 }, (_, i) => row(i));

    before(async () => {
      store = await createTestDatabase(variant.engine, "upgrade");
      const earlier = await open(store.url, EARLIER);
      for (const r of all) await insertListing(earlier.db, r);
      await earlier.close();
      database = await open(store.url);
      service = serviceOf(database);
    });
    after(async () => {
      await database?.close();
      await store?.drop();
    });

    /** Every page of a query, with `limit` listings a page. */
    async function traverse(query: { search?: string; tag?: string }, limit: number): Promise<string[]> {
      const seen: string[] = [];
      let cursor: string | undefined;
      for (;;) {
        const page = await service.list({ ...query, limit, includeDeleted: false, cursor });
        seen.push(...page.bodies.map((b) => (JSON.parse(b) as { service_did: string }).service_did));
        if (page.nextCursor === null) return seen;
        cursor = page.nextCursor;
      }
    }

    /** The DIDs of `rows` in list order: updated_at, then service_did. */
    const inOrder = (rows: readonly ReturnType<typeof row>[]) =>
      [...rows]
        .sort((a, b) => a.updated_at - b.updated_at || (a.service_did < b.service_did ? -1 : 1))
        .map((r) => r.service_did);

    test("listings written before the upgrade are found by search, in list order, page after page", async () => {
      for (const [query, want] of [
        [{ search: "harbour" }, all.filter((r) => r.title.startsWith("Harbour"))],
        [{ search: "sailors" }, all.filter((r) => r.description !== null)],
        [{ search: "weather", tag: "sea" }, all.filter((r) => r.title.includes("weather") && r.tags.includes("sea"))],
        [{ search: "e" }, all],
      ] as const) {
        for (const limit of [1, 3, 50]) {
          assert.deepEqual(await traverse(query, limit), inOrder(want), `${JSON.stringify(query)}, limit ${limit}`);
        }
      }
    });

    test("a listing changed after the upgrade is found by its new text only, at its new place", async () => {
      const [changed] = await database.db
        .selectFrom("dir_listings")
        .selectAll()
        .where("host", "=", "site-3.example")
        .execute();
      assert.ok(changed);
      const updated = { ...changed, title: "Lighthouse log", updated_at: START + 3_600_000 };
      await saveListing(database.db, { ...updated, body: listingBody(updated) });
      assert.deepEqual(await traverse({ search: "lighthouse" }, 10), [changed.service_did]);
      assert.ok(!(await traverse({ search: "harbour" }, 10)).includes(changed.service_did));
      const harbour = await traverse({ search: "tides" }, 2);
      assert.equal(harbour.length, all.filter((r) => r.title.startsWith("Harbour")).length - 1);
      assert.equal((await traverse({ search: "e" }, 7)).at(-1), changed.service_did);
    });
  });
}
