/**
 * Listing and search on SQLite: see listSqlite.
 */
import { sql } from "kysely";
import { escapeLike, type ListedRow, type ListQuery } from "./list-query.js";
import type { ListingStatus } from "./listing.js";
import { SQLITE_FOLDS_TO_ASCII, sqliteSearchKey } from "./migrations.js";
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

/** `dir_listings_search`'s key of the listing row `alias` (see migrations.ts). */
const searchKey = (alias: string) => sql.raw(sqliteSearchKey(alias));

/** Rows a first, quick scan looks at: settles short terms common enough. */
const QUICK_SCAN = 1_000;
const QUICK_TAG_SCAN = 600;
/** The most listings a short term's trigrams may hold before a scan is preferred (the vocabulary's count). */
const SHORT_TERM_DOCS = 200_000;
/** The most listings a short term's column endings may give. */
const ENDS_CAP = 20_000;
/**
 * Costs in microseconds, as measured on a million listings: a listing of a tag walked in list
 * order and tested, and a match yielded by the full-text index in its order (tested for the tag).
 */
const WALK_ROW_US = 2;
const INDEX_MATCH_US = 0.15;
/**
 * A tag of up to this many listings is read once into a set that each match of the full-text index
 * is looked up in; a larger one is looked up in its index for each match.
 */
const SET_TAG = 20_000;

/** A tag the full-text index's matches are tested against, and how (see SET_TAG). */
interface TagFilter {
  tag: string;
  set: boolean;
}

type Condition = ReturnType<typeof sql<boolean>>;
/** The search on the row of `alias`; `folds` says whether that row holds a character FTS5 folds onto ASCII. */
type Predicate = (alias: string, folds: Condition) => Condition;

interface SqliteSearch {
  /** Lowercased term. */
  needle: string;
  /** Three characters or more: the trigram index answers it (an FTS5 phrase). */
  long: boolean;
  /** Printable ASCII only: LIKE (ASCII case folding) decides it exactly, see below. */
  ascii: boolean;
  /** The term as an FTS5 phrase. */
  phrase: string;
  /** The search as a condition on the title and description of a row of alias `alias`. */
  matches: Predicate;
  /** Cheap enough to test row after row in a scan. */
  scannable: boolean;
  /** `folds` for a listing row read from the table: only what the term's letters need. */
  tableFolds: (alias: string) => Condition;
}

/**
 * What a search means is unchanged: a term of three characters or more matches what the FTS5
 * trigram index matches (a case-folded substring of the title or the description); a shorter one
 * matches when `instr(lower(column), lower(term))` finds it. Long terms are answered by the index
 * itself; where a row is tested instead (a walk along a tag), cheaper conditions stand in for them
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
    sql<boolean>`exists (select 1 from dir_listings_search where dir_listings_search match ${phrase} and rowid = ${searchKey(a)})`;
  let matches: Predicate;
  if (long && ascii) matches = (a, folds) => sql<boolean>`(${like(a)} or (${folds} and ${probe(a)}))`;
  else if (long) matches = probe;
  else if (ascii) matches = like;
  else {
    matches = (a) =>
      sql<boolean>`(instr(unicode_lower(${col(a, "title")}), ${needle}) > 0 or instr(unicode_lower(${col(a, "description")}), ${needle}) > 0)`;
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
  return { needle, long, ascii, phrase, matches, scannable: !long || ascii, tableFolds };
}

/**
 * A search, each step returning the exact page:
 * - a term of three characters or more: its matches in list order from `dir_listings_search`
 *   (keyed in list order), tested for the status, the range and the tag, until the page is full;
 *   with a tag so small that walking it costs less (WALK_ROW_US), the tag's listings are walked in
 *   list order and tested instead;
 * - a shorter term: a scan in list order that looks at a bounded number of rows (settles common
 *   terms), through the covering search index or along the tag's index; then its candidates in
 *   list order (every trigram starting with the term, from the index's vocabulary, plus the
 *   columns ending with it), tested; the scan without a bound when those are too many.
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
  if (search.long) {
    const tag = query.tag;
    if (tag === undefined)
      return bodiesInOrder(db, await indexedPage(db, query, search.phrase, undefined, undefined), query.limit);
    const { size, listings } = await tagSize(db, tag, SET_TAG);
    // A tag so small that walking it costs less than the matches the index would yield before
    // the page held enough of the tag's listings.
    if (size * WALK_ROW_US < ((query.limit * listings) / Math.max(size, 1)) * INDEX_MATCH_US)
      return bodiesInOrder(db, (await tagScan(db, query, search, tag, undefined)) as number[], query.limit);
    return bodiesInOrder(
      db,
      await indexedPage(db, query, search.phrase, undefined, { tag, set: size <= SET_TAG }),
      query.limit,
    );
  }
  return query.tag === undefined ? searchShort(db, query, search) : searchShortTag(db, query, search, query.tag);
}

/** A tag's listings are counted exactly up to this many; past it, estimated (see tagSize). */
const TAG_COUNT_EXACT = 2_048;
/** The share of listing ids (the newest) a large tag's size is estimated from: 1 / 2^TAG_SAMPLE_SHIFT. */
const TAG_SAMPLE_SHIFT = 4;

