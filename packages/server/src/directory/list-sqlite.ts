/**
 * Listing and search on SQLite: see listSqlite.
 */
import { sql } from "kysely";
import { escapeLike, type ListedRow, type ListQuery } from "./list-query.js";
import type { ListingStatus } from "./listing.js";
import { SQLITE_FOLDS_TO_ASCII } from "./migrations.js";
import type { Db } from "./store.js";

// ---- listing on SQLite -------------------------------------------------------------------
//
// SQLite's planner is given no statistics and picks poorly for these shapes at scale (an IN over
// statuses sorted every listing; a full-text IN-list was materialised in full), so each shape
// names its index and its join order (CROSS JOIN keeps the written order).

/** `(updated_at, service_did) > cursor` and `updated_at >= since` on the columns of `alias`. */
function bounds(alias: string, query: ListQuery) {
  const parts = [sql<boolean>`1`];
  if (query.after !== undefined) {
    parts.push(
      sql<boolean>`(${sql.ref(`${alias}.updated_at`)}, ${sql.ref(`${alias}.service_did`)}) > (${query.after.updatedAt}, ${query.after.serviceDid})`,
    );
  }
  if (query.updatedSince !== undefined)
    parts.push(sql<boolean>`${sql.ref(`${alias}.updated_at`)} >= ${query.updatedSince}`);
  return sql.join(parts, sql` and `);
}

const statusIn = (alias: string, statuses: readonly ListingStatus[]) =>
  sql<boolean>`${sql.ref(`${alias}.status`)} in (${sql.join(statuses)})`;

/** No search, no tag: one ordered range of (status, updated_at, service_did) per status, merged. */
async function listByStatusSqlite(db: Db, query: ListQuery): Promise<ListedRow[]> {
  const arms = query.statuses.map(
    (status) =>
      sql`select * from (select s.id, s.updated_at, s.service_did from dir_listings as s indexed by dir_listings_status_order
        where s.status = ${status} and ${bounds("s", query)} order by s.updated_at, s.service_did limit ${query.limit})`,
  );
  const result = await sql<ListedRow>`select l.body, k.updated_at, k.service_did
    from (${sql.join(arms, sql` union all `)} order by 2, 3 limit ${query.limit}) as k
    cross join dir_listings as l on l.id = k.id
    order by k.updated_at, k.service_did`.execute(db);
  return result.rows;
}

/** A tag, no search: the tag's rows carry the order key, so one index range in list order. */
async function listByTagSqlite(db: Db, query: ListQuery): Promise<ListedRow[]> {
  const result = await sql<ListedRow>`select l.body, t.updated_at, t.service_did
    from dir_listing_tags as t indexed by dir_listing_tags_list
    cross join dir_listings as l on l.id = t.listing_id
    where t.tag = ${query.tag} and ${statusIn("t", query.statuses)} and ${bounds("t", query)}
    order by t.updated_at, t.service_did limit ${query.limit}`.execute(db);
  return result.rows;
}

/**
 * The stored flag of `dir_listings_search_order` (see migrations.ts) on the columns of `alias`: it
 * must be written as the index wrote it, literals included, for SQLite to read it from the index.
 */
const indexedFolds = (alias: string) =>
  sql<boolean>`${sql.raw(SQLITE_FOLDS_TO_ASCII.replace(/\b(title|description)\b/g, `${alias}.$1`))}`;

/** Rows a first, quick scan looks at: settles terms common enough. */
const QUICK_SCAN = 1_000;
const QUICK_TAG_SCAN = 600;
/** Rows a second scan looks at, when the indexes hold too many matches to sort cheaply. */
const SCAN_BUDGET = 12_000;
/** Matches few enough to sort straight away, before a longer scan. */
const FEW_CANDIDATES = 2_000;
/** The most candidates taken from the indexes. */
const CANDIDATE_CAP = 20_000;
/** A tag this small is intersected with the search's candidates, or walked whole. */
const SMALL_TAG = 10_000;

