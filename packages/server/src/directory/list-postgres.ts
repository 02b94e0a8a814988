/**
 * Listing and search on PostgreSQL: see listPostgres and searchPostgres.
 */
import { sql } from "kysely";
import { PREPARE_ALWAYS } from "../platform/database.js";
import type { Position } from "./cursor.js";
import { escapeLike, type ListedRow, type ListQuery } from "./list-query.js";
import { LISTING_STATUSES, type ListingStatus } from "./listing.js";
import { PG_KEY_MARK, PG_SPANS_MS } from "./migrations.js";
import type { Db } from "./store.js";

// ---- listing on PostgreSQL ---------------------------------------------------------------

export async function listPostgres(db: Db, query: ListQuery): Promise<ListedRow[]> {
  const { tag, search, updatedSince, statuses } = query;
  if (search !== undefined) {
    // Within a caller's transaction: its snapshot, and the settings last until it ends.
    if (db.isTransaction) {
      const settings = PG_SEARCH_SETTINGS.map(([name, value]) => sql`set_config(${name}, ${value}, true)`);
      await sql`select ${sql.join([...settings, PG_PREFETCH])}`.execute(db);
      return searchPostgres(db, query, search, db);
    }
    // Several statements, one snapshot (a listing written meanwhile cannot be half seen), and the
    // settings in the same round trip as BEGIN.
    return db.connection().execute(async (connection) => {
      const settings = PG_SEARCH_SETTINGS.map(([name, value]) => `set local ${name} = '${value}'`).join("; ");
      await sql`${sql.raw(`begin isolation level repeatable read read only; ${settings}; select `)}${PG_PREFETCH}`.execute(
        connection,
      );
      try {
        const rows = await searchPostgres(connection, query, search, db);
        // Not awaited: a read-only transaction's commit cannot change the page, and the
        // connection runs it before the next statement anyone sends on it.
        sql
          .raw("commit")
          .execute(connection)
          .catch(() => undefined);
        return rows;
      } catch (error) {
        await sql
          .raw("rollback")
          .execute(connection)
          .catch(() => undefined);
        throw error;
      }
    });
  }
  if (tag !== undefined) {
    const { after, since } = pgTighter(query.after, updatedSince);
    let q = db
      .selectFrom("dir_listing_tags as t")
      .innerJoin("dir_listings as l", "l.id", "t.listing_id")
      .select(["l.body", "t.updated_at", "t.service_did"])
      .where("t.tag", "=", tag)
      .where("t.status", "in", statuses);
    if (since !== undefined) q = q.where("t.updated_at", ">=", since);
    if (after !== undefined) {
      q = q.where((eb) =>
        eb(eb.refTuple("t.updated_at", "t.service_did"), ">", eb.tuple(after.updatedAt, after.serviceDid)),
      );
    }
    return q.orderBy("t.updated_at").orderBy("t.service_did").limit(query.limit).execute();
  }
  const { after, since } = pgTighter(query.after, updatedSince);
  let q = db.selectFrom("dir_listings as l").select(["l.body", "l.updated_at", "l.service_did"]);
  // Every status: no filter to test on each row (a mirror's full traversal).
  if (statuses.length < LISTING_STATUSES.length) q = q.where("l.status", "in", statuses);
  if (since !== undefined) q = q.where("l.updated_at", ">=", since);
  if (after !== undefined) {
    q = q.where((eb) =>
      eb(eb.refTuple("l.updated_at", "l.service_did"), ">", eb.tuple(after.updatedAt, after.serviceDid)),
    );
  }
  return q.orderBy("l.updated_at").orderBy("l.service_did").limit(query.limit).execute();
}

/**
 * Settings of a search's transaction: its statements are short index walks and lookups, which
 * neither JIT compilation nor parallel workers speed up (both cost milliseconds to start); none
 * reads a whole table; a bitmap of every listing fits in memory.
 */
const PG_SEARCH_SETTINGS: readonly [string, string][] = [
  ["jit", "off"],
  ["max_parallel_workers_per_gather", "0"],
  ["enable_seqscan", "off"],
  ["work_mem", "64MB"],
];

/**
 * Read-ahead of a bitmap scan's table pages: a candidate search reads a few hundred listings at
 * random, one page each, and from a cold cache those reads are its whole cost when made one at a
 * time. PostgreSQL before 18 defaults to 1 (no overlap); 32 brought the worst cold first search
 * of a million listings from 29-32 ms to 20-22 ms. Raised only from that default: 0 means the
 * platform cannot prefetch (setting anything else would fail) or the operator turned it off, and
 * any other value is the operator's own choice.
 */
