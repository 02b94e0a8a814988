import type { ListingStatus } from "./listing.js";
import * as store from "./store.js";

/**
 * What mirror mode stores beside the listings (migration `0003_mirror`): one row saying which
 * upstream this database mirrors and how far its changes are applied. Times are milliseconds.
 */
export interface MirrorStateTable {
  /** Always 1. */
  id: number;
  upstream: string;
  /** List position (`updated_at`, `service_did`) of the last listing applied; null before any. */
  position_updated_at: number | null;
  position_service_did: string | null;
  /** An unfinished traversal: its `updated_since` (null: from the start) and the cursor to go on with. */
  pass_since: number | null;
  pass_cursor: string | null;
  /** When that traversal began (mirror clock). */
  pass_started_at: number | null;
  /** When the last complete traversal began: every upstream change before it is applied. */
  synced_at: number | null;
  /** The process syncing now, so replicas sharing the database never sync at once. */
  lease_owner: string | null;
  lease_until: number | null;
}

export type MirrorState = Omit<MirrorStateTable, "id" | "lease_owner" | "lease_until">;

/** One listing as the upstream serves it, with the columns the read paths query. */
export interface MirroredListing {
  service_did: string;
  host: string;
  discovery_url: string;
  /** Columns, serialised. */
  discovery_doc: string;
  tags: string;
  title: string | null;
  description: string | null;
  status: ListingStatus;
  fetched_at: number;
  first_listed_at: number;
  updated_at: number;
  /** The upstream's JSON of the listing, served as is. */
  body: string;
}

const state = (db: store.Db) => db.withTables<{ dir_mirror_state: MirrorStateTable }>();

const STATE_COLUMNS = [
  "upstream",
  "position_updated_at",
  "position_service_did",
  "pass_since",
  "pass_cursor",
  "pass_started_at",
  "synced_at",
] as const;

export async function loadMirrorState(db: store.Db): Promise<MirrorState | undefined> {
  return state(db).selectFrom("dir_mirror_state").select(STATE_COLUMNS).where("id", "=", 1).executeTakeFirst();
}

/**
 * The state of a database that mirrors `upstream`, created on first use. A database that mirrors
 * another upstream, or holds listings of its own, is refused: mixing them could never converge.
 */
export async function openMirrorState(db: store.Db, upstream: string): Promise<MirrorState> {
  let row = await loadMirrorState(db);
  if (row === undefined) {
    const own = await db.selectFrom("dir_listings").select("id").limit(1).executeTakeFirst();
    if (own !== undefined) {
      throw new Error(
        `the directory database holds listings of its own; a mirror of ${upstream} needs a database of its own`,
      );
    }
    await state(db)
      .insertInto("dir_mirror_state")
      .values({
        id: 1,
        upstream,
        position_updated_at: null,
        position_service_did: null,
        pass_since: null,
        pass_cursor: null,
        pass_started_at: null,
        synced_at: null,
        lease_owner: null,
        lease_until: null,
      })
      .onConflict((oc) => oc.column("id").doNothing())
      .execute();
    row = (await loadMirrorState(db)) as MirrorState;
  }
  if (row.upstream !== upstream) {
    throw new Error(
      `the directory database mirrors ${row.upstream}, not ${upstream}; a mirror of another upstream needs a database of its own`,
    );
  }
  return row;
}

/** Takes (or renews) the sync lease; false while another process holds it. */
export async function takeSyncLease(db: store.Db, owner: string, now: number, until: number): Promise<boolean> {
  const result = await state(db)
    .updateTable("dir_mirror_state")
    .set({ lease_owner: owner, lease_until: until })
    .where("id", "=", 1)
    .where((eb) => eb.or([eb("lease_until", "is", null), eb("lease_until", "<", now), eb("lease_owner", "=", owner)]))
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/** Extends the lease while this process holds it; false once it is another's (or released). */
export async function renewSyncLease(db: store.Db, owner: string, until: number): Promise<boolean> {
  const result = await state(db)
    .updateTable("dir_mirror_state")
    .set({ lease_until: until })
    .where("id", "=", 1)
    .where("lease_owner", "=", owner)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

export async function releaseSyncLease(db: store.Db, owner: string): Promise<void> {
  await state(db)
    .updateTable("dir_mirror_state")
    .set({ lease_owner: null, lease_until: null })
    .where("id", "=", 1)
    .where("lease_owner", "=", owner)
    .execute();
}

/** Records progress and renews the lease; false when the lease is no longer this process's. */
export async function saveMirrorProgress(
  db: store.Db,
  owner: string,
  leaseUntil: number,
  progress: Omit<MirrorState, "upstream">,
): Promise<boolean> {
  const result = await state(db)
    .updateTable("dir_mirror_state")
    .set({ ...progress, lease_until: leaseUntil })
    .where("id", "=", 1)
    .where("lease_owner", "=", owner)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/**
 * Upserts one upstream listing by `service_did`; false when the store already holds it or a later
 * state of it. Internal columns get what a primary would hold, so a mirror's database can be
 * promoted to a primary (revalidation then takes the listings up on its usual cadence).
 */
export async function applyMirroredListing(
  db: store.Db,
  listing: MirroredListing,
  revalidationIntervalMs: number,
): Promise<boolean> {
  const existing = await store.findListing(db, listing.service_did);
  if (
    existing !== undefined &&
    (listing.updated_at < existing.updated_at ||
      (listing.updated_at === existing.updated_at && listing.body === existing.body))
  ) {
    return false;
  }
  if (listing.status !== "deleted") {
    // The upstream has one live listing per host at any instant, but this store can still hold an
    // earlier state of another listing on that host (it moved or was deleted, then the host was
    // taken up again). That listing's newer state comes later in this traversal; until then it is
    // parked, hidden as deleted, so the host's unique index holds.
    const holder = await store.findLiveListingByHost(db, listing.host);
    if (holder !== undefined && holder.service_did !== listing.service_did) {
      await store.saveListing(db, { ...holder, status: "deleted" });
    }
  }
  const { service_did, ...columns } = listing;
  const bookkeeping = {
    failure_count: 0,
    stale_since:
      listing.status === "stale" ? (existing?.status === "stale" ? existing.stale_since : listing.updated_at) : null,
    next_check_at: listing.fetched_at + revalidationIntervalMs,
    lease_until: null,
  };
  if (existing === undefined) await store.insertListing(db, { service_did, ...columns, ...bookkeeping });
  else await store.saveListing(db, { ...existing, ...columns, ...bookkeeping });
  return true;
}
