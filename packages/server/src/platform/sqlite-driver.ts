import { setTimeout as sleep } from "node:timers/promises";
import type { SqliteHandle } from "@proto/protocol";
import {
  CompiledQuery,
  type DatabaseConnection,
  type DatabaseIntrospector,
  type Dialect,
  type DialectAdapter,
  type Driver,
  type Kysely,
  type QueryCompiler,
  type QueryResult,
  SqliteAdapter,
  SqliteIntrospector,
  SqliteQueryCompiler,
  type TransactionSettings,
} from "kysely";
import { DependencyUnavailable } from "./dependency.js";

/**
 * SQLite's busy timeout waits for a lock synchronously, on the only thread: while another process
 * holds the write lock, every request of this one (reads, health checks) would stall with it. So
 * the connection runs with no busy timeout, and this driver waits for the lock itself, between
 * attempts and asynchronously, with the connection released so reads go on meanwhile. A write
 * that cannot have the lock within `lockWaitMs` fails as DependencyUnavailable (a 503).
 *
 * It waits only where nothing is half done: a statement outside a transaction (it had no effect)
 * and a BEGIN. Transactions that write begin IMMEDIATE, taking the write lock at once, so no
 * statement inside one meets a lock; read-only transactions (`setAccessMode("read only")`) begin
 * deferred and never need it.
 */
export class LockWaitingSqliteDialect implements Dialect {
  readonly #raw: SqliteHandle;
  readonly #lockWaitMs: number;

  constructor(raw: SqliteHandle, lockWaitMs: number) {
    this.#raw = raw;
    this.#lockWaitMs = lockWaitMs;
  }

  createDriver(): Driver {
    return new LockWaitingDriver(this.#raw, this.#lockWaitMs);
  }

  createQueryCompiler(): QueryCompiler {
    return new SqliteQueryCompiler();
  }

  createAdapter(): DialectAdapter {
    return new SqliteAdapter();
  }

  createIntrospector(db: Kysely<unknown>): DatabaseIntrospector {
    return new SqliteIntrospector(db);
  }
}

const isBusy = (error: unknown): boolean =>
  typeof error === "object" &&
  error !== null &&
  /^SQLITE_(BUSY|LOCKED)/.test(String((error as { code?: unknown }).code));

const ROLLBACK = /^\s*rollback\s*;?\s*$/i;

class Mutex {
  #tail: Promise<void> = Promise.resolve();

  /** Resolves with the function that releases the lock, once every earlier holder has released it. */
  lock(): Promise<() => void> {
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const ready = this.#tail.then(() => release);
    this.#tail = this.#tail.then(() => held);
    return ready;
  }
}

class LockWaitingDriver implements Driver {
  readonly #mutex = new Mutex();
  readonly #connection: LockWaitingConnection;

  constructor(raw: SqliteHandle, lockWaitMs: number) {
    this.#connection = new LockWaitingConnection(raw, this.#mutex, lockWaitMs);
  }

  async init(): Promise<void> {}

  async acquireConnection(): Promise<DatabaseConnection> {
    await this.#connection.acquire();
    return this.#connection;
  }

  async beginTransaction(connection: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    const begin = settings.accessMode === "read only" ? "begin" : "begin immediate";
    await connection.executeQuery(CompiledQuery.raw(begin));
  }

  async commitTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw("commit"));
  }

  async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw("rollback"));
  }

  async releaseConnection(): Promise<void> {
    this.#connection.release();
  }

  async destroy(): Promise<void> {
    this.#connection.close();
  }
}

class LockWaitingConnection implements DatabaseConnection {
  readonly #raw: SqliteHandle;
  readonly #mutex: Mutex;
  readonly #lockWaitMs: number;
  #release: (() => void) | undefined;

  constructor(raw: SqliteHandle, mutex: Mutex, lockWaitMs: number) {
    this.#raw = raw;
    this.#mutex = mutex;
    this.#lockWaitMs = lockWaitMs;
  }

  async acquire(): Promise<void> {
    this.#release = await this.#mutex.lock();
  }

  release(): void {
    const release = this.#release;
    this.#release = undefined;
    release?.();
  }

  close(): void {
    this.#raw.close();
  }

  async executeQuery<R>(query: CompiledQuery): Promise<QueryResult<R>> {
    // SQLite rolls a transaction back by itself on some errors (SQLITE_FULL, SQLITE_IOERR,
    // SQLITE_NOMEM); the ROLLBACK sent after such an error would then fail with "no transaction is
    // active" and replace the error that says what happened (a full disk answered 500, not 503).
    if (!this.#raw.inTransaction && ROLLBACK.test(query.sql)) return { rows: [] };
    const deadline = performance.now() + this.#lockWaitMs;
    for (let pause = 5; ; pause = Math.min(pause * 2, 100)) {
      try {
        return this.#run<R>(query);
      } catch (error) {
        if (!isBusy(error) || this.#raw.inTransaction) throw error;
        if (performance.now() + pause > deadline) {
          throw new DependencyUnavailable("database", "the database is locked; retry shortly", 1, { cause: error });
        }
        // Nothing is held between attempts: let the queries queued behind this one run meanwhile.
        this.release();
        await sleep(pause);
        await this.acquire();
      }
    }
  }

  async *streamQuery<R>(query: CompiledQuery): AsyncIterableIterator<QueryResult<R>> {
    for (const row of this.#raw.prepare(query.sql).iterate(query.parameters)) yield { rows: [row as R] };
  }

  #run<R>(query: CompiledQuery): QueryResult<R> {
    const statement = this.#raw.prepare(query.sql);
    const parameters = query.parameters;
    if (statement.reader) return { rows: statement.all(parameters) as R[] };
    const { changes, lastInsertRowid } = statement.run(parameters);
    return { numAffectedRows: BigInt(changes), insertId: BigInt(lastInsertRowid), rows: [] };
  }
}
