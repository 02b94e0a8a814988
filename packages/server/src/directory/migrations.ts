import { type Generated, type Kysely, type Migration, type Selectable, sql } from "kysely";
import type { Engine } from "../platform/database.js";

/**
 * Timestamps are integer milliseconds since the epoch on both engines: exact, totally ordered
 * and the same on SQLite and PostgreSQL, which the keyset cursor relies on.
 */
function initial(engine: Engine): Migration {
  const bigint = engine === "sqlite" ? "integer" : "bigint";
  return {
    async up(db: Kysely<unknown>) {
      const idColumn = engine === "sqlite" ? "id integer primary key" : "id bigserial primary key";
      await sql
        .raw(`create table dir_listings (
          ${idColumn},
          service_did text not null unique,
          host text not null,
          discovery_url text not null,
          discovery_doc text not null,
          title text,
          description text,
          tags text not null,
          status text not null,
          fetched_at ${bigint} not null,
          first_listed_at ${bigint} not null,
          updated_at ${bigint} not null,
          failure_count integer not null default 0,
          stale_since ${bigint},
          next_check_at ${bigint} not null,
          lease_until ${bigint},
          body text not null
        )`)
        .execute(db);
      // One non-deleted listing per host; deleted records stay for mirrors and may share it.
      await sql
        .raw("create unique index dir_listings_live_host on dir_listings (host) where status <> 'deleted'")
        .execute(db);
      await sql.raw("create index dir_listings_order on dir_listings (updated_at, service_did)").execute(db);
      await sql
        .raw("create index dir_listings_status_order on dir_listings (status, updated_at, service_did)")
        .execute(db);
      await sql.raw("create index dir_listings_due on dir_listings (next_check_at)").execute(db);

      // Tags are rows, with the listing's order key copied in, so a tag filter walks one index
      // in list order.
      await sql
        .raw(`create table dir_listing_tags (
          tag text not null,
          listing_id ${bigint} not null references dir_listings (id) on delete cascade,
          updated_at ${bigint} not null,
          service_did text not null,
          status text not null,
          primary key (tag, listing_id)
        )`)
        .execute(db);
      await sql
        .raw("create index dir_listing_tags_order on dir_listing_tags (tag, updated_at, service_did)")
        .execute(db);
      await sql.raw("create index dir_listing_tags_listing on dir_listing_tags (listing_id)").execute(db);

      if (engine === "sqlite") {
        await sql
          .raw(`create virtual table dir_listings_fts using fts5(
            title, description, content='dir_listings', content_rowid='id', tokenize='trigram'
          )`)
          .execute(db);
        await sql
          .raw(`create trigger dir_listings_fts_insert after insert on dir_listings begin
            insert into dir_listings_fts (rowid, title, description) values (new.id, new.title, new.description);
          end`)
          .execute(db);
        await sql
          .raw(`create trigger dir_listings_fts_delete after delete on dir_listings begin
            insert into dir_listings_fts (dir_listings_fts, rowid, title, description)
              values ('delete', old.id, old.title, old.description);
          end`)
          .execute(db);
        await sql
          .raw(`create trigger dir_listings_fts_update after update of title, description on dir_listings begin
            insert into dir_listings_fts (dir_listings_fts, rowid, title, description)
              values ('delete', old.id, old.title, old.description);
            insert into dir_listings_fts (rowid, title, description) values (new.id, new.title, new.description);
          end`)
          .execute(db);
      } else {
        await sql.raw("create extension if not exists pg_trgm").execute(db);
        await sql
          .raw("create index dir_listings_title_trgm on dir_listings using gin (lower(title) gin_trgm_ops)")
          .execute(db);
        await sql
          .raw("create index dir_listings_description_trgm on dir_listings using gin (lower(description) gin_trgm_ops)")
          .execute(db);
      }

      await sql
        .raw(`create table dir_challenges (
          token_hash text primary key,
          discovery_url text not null,
          host text not null,
          issued_at ${bigint} not null,
          expires_at ${bigint} not null,
          consumed_at ${bigint}
        )`)
        .execute(db);
      await sql.raw("create index dir_challenges_host on dir_challenges (host, issued_at)").execute(db);
      await sql.raw("create index dir_challenges_expiry on dir_challenges (expires_at)").execute(db);

      await sql
        .raw(`create table dir_sessions (
          token_hash text primary key,
          service_did text not null,
          issued_at ${bigint} not null,
          expires_at ${bigint} not null,
          revoked_at ${bigint}
        )`)
        .execute(db);
      await sql.raw("create index dir_sessions_did on dir_sessions (service_did)").execute(db);
    },
  };
}

