import { type Insertable, type Kysely, sql, type Transaction } from "kysely";
import type { Engine } from "../platform/database.js";
import type { Position } from "./cursor.js";
import type { ListingStatus } from "./listing.js";
import type { DirectorySchema, ListingRow, ListingTable } from "./migrations.js";

export type Db = Kysely<DirectorySchema> | Transaction<DirectorySchema>;
export type ChallengeRow = DirectorySchema["dir_challenges"];
export type SessionRow = DirectorySchema["dir_sessions"];

export interface ListQuery {
  after: Position | undefined;
  limit: number;
  search: string | undefined;
  tag: string | undefined;
  updatedSince: number | undefined;
  /** Statuses to include. */
  statuses: readonly ListingStatus[];
}

/** What the list endpoint needs of a row: its bytes and its position. */
export interface ListedRow {
  body: string;
  updated_at: number;
  service_did: string;
}

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

export async function findListingBody(db: Db, serviceDid: string): Promise<string | undefined> {
  const row = await db
    .selectFrom("dir_listings")
    .select("body")
    .where("service_did", "=", serviceDid)
    .executeTakeFirst();
  return row?.body;
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

function escapeLike(term: string): string {
  return term.replace(/[\\%_]/g, (c) => `\\${c}`);
}

/** One page of listings in list order, through the index that fits the filters. */
export async function listListings(db: Db, engine: Engine, query: ListQuery): Promise<ListedRow[]> {
  const { after, tag, search, updatedSince, statuses } = query;
  if (tag !== undefined) {
    let q = db
      .selectFrom("dir_listing_tags as t")
      .innerJoin("dir_listings as l", "l.id", "t.listing_id")
      .select(["l.body", "t.updated_at", "t.service_did"])
      .where("t.tag", "=", tag)
      .where("t.status", "in", statuses);
    if (updatedSince !== undefined) q = q.where("t.updated_at", ">=", updatedSince);
    if (after !== undefined) {
      q = q.where((eb) =>
        eb.or([
          eb("t.updated_at", ">", after.updatedAt),
          eb.and([eb("t.updated_at", "=", after.updatedAt), eb("t.service_did", ">", after.serviceDid)]),
        ]),
      );
    }
    if (search !== undefined) q = q.where(searchCondition(engine, search, "l"));
    return q.orderBy("t.updated_at").orderBy("t.service_did").limit(query.limit).execute();
  }
  let q = db
    .selectFrom("dir_listings as l")
    .select(["l.body", "l.updated_at", "l.service_did"])
    .where("l.status", "in", statuses);
  if (updatedSince !== undefined) q = q.where("l.updated_at", ">=", updatedSince);
  if (after !== undefined) {
    q = q.where((eb) =>
      eb.or([
        eb("l.updated_at", ">", after.updatedAt),
        eb.and([eb("l.updated_at", "=", after.updatedAt), eb("l.service_did", ">", after.serviceDid)]),
      ]),
    );
  }
  if (search !== undefined) q = q.where(searchCondition(engine, search, "l"));
  return q.orderBy("l.updated_at").orderBy("l.service_did").limit(query.limit).execute();
}

/**
 * Case-insensitive substring match on title and description through the trigram index of each
 * engine. Terms shorter than a trigram cannot use the index and fall back to a scan.
 */
function searchCondition(engine: Engine, term: string, alias: "l") {
  const lower = term.toLowerCase();
  if (engine === "sqlite" && [...term].length >= 3) {
    const phrase = `"${term.replace(/"/g, '""')}"`;
    return sql<boolean>`${sql.ref(`${alias}.id`)} in (select rowid from dir_listings_fts where dir_listings_fts match ${phrase})`;
  }
  if (engine === "sqlite") {
    return sql<boolean>`(instr(lower(${sql.ref(`${alias}.title`)}), ${lower}) > 0 or instr(lower(${sql.ref(`${alias}.description`)}), ${lower}) > 0)`;
  }
  const pattern = `%${escapeLike(lower)}%`;
  return sql<boolean>`(lower(${sql.ref(`${alias}.title`)}) like ${pattern} escape '\\' or lower(${sql.ref(`${alias}.description`)}) like ${pattern} escape '\\')`;
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

/** Takes the revalidation lease on one listing; false when another pass holds it. */
export async function leaseListing(db: Db, id: number, now: number, until: number): Promise<boolean> {
  const result = await db
    .updateTable("dir_listings")
    .set({ lease_until: until })
    .where("id", "=", id)
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