/**
 * The listings of a tag (exact up to TAG_COUNT_EXACT, at most `cap + 1`), and of the whole
 * directory (about: ids are not reused). Both only choose a plan, never what a page holds, so a
 * large tag is not counted (20,000 index entries took about 1 ms at a million listings, a third of
 * a search + tag): its listings among the newest 1/16 of ids, times 16, stand in. A tag whose
 * listings cluster elsewhere is underestimated, which costs time only.
 */
async function tagSize(db: Db, tag: string, cap: number): Promise<{ size: number; listings: number }> {
  const sampleCap = (cap >> TAG_SAMPLE_SHIFT) + 1;
  const result = await sql<{ n: number; sampled: number; listings: number | null }>`select
    (select count(*) from (select 1 from dir_listing_tags where tag = ${tag} limit ${TAG_COUNT_EXACT + 1})) as n,
    (select count(*) from (select 1 from dir_listing_tags where tag = ${tag}
      and listing_id > (select max(id) - (max(id) >> ${TAG_SAMPLE_SHIFT}) from dir_listings) limit ${sampleCap})) as sampled,
    (select max(id) from dir_listings) as listings`.execute(db);
  const row = result.rows[0];
  const exact = row?.n ?? 0;
  const size = exact <= TAG_COUNT_EXACT ? exact : Math.max(exact, (row?.sampled ?? 0) << TAG_SAMPLE_SHIFT);
  return { size: Math.min(size, cap + 1), listings: row?.listings ?? 0 };
}

async function searchShort(db: Db, query: ListQuery, search: SqliteSearch): Promise<ListedRow[]> {
  if (search.scannable) {
    const ids = await indexScan(db, query, search, undefined, QUICK_SCAN);
    if (ids !== undefined) return bodiesInOrder(db, ids, query.limit);
  }
  const ids = await shortCandidates(db, query, search, undefined);
  if (ids !== undefined) return bodiesInOrder(db, ids, query.limit);
  return bodiesInOrder(db, (await indexScan(db, query, search, undefined, undefined)) as number[], query.limit);
}

async function searchShortTag(db: Db, query: ListQuery, search: SqliteSearch, tag: string): Promise<ListedRow[]> {
  if (search.scannable) {
    const ids = await tagScan(db, query, search, tag, QUICK_TAG_SCAN);
    if (ids !== undefined) return bodiesInOrder(db, ids, query.limit);
  }
  const { size } = await tagSize(db, tag, SET_TAG);
  const found = await shortCandidates(db, query, search, { tag, set: size <= SET_TAG });
  if (found !== undefined) return bodiesInOrder(db, found, query.limit);
  return bodiesInOrder(db, (await tagScan(db, query, search, tag, undefined)) as number[], query.limit);
}

/**
 * Ids of a scan of the covering search index in list order (optionally keeping a tag's listings),
 * or undefined when `budget` rows did not settle the page.
 */