/**
 * Whether the title or the description holds one of the two non-ASCII characters that FTS5's
 * case folding maps onto ASCII letters (U+212A KELVIN SIGN to k, U+017F LONG S to s). Stored in
 * the search index, so a scan reads it instead of computing it; `store.ts` writes the same
 * expression, which SQLite must see verbatim to use the stored value.
 */
export const SQLITE_FOLDS_TO_ASCII = "(title glob '*[\u212a\u017f]*' or description glob '*[\u212a\u017f]*')";

/**
 * Indexes for search at scale (SQLite; PostgreSQL's pg_trgm indexes already serve it):
 * - `dir_listings_search_order`: list order with the searched columns (and the folding flag
 *   above), so a scan for a common term reads one index in order instead of each listing's row;
 * - the last one and two characters of each searched column, lowercased, and a vocabulary view of
 *   the trigram index: together they find every listing holding a one- or two-character term
 *   (it either starts one of the column's trigrams or ends the column), so a rare short term no
 *   longer scans every listing.
 */
function searchIndexes(engine: Engine): Migration {
  return {
    async up(db: Kysely<unknown>) {
      if (engine !== "sqlite") return;
      await sql
        .raw(
          `create index dir_listings_search_order on dir_listings
            (updated_at, service_did, status, title, description, ${SQLITE_FOLDS_TO_ASCII})`,
        )
        .execute(db);
      // Keys by id, to sort candidate ids into list order without reading their rows.
      await sql.raw("create index dir_listings_keys on dir_listings (id, status, updated_at, service_did)").execute(db);
      // The tag index in list order, covering what a walk along it reads (it replaces the 0001 one).
      await sql
        .raw(
          "create index dir_listing_tags_list on dir_listing_tags (tag, updated_at, service_did, status, listing_id)",
        )
        .execute(db);
      await sql.raw("drop index dir_listing_tags_order").execute(db);
      for (const column of ["title", "description"]) {
        await sql
          .raw(`create index dir_listings_${column}_end2 on dir_listings (lower(substr(${column}, -2)))`)
          .execute(db);
        await sql
          .raw(`create index dir_listings_${column}_end1 on dir_listings (lower(substr(${column}, -1)))`)
          .execute(db);
      }
      await sql.raw("create virtual table dir_listings_fts_vocab using fts5vocab(dir_listings_fts, row)").execute(db);
    },
  };
}

/**
 * Mirror mode's own state (see mirror.ts): one row, the upstream and how far its changes are
 * applied. A primary directory never writes it.
 */
function mirrorState(engine: Engine): Migration {
  const bigint = engine === "sqlite" ? "integer" : "bigint";
  return {
    async up(db: Kysely<unknown>) {
      await sql
        .raw(`create table dir_mirror_state (
          id integer primary key check (id = 1),
          upstream text not null,
          position_updated_at ${bigint},
          position_service_did text,
          pass_since ${bigint},
          pass_cursor text,
          pass_started_at ${bigint},
          synced_at ${bigint},
          lease_owner text,
          lease_until ${bigint}
        )`)
        .execute(db);
    },
  };
}

/**
 * The most bytes of `service_did`, `title_lower` and `description_lower` together that
 * `dir_listings_search_scan` holds: a B-tree entry must stay under about 2.7 kB, and the API's
 * limits (120 and 500 characters of up to 4 bytes each, a DID of any length) allow more. Past it
 * a row is flagged `search_wide` and listed in `dir_listings_search_wide` instead (none in
 * practice); a scan reads both.
 */
const SEARCH_SCAN_BYTES = 2000;

/**
 * Search at scale on PostgreSQL (0001's trigram indexes on `lower(...)` served rare terms of
 * three characters or more only; shorter terms, terms without letters or digits and terms with
 * thousands of matches scanned or sorted every matching row):
 * - `title_lower` and `description_lower`: `lower(title)` and `lower(description)`, kept by a
 *   trigger on every write (with `search_wide`, see SEARCH_SCAN_BYTES), so a search tests a
 *   stored value instead of lowercasing each row again (the trigger is ALWAYS enabled: bulk loads
 *   and replicas run it too);
 * - `dir_listings_search_scan`: list order covering what a search tests, so a scan for a common
 *   term reads one index in list order and no table rows (`dir_listings_search_wide`: the rows
 *   too wide for it);
 * - the trigram indexes, now on the stored columns (cheaper to recheck), replace 0001's;
 * - `dir_listings_search_grams`: every character and every pair of adjacent characters of both
 *   columns (`dir_search_grams`): exact for one- and two-character terms, which trigrams cannot
 *   serve (nor terms without three letters or digits in a row), and for any term a superset of
 *   its matches;
 * - `dir_listings_tag_set`: the listing's tags as a set, so a search and a tag intersect in the
 *   indexes before any row is read;
 * - `dir_listing_tags_list`: a tag's listings in list order with their status, so a walk along a
 *   tag reads a listing's row only when its status is wanted.
 */
