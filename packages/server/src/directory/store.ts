import { CompiledQuery, type Insertable, type Kysely, type Transaction } from "kysely";
import { type Engine, syncReader } from "../platform/database.js";
import { listPostgres } from "./list-postgres.js";
import type { ListedRow, ListQuery } from "./list-query.js";
import { listSqlite } from "./list-sqlite.js";
import type { DirectorySchema, ListingRow, ListingTable } from "./migrations.js";

export type Db = Kysely<DirectorySchema> | Transaction<DirectorySchema>;
export type ChallengeRow = DirectorySchema["dir_challenges"];
export type SessionRow = DirectorySchema["dir_sessions"];
export type { ListedRow, ListQuery };

// ---- challenges --------------------------------------------------------------------------

export async function insertChallenge(db: Db, row: ChallengeRow): Promise<void> {
  await db.insertInto("dir_challenges").values(row).execute();
}

export async function countActiveChallenges(db: Db, host: string, issuedAfter: number, now: number): Promise<number> {
  const result = await db
    .selectFrom("dir_challenges")
    .select((eb) => eb.fn.countAll<number>().as("n"))
    .where("host", "=", host)
    .where("issued_at", ">", issuedAfter)
    .where("consumed_at", "is", null)
    .where("expires_at", ">", now)
    .executeTakeFirstOrThrow();
  return Number(result.n);
}

/** The issue time of the oldest challenge that still counts against the host's cap. */
export async function oldestActiveChallenge(db: Db, host: string, issuedAfter: number, now: number) {
  return db
    .selectFrom("dir_challenges")
    .select("issued_at")
    .where("host", "=", host)
    .where("issued_at", ">", issuedAfter)
    .where("consumed_at", "is", null)
    .where("expires_at", ">", now)
    .orderBy("issued_at")
    .limit(1)
    .executeTakeFirst();
}

export async function findChallenge(db: Db, tokenHash: string): Promise<ChallengeRow | undefined> {
  return db.selectFrom("dir_challenges").selectAll().where("token_hash", "=", tokenHash).executeTakeFirst();
}