const PG_PREFETCH = sql`(select set_config('effective_io_concurrency', '32', true)
  where current_setting('effective_io_concurrency') = '1')`;

/** Rows a first scan in list order looks at: settles terms common enough (one row in 12 or more). */
const PG_QUICK_SCAN = 600;
/** Below this share of rows with a wanted status, the statuses are intersected in bitmaps too. */
const PG_FEW_STATUS = 0.2;
/** A tag this small is walked in list order; a larger one's size is the planner's estimate. */
const PG_SMALL_TAG = 1_000;
/** How far above PG_SMALL_TAG the statistics must put a tag for its size not to be counted. */
const PG_SURELY_LARGE = 4;
/** The most candidates taken from the keys index at once, sorted into list order. */
const PG_CANDIDATE_CAP = 2_500;
/**
 * Costs in microseconds, as measured on a million listings: a row of a scan of
 * `dir_listings_search_scan` (tested), a row of a tag's index, a table row read at random (a
 * candidate, or a listing of a tag walked), a tag lookup, an entry of a GIN index's bitmap (for a
 * search, for a tag), a key of a window's spans (17 µs measured) and an entry of those keys
 * (0.007 µs measured: 358,000 in 2.5 ms; 0.05 taken as a bound). The scan's is as
 * measured on pages of a term in 1% of listings (2,400 rows in 2.6 ms, with the page's bodies);
 * 0.45 had been chosen when a window read a B-tree range of its listings (0.16 µs each) and one
 * ten times too wide cost more than the scan it replaced.
 */
const PG_SCAN_ROW = 0.8;
const PG_TAG_ROW = 0.3;
const PG_FETCH_ROW = 6;
const PG_PROBE = 3;
const PG_GIN_ENTRY = 0.3;
const PG_TAG_ENTRY = 0.15;
const PG_SPAN_KEY = 20;
const PG_SPAN_ENTRY = 0.05;
/**
 * A window is made this much larger than the matches it should hold (less when their share is
 * counted, not sampled), and grows by at most this factor.
 */
const PG_WINDOW_MARGIN = 3;
const PG_WINDOW_EXACT_MARGIN = 2;
const PG_WINDOW_GROWTH = 2;
const PG_WINDOWS = 4;
/**
 * The most spans a window's keys name: each costs a lookup in the keys index (about 20 µs), and
 * the span holding a window's start may reach back before it (read for nothing).
 */
const PG_WINDOW_KEYS = 12;

interface PgSearch {
  /** The term lowercased as JavaScript does it (the columns are lowercased by PostgreSQL). */
  needle: string;
  /** `LIKE` pattern for the needle, `%`, `_` and `\` escaped. */
  pattern: string;
  /**
   * The search keys a match holds (see `dir_search_keys`): the needle itself when it has one,
   * two or four characters; its two pairs when three; its pieces of four when longer.
   */
  keys: string[];
  /** Holding its keys is matching (the needle is one key). */
  exact: boolean;
  /**
   * What the index's candidates hold, as substrings of either column, when that is looser than
   * the search itself by more than chance: a three-character needle's pairs. (A longer needle's
   * pieces of four are taken to be the needle.)
   */
  loose: string[] | undefined;
}

function pgSearch(term: string): PgSearch {
  const needle = term.toLowerCase();
  const chars = [...needle];
  const pieces = (size: number) => [...new Set(chars.slice(size - 1).map((_, i) => chars.slice(i, i + size).join("")))];
  const exact = chars.length <= 2 || chars.length === 4;
  let keys: string[];
  if (chars.length === 0) keys = [];
  else if (exact) keys = [needle];
  else if (chars.length === 3) keys = pieces(2);
  else keys = pieces(4);
  const loose = chars.length === 3 ? keys : undefined;
  return { needle, pattern: `%${escapeLike(needle)}%`, keys, exact, loose };
}

/**
 * The search on the lowered columns of `alias`: exactly `lower(column) LIKE '%term%'`, written
 * as whichever test is quicker in a scan (`strpos` skips ahead by the term's length, `LIKE` by a
 * character).
 */
const pgMatches = (alias: string, search: PgSearch) =>
  search.needle.length >= 5
    ? pgChecked(alias, search)
    : sql<boolean>`(${sql.ref(`${alias}.title_lower`)} like ${search.pattern} or ${sql.ref(`${alias}.description_lower`)} like ${search.pattern})`;