function postgresSearch(engine: Engine): Migration {
  return {
    async up(db: Kysely<unknown>) {
      if (engine !== "postgres") return;
      // Index builds over every listing (a GIN index of many keys a row above all).
      await sql.raw("set local maintenance_work_mem = '256MB'").execute(db);
      await sql
        .raw(
          "alter table dir_listings add column title_lower text, add column description_lower text, add column search_wide boolean not null default false",
        )
        .execute(db);
      await sql
        .raw(`create function dir_listings_lower() returns trigger language plpgsql as $$
          begin
            new.title_lower := lower(new.title);
            new.description_lower := lower(new.description);
            new.search_wide := octet_length(new.service_did) + coalesce(octet_length(new.title_lower), 0)
              + coalesce(octet_length(new.description_lower), 0) > ${SEARCH_SCAN_BYTES};
            return new;
          end $$`)
        .execute(db);
      await sql
        .raw(
          "create trigger dir_listings_lower before insert or update on dir_listings for each row execute function dir_listings_lower()",
        )
        .execute(db);
      await sql.raw("alter table dir_listings enable always trigger dir_listings_lower").execute(db);
      await sql
        .raw("update dir_listings set title_lower = lower(title)") // the trigger sets every derived column
        .execute(db);

      await sql
        .raw(`create function dir_search_grams(title text, description text) returns text[]
          language plpgsql immutable parallel safe as $$
          declare
            t text[] := coalesce(string_to_array(title, null), '{}');
            d text[] := coalesce(string_to_array(description, null), '{}');
          begin
            return t || d
              || array(select x || y from unnest(t, t[2:]) as u(x, y) where y is not null)
              || array(select x || y from unnest(d, d[2:]) as u(x, y) where y is not null);
          end $$`)
        .execute(db);
      await sql
        .raw(`create function dir_tag_set(tags text) returns text[] language sql immutable parallel safe as $$
          select array(select jsonb_array_elements_text(tags::jsonb))
        $$`)
        .execute(db);

      await sql
        .raw(
          `create index dir_listings_search_scan on dir_listings (updated_at, service_did)
            include (id, status, title_lower, description_lower) where not search_wide`,
        )
        .execute(db);
      await sql
        .raw("create index dir_listings_search_wide on dir_listings (updated_at, service_did) where search_wide")
        .execute(db);
      await sql
        .raw("create index dir_listings_title_lower_trgm on dir_listings using gin (title_lower gin_trgm_ops)")
        .execute(db);
      await sql
        .raw(
          "create index dir_listings_description_lower_trgm on dir_listings using gin (description_lower gin_trgm_ops)",
        )
        .execute(db);
      await sql.raw("drop index dir_listings_title_trgm").execute(db);
      await sql.raw("drop index dir_listings_description_trgm").execute(db);
      // Keys compared bytewise (collation "C"; equality is the same): the index builds faster.
      await sql
        .raw(
          `create index dir_listings_search_grams on dir_listings using gin
            ((dir_search_grams(title_lower, description_lower) collate "C"))`,
        )
        .execute(db);
      await sql.raw("create index dir_listings_tag_set on dir_listings using gin (dir_tag_set(tags))").execute(db);
      // The tag index in list order, covering what a walk along it tests (it replaces 0001's).
      await sql
        .raw(
          "create index dir_listing_tags_list on dir_listing_tags (tag, updated_at, service_did) include (status, listing_id)",
        )
        .execute(db);
      await sql.raw("drop index dir_listing_tags_order").execute(db);
      await sql.raw("analyze dir_listings").execute(db);
      await sql.raw("analyze dir_listing_tags").execute(db);
    },
  };
}

/**
 * The key of a listing in `dir_listings_search` (SQLite): its list position to 1,024 ms, then its
 * id. `updated_at >> 10` (clamped to 32 bits, past the year 2100) in the high bits and the id in
 * the low 31, so the full-text index's own order (rowid) is list order up to ties within a
 * 1,024 ms bucket, which a search settles by reading the page's last bucket whole. Ids stay below
 * 2^31 (one per listing ever registered). `alias` is `new`, `old` or a table alias.
 */