async function indexScan(
  db: Db,
  query: ListQuery,
  search: SqliteSearch,
  tag: string | undefined,
  budget: number | undefined,
): Promise<number[] | undefined> {
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
  return ids;
}

/** Ids of a scan of a tag's listings in list order, or undefined when `budget` rows did not settle the page. */
async function tagScan(
  db: Db,
  query: ListQuery,
  search: SqliteSearch,
  tag: string,
  budget: number | undefined,
): Promise<number[] | undefined> {
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
  return ids;
}

/** `dir_listings_search`'s bucket of a timestamp (see `sqliteSearchKey`). */
const bucketOf = (at: number) => sql`max(min(${at} >> 10, 4294967295), -4294967296)`;

/**
 * Ids of the first `query.limit` listings in the page among the matches of the FTS5 query `match`
 * (checked with `check` when it is looser than the search), in the index's key order, then every
 * other match in the bucket of the last: the page is among them (ties within a bucket are not in
 * list order).
 */
async function indexedPage(
  db: Db,
  query: ListQuery,
  match: string,
  check: Predicate | undefined,
  tag: TagFilter | undefined,
): Promise<number[]> {
  // The range starts at the bucket of the cursor or of updated_since, whichever is later.
  const from = Math.max(
    query.after?.updatedAt ?? Number.NEGATIVE_INFINITY,
    query.updatedSince ?? Number.NEGATIVE_INFINITY,
  );
  const start = Number.isFinite(from) ? sql<boolean>`rowid >= (${bucketOf(from)} << 31)` : sql<boolean>`1`;
  const first = await indexedHits(db, query, match, check, tag, start, query.limit);
  const last = first.at(-1);
  if (last === undefined || first.length < query.limit) return first.map((h) => h.id);
  const rest = await indexedHits(
    db,
    query,
    match,
    check,
    tag,
    sql<boolean>`rowid > ((${last.bucket} << 31) | ${last.id}) and rowid <= ((${last.bucket} << 31) | 2147483647)`,
    undefined,
  );
  return [...first, ...rest].map((h) => h.id);
}

/** Matches of `match` within `range` (a condition on the index's rowid) that are in the page, in key order. */
async function indexedHits(
  db: Db,
  query: ListQuery,
  match: string,
  check: Predicate | undefined,
  tag: TagFilter | undefined,
  range: Condition,
  limit: number | undefined,
): Promise<{ id: number; bucket: number }[]> {
  const conditions = [sql<boolean>`+k.status in (${sql.join(query.statuses)})`, bounds("k", query)];
  if (tag?.set)
    conditions.push(
      sql<boolean>`(f.key & 2147483647) in (select listing_id from dir_listing_tags where tag = ${tag.tag})`,
    );
  else if (tag !== undefined)
    conditions.push(
      sql<boolean>`exists (select 1 from dir_listing_tags as g where g.tag = ${tag.tag} and g.listing_id = k.id)`,
    );
  if (check !== undefined) conditions.push(check("k", NO_FOLDS));
  // Without a check, the keys index holds all that is tested (smaller than the table's rows).
  const listing = check === undefined ? sql`dir_listings as k indexed by dir_listings_keys` : sql`dir_listings as k`;
  const result = await sql<{ id: number; bucket: number }>`select k.id, f.key >> 31 as bucket
    from (select rowid as key from dir_listings_search where dir_listings_search match ${match} and ${range}) as f
    cross join ${listing} on k.id = (f.key & 2147483647)
    where ${sql.join(conditions, sql` and `)}
    order by f.key limit ${limit ?? -1}`.execute(db);
  return result.rows;
}

/** Checks of short terms never read the folding flag (it concerns long terms only). */
const NO_FOLDS = sql<boolean>`0`;

/**
 * A short (one- or two-character, printable ASCII) term's page among its candidates, or undefined
 * when they are too many: a term occurring in a column either starts one of the column's trigrams
 * (the full-text index holds them case-folded; its vocabulary lists them, with how many listings
 * hold each) or ends the column.
 */
