import { mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { type Recipient, SqliteHandle } from "@proto/protocol";
import BetterSqlite3 from "better-sqlite3";
import { Kysely, Migrator, PostgresDialect, type SelectQueryBuilder, SqliteDialect, sql } from "kysely";
import pg from "pg";
import { randomId } from "../util.js";
import { type Engine, KIT_MIGRATION_TABLE, kitMigrations } from "./migrations.js";
import type { KitDatabase } from "./schema.js";
import type {
  AccountRecord,
  AttestationUpdate,
  InvitationRecord,
  InvitationStatus,
  KitStore,
  NewAccount,
  NewSpend,
  PersonRecord,
  RotateOutcome,
  SessionRecord,
  SignInRequestRecord,
  SpendOutcome,
  SpendRecord,
} from "./types.js";

export interface OpenKitStoreOptions {
  /** Largest PostgreSQL pool (default 10). */
  poolSize?: number;
}

/** True for a unique-constraint violation on either engine. */
function isUniqueViolation(error: unknown): boolean {
  if (typeof error !== "object" || error === null) return false;
  const code = (error as { code?: unknown }).code;
  return code === "23505" || code === "SQLITE_CONSTRAINT_UNIQUE" || code === "SQLITE_CONSTRAINT_PRIMARYKEY";
}

const num = (value: unknown): number => Number(value);
const optNum = (value: unknown): number | undefined =>
  value === null || value === undefined ? undefined : Number(value);
const optStr = (value: string | null | undefined): string | undefined => value ?? undefined;

/** Thrown inside a transaction to roll it back without an error reaching the caller. */
class Rollback extends Error {}

type SpendRow = KitDatabase["kit_spends"];

function toSpend(row: SpendRow): SpendRecord {
  return {
    id: row.id,
    grantId: row.grant_id,
    reference: row.reference,
    permission: row.permission,
    currency: row.currency,
    amount: num(row.amount),
    periodKey: optStr(row.period_key),
    periodTotal: optNum(row.period_total),
    periodLimit: optNum(row.period_limit),
    accountId: row.account_id,
    agentDid: row.agent_did,
    attestor: optStr(row.attestor),
    spentAt: num(row.spent_at),
  };
}

type AccountRow = Record<string, unknown>;

function toInvitation(row: Record<string, unknown>, prefix = ""): InvitationRecord {
  return {
    id: row[`${prefix}id`] as string,
    accountId: row[`${prefix}account_id`] as string,
    tokenHash: row[`${prefix}token_hash`] as string,
    recipientKey: row[`${prefix}recipient_key`] as string,
    recipient: JSON.parse(row[`${prefix}recipient`] as string) as Recipient,
    createdAt: num(row[`${prefix}created_at`]),
    expiresAt: num(row[`${prefix}expires_at`]),
    status: row[`${prefix}status`] as InvitationStatus,
    resolvedAt: optNum(row[`${prefix}resolved_at`]),
    redirectUrl: (row[`${prefix}redirect_url`] as string | null | undefined) ?? undefined,
    signedInAt: optNum(row[`${prefix}signed_in_at`]),
  };
}

function toAccount(row: AccountRow): AccountRecord {
  return {
    id: row.id as string,
    did: row.did as string,
    createdAt: num(row.created_at),
    claimedAt: optNum(row.claimed_at),
    ownerKey: optStr(row.owner_key as string | null),
    ownerRecipient: row.owner_recipient ? (JSON.parse(row.owner_recipient as string) as Recipient) : undefined,
    ownerPersonId: optStr(row.owner_person_id as string | null),
    personId: optStr(row.person_id as string | null),
    attestedIssuer: optStr(row.attested_issuer as string | null),
    attestedVerification: optStr(row.attested_verification as string | null),
    attestedAt: optNum(row.attested_at),
    attestedUntil: optNum(row.attested_until),
    keyRevokedAt: optNum(row.key_revoked_at),
    invitation: row.inv_id ? toInvitation(row, "inv_") : undefined,
  };
}

function toPerson(row: { id: string; issuer: string; subject: string; created_at: number }): PersonRecord {
  return { id: row.id, issuer: row.issuer, subject: row.subject, createdAt: num(row.created_at) };
}

/** The kit's store over Kysely: SQLite (better-sqlite3) or PostgreSQL (pg). */
export class KyselyKitStore implements KitStore {
  readonly db: Kysely<KitDatabase>;
  readonly engine: Engine;
  readonly #ownsDb: boolean;

  constructor(db: Kysely<KitDatabase>, engine: Engine, options: { ownsDb?: boolean } = {}) {
    this.db = db;
    this.engine = engine;
    this.#ownsDb = options.ownsDb ?? false;
  }

  /** Applies the kit's migrations (history in `kit_migrations`); safe to run from every replica. */
  async migrate(): Promise<void> {
    const migrations = kitMigrations(this.engine);
    const migrator = new Migrator({
      db: this.db,
      migrationTableName: KIT_MIGRATION_TABLE,
      migrationLockTableName: `${KIT_MIGRATION_TABLE}_lock`,
      provider: { getMigrations: async () => migrations },
    });
    const { error } = await migrator.migrateToLatest();
    if (error !== undefined) throw error instanceof Error ? error : new Error(String(error));
  }

  #accounts(): SelectQueryBuilder<KitDatabase & { a: KitDatabase["kit_accounts"] }, "a", AccountRow> {
    return this.db
      .selectFrom("kit_accounts as a")
      .leftJoin("kit_invitations as i", (join) =>
        join.onRef("i.account_id", "=", "a.id").on("i.status", "=", "pending"),
      )
      .selectAll("a")
      .select([
        "i.id as inv_id",
        "i.account_id as inv_account_id",
        "i.token_hash as inv_token_hash",
        "i.recipient_key as inv_recipient_key",
        "i.recipient as inv_recipient",
        "i.created_at as inv_created_at",
        "i.expires_at as inv_expires_at",
        "i.status as inv_status",
        "i.resolved_at as inv_resolved_at",
        "i.redirect_url as inv_redirect_url",
        "i.signed_in_at as inv_signed_in_at",
      ]) as unknown as SelectQueryBuilder<KitDatabase & { a: KitDatabase["kit_accounts"] }, "a", AccountRow>;
  }

  async isRevoked(did: string): Promise<boolean> {
    const row = await this.db.selectFrom("kit_revoked_keys").select("did").where("did", "=", did).executeTakeFirst();
    return row !== undefined;
  }

  async upsertPerson(issuer: string, subject: string, now: number): Promise<PersonRecord> {
    await this.db
      .insertInto("kit_people")
      .values({ id: randomId("per"), issuer, subject, created_at: now })
      .onConflict((oc) => oc.columns(["issuer", "subject"]).doNothing())
      .execute();
    const row = await this.db
      .selectFrom("kit_people")
      .selectAll()
      .where("issuer", "=", issuer)
      .where("subject", "=", subject)
      .executeTakeFirstOrThrow();
    return toPerson(row);
  }

  async findPerson(id: string): Promise<PersonRecord | undefined> {
    const row = await this.db.selectFrom("kit_people").selectAll().where("id", "=", id).executeTakeFirst();
    return row === undefined ? undefined : toPerson(row);
  }

  async findAccountByDid(did: string): Promise<AccountRecord | undefined> {
    const row = await this.#accounts().where("a.did", "=", did).executeTakeFirst();
    return row === undefined ? undefined : toAccount(row);
  }

  async findAccountById(id: string): Promise<AccountRecord | undefined> {
    const row = await this.#accounts().where("a.id", "=", id).executeTakeFirst();
    return row === undefined ? undefined : toAccount(row);
  }

  async createAccount(input: NewAccount): Promise<{ account: AccountRecord; created: boolean }> {
    const attestation = input.attestation;
    try {
      await this.db
        .insertInto("kit_accounts")
        .values({
          id: randomId("acct"),
          did: input.did,
          created_at: input.now,
          claimed_at: null,
          owner_key: null,
          owner_recipient: null,
          owner_person_id: null,
          person_id: input.personId ?? null,
          attested_issuer: attestation?.issuer ?? null,
          attested_verification: attestation?.verification ?? null,
          attested_at: attestation?.at ?? null,
          attested_until: attestation?.until ?? null,
          key_revoked_at: null,
        })
        .execute();
    } catch (error) {
      if (!isUniqueViolation(error)) throw error;
      const existing = await this.findAccountByDid(input.did);
      if (existing === undefined) throw error;
      return { account: existing, created: false };
    }
    const account = await this.findAccountByDid(input.did);
    if (account === undefined) throw new Error("account vanished after insert");
    return { account, created: true };
  }

  async recordAttestation(accountId: string, personId: string | undefined, update: AttestationUpdate): Promise<void> {
    await this.db
      .updateTable("kit_accounts")
      .set({
        attested_issuer: update.issuer,
        attested_verification: update.verification ?? null,
        attested_at: update.at,
        attested_until: update.until,
        ...(personId === undefined ? {} : { person_id: sql<string>`coalesce(person_id, ${personId})` }),
      })
      .where("id", "=", accountId)
      .execute();
  }

  async listAccountsForPerson(personId: string | undefined, ownerKeys: string[]): Promise<AccountRecord[]> {
    if (personId === undefined && ownerKeys.length === 0) return [];
    const rows = await this.#accounts()
      .where((eb) => {
        const terms = [];
        if (personId !== undefined) {
          terms.push(eb("a.person_id", "=", personId), eb("a.owner_person_id", "=", personId));
        }
        if (ownerKeys.length > 0) terms.push(eb("a.owner_key", "in", ownerKeys));
        return eb.or(terms);
      })
      .orderBy("a.created_at")
      .orderBy("a.id")
      .execute();
    return rows.map(toAccount);
  }

  async rotateKey(input: {
    accountId: string;
    fromDid: string;
    toDid: string;
    now: number;
    reason: string;
    unclaimedOnly: boolean;
  }): Promise<RotateOutcome> {
    try {
      return await this.db.transaction().execute(async (trx) => {
        const revoked = await trx
          .selectFrom("kit_revoked_keys")
          .select("did")
          .where("did", "=", input.toDid)
          .executeTakeFirst();
        if (revoked !== undefined) return "did_in_use";
        let update = trx
          .updateTable("kit_accounts")
          .set({ did: input.toDid, key_revoked_at: null })
          .where("id", "=", input.accountId)
          .where("did", "=", input.fromDid);
        if (input.unclaimedOnly) update = update.where("claimed_at", "is", null);
        const result = await update.executeTakeFirst();
        if (Number(result.numUpdatedRows) !== 1) return "stale";
        await trx
          .insertInto("kit_revoked_keys")
          .values({ did: input.fromDid, account_id: input.accountId, revoked_at: input.now, reason: input.reason })
          .onConflict((oc) => oc.column("did").doNothing())
          .execute();
        return "rotated";
      });
    } catch (error) {
      if (isUniqueViolation(error)) return "did_in_use";
      throw error;
    }
  }

  async revokeKey(input: { accountId: string; did: string; now: number; reason: string }): Promise<boolean> {
    return this.db.transaction().execute(async (trx) => {
      const inserted = await trx
        .insertInto("kit_revoked_keys")
        .values({ did: input.did, account_id: input.accountId, revoked_at: input.now, reason: input.reason })
        .onConflict((oc) => oc.column("did").doNothing())
        .executeTakeFirst();
      await trx
        .updateTable("kit_accounts")
        .set({ key_revoked_at: input.now })
        .where("id", "=", input.accountId)
        .where("did", "=", input.did)
        .where("key_revoked_at", "is", null)
        .execute();
      return Number(inserted.numInsertedOrUpdatedRows ?? 0) > 0;
    });
  }

  async replaceInvitation(input: {
    accountId: string;
    tokenHash: string;
    recipient: Recipient;
    recipientKey: string;
    redirectUrl?: string | undefined;
    now: number;
    expiresAt: number;
  }): Promise<InvitationRecord> {
    const row = {
      id: randomId("inv"),
      account_id: input.accountId,
      token_hash: input.tokenHash,
      recipient_key: input.recipientKey,
      recipient: JSON.stringify(input.recipient),
      created_at: input.now,
      expires_at: input.expiresAt,
      status: "pending",
      resolved_at: null,
      redirect_url: input.redirectUrl ?? null,
      signed_in_at: null,
    };
    // Concurrent replacements for one account queue on the account row (PostgreSQL; SQLite runs
    // one write transaction at a time), so each replaces the previous one. Should one still meet
    // the one-pending index, it tries again rather than fail.
    for (let attempt = 0; ; attempt++) {
      try {
        await this.db.transaction().execute(async (trx) => {
          if (this.engine === "postgres") {
            await trx.selectFrom("kit_accounts").select("id").where("id", "=", input.accountId).forUpdate().execute();
          }
          await trx
            .updateTable("kit_invitations")
            .set({ status: "replaced", resolved_at: input.now })
            .where("account_id", "=", input.accountId)
            .where("status", "=", "pending")
            .execute();
          await trx.insertInto("kit_invitations").values(row).execute();
        });
        return toInvitation(row);
      } catch (error) {
        if (!isUniqueViolation(error) || attempt >= 4) throw error;
      }
    }
  }

  async findInvitationByTokenHash(tokenHash: string): Promise<InvitationRecord | undefined> {
    const row = await this.db
      .selectFrom("kit_invitations")
      .selectAll()
      .where("token_hash", "=", tokenHash)
      .executeTakeFirst();
    return row === undefined ? undefined : toInvitation(row as unknown as Record<string, unknown>);
  }

  async markEmailSignIn(invitationId: string, now: number): Promise<boolean> {
    const result = await this.db
      .updateTable("kit_invitations")
      .set({ signed_in_at: now })
      .where("id", "=", invitationId)
      .where("status", "=", "pending")
      .where("expires_at", ">", now)
      .where("signed_in_at", "is", null)
      .executeTakeFirst();
    return Number(result.numUpdatedRows) === 1;
  }

  async claim(input: {
    invitationId: string;
    accountId: string;
    ownerKey: string;
    ownerRecipient: Recipient;
    ownerPersonId: string | undefined;
    now: number;
  }): Promise<boolean> {
    try {
      await this.db.transaction().execute(async (trx) => {
        const invitation = await trx
          .updateTable("kit_invitations")
          .set({ status: "claimed", resolved_at: input.now })
          .where("id", "=", input.invitationId)
          .where("account_id", "=", input.accountId)
          .where("status", "=", "pending")
          .where("expires_at", ">", input.now)
          .executeTakeFirst();
        if (Number(invitation.numUpdatedRows) !== 1) throw new Rollback();
        const account = await trx
          .updateTable("kit_accounts")
          .set({
            claimed_at: input.now,
            owner_key: input.ownerKey,
            owner_recipient: JSON.stringify(input.ownerRecipient),
            owner_person_id: input.ownerPersonId ?? null,
          })
          .where("id", "=", input.accountId)
          .where("claimed_at", "is", null)
          .executeTakeFirst();
        if (Number(account.numUpdatedRows) !== 1) throw new Rollback();
      });
      return true;
    } catch (error) {
      if (error instanceof Rollback) return false;
      throw error;
    }
  }

  async createSession(record: SessionRecord): Promise<void> {
    await this.db
      .insertInto("kit_sessions")
      .values({
        id_hash: record.idHash,
        created_at: record.createdAt,
        expires_at: record.expiresAt,
        authenticated_at: record.authenticatedAt ?? null,
        identities: JSON.stringify(record.identities),
        person_id: record.personId ?? null,
        csrf: record.csrf,
      })
      .execute();
  }

  async findSession(idHash: string, now: number): Promise<SessionRecord | undefined> {
    const row = await this.db
      .selectFrom("kit_sessions")
      .selectAll()
      .where("id_hash", "=", idHash)
      .where("expires_at", ">", now)
      .executeTakeFirst();
    if (row === undefined) return undefined;
    return {
      idHash: row.id_hash,
      createdAt: num(row.created_at),
      expiresAt: num(row.expires_at),
      authenticatedAt: optNum(row.authenticated_at),
      identities: JSON.parse(row.identities) as Recipient[],
      personId: optStr(row.person_id),
      csrf: row.csrf,
    };
  }

  async deleteSession(idHash: string): Promise<void> {
    await this.db.deleteFrom("kit_sessions").where("id_hash", "=", idHash).execute();
  }

  async createSignInRequest(record: SignInRequestRecord): Promise<void> {
    await this.db
      .insertInto("kit_signin_requests")
      .values({
        state_hash: record.stateHash,
        attestor: record.attestor,
        code_verifier: record.codeVerifier,
        nonce: record.nonce,
        return_to: record.returnTo,
        created_at: record.createdAt,
        expires_at: record.expiresAt,
      })
      .execute();
  }

  async takeSignInRequest(stateHash: string, now: number): Promise<SignInRequestRecord | undefined> {
    const row = await this.db
      .deleteFrom("kit_signin_requests")
      .where("state_hash", "=", stateHash)
      .returningAll()
      .executeTakeFirst();
    if (row === undefined || num(row.expires_at) <= now) return undefined;
    return {
      stateHash: row.state_hash,
      attestor: row.attestor,
      codeVerifier: row.code_verifier,
      nonce: row.nonce,
      returnTo: row.return_to,
      createdAt: num(row.created_at),
      expiresAt: num(row.expires_at),
    };
  }

  async incrementCounter(bucket: string, windowStart: number): Promise<number> {
    const row = await this.db
      .insertInto("kit_rate_counters")
      .values({ bucket, window_start: windowStart, count: 1 })
      .onConflict((oc) =>
        oc.columns(["bucket", "window_start"]).doUpdateSet({ count: sql<number>`kit_rate_counters.count + 1` }),
      )
      .returning("count")
      .executeTakeFirstOrThrow();
    return num(row.count);
  }

  async findSpend(grantId: string, reference: string): Promise<SpendRecord | undefined> {
    const row = await this.db
      .selectFrom("kit_spends")
      .selectAll()
      .where("grant_id", "=", grantId)
      .where("reference", "=", reference)
      .executeTakeFirst();
    return row === undefined ? undefined : toSpend(row);
  }

  async spentInPeriod(grantId: string, permission: string, periodKey: string): Promise<number> {
    const row = await this.db
      .selectFrom("kit_spend_totals")
      .select("total")
      .where("grant_id", "=", grantId)
      .where("permission", "=", permission)
      .where("period_key", "=", periodKey)
      .executeTakeFirst();
    return row === undefined ? 0 : num(row.total);
  }

  async recordSpend(spend: NewSpend): Promise<SpendOutcome> {
    const { periodKey, periodLimit } = spend;
    const limited = periodKey !== undefined && periodLimit !== undefined;
    try {
      return await this.db.transaction().execute(async (trx) => {
        let periodTotal: number | null = null;
        if (limited) {
          if (spend.amount > periodLimit) throw new Rollback();
          // One statement raises the total only while it stays within the limit. On PostgreSQL a
          // concurrent spend waits for this row's lock and then re-checks the condition against
          // the committed total, so replicas sharing the database never spend past the limit.
          const raised = await trx
            .insertInto("kit_spend_totals")
            .values({
              grant_id: spend.grantId,
              permission: spend.permission,
              period_key: periodKey,
              total: spend.amount,
            })
            .onConflict((oc) =>
              oc
                .columns(["grant_id", "permission", "period_key"])
                .doUpdateSet({ total: sql<number>`kit_spend_totals.total + excluded.total` })
                .where(sql<number>`kit_spend_totals.total + excluded.total`, "<=", periodLimit),
            )
            .returning("total")
            .executeTakeFirst();
          if (raised === undefined) throw new Rollback();
          periodTotal = num(raised.total);
        }
        const row: SpendRow = {
          id: randomId("spd"),
          grant_id: spend.grantId,
          reference: spend.reference,
          permission: spend.permission,
          currency: spend.currency,
          amount: spend.amount,
          period_key: periodKey ?? null,
          period_total: periodTotal,
          period_limit: limited ? periodLimit : null,
          account_id: spend.accountId,
          agent_did: spend.agentDid,
          attestor: spend.attestor ?? null,
          spent_at: spend.spentAt,
        };
        // A second spend with the reference fails on the unique index and rolls the total back.
        await trx.insertInto("kit_spends").values(row).execute();
        return { outcome: "recorded", spend: toSpend(row) } as const;
      });
    } catch (error) {
      if (!(error instanceof Rollback) && !isUniqueViolation(error)) throw error;
      // A spend with this reference committed meanwhile is the answer, over the limit or not.
      const existing = await this.findSpend(spend.grantId, spend.reference);
      if (existing !== undefined) return { outcome: "duplicate", spend: existing };
      if (!(error instanceof Rollback) || !limited) throw error;
      return { outcome: "over_limit", total: await this.spentInPeriod(spend.grantId, spend.permission, periodKey) };
    }
  }

  async listSpends(accountIds: string[], limit: number): Promise<SpendRecord[]> {
    const spends: SpendRecord[] = [];
    for (const accountId of new Set(accountIds)) {
      const rows = await this.db
        .selectFrom("kit_spends")
        .selectAll()
        .where("account_id", "=", accountId)
        .orderBy("spent_at", "desc")
        .orderBy("id", "desc")
        .limit(limit)
        .execute();
      spends.push(...rows.map(toSpend));
    }
    return spends;
  }

  async purgeExpired(now: number, counterHorizon: number): Promise<void> {
    await this.db.deleteFrom("kit_sessions").where("expires_at", "<=", now).execute();
    await this.db.deleteFrom("kit_signin_requests").where("expires_at", "<=", now).execute();
    await this.db.deleteFrom("kit_rate_counters").where("window_start", "<", counterHorizon).execute();
  }

  async close(): Promise<void> {
    if (this.#ownsDb) await this.db.destroy();
  }
}

function openSqlite(path: string): SqliteDialect {
  const memory = path === ":memory:";
  if (!memory) mkdirSync(dirname(resolve(path)), { recursive: true });
  // Wrapped so that better-sqlite3's native objects outlive the garbage collector (Node 24).
  const handle = new SqliteHandle(new BetterSqlite3(memory ? ":memory:" : resolve(path)));
  handle.exec("pragma journal_mode = WAL");
  handle.exec("pragma synchronous = NORMAL");
  handle.exec("pragma busy_timeout = 5000");
  handle.exec("pragma foreign_keys = ON");
  return new SqliteDialect({ database: handle });
}

/** How long a new PostgreSQL connection may take before the query that wanted it fails. */
const PG_CONNECT_TIMEOUT_MS = 2_000;

function openPostgres(url: string, poolSize: number): PostgresDialect {
  const pool = new pg.Pool({
    connectionString: url,
    max: poolSize,
    // A database that does not answer fails the request (503) instead of holding it.
    connectionTimeoutMillis: PG_CONNECT_TIMEOUT_MS,
    // A connection whose server vanished without a word (a network partition) is noticed.
    keepAlive: true,
    // Millisecond timestamps are BIGINT columns; they fit a double exactly.
    types: {
      getTypeParser: (oid: number, format?: "text" | "binary") =>
        oid === 20 ? (value: string) => Number(value) : pg.types.getTypeParser(oid, format),
    },
  });
  // A connection the server drops (restart, failover, a cut network) emits 'error'. The pool
  // listens on idle connections only; one checked out for a query has no listener but the one
  // attached when it is made, and unhandled the event would end the process. The query itself
  // fails (503 `kit_store_unavailable`), the pool discards the connection, the next one is new.
  pool.on("error", () => undefined);
  pool.on("connect", (client) => client.on("error", () => undefined));
  return new PostgresDialect({ pool });
}

/**
 * Opens the kit's store and applies its migrations. `url` is `sqlite:PATH`, `sqlite::memory:` or
 * `postgres://...` (also `postgresql://`).
 */
export async function openKitStore(url: string, options: OpenKitStoreOptions = {}): Promise<KyselyKitStore> {
  let engine: Engine;
  let dialect: SqliteDialect | PostgresDialect;
  if (url.startsWith("sqlite:")) {
    engine = "sqlite";
    dialect = openSqlite(url.slice("sqlite:".length));
  } else if (/^postgres(ql)?:\/\//.test(url)) {
    engine = "postgres";
    dialect = openPostgres(url, options.poolSize ?? 10);
  } else {
    throw new Error("database URL must be sqlite:PATH, sqlite::memory: or postgres://...");
  }
  const db = new Kysely<KitDatabase>({ dialect });
  const store = new KyselyKitStore(db, engine, { ownsDb: true });
  try {
    await store.migrate();
  } catch (error) {
    await db.destroy();
    throw error;
  }
  return store;
}