function pgChecked(alias: string, search: PgSearch) {
  return sql<boolean>`(strpos(${sql.ref(`${alias}.title_lower`)}, ${search.needle}) > 0 or strpos(${sql.ref(`${alias}.description_lower`)}, ${search.needle}) > 0)`;
}

/** Whether the row of `alias` is among the index's candidates for the search (see `loose`). */
function pgCandidate(alias: string, search: PgSearch) {
  if (search.loose === undefined) return pgMatches(alias, search);
  const holds = (column: string, piece: string) =>
    sql<boolean>`${sql.ref(`${alias}.${column}`)} like ${`%${escapeLike(piece)}%`}`;
  return sql<boolean>`(${sql.join(
    search.loose.map((p) => sql`(${holds("title_lower", p)} or ${holds("description_lower", p)})`),
    sql` and `,
  )})`;
}

const pgTagged = (alias: string, tag: string) =>
  sql<boolean>`exists (select 1 from dir_listing_tags as g where g.tag = ${tag} and g.listing_id = ${sql.ref(`${alias}.id`)})`;

const pgStatusIn = (alias: string, statuses: readonly ListingStatus[]) =>
  sql<boolean>`${sql.ref(`${alias}.status`)} in (${sql.join(statuses)})`;

/** The range of a query: `(updated_at, service_did) > after` and `updated_at >= since`. */
interface PgRange {
  after: Position | undefined;
  since: number | undefined;
}

function pgBounds(alias: string, range: PgRange) {
  const col = (c: string) => sql.ref(`${alias}.${c}`);
  const { after, since } = pgTighter(range.after, range.since);
  if (after !== undefined)
    return sql<boolean>`(${col("updated_at")}, ${col("service_did")}) > (${after.updatedAt}, ${after.serviceDid})`;
  if (since !== undefined) return sql<boolean>`${col("updated_at")} >= ${since}`;
  return sql<boolean>`true`;
}

/**
 * Of a cursor and `updated_since`, the one that implies the other (one of them always does). A
 * B-tree scan given both may start at the looser one: PostgreSQL does not weigh a row comparison
 * against a bound on its first column.
 */
function pgTighter(after: Position | undefined, since: number | undefined) {
  if (after === undefined || since === undefined) return { after, since };
  return after.updatedAt >= since ? { after, since: undefined } : { after: undefined, since };
}

/**
 * The first `budget` listings (all of them: undefined) of a range, in list order, with whether
 * they match the search (`m`) and, when `loose`, whether they are candidates (`c`): from the
 * covering index, and with `wide` from the rows too wide for it as well (see migrations.ts;
 * there are seldom any).
 */
function pgScanSource(range: PgRange, search: PgSearch, budget: number | undefined, wide: boolean, loose = false) {
  const candidate = loose ? sql`, ${pgCandidate("s", search)} as c` : sql``;
  const arm = (where: string) =>
    sql`select s.id, s.updated_at, s.service_did, s.status, ${pgMatches("s", search)} as m${candidate}
      from dir_listings as s where ${sql.raw(where)} and ${pgBounds("s", range)}
      order by s.updated_at, s.service_did limit ${budget ?? null}`;
  if (!wide) return sql`(${arm("not s.search_wide")})`;
  return sql`(select * from ((${arm("not s.search_wide")}) union all (${arm("s.search_wide")})) as a
    order by a.updated_at, a.service_did limit ${budget ?? null})`;
}

/**
 * Whether a listing of `alias` (columns id and status) is in the page, the search aside (its tag
 * already tested when `tagIndexed`).
 */
const pgKept = (alias: string, query: ListQuery, tagIndexed = false) =>
  query.tag === undefined || tagIndexed
    ? pgStatusIn(alias, query.statuses)
    : sql<boolean>`${pgStatusIn(alias, query.statuses)} and ${pgTagged(alias, query.tag)}`;

/** Bodies joined to `keys` (a subquery of id, updated_at, service_did), in list order. */
async function pgPage(db: Db, keys: ReturnType<typeof sql>): Promise<ListedRow[]> {
  const result = await sql<ListedRow>`select l.body, k.updated_at, k.service_did from (${keys}) as k
    join dir_listings as l on l.id = k.id order by k.updated_at, k.service_did`.execute(db);
  return result.rows;
}

