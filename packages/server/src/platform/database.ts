import { mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { SqliteHandle } from "@proto/protocol";
import BetterSqlite3 from "better-sqlite3";
import {
  Kysely,
  type Migration,
  Migrator,
  type PostgresCursor,
  PostgresDialect,
  type PostgresPool,
  type PostgresPoolClient,
  type PostgresQueryResult,
  sql,
} from "kysely";
import pg from "pg";
import { LockWaitingSqliteDialect } from "./sqlite-driver.js";

export type Engine = "sqlite" | "postgres";

export interface Database<DB> {
  db: Kysely<DB>;
  engine: Engine;
  /** True when the store answers a trivial query. */
  ping(): Promise<boolean>;
  /**
   * Runs `work` in a transaction that holds the lock `name` until it ends, across every process
   * sharing the store: on PostgreSQL a transaction-scoped advisory lock, on SQLite the database's
   * write lock taken at BEGIN IMMEDIATE. For check-then-act work that must not interleave
   * (a rotation checking for a pending key, a per-host cap counting before it inserts).
   */
  exclusive<T>(name: string, work: (trx: Kysely<DB>) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

export interface OpenDatabaseOptions {
  /** Migrations by name; applied in name order at open. */
  migrations: (engine: Engine) => Record<string, Migration>;
  /** Each service keeps its own migration history, so both may share one PostgreSQL database. */
  migrationTable: string;
  /** Largest PostgreSQL pool (default 10). */
  poolSize?: number;
  /**
   * Prepare statements on PostgreSQL (see statementName). For stores whose queries are lookups by
   * key: a prepared statement moves to a generic plan after five runs, which a query whose best
   * plan depends on its parameters (the directory's search and tag filters) must not have.
   */
  prepareStatements?: boolean;
  /** How long a write waits for SQLite's write lock held by another process (default 1500 ms). */
  lockWaitMs?: number;
  /** Told about errors of pooled connections that no query was waiting on (logged, never fatal). */
  onConnectionError?: (error: Error) => void;
  /** How a SQLite file is read (default: the directory's, for large read-mostly stores). */
  sqliteReads?: SqliteReads;
}

/**
 * SQLite's page caches (writer, and the reader of `syncReader`) and whether reads map the file.
 * Mapped pages count in the process's resident memory as long as the OS keeps them, so a store
 * that grows while it runs (the attestor's link requests) makes RSS grow with it; unmapped, the
 * same pages sit in the OS page cache instead, and resident memory stays at the caches' bounds.
 */
export interface SqliteReads {
  writerCacheMiB: number;
  readerCacheMiB: number;
  /** Whether the reader connection maps the file (and the writer too, unless `writerMmap` says otherwise). */
  mmap: boolean;
  /** Whether the writer connection, which serves lists and searches, maps the file (default: `mmap`). */
  writerMmap?: boolean;
}

/**
 * The directory: point reads of a large, read-mostly store walk two B-trees, and at a hundred
 * thousand listings and more copying those pages through read(2) was most of their cost. The
 * mapping stops at 2 GiB (better-sqlite3's SQLite is built with that most), and a store of a
 * million listings is more than twice that: pages past it are read into the caches, which are
 * the process's own memory (RssAnon). The writer's, which serves lists and searches, is 8 MiB: at a
 * million listings it searched as fast as 16 MiB did (a page missed is copied from the OS page
 * cache), with 10 MB less of RssAnon.
 *
 * The writer does not map the file. A page missing from the OS page cache (a store larger than
 * what the host keeps cached, a cache the host dropped) costs a mapped read a fault, and the
 * kernel reads around a fault up to the device's read-ahead (8 MiB on the bench host), where a
 * read(2) at a random offset reads just the page. A search touches pages all over the store: the
 * first pass of the directory's searches over a million listings, none of it cached, read 1.7 GB
 * from disk mapped (p99 290-560 ms, in process) and 94 MB unmapped (p99 29-32 ms); warm, both
 * took the same CPU. Point reads, on the reader, touch a few pages each and keep the mapping.
 */
export const LARGE_READ_MOSTLY: SqliteReads = { writerCacheMiB: 8, readerCacheMiB: 16, mmap: true, writerMmap: false };

/** Longest wait for a new PostgreSQL connection: a down server answers 503 quickly, not after a hang. */
const PG_CONNECT_TIMEOUT_MS = 2_000;
/** Longest a readiness ping waits: a health check answers within it, whatever the store does. */
const PING_TIMEOUT_MS = 1_500;
/** Longest a statement may run before PostgreSQL cancels it (our queries take milliseconds). */
const PG_STATEMENT_TIMEOUT_MS = 10_000;

/** Address space, not memory: pages are shared with the OS page cache (SQLite caps it at 2 GiB by default). */
const SQLITE_MMAP_BYTES = 2 ** 31;

/**
 * SQLite's own lower() folds ASCII only; searches need the same Unicode case folding as the
 * full-text index and as PostgreSQL, so the connection gets JavaScript's.
 */
function registerSqliteFunctions(handle: SqliteHandle): void {
  handle.function("unicode_lower", (value) => (typeof value === "string" ? value.toLowerCase() : value));
}

function openSqlite(path: string, lockWaitMs: number, reads: SqliteReads): LockWaitingSqliteDialect {
  const memory = path === ":memory:";
  if (!memory) mkdirSync(dirname(resolve(path)), { recursive: true });
  const handle = new SqliteHandle(new BetterSqlite3(memory ? ":memory:" : resolve(path)));
  handle.exec("pragma journal_mode = WAL");
  // NORMAL with WAL keeps every committed transaction across a process crash (only an OS crash
  // can lose the last ones), at a fraction of FULL's fsync cost.
  handle.exec("pragma synchronous = NORMAL");
  // No synchronous busy wait on the only thread: the dialect waits for the lock asynchronously.
  handle.exec("pragma busy_timeout = 0");
  handle.exec("pragma foreign_keys = ON");
  if (!memory && (reads.writerMmap ?? reads.mmap)) handle.exec(`pragma mmap_size = ${SQLITE_MMAP_BYTES}`);
  handle.exec(`pragma cache_size = -${reads.writerCacheMiB * 1024}`);
  // Sorts of search candidates stay in memory.
  handle.exec("pragma temp_store = MEMORY");
  registerSqliteFunctions(handle);
  return new LockWaitingSqliteDialect(handle, lockWaitMs);
}

function openPostgres(
  url: string,
  poolSize: number,
  onConnectionError: (error: Error) => void,
  prepare: boolean,
): PostgresDialect {
  const pool = new pg.Pool({
    connectionString: url,
    max: poolSize,
    connectionTimeoutMillis: PG_CONNECT_TIMEOUT_MS,
    statement_timeout: PG_STATEMENT_TIMEOUT_MS,
    // A connection whose server vanished without a word (a network partition) is noticed.
    keepAlive: true,
    // Millisecond timestamps are BIGINT columns; they fit a double exactly.
    types: {
      getTypeParser: (oid: number, format?: "text" | "binary") =>
        oid === 20 ? (value: string) => Number(value) : pg.types.getTypeParser(oid, format),
    },
  });
  // A connection the server drops (restart, failover, admin termination) emits 'error'. The pool
  // listens on idle connections only; one checked out between two queries has no listener but
  // this one, attached when it is made. Unhandled, the event would end the process. The pool
  // discards the broken connection at release, and the next query opens a new one.
  pool.on("error", onConnectionError);
  pool.on("connect", (client) => client.on("error", onConnectionError));
  return new PostgresDialect({ pool: callbackQueries(pool, prepare) });
}

const MAX_NAMED_STATEMENTS = 500;

/**
 * Leading comment of a statement to prepare even in a store that does not prepare (see
 * `prepareStatements`): for a statement whose plan is the same whatever its parameters, so that
 * planning it at every run (a millisecond for a large one) is wasted.
 */
export const PREPARE_ALWAYS = "/* prepared */";
const statementNames = new Map<string, string>();
// `select *`, `b.*`, `returning *`: a result whose columns are not spelled out.
const STAR_RESULT = /(?:^|[\s,.(])\*(?=[\s,)]|$)/;

/**
 * The name a statement is prepared under on each connection, so that PostgreSQL parses and plans
 * it once per connection instead of at every run (on the mint, about a third of the database's
 * CPU). Only statements with parameters (the others go through the simple protocol) and with
 * spelled-out result columns: a prepared `select *` fails with "cached plan must not change result
 * type" once a newer replica's migration adds a column. Bounded: the query shapes the code builds
 * are few, and a statement past the bound runs unnamed. Behind PgBouncer in transaction mode,
 * named statements need its `max_prepared_statements` (see docs/operations.md).
 */
function statementName(text: string, parameters: readonly unknown[] | undefined): string | undefined {
  if (parameters === undefined || parameters.length === 0) return undefined;
  let name = statementNames.get(text);
  if (name === undefined && statementNames.size < MAX_NAMED_STATEMENTS && !STAR_RESULT.test(text)) {
    name = `proto_${statementNames.size}`;
    statementNames.set(text, name);
  }
  return name;
}

/**
 * The pool as Kysely uses it, with each statement run through pg's callback form. pg's promise
 * form (a query made without a callback, given one afterwards) leaves its rows to be promoted to
 * V8's old generation: over 1,000 pages of 101 listings, 80 MB of the 167 MB allocated were
 * promoted, against 5 MB with the callback form. The old generation then grew by about 100 kB a
 * listing page until a full collection, and the server's resident memory swung by 50 MB and more.
 */
function callbackQueries(pool: pg.Pool, prepare: boolean): PostgresPool {
  // One wrapper per pg client: Kysely keeps its connection state per client object.
  const wrappers = new WeakMap<pg.PoolClient, PostgresPoolClient>();
  const wrap = (client: pg.PoolClient): PostgresPoolClient => ({
    query: ((sqlOrCursor: string | PostgresCursor<unknown>, parameters?: readonly unknown[]) => {
      if (typeof sqlOrCursor !== "string") return client.query(sqlOrCursor as never);
      const query = {
        text: sqlOrCursor,
        values: parameters as unknown[],
        name: prepare || sqlOrCursor.startsWith(PREPARE_ALWAYS) ? statementName(sqlOrCursor, parameters) : undefined,
      };
      return new Promise<PostgresQueryResult<unknown>>((resolve, reject) => {
        client.query(query, (error: Error | null, result: unknown) =>
          error ? reject(error) : resolve(result as PostgresQueryResult<unknown>),
        );
      });
    }) as PostgresPoolClient["query"],
    release: () => client.release(),
  });
  return {
    async connect() {
      const client = await pool.connect();
      let wrapper = wrappers.get(client);
      if (wrapper === undefined) {
        wrapper = wrap(client);
        wrappers.set(client, wrapper);
      }
      return wrapper;
    },
    end: () => pool.end(),
  };
}

export function engineOf(url: string): Engine {
  return url.startsWith("sqlite:") ? "sqlite" : "postgres";
}

/** A read-only statement run at once, returning its rows. */
export type SyncReader = (sql: string, parameters: readonly unknown[]) => unknown[];

const syncReaders = new WeakMap<object, SyncReader>();
const changeCounters = new WeakMap<object, () => number>();

/**
 * For a SQLite database in a file, a synchronous reader on a read-only connection of its own,
 * registered for the `Kysely` instance `db` (not for its transactions). That connection sees
 * committed data only, as a new read on the main connection would once its turn came, but it
 * neither queues behind transactions in progress nor pays the query builder and driver's promise
 * chain: hot single-row reads use it. Undefined for PostgreSQL, in-memory SQLite and transactions.
 */
export function syncReader(db: object): SyncReader | undefined {
  return syncReaders.get(db);
}

/**
 * For a SQLite database in a file, a number that changes whenever any connection (this process's
 * writer, another process) has committed since the last call: SQLite's `data_version`, read on
 * the reader connection, which never writes. What reads it may cache anything read from the
 * store until it changes. Undefined where there is no such reader (PostgreSQL, in memory).
 */
export function changeCounter(db: object): (() => number) | undefined {
  return changeCounters.get(db);
}

function openSqliteReader(
  path: string,
  reads: SqliteReads,
): { read: SyncReader; dataVersion(): number; close(): void } {
  const handle = new SqliteHandle(new BetterSqlite3(resolve(path), { readonly: true, fileMustExist: true }));
  // WAL readers meet a lock only in recovery; never wait long for it on the only thread.
  handle.exec("pragma busy_timeout = 50");
  if (reads.mmap) handle.exec(`pragma mmap_size = ${SQLITE_MMAP_BYTES}`);
  handle.exec(`pragma cache_size = -${reads.readerCacheMiB * 1024}`);
  registerSqliteFunctions(handle);
  const dataVersion = handle.prepare("pragma data_version");
  return {
    dataVersion: () => (dataVersion.get() as { data_version: number }).data_version,
    read: (source, parameters) => handle.prepare(source).all(parameters),
    close: () => handle.close(),
  };
}

export async function openDatabase<DB>(url: string, options: OpenDatabaseOptions): Promise<Database<DB>> {
  const engine = engineOf(url);
  const reads = options.sqliteReads ?? LARGE_READ_MOSTLY;
  const dialect =
    engine === "sqlite"
      ? openSqlite(url.slice("sqlite:".length), options.lockWaitMs ?? 1_500, reads)
      : openPostgres(
          url,
          options.poolSize ?? 10,
          options.onConnectionError ?? (() => undefined),
          options.prepareStatements === true,
        );
  const db = new Kysely<DB>({ dialect });
  const migrations = options.migrations(engine);
  const migrator = new Migrator({
    db,
    migrationTableName: options.migrationTable,
    migrationLockTableName: `${options.migrationTable}_lock`,
    provider: { getMigrations: async () => migrations },
  });
  const { error } = await migrator.migrateToLatest();
  if (error !== undefined) {
    await db.destroy();
    throw error instanceof Error ? error : new Error(String(error));
  }
  const path = url.slice("sqlite:".length);
  const reader = engine === "sqlite" && path !== ":memory:" ? openSqliteReader(path, reads) : undefined;
  if (reader !== undefined) {
    syncReaders.set(db, reader.read);
    changeCounters.set(db, reader.dataVersion);
  }
  return {
    db,
    engine,
    async ping() {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), PING_TIMEOUT_MS);
      });
      const answered = sql`select 1`.execute(db).then(
        () => true,
        () => false,
      );
      try {
        return await Promise.race([answered, timeout]);
      } finally {
        clearTimeout(timer);
      }
    },
    exclusive<T>(name: string, work: (trx: Kysely<DB>) => Promise<T>): Promise<T> {
      if (engine === "postgres") {
        return db.transaction().execute(async (trx) => {
          await sql`select pg_advisory_xact_lock(hashtextextended(${name}, 0))`.execute(trx);
          return work(trx);
        });
      }
      // Kysely's SQLite transactions begin DEFERRED, which takes the write lock only at the first
      // write: another process could read the same state in between. IMMEDIATE takes it at once.
      return db.connection().execute(async (connection) => {
        await sql`begin immediate`.execute(connection);
        try {
          const result = await work(connection);
          await sql`commit`.execute(connection);
          return result;
        } catch (error) {
          await sql`rollback`.execute(connection);
          throw error;
        }
      });
    },
    async close() {
      syncReaders.delete(db);
      changeCounters.delete(db);
      reader?.close();
      await db.destroy();
    },
  };
}

/** True for a unique-constraint violation on either engine. */
export function isUniqueViolation(error: unknown): boolean {
  if (typeof error !== "object" || error === null) return false;
  const code = (error as { code?: unknown }).code;
  return code === "23505" || code === "SQLITE_CONSTRAINT_UNIQUE" || code === "SQLITE_CONSTRAINT_PRIMARYKEY";
}
