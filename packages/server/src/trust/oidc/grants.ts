import { randomUUID } from "node:crypto";
import { hashToken, randomToken } from "../../platform/tokens.js";
import type { Db } from "../store.js";
import { withinScope } from "./scope.js";

/** A grant lapses after this long without a refresh (each refresh moves it on). */
export const GRANT_IDLE_SECONDS = 30 * 86400;
/**
 * The most live grants of one client and resource compared with a new request: each code redeemed
 * makes one, so a client could pile them up; the most recently used ones are what matter.
 */
const GRANTS_COMPARED = 20;

/** What a person allowed one client for one resource; its refresh tokens are one family. */
export interface Grant {
  id: string;
  humanId: string;
  clientId: string;
  clientName: string;
  resource: string;
  scope: string;
  authMethod: string | null;
  createdAt: number;
  lastUsedAt: number;
}

export interface NewGrant {
  humanId: string;
  clientId: string;
  clientName: string;
  resource: string;
  scope: string;
  authMethod: string | null;
}

export type Rotation =
  | { ok: true; grant: Grant; refreshToken: string }
  | { ok: false; error: "invalid_grant" | "invalid_scope" | "invalid_target"; reason: string };

/** What a refresh must still satisfy, checked before its token is used up: a refusal burns nothing. */
export type RefreshCheck = (grant: Grant) => Extract<Rotation, { ok: false }> | undefined;

function newRefreshToken(): string {
  return randomToken("prt_", 32);
}

async function issueRefreshToken(db: Db, grantId: string, now: number): Promise<string> {
  const token = newRefreshToken();
  await db
    .insertInto("trust_oauth_refresh_tokens")
    .values({ token_hash: hashToken(token), grant_id: grantId, created_at: now, used_at: null })
    .execute();
  return token;
}

/** Records a grant (under `id`, when the caller chose it) and answers its first refresh token. */
export async function createGrant(
  db: Db,
  grant: NewGrant,
  now: number,
  id: string = randomUUID(),
): Promise<{ grantId: string; refreshToken: string }> {
  await db
    .insertInto("trust_oauth_grants")
    .values({
      id,
      human_id: grant.humanId,
      client_id: grant.clientId,
      client_name: grant.clientName,
      resource: grant.resource,
      scope: grant.scope,
      auth_method: grant.authMethod,
      created_at: now,
      last_used_at: now,
      expires_at: now + GRANT_IDLE_SECONDS * 1000,
      revoked_at: null,
    })
    .execute();
  return { grantId: id, refreshToken: await issueRefreshToken(db, id, now) };
}

/** Ends a grant: none of its refresh tokens refreshes any more. */
export async function revokeFamily(db: Db, grantId: string, now: number): Promise<void> {
  await db
    .updateTable("trust_oauth_grants")
    .set({ revoked_at: now })
    .where("id", "=", grantId)
    .where("revoked_at", "is", null)
    .execute();
}

/**
 * Uses a refresh token once: answers the grant and the token that replaces it. A token already
 * used (or used by a concurrent request a moment ago) is a sign it was stolen: the whole family
 * is revoked, so neither the thief nor the client can refresh again (OAuth 2.1 §4.3.1).
 */
export async function rotateRefreshToken(
  db: Db,
  token: string,
  clientId: string,
  now: number,
  check: RefreshCheck = () => undefined,
): Promise<Rotation> {
  const hash = hashToken(token);
  const row = await db
    .selectFrom("trust_oauth_refresh_tokens")
    .select(["grant_id", "used_at"])
    .where("token_hash", "=", hash)
    .executeTakeFirst();
  if (row === undefined) return { ok: false, error: "invalid_grant", reason: "the refresh token is not known" };
  const grantRow = await db
    .selectFrom("trust_oauth_grants")
    .selectAll()
    .where("id", "=", row.grant_id)
    .executeTakeFirst();
  if (grantRow === undefined || grantRow.client_id !== clientId) {
    return { ok: false, error: "invalid_grant", reason: "the refresh token was issued to another client" };
  }
  if (row.used_at === null && grantRow.revoked_at === null) {
    const refused = check(toGrant(grantRow));
    if (refused !== undefined) return refused;
  }
  const used = await db
    .updateTable("trust_oauth_refresh_tokens")
    .set({ used_at: now })
    .where("token_hash", "=", hash)
    .where("used_at", "is", null)
    .executeTakeFirst();
  if (Number(used.numUpdatedRows) !== 1) {
    await revokeFamily(db, row.grant_id, now);
    return {
      ok: false,
      error: "invalid_grant",
      reason: "the refresh token was already used: every token of its grant is revoked",
    };
  }
  if (grantRow.revoked_at !== null) return { ok: false, error: "invalid_grant", reason: "the grant was revoked" };
  if (grantRow.expires_at <= now)
    return { ok: false, error: "invalid_grant", reason: "the grant lapsed; sign in again" };
  await db
    .updateTable("trust_oauth_grants")
    .set({ last_used_at: now, expires_at: now + GRANT_IDLE_SECONDS * 1000 })
    .where("id", "=", row.grant_id)
    .execute();
  return {
    ok: true,
    grant: toGrant({ ...grantRow, last_used_at: now }),
    refreshToken: await issueRefreshToken(db, row.grant_id, now),
  };
}