interface QuickScan {
  /** The matches among the rows seen, in list order. */
  page: ListedRow[];
  /** The last row seen, when the range holds more. */
  stop: Position | undefined;
  /** Rows seen matching the search alone, being candidates of the keys index, having a wanted status. */
  matched: number;
  candidates: number;
  statusOk: number;
  /** Listings of the table (the planner's figure). */
  total: number;
  /** Whether some rows are too wide for the covering index. */
  wide: boolean;
}

/**
 * The first PG_QUICK_SCAN rows of the range in list order, through the covering index, stopping
 * as soon as the page is full; also the last row (a sentinel row, numbered PG_QUICK_SCAN) with
 * running counts up to it.
 */
async function pgQuickScan(db: Db, query: ListQuery, search: PgSearch, wide = false): Promise<QuickScan> {
  const range = { after: query.after, since: query.updatedSince };
  const loose = search.loose !== undefined;
  const result = await sql<{
    wide: boolean;
    total: number;
    id: number | null;
    updated_at: number;
    service_did: string;
    hit: boolean;
    rn: number;
    ms: number;
    mc: number;
    mst: number;
    body: string | null;
  }>`${sql.raw(PREPARE_ALWAYS)} select d.wide, d.total, v.id, v.updated_at, v.service_did, v.hit, v.rn, v.ms, v.mc, v.mst, l.body
    from (select exists (select 1 from dir_listings where search_wide) as wide,
      (select greatest(reltuples, 0)::float8 from pg_class where oid = 'dir_listings'::regclass) as total) as d
    left join lateral (
      select w.id, w.updated_at, w.service_did, w.hit, w.rn, w.ms, w.mc, w.mst from (
        select u.id, u.updated_at, u.service_did, u.m and ${pgKept("u", query)} as hit,
          row_number() over w as rn, count(*) filter (where u.m) over w as ms,
          count(*) filter (where ${loose ? sql`u.c` : sql`u.m`}) over w as mc,
          count(*) filter (where ${pgStatusIn("u", query.statuses)}) over w as mst
        from ${pgScanSource(range, search, PG_QUICK_SCAN, wide, loose)} as u
        window w as (order by u.updated_at, u.service_did rows unbounded preceding)) as w
      where w.hit or w.rn = ${PG_QUICK_SCAN}
      order by w.updated_at, w.service_did limit ${query.limit + 1}) as v on true
    left join dir_listings as l on l.id = v.id and v.hit
    order by v.updated_at, v.service_did`.execute(db);
  const first = result.rows[0];
  if (first?.wide === true && !wide) return pgQuickScan(db, query, search, true);
  const scan: QuickScan = {
    page: [],
    stop: undefined,
    matched: 0,
    candidates: 0,
    statusOk: 0,
    total: Number(first?.total ?? 0),
    wide,
  };
  for (const row of result.rows) {
    if (row.id === null) continue;
    if (row.hit) scan.page.push({ body: row.body as string, updated_at: row.updated_at, service_did: row.service_did });
    if (Number(row.rn) === PG_QUICK_SCAN) {
      scan.stop = { updatedAt: row.updated_at, serviceDid: row.service_did };
      scan.matched = Number(row.ms);
      scan.candidates = Number(row.mc);
      scan.statusOk = Number(row.mst);
    }
  }
  scan.page = scan.page.slice(0, query.limit);
  return scan;
}

/** The rest of the page by a scan in list order without a bound. */
async function pgScan(db: Db, query: ListQuery, search: PgSearch, range: PgRange, limit: number, wide: boolean) {
  return pgPage(
    db,
    sql`select u.id, u.updated_at, u.service_did from ${pgScanSource(range, search, undefined, wide)} as u
      where u.m and ${pgKept("u", query)} order by u.updated_at, u.service_did limit ${limit}`,
  );
}

/**
 * A walk of a tag's listings in list order along its covering index; a listing is read from the
 * table only when its status is wanted.
 */
function pgTagWalk(db: Db, query: ListQuery, search: PgSearch, tag: string, range: PgRange, limit: number) {
  return pgPage(
    db,
    sql`select t.listing_id as id, t.updated_at, t.service_did from dir_listing_tags as t
      join dir_listings as x on x.id = t.listing_id
      where t.tag = ${tag} and ${pgStatusIn("t", query.statuses)} and ${pgBounds("t", range)} and ${pgChecked("x", search)}
      order by t.updated_at, t.service_did limit ${limit}`,
  );
}