type Condition = ReturnType<typeof sql<boolean>>;
/** The search on the row of `alias`; `folds` says whether that row holds a character FTS5 folds onto ASCII. */
type Predicate = (alias: string, folds: Condition) => Condition;

interface SqliteSearch {
  /** Lowercased term. */
  needle: string;
  /** Three characters or more: the trigram index answers it (FTS5 phrase). */
  long: boolean;
  /** Printable ASCII only: LIKE (ASCII case folding) decides it exactly, see below. */
  ascii: boolean;
  /** The search as a condition on the title and description of a row of alias `alias`. */
  matches: Predicate;
  /** Cheap enough to test row after row in a scan. */
  scannable: boolean;
  /**
   * For a term of three characters or more, an FTS5 phrase whose matches include the term's: the
   * term itself, or for a printable-ASCII term with spaces its longest space-free run of three
   * characters or more (FTS5 is slow on phrases of common words across spaces), if any.
   */
  piece: { phrase: string; exact: boolean } | undefined;
  /** `folds` for a listing row read from the table: only what the term's letters need. */
  tableFolds: (alias: string) => Condition;
}

/**
 * What a search means is unchanged: a term of three characters or more matches what the FTS5
 * trigram index matches (a case-folded substring of the title or the description); a shorter one
 * matches when `instr(lower(column), lower(term))` finds it. Cheaper conditions stand in for them
 * where they are provably the same:
 *
 * - For a printable-ASCII term, `column LIKE '%term%'` (ASCII case-insensitive, `%`, `_` and `\`
 *   escaped) is exactly `instr(lower(column), term)`, and it is also exactly the trigram match,
 *   except on a column holding one of the two non-ASCII characters FTS5 folds onto ASCII letters
 *   (U+212A onto k, U+017F onto s); such a row is asked of the full-text index itself.
 * - Other terms keep their original condition.
 */
function sqliteSearch(term: string): SqliteSearch {
  const needle = term.toLowerCase();
  const long = [...term].length >= 3;
  const ascii = /^[\x20-\x7e]+$/.test(term);
  const phrase = `"${term.replace(/"/g, '""')}"`;
  const pattern = `%${escapeLike(needle)}%`;
  const col = (a: string, c: string) => sql.ref(`${a}.${c}`);
  const like = (a: string) =>
    sql<boolean>`(${col(a, "title")} like ${pattern} escape '\\' or ${col(a, "description")} like ${pattern} escape '\\')`;
  const probe = (a: string) =>
    sql<boolean>`${col(a, "id")} in (select rowid from dir_listings_fts where dir_listings_fts match ${phrase} and rowid = ${col(a, "id")})`;
  let matches: Predicate;
  if (long && ascii) matches = (a, folds) => sql<boolean>`(${like(a)} or (${folds} and ${probe(a)}))`;
  else if (long) matches = probe;
  else if (ascii) matches = like;
  else {
    matches = (a) =>
      sql<boolean>`(instr(unicode_lower(${col(a, "title")}), ${needle}) > 0 or instr(unicode_lower(${col(a, "description")}), ${needle}) > 0)`;
  }
  let piece: SqliteSearch["piece"];
  if (long && (!ascii || !/\s/.test(term))) piece = { phrase, exact: true };
  else if (long) {
    const run = term.split(/\s+/).reduce((a, b) => (b.length > a.length ? b : a), "");
    if (run.length >= 3) piece = { phrase: `"${run.replace(/"/g, '""')}"`, exact: false };
  }
  const folding = [...(needle.includes("k") ? ["\u212a"] : []), ...(needle.includes("s") ? ["\u017f"] : [])];
  const tableFolds = (a: string) =>
    folding.length === 0
      ? sql<boolean>`0`
      : sql<boolean>`(${sql.join(
          folding.flatMap((c) => [
            sql`instr(${col(a, "title")}, ${c}) > 0`,
            sql`instr(${col(a, "description")}, ${c}) > 0`,
          ]),
          sql` or `,
        )})`;
  return { needle, long, ascii, matches, scannable: !long || ascii, piece, tableFolds };
}

