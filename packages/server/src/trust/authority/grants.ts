/**
 * Grants (docs/authority.md): one binding's authority at one service, its history, and the claims
 * the mint copies into tokens. Every change writes the grant and its event in one transaction, and
 * rewrites `claims`, so the mint reads a ready JSON column and nothing else.
 */
import { randomBytes, randomUUID } from "node:crypto";
import {
  type AuthorityGrant,
  grantClaims,
  readSpendLimit,
  type SpendLimit,
  spendLimitDetail,
  spendLimitProblem,
} from "@proto/protocol";
import type { AuthoritySchema } from "../migrations.js";
import type { Db } from "../store.js";

export type GrantRow = AuthoritySchema["trust_grants"];
export type GrantEventRow = AuthoritySchema["trust_grant_events"];
export type GrantEventKind = "granted" | "changed" | "revoked";
/** How the person approved a change: a passkey ceremony, or their signed-in session. */
export type ApprovalMethod = "passkey" | "session";

/** A grant as the attestor's pages and the agent's listing read it. */
export interface Grant {
  id: string;
  bindingId: string;
  humanId: string;
  aud: string;
  serviceUrl: string;
  permissions: string[];
  spendLimits: SpendLimit[];
  expiresAt: number | null;
  revokedAt: number | null;
  createdAt: number;
  updatedAt: number;
}

export interface GrantEvent {
  at: number;
  kind: GrantEventKind;
  permissions: string[];
  spendLimits: SpendLimit[];
  expiresAt: number | null;
  method: ApprovalMethod;
  approvalId: string | null;
}

/** What a change sets: the whole new content of the grant. */
export interface GrantContent {
  permissions: readonly string[];
  spendLimits: readonly SpendLimit[];
  expiresAt: number | null;
}

export function newGrantId(): string {
  return `grt_${randomBytes(16).toString("base64url")}`;
}

function readLimits(json: string): SpendLimit[] {
  return (JSON.parse(json) as Record<string, unknown>[]).map(readSpendLimit);
}

function limitsJson(limits: readonly SpendLimit[]): string {
  return JSON.stringify(limits.map(spendLimitDetail));
}

export function toGrant(row: GrantRow): Grant {
  return {
    id: row.id,
    bindingId: row.binding_id,
    humanId: row.human_id,
    aud: row.aud,
    serviceUrl: row.service_url,
    permissions: JSON.parse(row.permissions) as string[],
    spendLimits: readLimits(row.spend_limits),
    expiresAt: row.expires_at === null ? null : Number(row.expires_at),
    revokedAt: row.revoked_at === null ? null : Number(row.revoked_at),
    createdAt: Number(row.created_at),
    updatedAt: Number(row.updated_at),
  };
}

/** The grant's claims for a token, as the mint stores them. */
export function claimsJson(id: string, content: GrantContent): string {
  const grant: AuthorityGrant = {
    id,
    permissions: [...content.permissions],
    spendLimits: [...content.spendLimits],
  };
  return JSON.stringify(grantClaims(grant));
}

/** Whether a grant gives its claims to a mint at `now`: live, and not past its expiry. */
export function inForce(grant: Pick<Grant, "revokedAt" | "expiresAt">, now: number): boolean {
  return grant.revokedAt === null && (grant.expiresAt === null || grant.expiresAt > now);
}

/** The problem with a grant's content, or undefined. One limit per permission and currency. */
export function contentProblem(content: GrantContent): string | undefined {
  const seen = new Set<string>();
  for (const limit of content.spendLimits) {
    const problem = spendLimitProblem(limit);
    if (problem !== undefined) return problem;
    const key = `${limit.permission} ${limit.currency}`;
    if (seen.has(key)) return `two limits for ${limit.permission} in ${limit.currency}`;
    seen.add(key);
  }
  return undefined;
}

/**
 * Merges `limits` into `current`: a limit for the same permission and currency replaces the one
 * there, the others stay.
 */
export function mergeLimits(current: readonly SpendLimit[], limits: readonly SpendLimit[]): SpendLimit[] {
  const key = (limit: SpendLimit) => `${limit.permission} ${limit.currency}`;
  const replaced = new Set(limits.map(key));
  return [...current.filter((limit) => !replaced.has(key(limit))), ...limits];
}

export async function findGrant(db: Db, bindingId: string, aud: string): Promise<Grant | undefined> {
  const row = await db
    .selectFrom("trust_grants")
    .selectAll()
    .where("binding_id", "=", bindingId)
    .where("aud", "=", aud)
    .executeTakeFirst();
  return row === undefined ? undefined : toGrant(row);
}

export async function grantById(db: Db, id: string): Promise<Grant | undefined> {
  const row = await db.selectFrom("trust_grants").selectAll().where("id", "=", id).executeTakeFirst();
  return row === undefined ? undefined : toGrant(row);
}