/** What a bitmap intersects besides the search's candidates: the tag's (keys), the statuses' (B-tree). */
interface PgIntersect {
  tag: boolean;
  status: boolean;
}
const PG_SEARCH_ONLY: PgIntersect = { tag: false, status: false };

/** The search keys of the listing `c`, exactly as `dir_listings_search_keys` indexes them. */
const PG_KEYS = sql`(dir_search_keys(c.title_lower, c.description_lower, c.updated_at, c.tags) collate "C")`;

/**
 * The condition the indexes serve in a bitmap: the search's candidates (with the tag's key when
 * `also.tag`, within the keys of `window` when given), the statuses when `also.status`; and the
 * test of the needle on each candidate unless its keys are exact.
 */
function pgIndexed(query: ListQuery | undefined, search: PgSearch, also: PgIntersect, window?: string[]) {
  const keys = also.tag && query?.tag !== undefined ? [...search.keys, pgTagKey(query.tag)] : search.keys;
  const parts = [sql<boolean>`${PG_KEYS} @> ${keys}::text[]`];
  if (window !== undefined) parts.push(sql<boolean>`${PG_KEYS} && ${window}::text[]`);
  if (!search.exact) parts.push(pgChecked("c", search));
  if (also.status && query !== undefined) parts.push(pgStatusIn("c", query.statuses));
  return sql.join(parts, sql` and `);
}

const pgTagKey = (tag: string) => `${PG_KEY_MARK}tag:${tag}`;

/**
 * Keys naming at most PG_WINDOW_KEYS spans of one length (the shortest that does), from the span
 * holding `from` to the one holding `to`, and where the last of them ends: a window of list
 * order from `from` may run that far at no extra cost. Undefined when no length does (a window
 * that wide is better read along the term's keys alone) or before 1970 (where the spans'
 * integer division rounds the other way).
 */
function pgWindowKeys(from: number, to: number): { keys: string[]; end: number } | undefined {
  if (from < 0 || to < from) return undefined;
  for (const span of PG_SPANS_MS) {
    const first = Math.trunc(from / span);
    const last = Math.trunc(to / span);
    if (last - first >= PG_WINDOW_KEYS) continue;
    const keys = Array.from({ length: last - first + 1 }, (_, i) => `${PG_KEY_MARK}${span}:${first + i}`);
    return { keys, end: (last + 1) * span - 1 };
  }
  return undefined;
}

/**
 * How many listings hold the search's keys (an upper bound on its matches; exact when its keys
 * are), without reading them: EXPLAIN ANALYZE reports the
 * entries an index scan put in its bitmap, and the query stops at the first row. (Counting the
 * rows themselves would read each from the table.) Undefined if the plan has no bitmap.
 */
async function pgIndexCount(db: Db, search: PgSearch): Promise<number | undefined> {
  const result = await sql<{ "QUERY PLAN": unknown }>`explain (analyze, timing off, summary off, costs off, format json)
    select 1 from dir_listings as c where ${PG_KEYS} @> ${search.keys}::text[] limit 1`.execute(db);
  interface Node {
    "Node Type"?: string;
    "Actual Rows"?: number;
    Plans?: Node[];
  }
  const explained = result.rows[0]?.["QUERY PLAN"];
  const root = (Array.isArray(explained) ? explained[0] : undefined) as { Plan?: Node } | undefined;
  let total: number | undefined;
  const visit = (node: Node) => {
    if (node["Node Type"] === "Bitmap Index Scan") total = (total ?? 0) + Number(node["Actual Rows"] ?? 0);
    for (const child of node.Plans ?? []) visit(child);
  };
  if (root?.Plan !== undefined) visit(root.Plan);
  return total;
}

/**
 * The page among at most `cap` candidates of the keys index (their table rows read, then sorted),
 * or undefined when there are more. The range is written so no B-tree can serve it: only the
 * keys index is read.
 */
