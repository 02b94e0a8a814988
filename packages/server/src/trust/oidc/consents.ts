import type { Kysely } from "kysely";
import type { OidcConsentRow, TrustSchema } from "../migrations.js";

/**
 * The remembered answers to the consent page: one row per (person, client) that the person
 * allowed. A "Deny" is not stored, so the service's next sign-in button asks again instead of
 * failing silently; disconnecting deletes the row, with the same effect.
 */
type Db = Kysely<TrustSchema>;

/** The most connected services the account page lists (the list is per person and short). */
export const CONSENTS_SHOWN = 100;

export async function hasConsent(db: Db, humanId: string, clientId: string): Promise<boolean> {
  const row = await db
    .selectFrom("trust_oidc_consents")
    .select("client_id")
    .where("human_id", "=", humanId)
    .where("client_id", "=", clientId)
    .executeTakeFirst();
  return row !== undefined;
}

/** Records an "Allow" (again: a new answer after a disconnect replaces nothing but the time). */
export async function grantConsent(db: Db, humanId: string, clientId: string, serviceDid: string, now: number) {
  await db
    .insertInto("trust_oidc_consents")
    .values({ human_id: humanId, client_id: clientId, service_did: serviceDid, granted_at: now, last_used_at: now })
    .onConflict((oc) =>
      oc
        .columns(["human_id", "client_id"])
        .doUpdateSet({ service_did: serviceDid, granted_at: now, last_used_at: now }),
    )
    .execute();
}

export async function touchConsent(db: Db, humanId: string, clientId: string, now: number): Promise<void> {
  await db
    .updateTable("trust_oidc_consents")
    .set({ last_used_at: now })
    .where("human_id", "=", humanId)
    .where("client_id", "=", clientId)
    .execute();
}

/** The person's connected services, most recently used first. */
export async function consentsOf(db: Db, humanId: string): Promise<OidcConsentRow[]> {
  return db
    .selectFrom("trust_oidc_consents")
    .selectAll()
    .where("human_id", "=", humanId)
    .orderBy("last_used_at", "desc")
    .orderBy("client_id")
    .limit(CONSENTS_SHOWN)
    .execute();
}

/** Forgets the person's "Allow" for a client; answers the service it named, undefined when none. */
export async function withdrawConsent(db: Db, humanId: string, clientId: string): Promise<string | undefined> {
  const row = await db
    .deleteFrom("trust_oidc_consents")
    .where("human_id", "=", humanId)
    .where("client_id", "=", clientId)
    .returning("service_did")
    .executeTakeFirst();
  return row?.service_did;
}