function toGrant(row: {
  id: string;
  human_id: string;
  client_id: string;
  client_name: string;
  resource: string;
  scope: string;
  auth_method: string | null;
  created_at: number;
  last_used_at: number;
}): Grant {
  return {
    id: row.id,
    humanId: row.human_id,
    clientId: row.client_id,
    clientName: row.client_name,
    resource: row.resource,
    scope: row.scope,
    authMethod: row.auth_method,
    createdAt: Number(row.created_at),
    lastUsedAt: Number(row.last_used_at),
  };
}

/** A person's grants that can still refresh, newest use first. */
export async function activeGrants(db: Db, humanId: string, now: number): Promise<Grant[]> {
  const rows = await db
    .selectFrom("trust_oauth_grants")
    .selectAll()
    .where("human_id", "=", humanId)
    .where("revoked_at", "is", null)
    .where("expires_at", ">", now)
    .orderBy("last_used_at", "desc")
    .limit(200)
    .execute();
  return rows.map(toGrant);
}

/** Revokes one of a person's grants; false when it is not theirs or already revoked. */
export async function revokeGrant(db: Db, humanId: string, grantId: string, now: number): Promise<boolean> {
  const result = await db
    .updateTable("trust_oauth_grants")
    .set({ revoked_at: now })
    .where("id", "=", grantId)
    .where("human_id", "=", humanId)
    .where("revoked_at", "is", null)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/** One of the person's grants whatever its state, with when it was revoked (null while live). */
export async function grantOf(
  db: Db,
  humanId: string,
  grantId: string,
): Promise<(Grant & { revokedAt: number | null }) | undefined> {
  const row = await db
    .selectFrom("trust_oauth_grants")
    .selectAll()
    .where("id", "=", grantId)
    .where("human_id", "=", humanId)
    .executeTakeFirst();
  return row === undefined ? undefined : { ...toGrant(row), revokedAt: row.revoked_at };
}

/**
 * Whether the person has a live grant for this client and resource that covers every scope of
 * `scope` (then no consent is asked): a request for more than was granted asks again.
 */
export async function hasActiveGrant(
  db: Db,
  humanId: string,
  clientId: string,
  resource: string,
  scope: readonly string[],
  now: number,
): Promise<boolean> {
  const rows = await db
    .selectFrom("trust_oauth_grants")
    .select("scope")
    .where("human_id", "=", humanId)
    .where("client_id", "=", clientId)
    .where("resource", "=", resource)
    .where("revoked_at", "is", null)
    .where("expires_at", ">", now)
    .orderBy("last_used_at", "desc")
    .limit(GRANTS_COMPARED)
    .execute();
  return rows.some((row) => withinScope(scope, row.scope === "" ? [] : row.scope.split(" ")));
}

/** Forgets grants that ended (revoked or lapsed) over a week ago, with their refresh tokens. */
export async function purgeEndedGrants(db: Db, now: number): Promise<void> {
  const before = now - 7 * 86400 * 1000;
  const ended = db
    .selectFrom("trust_oauth_grants")
    .select("id")
    .where((eb) => eb.or([eb("revoked_at", "<", before), eb("expires_at", "<", before)]));
  await db.deleteFrom("trust_oauth_refresh_tokens").where("grant_id", "in", ended).execute();
  await db
    .deleteFrom("trust_oauth_grants")
    .where((eb) => eb.or([eb("revoked_at", "<", before), eb("expires_at", "<", before)]))
    .execute();
}