async function pgCandidates(
  db: Db,
  query: ListQuery,
  search: PgSearch,
  range: PgRange,
  limit: number,
  also: PgIntersect,
  cap: number,
): Promise<ListedRow[] | undefined> {
  const after = range.after;
  const bounds = [sql<boolean>`true`];
  if (after !== undefined)
    bounds.push(sql<boolean>`(c.updated_at + 0, c.service_did) > (${after.updatedAt}, ${after.serviceDid})`);
  if (range.since !== undefined) bounds.push(sql<boolean>`c.updated_at + 0 >= ${range.since}`);
  const result = await sql<{ n: number; body: string | null; updated_at: number; service_did: string }>`
    with found as materialized (
      select c.id, c.updated_at, c.service_did, c.status from dir_listings as c
      where ${pgIndexed(query, search, also)} and ${sql.join(bounds, sql` and `)}
      limit ${cap + 1})
    select n.n, l.body, k.updated_at, k.service_did
    from (select count(*)::int as n from found) as n
    left join lateral (select f.id, f.updated_at, f.service_did from found as f where n.n <= ${cap} and ${pgKept("f", query, also.tag)}
      order by f.updated_at, f.service_did limit ${limit}) as k on true
    left join dir_listings as l on l.id = k.id
    order by k.updated_at, k.service_did`.execute(db);
  if ((result.rows[0]?.n ?? 0) > cap) return undefined;
  return result.rows
    .filter((r) => r.body !== null)
    .map((r) => ({ body: r.body as string, updated_at: r.updated_at, service_did: r.service_did }));
}

/**
 * The planner's statistics the estimates use, kept per database handle and read again in the
 * background once a minute old (they only choose plans, so older ones cost time, never results;
 * reading them takes milliseconds): the histogram of `updated_at` (values splitting the listings
 * into equal parts) and the commonest tags' listings.
 */
interface PgStats {
  histogram: number[] | undefined;
  tags: Map<string, number>;
  /** Listings of a tag not among the commonest. */
  otherTag: number;
  at: number;
}
const pgStatsCache = new WeakMap<object, PgStats>();
const PG_STATS_MS = 60_000;

async function pgStats(db: Db, key: Db): Promise<PgStats> {
  const cached = pgStatsCache.get(key);
  // A caller's transaction is a handle of its own: read them in it.
  if (cached === undefined || key.isTransaction) return readPgStats(db, key);
  if (Date.now() - cached.at >= PG_STATS_MS) {
    cached.at = Date.now();
    readPgStats(key, key).catch(() => undefined);
  }
  return cached;
}

async function readPgStats(db: Db, key: Db): Promise<PgStats> {
  const result = await sql<{ kind: string; value: string; freq: number | null }>`
    select 'h' as kind, u.v::text as value, null::float8 as freq
      from pg_stats as s, unnest(s.histogram_bounds::text::bigint[]) as u(v)
      where s.schemaname = current_schema() and s.tablename = 'dir_listings' and s.attname = 'updated_at'
    union all
    select 't', u.v, u.f::float8 from pg_stats as s, unnest(s.most_common_vals::text::text[], s.most_common_freqs) as u(v, f)
      where s.schemaname = current_schema() and s.tablename = 'dir_listing_tags' and s.attname = 'tag'
    union all
    select 'n', s.n_distinct::text, (select greatest(reltuples, 0) from pg_class where oid = 'dir_listing_tags'::regclass)::float8
      from pg_stats as s where s.schemaname = current_schema() and s.tablename = 'dir_listing_tags' and s.attname = 'tag'`.execute(
    db,
  );
  const histogram: number[] = [];
  const tags = new Map<string, number>();
  let tagRows = 0;
  let distinct = 0;
  let common = 0;
  for (const row of result.rows) {
    if (row.kind === "h") histogram.push(Number(row.value));
    else if (row.kind === "t") {
      tags.set(row.value, Number(row.freq));
      common += Number(row.freq);
    } else {
      tagRows = Number(row.freq);
      const n = Number(row.value);
      distinct = n < 0 ? -n * tagRows : n;
    }
  }
  for (const [tag, freq] of tags) tags.set(tag, freq * tagRows);
  const stats: PgStats = {
    histogram: histogram.length >= 2 ? histogram.sort((a, b) => a - b) : undefined,
    tags,
    otherTag: distinct > tags.size ? ((1 - common) * tagRows) / (distinct - tags.size) : PG_SMALL_TAG,
    at: Date.now(),
  };
  pgStatsCache.set(key, stats);
  return stats;
}

/** The share of the table below `at` by the histogram (0 to 1). */
function histogramRank(bounds: readonly number[], at: number): number {
  const parts = bounds.length - 1;
  for (let i = 0; i < parts; i++) {
    const lo = bounds[i] as number;
    const hi = bounds[i + 1] as number;
    if (at < lo) return i / parts;
    if (at < hi) return (i + (at - lo) / (hi - lo)) / parts;
  }
  return 1;
}

