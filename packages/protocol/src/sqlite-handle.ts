/**
 * A better-sqlite3 connection whose native objects are never left to the garbage collector.
 *
 * better-sqlite3 12 builds its databases, statements and iterators on `node::ObjectWrap`. On
 * Node 24 that class's destructor looks up the current Node environment and aborts the whole
 * process (`Assertion failed: (env) != nullptr` in `RemoveEnvironmentCleanupHook`) when the
 * collector runs it from a task outside any JavaScript context, as V8's scheduled scavenges and
 * memory-reducer collections are. Node 20 and 26 survive it; a server on Node 24 would die at a
 * random moment after enough queries. So every native object made here stays reachable until the
 * process ends, and the environment's own teardown frees them at exit, where a context exists:
 * - statements are prepared once per SQL text and kept with their connection (the texts are the
 *   query shapes the code builds, a bounded set; preparing once is also the fast path);
 * - a closed connection is kept too (SQLite's memory is freed at close; the wrapper is small);
 * - no statement iterator is ever made: `iterate` walks the rows of `all`;
 * - nothing here calls better-sqlite3's `pragma()` or `transaction()`, which prepare statements
 *   out of reach: pragmas go through `exec` or `prepare`.
 *
 * Structural types only: this package does not depend on better-sqlite3; the packages that open
 * SQLite files do, and wrap each connection here right after opening it.
 */

/** What is used of a better-sqlite3 `Database`. */
export interface RawSqliteDatabase {
  readonly inTransaction: boolean;
  prepare(source: string): RawSqliteStatement;
  exec(source: string): unknown;
  function(name: string, options: { deterministic?: boolean }, implementation: (value: unknown) => unknown): unknown;
  close(): unknown;
}

/** What is used of a better-sqlite3 `Statement`. */
export interface RawSqliteStatement {
  readonly reader: boolean;
  all(...parameters: unknown[]): unknown[];
  get(...parameters: unknown[]): unknown;
  run(...parameters: unknown[]): SqliteRunResult;
}

export interface SqliteRunResult {
  changes: number | bigint;
  lastInsertRowid: number | bigint;
}

/** A prepared statement, shared by everything that sends its SQL text on one connection. */
export interface SqliteStatement {
  /** True when the statement returns rows. */
  readonly reader: boolean;
  all(parameters?: readonly unknown[]): unknown[];
  get(parameters?: readonly unknown[]): unknown;
  run(parameters?: readonly unknown[]): SqliteRunResult;
  /** The rows of `all`, one at a time (Kysely's `SqliteStatement` shape). */
  iterate(parameters?: readonly unknown[]): IterableIterator<unknown>;
}

/** Every connection ever wrapped, with its statements: see the module comment for why. */
const kept = new Set<SqliteHandle>();

/** A SQLite connection in the shape Kysely's `SqliteDatabase` asks for. */
export class SqliteHandle {
  readonly #raw: RawSqliteDatabase;
  readonly #statements = new Map<string, SqliteStatement>();

  constructor(raw: RawSqliteDatabase) {
    this.#raw = raw;
    kept.add(this);
  }

  get inTransaction(): boolean {
    return this.#raw.inTransaction;
  }

  prepare(source: string): SqliteStatement {
    let statement = this.#statements.get(source);
    if (statement === undefined) {
      statement = shared(this.#raw.prepare(source));
      this.#statements.set(source, statement);
    }
    return statement;
  }

  /** Runs SQL that returns nothing wanted (pragmas that set, DDL), without a prepared statement. */
  exec(source: string): void {
    this.#raw.exec(source);
  }

  /** Registers a deterministic one-argument SQL function. */
  function(name: string, implementation: (value: unknown) => unknown): void {
    this.#raw.function(name, { deterministic: true }, implementation);
  }

  close(): void {
    this.#raw.close();
  }
}

function shared(raw: RawSqliteStatement): SqliteStatement {
  const reader = raw.reader;
  return {
    reader,
    all: (parameters = []) => raw.all(...parameters),
    get: (parameters = []) => raw.get(...parameters),
    run: (parameters = []) => raw.run(...parameters),
    iterate: (parameters = []) => raw.all(...parameters)[Symbol.iterator](),
  };
}

/** How many connections this process has wrapped (open and closed): they are never released. */
export function sqliteHandlesKept(): number {
  return kept.size;
}