/**
 * A search, in steps from cheapest to dearest; each step returns the exact page when it can:
 * - a scan in list order that looks at a bounded number of rows (settles common terms): through
 *   the covering search index, or along the tag's index;
 * - candidates from the indexes, sorted into list order by their keys (the full-text index for
 *   three characters or more; for shorter ASCII terms every trigram that starts with the term plus
 *   the columns that end with it; the tag's listings), when they are few enough;
 * - the scan without a bound.
 * Candidates that are a superset of the matches are checked with the search condition itself.
 */
async function searchSqlite(db: Db, query: ListQuery, term: string): Promise<ListedRow[]> {
  // Several statements, one snapshot: a listing written meanwhile cannot be half seen.
  if (!db.isTransaction) {
    return db
      .transaction()
      .setAccessMode("read only")
      .execute((trx) => searchSqlite(trx, query, term));
  }
  const search = sqliteSearch(term);
  return query.tag === undefined ? searchAll(db, query, search) : searchTag(db, query, search, query.tag);
}

async function searchAll(db: Db, query: ListQuery, search: SqliteSearch): Promise<ListedRow[]> {
  if (search.scannable) {
    const page = await indexScan(db, query, search, undefined, QUICK_SCAN);
    if (page !== undefined) return page;
  }
  const few = await candidates(db, search, FEW_CANDIDATES);
  if (few !== undefined) return candidatePage(db, query, search, few.ids, few.check);
  if (search.scannable) {
    const page = await indexScan(db, query, search, undefined, SCAN_BUDGET);
    if (page !== undefined) return page;
  }
  const ids = await candidates(db, search, CANDIDATE_CAP);
  if (ids !== undefined) return candidatePage(db, query, search, ids.ids, ids.check);
  return (await indexScan(db, query, search, undefined, undefined)) as ListedRow[];
}

async function searchTag(db: Db, query: ListQuery, search: SqliteSearch, tag: string): Promise<ListedRow[]> {
  if (search.scannable) {
    const page = await tagScan(db, query, search, tag, QUICK_TAG_SCAN);
    if (page !== undefined) return page;
  }
  // A tag of up to SMALL_TAG listings: its ids against the search's, or all of them checked.
  const size = await sql<{ n: number }>`select count(*) as n from (select 1 from dir_listing_tags
    where tag = ${tag} limit ${SMALL_TAG + 1})`.execute(db);
  if ((size.rows[0]?.n ?? 0) <= SMALL_TAG) {
    const tagged = await sql<{ id: number }>`select listing_id as id from dir_listing_tags
      where tag = ${tag} order by listing_id`.execute(db);
    const found = await candidates(db, search, CANDIDATE_CAP);
    if (found !== undefined) {
      const inTag = new Set(tagged.rows.map((r) => r.id));
      return candidatePage(
        db,
        query,
        search,
        found.ids.filter((id) => inTag.has(id)),
        found.check,
      );
    }
    if (search.scannable) return (await tagScan(db, query, search, tag, undefined)) as ListedRow[];
    return candidatePage(
      db,
      query,
      search,
      tagged.rows.map((r) => r.id),
      true,
    );
  }
  // A large tag: the search's candidates if few, else a scan of the search index keeping the tag's.
  const few = await candidates(db, search, FEW_CANDIDATES);
  if (few !== undefined) return candidatePage(db, query, search, few.ids, few.check, tag);
  if (search.scannable) {
    const page = await indexScan(db, query, search, tag, SCAN_BUDGET);
    if (page !== undefined) return page;
  }
  const found = await candidates(db, search, CANDIDATE_CAP);
  if (found !== undefined) return candidatePage(db, query, search, found.ids, found.check, tag);
  // Common overall, yet not in the rows seen so far: walk the tag.
  return (await tagScan(db, query, search, tag, undefined)) as ListedRow[];
}

/**
 * A scan of the covering search index in list order (optionally keeping a tag's listings), or
 * undefined when `budget` rows did not settle the page.
 */