async function shortCandidates(
  db: Db,
  query: ListQuery,
  search: SqliteSearch,
  tag: TagFilter | undefined,
): Promise<number[] | undefined> {
  if (search.long || !search.ascii) return undefined;
  const needle = search.needle;
  const upper = `${needle}\u{10ffff}`;
  const terms = await sql<{ term: string; doc: number }>`select term, doc from dir_listings_search_vocab
    where term >= ${needle} and term < ${upper}`.execute(db);
  if (terms.rows.reduce((sum, r) => sum + r.doc, 0) > SHORT_TERM_DOCS) return undefined;
  const ends =
    needle.length === 2
      ? sql`select id from dir_listings where lower(substr(title, -2)) = ${needle}
          union select id from dir_listings where lower(substr(description, -2)) = ${needle}`
      : sql`select id from dir_listings where lower(substr(title, -2)) >= ${needle} and lower(substr(title, -2)) < ${upper}
          union select id from dir_listings where lower(substr(description, -2)) >= ${needle} and lower(substr(description, -2)) < ${upper}
          union select id from dir_listings where lower(substr(title, -1)) = ${needle}
          union select id from dir_listings where lower(substr(description, -1)) = ${needle}`;
  const ended = await sql<{ id: number }>`select id from (${ends}) limit ${ENDS_CAP + 1}`.execute(db);
  if (ended.rows.length > ENDS_CAP) return undefined;
  const fromIndex =
    terms.rows.length === 0
      ? []
      : await indexedPage(
          db,
          query,
          terms.rows.map((r) => `"${r.term.replace(/"/g, '""')}"`).join(" OR "),
          search.matches,
          tag,
        );
  const fromEnds = await candidatePage(
    db,
    query,
    search,
    ended.rows.map((r) => r.id),
    tag?.tag,
  );
  return [...new Set([...fromIndex, ...fromEnds])];
}

/**
 * Ids of the page among candidate ids: their keys from `dir_listings_keys` (one lookup each:
 * `+status` keeps the status out of the index search), filtered and sorted into list order, then
 * the search condition applied in that order (through the search index) until the page is full.
 */
async function candidatePage(
  db: Db,
  query: ListQuery,
  search: SqliteSearch,
  ids: readonly number[],
  tag?: string,
): Promise<number[]> {
  if (ids.length === 0) return [];
  const tagged =
    tag === undefined
      ? sql<boolean>`1`
      : sql<boolean>`exists (select 1 from dir_listing_tags as g where g.tag = ${tag} and g.listing_id = k.id)`;
  const ordered = sql`select k.id, k.updated_at, k.service_did from json_each(${JSON.stringify(ids)}) as c
    cross join dir_listings as k indexed by dir_listings_keys on k.id = c.value
    where +k.status in (${sql.join(query.statuses)}) and ${bounds("k", query)} and ${tagged}
    order by k.updated_at, k.service_did limit ${ids.length}`;
  const hits = await sql<{ id: number }>`select x.id from (${ordered}) as o
    cross join dir_listings as x indexed by dir_listings_search_order
      on x.updated_at = o.updated_at and x.service_did = o.service_did
    where x.id = o.id and ${search.matches("x", indexedFolds("x"))}
    order by o.updated_at, o.service_did limit ${query.limit}`.execute(db);
  return hits.rows.map((r) => r.id);
}

/** The first `limit` listings of `ids`, in list order. */
async function bodiesInOrder(db: Db, ids: readonly number[], limit: number): Promise<ListedRow[]> {
  if (ids.length === 0) return [];
  const result = await sql<ListedRow>`select body, updated_at, service_did from dir_listings
    where id in (select value from json_each(${JSON.stringify(ids)}))
    order by updated_at, service_did limit ${limit}`.execute(db);
  return result.rows;
}

/** One page of listings on SQLite, through the index that fits the filters. */
export function listSqlite(db: Db, query: ListQuery): Promise<ListedRow[]> {
  if (query.search !== undefined) return searchSqlite(db, query, query.search);
  return query.tag === undefined ? listByStatusSqlite(db, query) : listByTagSqlite(db, query);
}