/** The `updated_at` below which the histogram puts the share `rank` of the table (undefined: past its end). */
function histogramValue(bounds: readonly number[], rank: number): number | undefined {
  const parts = bounds.length - 1;
  if (rank >= 1) return undefined;
  const i = Math.max(0, Math.floor(rank * parts));
  const lo = bounds[i] as number;
  const hi = bounds[i + 1] as number;
  return Math.ceil(lo + (hi - lo) * (rank * parts - i));
}

/**
 * The rest of the page from windows of list order, each sized (with the planner's histogram of
 * `updated_at`) to hold a few times the matches still wanted: the search's keys intersected with
 * the window's spans (see pgWindowKeys) in the keys index, so only the window's
 * candidates are read from the table. After PG_WINDOWS windows the last one runs to the end of
 * the range.
 */
async function pgWindows(
  db: Db,
  query: ListQuery,
  search: PgSearch,
  range: PgRange & { after: Position },
  limit: number,
  also: PgIntersect,
  span: number,
  histogram: readonly number[],
): Promise<ListedRow[]> {
  const page: ListedRow[] = [];
  // Written so no B-tree can serve them: the keys index narrows to the window, these are exact.
  const { after } = range;
  const bounds = [sql<boolean>`(c.updated_at + 0, c.service_did) > (${after.updatedAt}, ${after.serviceDid})`];
  if (range.since !== undefined) bounds.push(sql<boolean>`c.updated_at + 0 >= ${range.since}`);
  let from = Math.max(after.updatedAt, range.since ?? after.updatedAt);
  let rank = histogramRank(histogram, from);
  for (let window = 1; ; window++) {
    const estimate = window < PG_WINDOWS ? histogramValue(histogram, rank + span) : undefined;
    const spans = estimate === undefined ? undefined : pgWindowKeys(from, estimate);
    const upTo = spans?.end ?? estimate;
    const keys = spans?.keys;
    const within = [...bounds, sql<boolean>`c.updated_at + 0 >= ${from}`];
    if (upTo !== undefined) within.push(sql<boolean>`c.updated_at + 0 <= ${upTo}`);
    const found = await pgPage(
      db,
      sql`select c.id, c.updated_at, c.service_did from dir_listings as c
        where ${pgIndexed(query, search, also, keys)} and ${sql.join(within, sql` and `)} and ${pgKept("c", query, also.tag)}
        order by c.updated_at + 0, c.service_did limit ${limit - page.length}`,
    );
    page.push(...found);
    if (page.length >= limit || upTo === undefined) return page;
    from = upTo + 1;
    // This window's share of the table (more than planned when its spans ran further).
    const next = histogramRank(histogram, from);
    const seen = Math.max(next - rank, span);
    rank = next;
    // The next window holds the matches still wanted at the share this one had, or grows.
    span =
      found.length > 0
        ? Math.min((seen * (limit - page.length) * PG_WINDOW_MARGIN) / found.length, seen * PG_WINDOW_GROWTH)
        : seen * PG_WINDOW_GROWTH;
  }
}

/**
 * A search, cheapest plan first, each returning the exact page:
 * - a scan in list order of the covering search index that looks at PG_QUICK_SCAN rows settles
 *   common terms;
 * - then a tag of up to PG_SMALL_TAG listings is walked in list order;
 * - otherwise the rows seen give the shares of rows matching the search, being candidates of the
 *   keys index and having a wanted status (and the planner's statistics a tag's size), and the
 *   rest of the page comes from whichever plan is estimated cheapest: the scan carried on; the
 *   tag walked; the candidates of the keys index (with or without the tag's key), all of them
 *   sorted, or those of windows of list order.
 */