async function indexScan(
  db: Db,
  query: ListQuery,
  search: SqliteSearch,
  tag: string | undefined,
  budget: number | undefined,
): Promise<ListedRow[] | undefined> {
  // CASE, so the tag is looked up only for rows that match (SQLite may reorder AND terms).
  const matches = search.matches("x", sql<boolean>`x.folds`);
  const wanted =
    tag === undefined
      ? matches
      : sql<boolean>`case when ${matches} then exists (select 1 from dir_listing_tags as g where g.tag = ${tag} and g.listing_id = x.id) else 0 end`;
  const hits = await sql<{ id: number }>`select x.id from (
      select s.id, s.updated_at, s.service_did, s.status, s.title, s.description, ${indexedFolds("s")} as folds
      from dir_listings as s indexed by dir_listings_search_order
      where ${bounds("s", query)} order by s.updated_at, s.service_did limit ${budget ?? -1}) as x
    where ${statusIn("x", query.statuses)} and ${wanted}
    order by x.updated_at, x.service_did limit ${query.limit}`.execute(db);
  const ids = hits.rows.map((r) => r.id);
  if (budget !== undefined && ids.length < query.limit) {
    // Settled only if the range holds no row past the ones examined.
    const beyond = await sql`select 1 from dir_listings as s indexed by dir_listings_order where ${bounds("s", query)}
      order by s.updated_at, s.service_did limit 1 offset ${budget}`.execute(db);
    if (beyond.rows.length > 0) return undefined;
  }
  return bodiesSqlite(db, ids);
}

/** A scan of a tag's listings in list order, or undefined when `budget` rows did not settle the page. */
async function tagScan(
  db: Db,
  query: ListQuery,
  search: SqliteSearch,
  tag: string,
  budget: number | undefined,
): Promise<ListedRow[] | undefined> {
  const hits = await sql<{ id: number }>`select x.id from (
      select t.listing_id as id, t.updated_at, t.service_did, t.status
      from dir_listing_tags as t indexed by dir_listing_tags_list
      where t.tag = ${tag} and ${bounds("t", query)} order by t.updated_at, t.service_did limit ${budget ?? -1}) as k
    cross join dir_listings as x on x.id = k.id
    where ${statusIn("k", query.statuses)} and ${search.matches("x", search.tableFolds("x"))}
    order by k.updated_at, k.service_did limit ${query.limit}`.execute(db);
  const ids = hits.rows.map((r) => r.id);
  if (budget !== undefined && ids.length < query.limit) {
    const beyond = await sql`select 1 from dir_listing_tags as t indexed by dir_listing_tags_list
      where t.tag = ${tag} and ${bounds("t", query)} order by t.updated_at, t.service_did limit 1 offset ${budget}`.execute(
      db,
    );
    if (beyond.rows.length > 0) return undefined;
  }
  return bodiesSqlite(db, ids);
}

/** The listings matching an FTS5 query, in rowid order, or undefined when there are more than `cap`. */
async function ftsIds(db: Db, match: string, cap: number): Promise<number[] | undefined> {
  const ids = await sql<{ id: number }>`select rowid as id from dir_listings_fts
    where dir_listings_fts match ${match} limit ${cap + 1}`.execute(db);
  return ids.rows.length > cap ? undefined : ids.rows.map((r) => r.id);
}