/** The grants of some bindings (at most 200 per call), most recently changed first. */
export async function grantsOfBindings(db: Db, bindingIds: readonly string[]): Promise<Grant[]> {
  if (bindingIds.length === 0) return [];
  const rows = await db
    .selectFrom("trust_grants")
    .selectAll()
    .where("binding_id", "in", bindingIds)
    .orderBy("updated_at", "desc")
    .limit(200)
    .execute();
  return rows.map(toGrant);
}

/** A grant's history, newest first (at most 100 events). */
export async function grantHistory(db: Db, grantId: string): Promise<GrantEvent[]> {
  const rows = await db
    .selectFrom("trust_grant_events")
    .selectAll()
    .where("grant_id", "=", grantId)
    .orderBy("at", "desc")
    .limit(100)
    .execute();
  return rows.map((row) => ({
    at: Number(row.at),
    kind: row.kind as GrantEventKind,
    permissions: JSON.parse(row.permissions) as string[],
    spendLimits: readLimits(row.spend_limits),
    expiresAt: row.expires_at === null ? null : Number(row.expires_at),
    method: row.method as ApprovalMethod,
    approvalId: row.approval_id,
  }));
}

async function recordEvent(
  db: Db,
  grantId: string,
  kind: GrantEventKind,
  content: GrantContent,
  how: { now: number; method: ApprovalMethod; approvalId?: string | undefined },
): Promise<void> {
  await db
    .insertInto("trust_grant_events")
    .values({
      id: randomUUID(),
      grant_id: grantId,
      at: how.now,
      kind,
      permissions: JSON.stringify(content.permissions),
      spend_limits: limitsJson(content.spendLimits),
      expires_at: content.expiresAt,
      method: how.method,
      approval_id: how.approvalId ?? null,
    })
    .execute();
}

export interface GrantChange {
  bindingId: string;
  humanId: string;
  aud: string;
  serviceUrl: string;
  now: number;
  method: ApprovalMethod;
  approvalId?: string;
}

/**
 * Sets the grant of (binding, aud) to `content`: creates it ("granted"), or rewrites it and clears
 * a revocation ("changed", or "granted" when it was revoked). Run inside the caller's transaction.
 */
export async function putGrant(trx: Db, change: GrantChange, content: GrantContent): Promise<Grant> {
  const problem = contentProblem(content);
  if (problem !== undefined) throw new RangeError(problem);
  const existing = await findGrant(trx, change.bindingId, change.aud);
  const id = existing?.id ?? newGrantId();
  const values = {
    permissions: JSON.stringify(content.permissions),
    spend_limits: limitsJson(content.spendLimits),
    claims: claimsJson(id, content),
    expires_at: content.expiresAt,
    revoked_at: null,
    updated_at: change.now,
    service_url: change.serviceUrl,
  };
  if (existing === undefined) {
    await trx
      .insertInto("trust_grants")
      .values({
        id,
        binding_id: change.bindingId,
        human_id: change.humanId,
        aud: change.aud,
        created_at: change.now,
        ...values,
      })
      .execute();
  } else {
    await trx.updateTable("trust_grants").set(values).where("id", "=", id).execute();
  }
  if (existing === undefined) await markHasGrants(trx, change.bindingId);
  const kind: GrantEventKind = existing === undefined || existing.revokedAt !== null ? "granted" : "changed";
  await recordEvent(trx, id, kind, content, change);
  return (await grantById(trx, id)) as Grant;
}

/** Revokes one of the person's grants; false when it is not theirs or already revoked. */
export async function revokeGrant(
  trx: Db,
  humanId: string,
  grantId: string,
  how: { now: number; method: ApprovalMethod },
): Promise<boolean> {
  const grant = await grantById(trx, grantId);
  if (grant === undefined || grant.humanId !== humanId || grant.revokedAt !== null) return false;
  const result = await trx
    .updateTable("trust_grants")
    .set({ revoked_at: how.now, updated_at: how.now })
    .where("id", "=", grantId)
    .where("revoked_at", "is", null)
    .executeTakeFirst();
  if (Number(result.numUpdatedRows) !== 1) return false;
  await recordEvent(trx, grantId, "revoked", grant, how);
  return true;
}

/** The mint looks a binding's grants up only once it has one (the flag is never cleared). */
async function markHasGrants(db: Db, bindingId: string): Promise<void> {
  await db
    .updateTable("trust_bindings")
    .set({ has_grants: 1 })
    .where("id", "=", bindingId)
    .where("has_grants", "=", 0)
    .execute();
}

/** A re-link by the same person keeps the old binding's grants, their ids and their history. */
export async function moveGrants(db: Db, fromBindingId: string, toBindingId: string): Promise<void> {
  const moved = await db
    .updateTable("trust_grants")
    .set({ binding_id: toBindingId })
    .where("binding_id", "=", fromBindingId)
    .executeTakeFirst();
  if (Number(moved.numUpdatedRows) > 0) await markHasGrants(db, toBindingId);
}
