import { type Kysely, sql, type Transaction } from "kysely";
import type { BindingRow, LinkRequestRow, TrustSchema } from "./migrations.js";

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

/**
 * What a mint needs, in one round trip: the binding `latestBindingForAgent` answers and the
 * methods `activeMethods` answers for its human (empty when none is in force). The token endpoint
 * is the attestor's hot path; plain SQL here skips the query builder's per-call cost, and one
 * statement instead of two halves the database work (and the round trips on PostgreSQL).
 */
export async function mintContext(
  db: Db,
  agentDid: string,
): Promise<{ binding: BindingRow; methods: string[] } | undefined> {
  const { rows } = await sql<BindingRow & { method: string | null }>`
    select b.*, v.method as method
    from (
      select * from trust_bindings
      where agent_did = ${agentDid}
      order by revoked_at desc nulls first, created_at desc
      limit 1
    ) b
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
  };
  const methods: string[] = [];
  for (const row of rows) if (row.method !== null) methods.push(row.method);
  return { binding, methods };
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

/**
 * Records a mint and re-arms the inactivity window, unless the binding was revoked meanwhile.
 * Plain SQL: it runs on every mint (see mintContext).
 */
export async function recordMint(db: Db, id: string, now: number, expiresAt: number): Promise<boolean> {
  const result = await sql`
    update trust_bindings set last_mint_at = ${now}, expires_at = ${expiresAt}
    where id = ${id} and revoked_at is null`.execute(db);
  return Number(result.numAffectedRows) === 1;
}

export async function setBindingExpiry(db: Db, id: string, expiresAt: number): Promise<boolean> {
  const result = await db
    .updateTable("trust_bindings")
    .set({ expires_at: expiresAt })
    .where("id", "=", id)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}