export function sqliteSearchKey(alias: string): string {
  return `((max(min(${alias}.updated_at >> 10, 4294967295), -4294967296) << 31) | (${alias}.id & 2147483647))`;
}

/**
 * Search on SQLite in list order. 0001's trigram index was keyed by listing id, so a search had
 * to sort its matches (or scan the list order testing each row) to find a page; this one is keyed
 * by `sqliteSearchKey`, so FTS5 yields matches in list order and a page stops at its last match.
 * It is contentless (it keeps no copy of the text; rows are deleted by key), and replaces 0001's
 * table, its triggers and 0002's vocabulary view. Rebuilding it reads every listing once (about a
 * minute per million).
 */
function sqliteOrderedSearch(engine: Engine): Migration {
  return {
    async up(db: Kysely<unknown>) {
      if (engine !== "sqlite") return;
      for (const statement of [
        "drop trigger dir_listings_fts_insert",
        "drop trigger dir_listings_fts_delete",
        "drop trigger dir_listings_fts_update",
        "drop table dir_listings_fts_vocab",
        "drop table dir_listings_fts",
        `create virtual table dir_listings_search using fts5(
          title, description, content='', contentless_delete=1, tokenize='trigram')`,
        "create virtual table dir_listings_search_vocab using fts5vocab(dir_listings_search, row)",
        // In key order (LIMIT keeps SQLite from dropping the subquery's ORDER BY): FTS5 writes out
        // its pending terms whenever a key arrives out of order.
        `insert into dir_listings_search (rowid, title, description)
          select o.key, l.title, l.description
          from (select ${sqliteSearchKey("k")} as key, k.id from dir_listings as k order by 1 limit -1) as o
          cross join dir_listings as l on l.id = o.id`,
        `create trigger dir_listings_search_insert after insert on dir_listings begin
          insert into dir_listings_search (rowid, title, description)
            values (${sqliteSearchKey("new")}, new.title, new.description);
        end`,
        `create trigger dir_listings_search_delete after delete on dir_listings begin
          delete from dir_listings_search where rowid = ${sqliteSearchKey("old")};
        end`,
        `create trigger dir_listings_search_update after update of id, updated_at, title, description on dir_listings
          when ${sqliteSearchKey("old")} <> ${sqliteSearchKey("new")}
            or old.title is not new.title or old.description is not new.description
        begin
          delete from dir_listings_search where rowid = ${sqliteSearchKey("old")};
          insert into dir_listings_search (rowid, title, description)
            values (${sqliteSearchKey("new")}, new.title, new.description);
        end`,
      ]) {
        await sql.raw(statement).execute(db);
      }
    },
  };
}

/**
 * PostgreSQL: every write that changes what a single-listing read answers (a listing inserted or
 * deleted, its body or DID changed) notifies `dir_listings` with the DID, inside the writing
 * transaction, so each replica's read cache hears of it if and only if it committed, even if the
 * writer dies right after (see listing-changes.ts). A DID too long for a notification's payload
 * (8,000 bytes) sends an empty one: "any listing". Revalidation's bookkeeping (leases, next check)
 * notifies nothing. Like any trigger it is skipped under `session_replication_role = replica`
 * (bulk loads into a store that no replica serves yet).
 */
function listingChanges(engine: Engine): Migration {
  return {
    async up(db: Kysely<unknown>) {
      if (engine !== "postgres") return;
      await sql
        .raw(`create function dir_listings_notify() returns trigger language plpgsql as $$
          begin
            if tg_op <> 'INSERT' then
              perform pg_notify('dir_listings', case when octet_length(old.service_did) <= 7000 then old.service_did else '' end);
            end if;
            if tg_op = 'INSERT' or (tg_op = 'UPDATE' and new.service_did is distinct from old.service_did) then
              perform pg_notify('dir_listings', case when octet_length(new.service_did) <= 7000 then new.service_did else '' end);
            end if;
            return null;
          end $$`)
        .execute(db);
      await sql
        .raw(
          "create trigger dir_listings_notify_write after insert or delete on dir_listings for each row execute function dir_listings_notify()",
        )
        .execute(db);
      await sql
        .raw(
          `create trigger dir_listings_notify_update after update on dir_listings for each row
            when (old.body is distinct from new.body or old.service_did is distinct from new.service_did)
            execute function dir_listings_notify()`,
        )
        .execute(db);
    },
  };
}