/** Marks a challenge used; true for exactly one caller however many race for it. */
export async function consumeChallenge(db: Db, tokenHash: string, now: number): Promise<boolean> {
  const result = await db
    .updateTable("dir_challenges")
    .set({ consumed_at: now })
    .where("token_hash", "=", tokenHash)
    .where("consumed_at", "is", null)
    .where("expires_at", ">", now)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

export async function deleteOldChallenges(db: Db, before: number): Promise<void> {
  await db.deleteFrom("dir_challenges").where("expires_at", "<", before).execute();
}

// ---- sessions ----------------------------------------------------------------------------

export async function insertSession(db: Db, row: SessionRow): Promise<void> {
  await db.insertInto("dir_sessions").values(row).execute();
}

export async function findSession(db: Db, tokenHash: string): Promise<SessionRow | undefined> {
  return db.selectFrom("dir_sessions").selectAll().where("token_hash", "=", tokenHash).executeTakeFirst();
}

export async function revokeSessions(db: Db, serviceDid: string, now: number): Promise<void> {
  await db
    .updateTable("dir_sessions")
    .set({ revoked_at: now })
    .where("service_did", "=", serviceDid)
    .where("revoked_at", "is", null)
    .execute();
}

export async function deleteOldSessions(db: Db, before: number): Promise<void> {
  await db.deleteFrom("dir_sessions").where("expires_at", "<", before).execute();
}

// ---- listings ----------------------------------------------------------------------------

export async function findListing(db: Db, serviceDid: string): Promise<ListingRow | undefined> {
  return db.selectFrom("dir_listings").selectAll().where("service_did", "=", serviceDid).executeTakeFirst();
}

// The single-listing read is the hottest query. On SQLite it runs synchronously on the read-only
// connection (see syncReader); otherwise it is compiled once per database handle and only its
// parameter changes (building and compiling it each time cost more than running it).
const bodyQueries = new WeakMap<Db, string>();
const FIND_BODY_SQLITE = 'select "body" from "dir_listings" where "service_did" = ?';

/** At once (no promise) where the store has a synchronous reader: SQLite in a file. */
export function findListingBody(db: Db, serviceDid: string): string | undefined | Promise<string | undefined> {
  const read = syncReader(db);
  if (read !== undefined) return (read(FIND_BODY_SQLITE, [serviceDid])[0] as { body: string } | undefined)?.body;
  let text = bodyQueries.get(db);
  if (text === undefined) {
    text = db.selectFrom("dir_listings").select("body").where("service_did", "=", serviceDid).compile().sql;
    bodyQueries.set(db, text);
  }
  return db
    .executeQuery<{ body: string }>(CompiledQuery.raw(text, [serviceDid]))
    .then((result) => result.rows[0]?.body);
}

export async function findLiveListingByHost(db: Db, host: string): Promise<ListingRow | undefined> {
  return db
    .selectFrom("dir_listings")
    .selectAll()
    .where("host", "=", host)
    .where("status", "<>", "deleted")
    .executeTakeFirst();
}

async function writeTags(db: Db, row: ListingRow): Promise<void> {
  await db.deleteFrom("dir_listing_tags").where("listing_id", "=", row.id).execute();
  const tags = JSON.parse(row.tags) as string[];
  if (tags.length === 0) return;
  await db
    .insertInto("dir_listing_tags")
    .values(
      tags.map((tag) => ({
        tag,
        listing_id: row.id,
        updated_at: row.updated_at,
        service_did: row.service_did,
        status: row.status,
      })),
    )
    .execute();
}

export async function insertListing(db: Db, row: Insertable<ListingTable>): Promise<ListingRow> {
  const inserted = await db.insertInto("dir_listings").values(row).returningAll().executeTakeFirstOrThrow();
  await writeTags(db, inserted);
  return inserted;
}

/** Writes every column of a listing row and keeps its tag rows in step. */
export async function saveListing(db: Db, row: ListingRow): Promise<void> {
  const { id, ...columns } = row;
  await db.updateTable("dir_listings").set(columns).where("id", "=", id).execute();
  await writeTags(db, row);
}

/** Revalidation bookkeeping that a reader cannot see: no tag rows to touch. */
export async function saveBookkeeping(
  db: Db,
  id: number,
  columns: Partial<Pick<ListingRow, "failure_count" | "next_check_at" | "lease_until" | "fetched_at" | "body">>,
): Promise<void> {
  await db.updateTable("dir_listings").set(columns).where("id", "=", id).execute();
}

/** One page of listings in list order, through the index that fits the filters. */
export function listListings(db: Db, engine: Engine, query: ListQuery): Promise<ListedRow[]> {
  return engine === "postgres" ? listPostgres(db, query) : listSqlite(db, query);
}

/** Listings whose revalidation is due and not leased by a pass already running. */
export async function dueListings(db: Db, now: number, limit: number): Promise<ListingRow[]> {
  return db
    .selectFrom("dir_listings")
    .selectAll()
    .where("next_check_at", "<=", now)
    .where("status", "<>", "deleted")
    .where((eb) => eb.or([eb("lease_until", "is", null), eb("lease_until", "<", now)]))
    .orderBy("next_check_at")
    .limit(limit)
    .execute();
}

/**
 * Takes the revalidation lease on one listing; false when another pass holds it, or when it is no
 * longer due: a pass that read the due list before another replica finished the listing must not
 * check it a second time in the same cycle.
 */
export async function leaseListing(db: Db, id: number, now: number, until: number): Promise<boolean> {
  const result = await db
    .updateTable("dir_listings")
    .set({ lease_until: until })
    .where("id", "=", id)
    .where("next_check_at", "<=", now)
    .where("status", "<>", "deleted")
    .where((eb) => eb.or([eb("lease_until", "is", null), eb("lease_until", "<", now)]))
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

export async function activeSitemapRows(db: Db, offset: number, limit: number) {
  return db
    .selectFrom("dir_listings")
    .select(["service_did", "updated_at"])
    .where("status", "=", "active")
    .orderBy("service_did")
    .offset(offset)
    .limit(limit)
    .execute();
}

export async function countActive(db: Db): Promise<number> {
  const row = await db
    .selectFrom("dir_listings")
    .select((eb) => eb.fn.countAll<number>().as("n"))
    .where("status", "=", "active")
    .executeTakeFirstOrThrow();
  return Number(row.n);
}
