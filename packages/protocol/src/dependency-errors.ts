/**
 * Failures of what a service depends on (its database, Redis), told apart from bugs: a client
 * gets 503 with `Retry-After` for these, 500 only for the rest. The servers and the service kit
 * both classify with `unavailableDependency`, so an outage means the same on either.
 *
 * Structural only: this package depends on none of the drivers (pg, better-sqlite3, ioredis);
 * their errors are recognised by code, name and message.
 */

export type Dependency = "database" | "redis";

/** Seconds a client is asked to wait before retrying during an outage. */
export const OUTAGE_RETRY_AFTER_SECONDS = 2;

/** A dependency that did not answer, or answered that it cannot serve now. */
export class DependencyUnavailable extends Error {
  override readonly name = "DependencyUnavailable";
  /**
   * True when the dependency answered and the refusal is the service's own decision about what it
   * said (the replay store waiting out a loss of nonces): a 503 all the same, but no outage of the
   * dependency to track.
   */
  readonly answered: boolean;
  constructor(
    readonly dependency: Dependency,
    message: string,
    readonly retryAfterSeconds = OUTAGE_RETRY_AFTER_SECONDS,
    options?: { cause?: unknown; answered?: boolean },
  ) {
    super(message, options);
    this.answered = options?.answered ?? false;
  }
}

// PostgreSQL SQLSTATE classes and codes that mean "the server cannot serve now", not "your
// statement is wrong": connection exceptions (08), insufficient resources (53: disk full, out of
// memory, too many connections), operator intervention (57: shutdown, crash recovery, cancelled by
// a statement timeout), lock_not_available, and a read-only server during failover.
const PG_OUTAGE = /^(08|53|57)/;
const PG_OUTAGE_CODES = new Set(["55P03", "25006"]);
// SQLite: the write lock held elsewhere past our wait, the disk full, I/O failures.
const SQLITE_OUTAGE = /^SQLITE_(BUSY|LOCKED|FULL|IOERR|CANTOPEN|READONLY|PROTOCOL)/;
// Node socket errors reaching a database or Redis over the network.
const SOCKET_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EPIPE",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
]);
// Errors `pg` and its pool raise without a code when a connection is lost or cannot be had.
const PG_MESSAGES =
  /^(Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|Connection terminated unexpectedly|Query read timeout|Client was closed and is not queryable)/;
// ioredis: no connection and no offline queue, retries exhausted, a command timed out.
const REDIS_MESSAGES = /^(Stream isn't writeable|Connection is closed|Command timed out|Reached the max retries)/;

/**
 * Which dependency `error` says is unavailable, or undefined for any other error. Errors wrapped
 * as `cause` are looked through (Kysely and our own stores wrap some). A socket error with nothing
 * else to go by counts as the database's: call this only on errors of a database or Redis call.
 */
export function unavailableDependency(error: unknown): Dependency | undefined {
  for (let current = error, depth = 0; current !== undefined && current !== null && depth < 4; depth++) {
    if (current instanceof DependencyUnavailable) return current.dependency;
    if (typeof current !== "object") return undefined;
    const { code, message, name } = current as { code?: unknown; message?: unknown; name?: unknown };
    if (typeof code === "string") {
      if (SQLITE_OUTAGE.test(code)) return "database";
      if (/^[0-9A-Z]{5}$/.test(code) && (PG_OUTAGE.test(code) || PG_OUTAGE_CODES.has(code))) return "database";
    }
    if (name === "MaxRetriesPerRequestError") return "redis";
    if (typeof message === "string") {
      if (REDIS_MESSAGES.test(message)) return "redis";
      if (PG_MESSAGES.test(message)) return "database";
    }
    if (typeof code === "string" && SOCKET_CODES.has(code)) return "database";
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}
