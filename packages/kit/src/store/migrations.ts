import { type Kysely, type Migration, sql } from "kysely";

export type Engine = "sqlite" | "postgres";

/** The kit's migration history lives in its own table, so it can share a database with the service. */
export const KIT_MIGRATION_TABLE = "kit_migrations";

function initial(engine: Engine): Migration {
  const bigint = engine === "sqlite" ? "integer" : "bigint";
  const statements = [
    `create table kit_people (
      id text primary key,
      issuer text not null,
      subject text not null,
      created_at ${bigint} not null
    )`,
    "create unique index kit_people_subject on kit_people (issuer, subject)",
    `create table kit_accounts (
      id text primary key,
      did text not null,
      created_at ${bigint} not null,
      claimed_at ${bigint},
      owner_key text,
      owner_recipient text,
      owner_person_id text references kit_people (id),
      person_id text references kit_people (id),
      attested_issuer text,
      attested_verification text,
      attested_at ${bigint},
      attested_until ${bigint},
      key_revoked_at ${bigint}
    )`,
    "create unique index kit_accounts_did on kit_accounts (did)",
    "create index kit_accounts_person on kit_accounts (person_id)",
    "create index kit_accounts_owner_person on kit_accounts (owner_person_id)",
    "create index kit_accounts_owner_key on kit_accounts (owner_key)",
    `create table kit_revoked_keys (
      did text primary key,
      account_id text,
      revoked_at ${bigint} not null,
      reason text not null
    )`,
    `create table kit_invitations (
      id text primary key,
      account_id text not null references kit_accounts (id),
      token_hash text not null,
      recipient_key text not null,
      recipient text not null,
      created_at ${bigint} not null,
      expires_at ${bigint} not null,
      status text not null,
      resolved_at ${bigint}
    )`,
    "create unique index kit_invitations_token on kit_invitations (token_hash)",
    // At most one pending invitation per account: a replacement is one transaction, and a
    // concurrent second one fails on this index instead of leaving two live tokens.
    "create unique index kit_invitations_pending on kit_invitations (account_id) where status = 'pending'",
    `create table kit_sessions (
      id_hash text primary key,
      created_at ${bigint} not null,
      expires_at ${bigint} not null,
      authenticated_at ${bigint},
      identities text not null,
      person_id text,
      csrf text not null
    )`,
    "create index kit_sessions_expiry on kit_sessions (expires_at)",
    `create table kit_signin_requests (
      state_hash text primary key,
      attestor text not null,
      code_verifier text not null,
      nonce text not null,
      return_to text not null,
      created_at ${bigint} not null,
      expires_at ${bigint} not null
    )`,
    "create index kit_signin_requests_expiry on kit_signin_requests (expires_at)",
    `create table kit_rate_counters (
      bucket text not null,
      window_start ${bigint} not null,
      count integer not null,
      primary key (bucket, window_start)
    )`,
    "create index kit_rate_counters_window on kit_rate_counters (window_start)",
  ];
  return {
    async up(db: Kysely<unknown>) {
      for (const statement of statements) await sql.raw(statement).execute(db);
    },
  };
}

/**
 * Invitations remember where to send the person after the claim (`redirect_url`, upstream §7.2),
 * and when the e-mail link of an `email` invitation was used to sign in (it works once).
 */
function invitationRedirectAndEmailSignIn(engine: Engine): Migration {
  const bigint = engine === "sqlite" ? "integer" : "bigint";
  return {
    async up(db: Kysely<unknown>) {
      await sql.raw("alter table kit_invitations add column redirect_url text").execute(db);
      await sql.raw(`alter table kit_invitations add column signed_in_at ${bigint}`).execute(db);
    },
  };
}

/**
 * Spends under people's grants (docs/authority.md): one row per spend, unique per grant and
 * reference (the same reference again is the same spend), and one running total per grant,
 * permission and calendar period, which a spend raises only while it stays within the limit.
 */
function spends(engine: Engine): Migration {
  const bigint = engine === "sqlite" ? "integer" : "bigint";
  const statements = [
    `create table kit_spends (
      id text primary key,
      grant_id text not null,
      reference text not null,
      permission text not null,
      currency text not null,
      amount ${bigint} not null,
      period_key text,
      period_total ${bigint},
      period_limit ${bigint},
      account_id text not null,
      agent_did text not null,
      attestor text,
      spent_at ${bigint} not null
    )`,
    "create unique index kit_spends_reference on kit_spends (grant_id, reference)",
    "create index kit_spends_account on kit_spends (account_id, spent_at)",
    `create table kit_spend_totals (
      grant_id text not null,
      permission text not null,
      period_key text not null,
      total ${bigint} not null,
      primary key (grant_id, permission, period_key)
    )`,
  ];
  return {
    async up(db: Kysely<unknown>) {
      for (const statement of statements) await sql.raw(statement).execute(db);
    },
  };
}

export function kitMigrations(engine: Engine): Record<string, Migration> {
  return {
    "0001_initial": initial(engine),
    "0002_invitation_redirect": invitationRedirectAndEmailSignIn(engine),
    "0003_spends": spends(engine),
  };
}