/** Every listing the search can match, and whether some others are among them; undefined past the cap. */
async function candidates(
  db: Db,
  search: SqliteSearch,
  cap: number,
): Promise<{ ids: number[]; check: boolean } | undefined> {
  if (search.piece !== undefined) {
    const ids = await ftsIds(db, search.piece.phrase, cap);
    return ids === undefined ? undefined : { ids, check: !search.piece.exact };
  }
  if (search.long || !search.ascii) return undefined;
  // A one- or two-character term occurring in a column either starts one of the column's trigrams
  // (the full-text index holds them case-folded; its vocabulary lists them) or ends the column.
  const needle = search.needle;
  const upper = `${needle}\u{10ffff}`;
  // The vocabulary counts each trigram's listings: their sum bounds the candidates it gives. Short
  // terms' candidates are cheaper to sort than a second scan: twice the cap.
  const most = cap * 2;
  const terms = await sql<{ term: string; doc: number }>`select term, doc from dir_listings_fts_vocab
    where term >= ${needle} and term < ${upper}`.execute(db);
  if (terms.rows.reduce((sum, r) => sum + r.doc, 0) > most) return undefined;
  const ends =
    needle.length === 2
      ? sql`select id from dir_listings where lower(substr(title, -2)) = ${needle}
          union select id from dir_listings where lower(substr(description, -2)) = ${needle}`
      : sql`select id from dir_listings where lower(substr(title, -2)) >= ${needle} and lower(substr(title, -2)) < ${upper}
          union select id from dir_listings where lower(substr(description, -2)) >= ${needle} and lower(substr(description, -2)) < ${upper}
          union select id from dir_listings where lower(substr(title, -1)) = ${needle}
          union select id from dir_listings where lower(substr(description, -1)) = ${needle}`;
  const sources =
    terms.rows.length === 0
      ? ends
      : sql`select rowid as id from dir_listings_fts where dir_listings_fts match ${terms.rows
          .map((r) => `"${r.term.replace(/"/g, '""')}"`)
          .join(" OR ")} union ${ends}`;
  const ids = await sql<{ id: number }>`select id from (${sources}) limit ${most + 1}`.execute(db);
  return ids.rows.length > most ? undefined : { ids: ids.rows.map((r) => r.id), check: true };
}

/**
 * The page among candidate ids: their keys from `dir_listings_keys` (one lookup each: `+status`
 * keeps the status out of the index search), filtered and sorted into list order; with `check`,
 * the search condition is then applied in that order (through the search index) until the page is
 * full.
 */
async function candidatePage(
  db: Db,
  query: ListQuery,
  search: SqliteSearch,
  ids: readonly number[],
  check: boolean,
  tag?: string,
): Promise<ListedRow[]> {
  if (ids.length === 0) return [];
  const tagged =
    tag === undefined
      ? sql<boolean>`1`
      : sql<boolean>`exists (select 1 from dir_listing_tags as g where g.tag = ${tag} and g.listing_id = k.id)`;
  const ordered = sql`select k.id, k.updated_at, k.service_did from json_each(${JSON.stringify(ids)}) as c
    cross join dir_listings as k indexed by dir_listings_keys on k.id = c.value
    where +k.status in (${sql.join(query.statuses)}) and ${bounds("k", query)} and ${tagged}
    order by k.updated_at, k.service_did limit ${check ? ids.length : query.limit}`;
  const hits = check
    ? await sql<{ id: number }>`select x.id from (${ordered}) as o
        cross join dir_listings as x indexed by dir_listings_search_order
          on x.updated_at = o.updated_at and x.service_did = o.service_did
        where x.id = o.id and ${search.matches("x", indexedFolds("x"))}
        order by o.updated_at, o.service_did limit ${query.limit}`.execute(db)
    : await sql<{ id: number }>`${ordered}`.execute(db);
  return bodiesSqlite(
    db,
    hits.rows.map((r) => r.id),
  );
}

/** The rows of `ids`, in that order. */
async function bodiesSqlite(db: Db, ids: readonly number[]): Promise<ListedRow[]> {
  if (ids.length === 0) return [];
  const result = await sql<ListedRow & { id: number }>`select id, body, updated_at, service_did from dir_listings
    where id in (select value from json_each(${JSON.stringify(ids)}))`.execute(db);
  const byId = new Map(result.rows.map((r) => [r.id, r]));
  return ids.map((id) => {
    const row = byId.get(id) as ListedRow & { id: number };
    return { body: row.body, updated_at: row.updated_at, service_did: row.service_did };
  });
}

/** One page of listings on SQLite, through the index that fits the filters. */
export function listSqlite(db: Db, query: ListQuery): Promise<ListedRow[]> {
  if (query.search !== undefined) return searchSqlite(db, query, query.search);
  return query.tag === undefined ? listByStatusSqlite(db, query) : listByTagSqlite(db, query);
}