async function searchPostgres(db: Db, query: ListQuery, term: string, statsKey: Db): Promise<ListedRow[]> {
  const search = pgSearch(term);
  const { tag, limit } = query;
  const quick = await pgQuickScan(db, query, search);
  const first = quick.page;
  if (first.length >= limit || quick.stop === undefined) return first;
  const need = limit - first.length;
  const range: PgRange = { after: quick.stop, since: query.updatedSince };
  let tagSize: number | undefined;
  const stats = await pgStats(db, statsKey);
  // A tag among the commonest, sampled well above the bound, is not counted (a millisecond).
  if (tag !== undefined && (stats.tags.get(tag) ?? 0) < PG_SMALL_TAG * PG_SURELY_LARGE) {
    const counted = await sql<{ n: number }>`select count(*)::int as n from (select 1 from dir_listing_tags
      where tag = ${tag} limit ${PG_SMALL_TAG + 1}) as t`.execute(db);
    tagSize = counted.rows[0]?.n ?? 0;
    if (tagSize <= PG_SMALL_TAG) return [...first, ...(await pgTagWalk(db, query, search, tag, range, need))];
  }
  if (tag !== undefined) tagSize = Math.max(stats.tags.get(tag) ?? stats.otherTag, PG_SMALL_TAG + 1);
  const rows = Math.max(quick.total, PG_QUICK_SCAN);
  // Shares of the rows seen (half a row added: none seen is not none there).
  const share = (n: number) => (n + 0.5) / PG_QUICK_SCAN;
  let matching = share(quick.matched);
  let candidates = share(quick.candidates);
  const wanted = share(quick.statusOk);
  // None seen, or so few that reading all candidates may be the plan: the keys index counts them
  // (a millisecond for a rare term, three for one listing in a hundred at a million), so that
  // plan is not chosen on a chance sample, nor a window of the wrong size for a rare term.
  let margin = PG_WINDOW_MARGIN;
  if (quick.candidates === 0 || share(quick.candidates) * rows <= PG_CANDIDATE_CAP / 2) {
    const counted = await pgIndexCount(db, search);
    if (counted === 0) return first;
    if (counted !== undefined) {
      candidates = counted / rows;
      matching = search.exact ? candidates : Math.min(matching, candidates);
      if (search.exact) margin = PG_WINDOW_EXACT_MARGIN;
    }
  }
  const tagged = tag === undefined ? 1 : Math.min(1, (tagSize as number) / rows);
  // The query's share: as seen once enough rows matched, else as the shares above make it.
  const hits =
    first.length >= 3 ? first.length / PG_QUICK_SCAN : Math.min(share(first.length), matching * wanted * tagged);
  const scanned = need / hits;
  const plans: [number, () => Promise<ListedRow[] | undefined>][] = [
    [
      scanned * PG_SCAN_ROW + (tag === undefined ? 0 : scanned * matching * wanted * PG_PROBE),
      () => pgScan(db, query, search, range, need, quick.wide),
    ],
  ];
  if (tag !== undefined) {
    const walked = Math.min(tagSize as number, need / (matching * wanted));
    plans.push([
      walked * PG_TAG_ROW + walked * wanted * PG_FETCH_ROW,
      () => pgTagWalk(db, query, search, tag, range, need),
    ]);
  }
  const entries = candidates * rows;
  // Bitmaps intersect the search's candidates with the tag's listings (keys) and with the wanted
  // statuses (the B-tree on status) when those are few enough to be worth it.
  const options: PgIntersect[] = [PG_SEARCH_ONLY];
  if (tag !== undefined) options.push({ tag: true, status: false });
  if (wanted < PG_FEW_STATUS) options.push(...options.map((o) => ({ ...o, status: true })));
  for (const also of options) {
    // The keys index's entries (the search's, the tag's) and the status B-tree's.
    const keysCost = entries * PG_GIN_ENTRY + (also.tag ? (tagSize as number) * PG_TAG_ENTRY : 0);
    const statusCost = also.status ? wanted * rows * PG_TAG_ENTRY : 0;
    const indexCost = keysCost + statusCost;
    const read = entries * (also.tag ? tagged : 1) * (also.status ? wanted : 1);
    const probes = tag !== undefined && !also.tag ? read * (also.status ? 1 : wanted) * PG_PROBE : 0;
    if (read <= PG_CANDIDATE_CAP / 2) {
      plans.push([
        indexCost + read * PG_FETCH_ROW + probes,
        () => pgCandidates(db, query, search, range, need, also, PG_CANDIDATE_CAP),
      ]);
    }
    if (stats.histogram !== undefined) {
      const window = (need * margin) / hits;
      const histogram = stats.histogram;
      const from = { ...range, after: quick.stop as Position };
      // Taken as reading the keys' entries within the window only (it reads more: a bound).
      const part = Math.min(1, window / rows);
      plans.push([
        PG_WINDOW_KEYS * PG_SPAN_KEY +
          window * PG_SPAN_ENTRY +
          part * keysCost +
          statusCost +
          part * (read * PG_FETCH_ROW + probes),
        () => pgWindows(db, query, search, from, need, also, window / rows, histogram),
      ]);
    }
  }
  plans.sort((a, b) => a[0] - b[0]);
  for (const [, plan] of plans) {
    const page = await plan();
    if (page !== undefined) return [...first, ...page];
  }
  return [...first, ...(await pgScan(db, query, search, range, need, quick.wide))];
}
