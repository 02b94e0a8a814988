import { VERIFICATION_METHODS } from "@proto/protocol";
import { type Kysely, sql, type Transaction } from "kysely";
import type { BindingRow, BindingServiceRow, LinkRequestRow, TrustSchema } from "./migrations.js";

export type Db = Kysely<TrustSchema> | Transaction<TrustSchema>;

export async function insertLinkRequest(db: Db, row: LinkRequestRow): Promise<void> {
  await db.insertInto("trust_link_requests").values(row).execute();
}

export async function findLinkRequest(db: Db, id: string): Promise<LinkRequestRow | undefined> {
  return db.selectFrom("trust_link_requests").selectAll().where("id", "=", id).executeTakeFirst();
}

/** Moves a request from one state to the next; true for exactly one caller. */
export async function transitionLinkRequest(
  db: Db,
  id: string,
  from: string,
  changes: Partial<Pick<LinkRequestRow, "state" | "phase" | "binding_id" | "human_id" | "resolved_at">>,
): Promise<boolean> {
  const result = await db
    .updateTable("trust_link_requests")
    .set(changes)
    .where("id", "=", id)
    .where("state", "=", from)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

export async function markLinkOpened(db: Db, id: string): Promise<void> {
  await db
    .updateTable("trust_link_requests")
    .set({ phase: "awaiting_confirm" })
    .where("id", "=", id)
    .where("state", "=", "pending")
    .execute();
}

export async function deleteOldLinkRequests(db: Db, before: number): Promise<void> {
  await db.deleteFrom("trust_link_requests").where("expires_at", "<", before).execute();
}

export async function insertHuman(db: Db, id: string, now: number): Promise<void> {
  await db.insertInto("trust_humans").values({ id, created_at: now }).execute();
}

export async function findVerification(db: Db, method: string, subject: string) {
  return db
    .selectFrom("trust_verifications")
    .selectAll()
    .where("method", "=", method)
    .where("subject", "=", subject)
    .executeTakeFirst();
}

export async function upsertVerification(db: Db, humanId: string, method: string, subject: string, now: number) {
  const existing = await findVerification(db, method, subject);
  if (existing === undefined) {
    await db
      .insertInto("trust_verifications")
      .values({ human_id: humanId, method, subject, created_at: now, revoked_at: null })
      .execute();
  } else if (existing.revoked_at !== null) {
    await db
      .updateTable("trust_verifications")
      .set({ revoked_at: null, created_at: now })
      .where("method", "=", method)
      .where("subject", "=", subject)
      .execute();
  }
}

/** The methods a human has on file and in force. */
export async function activeMethods(db: Db, humanId: string): Promise<string[]> {
  const rows = await db
    .selectFrom("trust_verifications")
    .select("method")
    .where("human_id", "=", humanId)
    .where("revoked_at", "is", null)
    .execute();
  return rows.map((r) => r.method);
}

export async function revokeVerifications(db: Db, humanId: string, now: number): Promise<void> {
  await db
    .updateTable("trust_verifications")
    .set({ revoked_at: now })
    .where("human_id", "=", humanId)
    .where("revoked_at", "is", null)
    .execute();
}

export async function findBinding(db: Db, id: string): Promise<BindingRow | undefined> {
  return db.selectFrom("trust_bindings").selectAll().where("id", "=", id).executeTakeFirst();
}

/** The binding an agent DID maps to: its live one, else its most recent. */
export async function latestBindingForAgent(db: Db, agentDid: string): Promise<BindingRow | undefined> {
  return db
    .selectFrom("trust_bindings")
    .selectAll()
    .where("agent_did", "=", agentDid)
    .orderBy("revoked_at", (ob) => ob.desc().nullsFirst())
    .orderBy("created_at", "desc")
    .limit(1)
    .executeTakeFirst();
}

/** What the mint knows of one (binding, aud) pair: when it was last recorded, and any suspension. */
export interface ServiceUse {
  last_mint_at: number;
  suspended_at: number | null;
}

/**
 * What a mint needs, in one round trip: the binding `latestBindingForAgent` answers, the methods
 * `activeMethods` answers for its human (empty when none is in force), and the binding's row for
 * `aud` (a primary-key lookup; undefined before its first mint for that service). The token
 * endpoint is the attestor's hot path; plain SQL here skips the query builder's per-call cost,
 * and one statement instead of three keeps the database work (and the round trips on
 * PostgreSQL) at one.
 */
export async function mintContext(
  db: Db,
  agentDid: string,
  aud: string,
): Promise<{ binding: BindingRow; methods: string[]; service: ServiceUse | undefined } | undefined> {
  const { rows } = await sql<
    BindingRow & { method: string | null; service_last_mint_at: number | null; service_suspended_at: number | null }
  >`
    select b.*, v.method as method,
      s.last_mint_at as service_last_mint_at, s.suspended_at as service_suspended_at
    from (
      select * from trust_bindings
      where agent_did = ${agentDid}
      order by revoked_at desc nulls first, created_at desc
      limit 1
    ) b
    left join trust_binding_services s on s.binding_id = b.id and s.aud = ${aud}
    left join trust_verifications v on v.human_id = b.human_id and v.revoked_at is null`.execute(db);
  const first = rows[0];
  if (first === undefined) return undefined;
  const binding: BindingRow = {
    id: first.id,
    human_id: first.human_id,
    agent_did: first.agent_did,
    agent_label: first.agent_label,
    created_at: first.created_at,
    last_mint_at: first.last_mint_at,
    expires_at: first.expires_at,
    revoked_at: first.revoked_at,
    wba_published_at: first.wba_published_at,
    mint_day: first.mint_day,
    mint_day_count: first.mint_day_count,
    has_grants: first.has_grants,
  };
  const methods: string[] = [];
  for (const row of rows) if (row.method !== null) methods.push(row.method);
  const service =
    first.service_last_mint_at === null
      ? undefined
      : { last_mint_at: first.service_last_mint_at, suspended_at: first.service_suspended_at };
  return { binding, methods, service };
}

/**
 * Records that a binding minted for `aud` now: a new row, or a later `last_mint_at` on the
 * existing one (never an earlier one, whatever order replicas write in). A suspension is left
 * as it is. Plain SQL: it runs on the mint path (see mintContext).
 */
export async function recordServiceUse(db: Db, bindingId: string, aud: string, now: number): Promise<void> {
  await sql`
    insert into trust_binding_services (binding_id, aud, first_mint_at, last_mint_at, suspended_at)
    values (${bindingId}, ${aud}, ${now}, ${now}, null)
    on conflict (binding_id, aud) do update set last_mint_at = excluded.last_mint_at
    where trust_binding_services.last_mint_at < excluded.last_mint_at`.execute(db);
}

/**
 * The services of some bindings, at most `limit` per binding: suspended ones first (they cannot
 * mint, so their last use only grows older, and the person must still find them to restore
 * them), then the most recently used. `total` counts every service of the binding.
 */
export async function servicesOfBindings(
  db: Db,
  bindingIds: readonly string[],
  limit: number,
): Promise<(BindingServiceRow & { total: number })[]> {
  if (bindingIds.length === 0) return [];
  const { rows } = await sql<BindingServiceRow & { total: number | string }>`
    select binding_id, aud, first_mint_at, last_mint_at, suspended_at, total from (
      select s.*,
        row_number() over (
          partition by binding_id
          order by case when suspended_at is null then 1 else 0 end, last_mint_at desc, aud
        ) as position,
        count(*) over (partition by binding_id) as total
      from trust_binding_services s
      where binding_id in (${sql.join(bindingIds)})
    ) ranked
    where position <= ${limit}
    order by binding_id, position`.execute(db);
  return rows.map((row) => ({ ...row, total: Number(row.total) }));
}

/**
 * Suspends (`suspendedAt` a time) or restores (`null`) one service of one binding; true when the
 * pair exists and its state changed.
 */
export async function setServiceSuspension(
  db: Db,
  bindingId: string,
  aud: string,
  suspendedAt: number | null,
): Promise<boolean> {
  const result = await db
    .updateTable("trust_binding_services")
    .set({ suspended_at: suspendedAt })
    .where("binding_id", "=", bindingId)
    .where("aud", "=", aud)
    .where("suspended_at", suspendedAt === null ? "is not" : "is", null)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

export async function findServiceUse(db: Db, bindingId: string, aud: string): Promise<BindingServiceRow | undefined> {
  return db
    .selectFrom("trust_binding_services")
    .selectAll()
    .where("binding_id", "=", bindingId)
    .where("aud", "=", aud)
    .executeTakeFirst();
}

/** A re-link by the same person keeps what the old binding knew: its services and suspensions. */
export async function copyServices(db: Db, fromBindingId: string, toBindingId: string): Promise<void> {
  await sql`
    insert into trust_binding_services (binding_id, aud, first_mint_at, last_mint_at, suspended_at)
    select ${toBindingId}, aud, first_mint_at, last_mint_at, suspended_at
    from trust_binding_services where binding_id = ${fromBindingId}`.execute(db);
}

export async function liveBindingForAgent(db: Db, agentDid: string): Promise<BindingRow | undefined> {
  return db
    .selectFrom("trust_bindings")
    .selectAll()
    .where("agent_did", "=", agentDid)
    .where("revoked_at", "is", null)
    .executeTakeFirst();
}

export async function insertBinding(db: Db, row: BindingRow): Promise<void> {
  await db.insertInto("trust_bindings").values(row).execute();
}

export async function revokeBinding(db: Db, id: string, now: number): Promise<boolean> {
  const result = await db
    .updateTable("trust_bindings")
    .set({ revoked_at: now })
    .where("id", "=", id)
    .where("revoked_at", "is", null)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/** One mint as recordMint takes it. */
export interface MintInput {
  agentDid: string;
  aud: string;
  now: number;
  expiresAt: number;
  day: number;
  dailyLimit: number;
}

export interface MintRecord {
  /** The binding that minted. */
  id: string;
  human_id: string;
  /** The verification methods in force for its person. */
  methods: string[];
  /** The pair (binding, aud)'s last recorded use; null before its first mint for `aud`. */
  service_last_mint_at: number | null;
  /** The claims of the pair's grant in force (JSON), or null: no grant, or an expired one. */
  grant_claims: string | null;
}

/**
 * The mint's one statement. The agent's latest binding, if it can mint for `aud` now (not
 * revoked, not lapsed, its person holding a verification method in force, `aud` not suspended,
 * fewer than `dailyLimit` mints in the daily window `day`), records the mint: its last use, the
 * inactivity window re-armed to `expiresAt`, and one more in the day's count (a new day starts it
 * afresh). It answers what the token needs. Undefined when the binding cannot mint, and then
 * nothing was written (mintContext says why).
 * Plain SQL: the query builder's per-call cost is measurable on the attestor's hot path.
 */
export async function recordMint(db: Db, mint: MintInput): Promise<MintRecord | undefined> {
  const { rows } = await mintStatement(mint, 0).execute(db);
  const row = rows[0];
  return row === undefined ? undefined : mintRecord(row);
}

/** recordMint's UPDATE, its row tagged `i` (recordMints runs several in one statement). */
function mintStatement(mint: MintInput, i: number) {
  const { agentDid, aud, now, expiresAt, day, dailyLimit } = mint;
  const hasMethod = (method: string) => sql`exists (
    select 1 from trust_verifications v
    where v.human_id = trust_bindings.human_id and v.method = ${method} and v.revoked_at is null)`;
  return sql<Record<string, unknown>>`
    update trust_bindings set
      last_mint_at = ${now},
      expires_at = ${expiresAt},
      mint_day_count = case when mint_day = ${day} then mint_day_count + 1 else 1 end,
      mint_day = ${day}
    where id = (
        select id from trust_bindings where agent_did = ${agentDid}
        order by revoked_at desc nulls first, created_at desc
        limit 1)
      and revoked_at is null and expires_at > ${now}
      and (mint_day <> ${day} or mint_day_count < ${dailyLimit})
      and exists (
        select 1 from trust_verifications v
        where v.human_id = trust_bindings.human_id and v.revoked_at is null)
      and not exists (
        select 1 from trust_binding_services s
        where s.binding_id = trust_bindings.id and s.aud = ${aud} and s.suspended_at is not null)
      and case when trust_bindings.has_grants = 0 then true else not exists (
        select 1 from trust_grants g
        where g.binding_id = trust_bindings.id and g.aud = ${aud} and g.revoked_at is not null) end
    returning ${sql.lit(i)} as i, id, human_id,
      (select s.last_mint_at from trust_binding_services s
        where s.binding_id = trust_bindings.id and s.aud = ${aud}) as service_last_mint_at,
      case when trust_bindings.has_grants = 0 then null else (select g.claims from trust_grants g
        where g.binding_id = trust_bindings.id and g.aud = ${aud}
          and (g.expires_at is null or g.expires_at > ${now})) end as grant_claims,
      ${sql.join(VERIFICATION_METHODS.map((method, j) => sql`${hasMethod(method)} as ${sql.ref(`has_method_${j}`)}`))}`;
}

function mintRecord(row: Record<string, unknown>): MintRecord {
  const last = row.service_last_mint_at;
  return {
    id: row.id as string,
    human_id: row.human_id as string,
    // PostgreSQL answers booleans, SQLite 0 or 1.
    methods: VERIFICATION_METHODS.filter((_, i) => Boolean(row[`has_method_${i}`])),
    service_last_mint_at: last === null || last === undefined ? null : Number(last),
    grant_claims: typeof row.grant_claims === "string" ? row.grant_claims : null,
  };
}

/**
 * recordMint for many mints in one PostgreSQL statement (the attestor's batched hot path): each
 * mint is checked and recorded exactly as recordMint does it, and answers in the mints' order.
 * The agents must be distinct: two mints of one binding in one UPDATE would count once.
 * PostgreSQL only (`unnest` of array parameters); the mints share `dailyLimit`.
 */
export async function recordMints(db: Db, mints: readonly MintInput[]): Promise<(MintRecord | undefined)[]> {
  if (mints.length === 0) return [];
  const hasMethod = (method: string) => sql`exists (
    select 1 from trust_verifications v
    where v.human_id = trust_bindings.human_id and v.method = ${method} and v.revoked_at is null)`;
  // The text is the same for any number of mints: one prepared statement, one generic plan.
  const { rows } = await sql<Record<string, unknown>>`
    with m as (
      select m.*, (
          select id from trust_bindings where agent_did = m.agent_did
          order by revoked_at desc nulls first, created_at desc
          limit 1) as binding_id
      from unnest(
        ${mints.map((_, i) => i)}::integer[], ${mints.map((m) => m.agentDid)}::text[],
        ${mints.map((m) => m.aud)}::text[], ${mints.map((m) => m.now)}::bigint[],
        ${mints.map((m) => m.expiresAt)}::bigint[], ${mints.map((m) => m.day)}::bigint[]
      ) as m(i, agent_did, aud, now, expires_at, day)
    )
    update trust_bindings set
      last_mint_at = m.now,
      expires_at = m.expires_at,
      mint_day_count = case when trust_bindings.mint_day = m.day then trust_bindings.mint_day_count + 1 else 1 end,
      mint_day = m.day
    from m
    where trust_bindings.id = m.binding_id
      and trust_bindings.revoked_at is null and trust_bindings.expires_at > m.now
      and (trust_bindings.mint_day <> m.day or trust_bindings.mint_day_count < ${mints[0]!.dailyLimit})
      and exists (
        select 1 from trust_verifications v
        where v.human_id = trust_bindings.human_id and v.revoked_at is null)
      and not exists (
        select 1 from trust_binding_services s
        where s.binding_id = trust_bindings.id and s.aud = m.aud and s.suspended_at is not null)
      and case when trust_bindings.has_grants = 0 then true else not exists (
        select 1 from trust_grants g
        where g.binding_id = trust_bindings.id and g.aud = m.aud and g.revoked_at is not null) end
    returning m.i as i, trust_bindings.id as id, trust_bindings.human_id as human_id,
      (select s.last_mint_at from trust_binding_services s
        where s.binding_id = trust_bindings.id and s.aud = m.aud) as service_last_mint_at,
      case when trust_bindings.has_grants = 0 then null else (select g.claims from trust_grants g
        where g.binding_id = trust_bindings.id and g.aud = m.aud
          and (g.expires_at is null or g.expires_at > m.now)) end as grant_claims,
      ${sql.join(
        VERIFICATION_METHODS.map((method, i) => sql`${hasMethod(method)} as ${sql.ref(`has_method_${i}`)}`),
      )}`.execute(db);
  const records: (MintRecord | undefined)[] = mints.map(() => undefined);
  for (const row of rows) records[Number(row.i)] = mintRecord(row);
  return records;
}

export async function setBindingExpiry(db: Db, id: string, expiresAt: number): Promise<boolean> {
  const result = await db
    .updateTable("trust_bindings")
    .set({ expires_at: expiresAt })
    .where("id", "=", id)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/**
 * Publishes (`publishedAt` a time) or withdraws (`null`) a live binding's agent key in the Web Bot
 * Auth directory; true when the binding is live and its state changed (publishing twice keeps the
 * first time, so the directory's order does not move).
 */
export async function setWbaPublication(db: Db, id: string, publishedAt: number | null): Promise<boolean> {
  const result = await db
    .updateTable("trust_bindings")
    .set({ wba_published_at: publishedAt })
    .where("id", "=", id)
    .where("revoked_at", "is", null)
    .where("wba_published_at", publishedAt === null ? "is not" : "is", null)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/**
 * The agent DIDs the Web Bot Auth directory lists at `now`, most recently published first, at most
 * `limit`: bindings the person published that are neither revoked nor lapsed, whose person still
 * has a verification method in force (what a mint needs too: the directory vouches for no more
 * than an attestation would).
 */
export async function publishedAgents(
  db: Db,
  now: number,
  limit: number,
): Promise<{ agent_did: string; wba_published_at: number }[]> {
  const { rows } = await sql<{ agent_did: string; wba_published_at: number }>`
    select b.agent_did, b.wba_published_at from trust_bindings b
    where b.wba_published_at is not null and b.revoked_at is null and b.expires_at > ${now}
      and exists (
        select 1 from trust_verifications v where v.human_id = b.human_id and v.revoked_at is null
      )
    order by b.wba_published_at desc, b.id
    limit ${limit}`.execute(db);
  return rows;
}
