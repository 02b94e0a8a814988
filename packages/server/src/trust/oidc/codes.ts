import { randomUUID } from "node:crypto";
import type { Kysely } from "kysely";
import { hashToken } from "../../platform/tokens.js";
import type { TrustSchema } from "../migrations.js";
import type { Db } from "../store.js";
import { createGrant, type NewGrant, revokeFamily } from "./grants.js";

/** An authorization code as stored (by its hash), with what it was issued for. */
export type CodeRow = TrustSchema["trust_oidc_codes"];

/** The stored code, whatever its state: the token request is checked against it before it is used. */
export function findCode(db: Db, code: string): Promise<CodeRow | undefined> {
  return db.selectFrom("trust_oidc_codes").selectAll().where("code_hash", "=", hashToken(code)).executeTakeFirst();
}

/**
 * Uses a code once, and records the grant it gives (codes for a resource) in the same
 * transaction: of concurrent redemptions exactly one commits, and whoever sees the code used sees
 * its grant too. Undefined when the code was used (or lapsed) meanwhile.
 */
export function redeemCode(
  db: Kysely<TrustSchema>,
  row: CodeRow,
  grant: NewGrant | undefined,
  now: number,
): Promise<{ refreshToken: string | undefined } | undefined> {
  return db.transaction().execute(async (trx) => {
    const grantId = grant === undefined ? null : randomUUID();
    const used = await trx
      .updateTable("trust_oidc_codes")
      .set({ used_at: now, grant_id: grantId })
      .where("code_hash", "=", row.code_hash)
      .where("used_at", "is", null)
      .where("expires_at", ">", now)
      .executeTakeFirst();
    if (Number(used.numUpdatedRows) !== 1) return undefined;
    if (grant === undefined || grantId === null) return { refreshToken: undefined };
    return { refreshToken: (await createGrant(trx, grant, now, grantId)).refreshToken };
  });
}

/**
 * A redeemed code presented again: whoever redeemed it first may not be its client, so the grant
 * it gave is revoked, and no refresh token issued from it works any more (RFC 6749 §4.1.2).
 */
export async function revokeRedeemed(db: Db, row: CodeRow, now: number): Promise<void> {
  const current = await db
    .selectFrom("trust_oidc_codes")
    .select("grant_id")
    .where("code_hash", "=", row.code_hash)
    .executeTakeFirst();
  const grantId = current?.grant_id;
  if (typeof grantId === "string") await revokeFamily(db, grantId, now);
}

/** Slack past a code's expiry before it is forgotten, for instances whose clocks disagree a little. */
const CODE_PURGE_MARGIN_MS = 3600 * 1000;

/**
 * Forgets the codes that can no longer change an answer: unused ones past their expiry (they can
 * never be redeemed), and used ones whose grant has ended or never existed. A used code is kept
 * while its grant is live, however long after expiry: the token endpoint checks "used" before
 * "expired", so a replay still revokes the grant at any age, and forgetting the code earlier would
 * let a late replay pass without ending the access it gave. Kept codes are at most one per live grant.
 */
export async function purgeSpentCodes(db: Db, now: number): Promise<void> {
  await db
    .deleteFrom("trust_oidc_codes")
    .where("expires_at", "<", now - CODE_PURGE_MARGIN_MS)
    .where((eb) =>
      eb.or([
        eb("grant_id", "is", null),
        eb.not(
          eb.exists(
            eb
              .selectFrom("trust_oauth_grants")
              .select("trust_oauth_grants.id")
              .whereRef("trust_oauth_grants.id", "=", "trust_oidc_codes.grant_id")
              .where("trust_oauth_grants.revoked_at", "is", null)
              .where("trust_oauth_grants.expires_at", ">", now),
          ),
        ),
      ]),
    )
    .execute();
}