/** Marks the search keys that are not pieces of text: every such key is longer than a piece (4). */
export const PG_KEY_MARK = "\u0001";
/**
 * The spans of list order a listing's keys name (an hour, a day, a week, 4 and 16 weeks), each
 * counted from the epoch: `updated_at / span`.
 */
export const PG_SPANS_MS = [3_600_000, 86_400_000, 604_800_000, 2_419_200_000, 9_676_800_000] as const;

/**
 * Search on PostgreSQL through one index (0004 had four, and a page among many candidates also
 * read a B-tree range): `dir_listings_search_keys`, a GIN index of each listing's search keys
 * (`dir_search_keys`):
 * - every character and pair of adjacent characters of the lowered title and description
 *   (`dir_search_grams`: exact for terms of one or two characters),
 * - every piece of four characters of each (a term of four or more is in a listing only if all
 *   its pieces are; a term of three, only if both its pairs are),
 * - the hour, day, week, 4 and 16 weeks of `updated_at` (PG_SPANS_MS), so a window of list
 *   order is a handful of keys intersected with the term's inside the same index,
 * - each tag.
 * A page's candidates are then one GIN scan: `keys @> term-and-tag keys and keys && window keys`.
 * Keys that are not pieces of text start with PG_KEY_MARK and are longer than four characters,
 * so no text can stand for them. Building it reads every listing (about ten minutes per million).
 */
function postgresSearchKeys(engine: Engine): Migration {
  return {
    async up(db: Kysely<unknown>) {
      if (engine !== "postgres") return;
      await sql.raw("set local maintenance_work_mem = '256MB'").execute(db);
      await sql
        .raw(`create or replace function dir_search_keys(title text, description text, updated_at bigint, tags text) returns text[]
          language sql immutable parallel safe as $$
            select dir_search_grams(title, description)
              || array(select substr(title, i, 4) from generate_series(1, char_length(title) - 3) as i)
              || array(select substr(description, i, 4) from generate_series(1, char_length(description) - 3) as i)
              || array[${PG_SPANS_MS.map((span) => `chr(1) || '${span}:' || (updated_at / ${span})::text`).join(", ")}]
              || array(select chr(1) || 'tag:' || t from jsonb_array_elements_text(tags::jsonb) as t)
          $$`)
        .execute(db);
      // Keys compared bytewise (collation "C"; equality is the same): the index builds faster.
      // "if not exists": an operator may have built it beforehand, concurrently (docs/operations.md).
      await sql
        .raw(
          `create index if not exists dir_listings_search_keys on dir_listings using gin
            ((dir_search_keys(title_lower, description_lower, updated_at, tags) collate "C"))`,
        )
        .execute(db);
      await sql.raw("drop index dir_listings_title_lower_trgm").execute(db);
      await sql.raw("drop index dir_listings_description_lower_trgm").execute(db);
      await sql.raw("drop index dir_listings_search_grams").execute(db);
      await sql.raw("drop index dir_listings_tag_set").execute(db);
      await sql.raw("drop function dir_tag_set(text)").execute(db);
      await sql.raw("analyze dir_listings").execute(db);
    },
  };
}

export function directoryMigrations(engine: Engine): Record<string, Migration> {
  return {
    "0001_initial": initial(engine),
    "0002_search_indexes": searchIndexes(engine),
    "0003_mirror": mirrorState(engine),
    "0004_postgres_search": postgresSearch(engine),
    "0005_sqlite_ordered_search": sqliteOrderedSearch(engine),
    "0006_listing_changes": listingChanges(engine),
    "0007_postgres_search_keys": postgresSearchKeys(engine),
  };
}

export interface ListingTable {
  id: Generated<number>;
  service_did: string;
  host: string;
  discovery_url: string;
  discovery_doc: string;
  title: string | null;
  description: string | null;
  tags: string;
  status: string;
  fetched_at: number;
  first_listed_at: number;
  updated_at: number;
  failure_count: number;
  stale_since: number | null;
  next_check_at: number;
  lease_until: number | null;
  body: string;
}

export type ListingRow = Selectable<ListingTable>;

export interface DirectorySchema {
  dir_listings: ListingTable;
  dir_listing_tags: { tag: string; listing_id: number; updated_at: number; service_did: string; status: string };
  dir_challenges: {
    token_hash: string;
    discovery_url: string;
    host: string;
    issued_at: number;
    expires_at: number;
    consumed_at: number | null;
  };
  dir_sessions: {
    token_hash: string;
    service_did: string;
    issued_at: number;
    expires_at: number;
    revoked_at: number | null;
  };
}
