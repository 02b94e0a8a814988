import { type Kysely, type Migration, sql } from "kysely";
import type { Engine } from "../platform/database.js";

/** Timestamps are integer milliseconds since the epoch, as in the directory. */
function initial(engine: Engine): Migration {
  const bigint = engine === "sqlite" ? "integer" : "bigint";
  const statements = [
    `create table trust_signing_keys (
      kid text primary key,
      public_x text not null,
      private_enc text not null,
      created_at ${bigint} not null,
      publish_at ${bigint} not null,
      activate_at ${bigint} not null
    )`,
    `create table trust_humans (
      id text primary key,
      created_at ${bigint} not null
    )`,
    `create table trust_verifications (
      human_id text not null references trust_humans (id),
      method text not null,
      subject text not null,
      created_at ${bigint} not null,
      revoked_at ${bigint},
      primary key (method, subject)
    )`,
    "create index trust_verifications_human on trust_verifications (human_id)",
    `create table trust_bindings (
      id text primary key,
      human_id text not null references trust_humans (id),
      agent_did text not null,
      agent_label text,
      created_at ${bigint} not null,
      last_mint_at ${bigint},
      expires_at ${bigint} not null,
      revoked_at ${bigint}
    )`,
    // One binding per agent DID that is not revoked; a lapsed one is revoked when replaced.
    "create unique index trust_bindings_live_agent on trust_bindings (agent_did) where revoked_at is null",
    "create index trust_bindings_agent on trust_bindings (agent_did, created_at)",
    "create index trust_bindings_human on trust_bindings (human_id)",
    `create table trust_link_requests (
      id text primary key,
      agent_did text not null,
      agent_pubkey text not null,
      agent_label text,
      callback_url text,
      created_at ${bigint} not null,
      expires_at ${bigint} not null,
      phase text not null,
      state text not null,
      binding_id text,
      human_id text,
      resolved_at ${bigint}
    )`,
    "create index trust_link_requests_expiry on trust_link_requests (expires_at)",
  ];
  return {
    async up(db: Kysely<unknown>) {
      for (const statement of statements) await sql.raw(statement).execute(db);
    },
  };
}

/** The human side: browser sessions, e-mail sign-in links, OpenID codes, upstream sign-in state. */
function humanSide(engine: Engine): Migration {
  const bigint = engine === "sqlite" ? "integer" : "bigint";
  const statements = [
    `create table trust_sessions (
      id_hash text primary key,
      human_id text not null references trust_humans (id),
      created_at ${bigint} not null,
      auth_at ${bigint} not null,
      auth_method text not null,
      expires_at ${bigint} not null,
      revoked_at ${bigint}
    )`,
    "create index trust_sessions_human on trust_sessions (human_id)",
    `create table trust_magic_links (
      token_hash text primary key,
      email text not null,
      next text not null,
      created_at ${bigint} not null,
      expires_at ${bigint} not null,
      used_at ${bigint}
    )`,
    `create table trust_oidc_codes (
      code_hash text primary key,
      client_id text not null,
      redirect_uri text not null,
      code_challenge text not null,
      nonce text,
      human_id text not null,
      auth_at ${bigint} not null,
      created_at ${bigint} not null,
      expires_at ${bigint} not null,
      used_at ${bigint}
    )`,
    `create table trust_upstream_states (
      state_hash text primary key,
      nonce text not null,
      next text not null,
      created_at ${bigint} not null,
      expires_at ${bigint} not null,
      used_at ${bigint}
    )`,
  ];
  return {
    async up(db: Kysely<unknown>) {
      for (const statement of statements) await sql.raw(statement).execute(db);
    },
  };
}

export function trustMigrations(engine: Engine): Record<string, Migration> {
  return {
    "0001_initial": initial(engine),
    "0002_human_side": humanSide(engine),
    "0003_payment": payment(engine),
    "0004_state": state(),
    "0005_binding_services": bindingServices(engine),
    "0006_wba_directory": wbaDirectory(engine),
    "0007_mint_day": mintDay(engine),
    "0008_oidc_consents": oidcConsents(engine),
    "0009_passkeys": passkeys(engine),
    "0010_oauth": oauth(engine),
    "0011_code_grants": codeGrants(),
    "0012_code_expiry": codeExpiry(),
    "0013_authority": authority(engine),
  };
}

/**
 * OAuth for MCP (issue 24). A code remembers the scope and the RFC 8707 `resource` it was asked
 * for. A grant is what a person allowed one client for one resource: its refresh tokens rotate on
 * every use (each stored as its hash, marked used once); a used one presented again revokes the
 * grant and with it every token of its family. Dynamically registered clients (RFC 7591) are kept
 * as their metadata. JWT-bearer assertions' `jti`s live in the replay store, not here.
 */
function oauth(engine: Engine): Migration {
  const bigint = engine === "sqlite" ? "integer" : "bigint";
  const statements = [
    "alter table trust_oidc_codes add column scope text",
    "alter table trust_oidc_codes add column resource text",
    `create table trust_oauth_grants (
      id text primary key,
      human_id text not null references trust_humans (id),
      client_id text not null,
      client_name text not null,
      resource text not null,
      scope text not null,
      auth_method text,
      created_at ${bigint} not null,
      last_used_at ${bigint} not null,
      expires_at ${bigint} not null,
      revoked_at ${bigint}
    )`,
    "create index trust_oauth_grants_human on trust_oauth_grants (human_id)",
    `create table trust_oauth_refresh_tokens (
      token_hash text primary key,
      grant_id text not null references trust_oauth_grants (id),
      created_at ${bigint} not null,
      used_at ${bigint}
    )`,
    "create index trust_oauth_refresh_tokens_grant on trust_oauth_refresh_tokens (grant_id)",
    `create table trust_oauth_clients (
      client_id text primary key,
      client_name text not null,
      redirect_uris text not null,
      created_at ${bigint} not null,
      last_used_at ${bigint} not null
    )`,
  ];
  return {
    async up(db: Kysely<unknown>) {
      for (const statement of statements) await sql.raw(statement).execute(db);
    },
  };
}

/**
 * The grant a redeemed code created, so that the code presented again revokes it (RFC 6749
 * §4.1.2): set in the transaction that redeems the code. No foreign key: ended grants are purged.
 */
function codeGrants(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await sql.raw("alter table trust_oidc_codes add column grant_id text").execute(db);
    },
  };
}

/** The periodic purge of spent codes reads them by expiry (see oidc/codes.ts purgeSpentCodes). */
function codeExpiry(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await sql.raw("create index trust_oidc_codes_expiry on trust_oidc_codes (expires_at)").execute(db);
    },
  };
}

/**
 * Passkeys (WebAuthn credentials) and their ceremonies' challenges. A credential's public key is
 * public; its counter and backup flags are kept to refuse a cloned authenticator's older counter.
 * Challenges are stored as their hash, bound to the browser that asked (its session, or a
 * ceremony cookie before sign-in), and used once. `trust_oidc_codes.auth_method` carries how the
 * person signed in into the id_token (`amr`, `acr`).
 */
function passkeys(engine: Engine): Migration {
  const bigint = engine === "sqlite" ? "integer" : "bigint";
  const statements = [
    `create table trust_passkeys (
      credential_id text primary key,
      human_id text not null references trust_humans (id),
      user_handle text not null,
      public_key text not null,
      counter ${bigint} not null,
      transports text not null,
      device_type text not null,
      backed_up integer not null,
      name text not null,
      created_at ${bigint} not null,
      last_used_at ${bigint}
    )`,
    "create index trust_passkeys_human on trust_passkeys (human_id)",
    `create table trust_webauthn_challenges (
      challenge_hash text primary key,
      purpose text not null,
      bound_to text not null,
      human_id text,
      created_at ${bigint} not null,
      expires_at ${bigint} not null,
      used_at ${bigint}
    )`,
    "create index trust_webauthn_challenges_expiry on trust_webauthn_challenges (expires_at)",
    "alter table trust_oidc_codes add column auth_method text",
  ];
  return {
    async up(db: Kysely<unknown>) {
      for (const statement of statements) await sql.raw(statement).execute(db);
    },
  };
}

/**
 * A person's "Allow" for an OpenID client (`client_id`): while the row exists the provider signs
 * them in to it without asking; disconnecting on `/account` deletes it, so the next sign-in asks
 * again. `service_did` is kept so the account page can name the service without the client list.
 */
function oidcConsents(engine: Engine): Migration {
  const bigint = engine === "sqlite" ? "integer" : "bigint";
  return {
    async up(db: Kysely<unknown>) {
      await sql
        .raw(`create table trust_oidc_consents (
          human_id text not null references trust_humans (id),
          client_id text not null,
          service_did text not null,
          granted_at ${bigint} not null,
          last_used_at ${bigint} not null,
          primary key (human_id, client_id)
        )`)
        .execute(db);
    },
  };
}

/**
 * Each binding's mints of the current day (the fixed window of the per-binding daily limit,
 * `floor(now / window)`): counted by the statement that records the mint, so the limit holds
 * exactly across replicas and restarts with no other store, and the mint stays one statement.
 */
function mintDay(engine: Engine): Migration {
  const bigint = engine === "sqlite" ? "integer" : "bigint";
  return {
    async up(db: Kysely<unknown>) {
      await sql.raw(`alter table trust_bindings add column mint_day ${bigint} not null default 0`).execute(db);
      await sql.raw("alter table trust_bindings add column mint_day_count integer not null default 0").execute(db);
    },
  };
}

/**
 * The person's opt-in to list a binding's agent key in the attestor's Web Bot Auth key directory
 * (`/.well-known/http-message-signatures-directory`): when they published it, null when not (the
 * default, since publishing tells anyone that this key is linked here). The partial index holds
 * only live published bindings, so the directory reads a few rows, not the whole table.
 */
function wbaDirectory(engine: Engine): Migration {
  const bigint = engine === "sqlite" ? "integer" : "bigint";
  return {
    async up(db: Kysely<unknown>) {
      await sql.raw(`alter table trust_bindings add column wba_published_at ${bigint}`).execute(db);
      await sql
        .raw(
          `create index trust_bindings_wba_published on trust_bindings (wba_published_at)
          where wba_published_at is not null and revoked_at is null`,
        )
        .execute(db);
    },
  };
}

/**
 * The services (`aud`) each binding has minted for, and the person's per-service suspension
 * (upstream §10.3.1). One row per (binding, aud): the mint reads it by primary key, and writes
 * it only when the pair is new or its last use is stale (see TrustService.mint).
 */
function bindingServices(engine: Engine): Migration {
  const bigint = engine === "sqlite" ? "integer" : "bigint";
  return {
    async up(db: Kysely<unknown>) {
      await sql
        .raw(`create table trust_binding_services (
          binding_id text not null references trust_bindings (id),
          aud text not null,
          first_mint_at ${bigint} not null,
          last_mint_at ${bigint} not null,
          suspended_at ${bigint},
          primary key (binding_id, aud)
        )`)
        .execute(db);
    },
  };
}

/** Facts about the deployment that must outlive Redis (see trust/replay-store.ts). */
function state(): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await sql.raw("create table trust_state (name text primary key, value text not null)").execute(db);
    },
  };
}

/**
 * Bounded authority (docs/authority.md). A grant is one binding's authority at one service (`aud`),
 * at most one per pair; `claims` is the JSON the mint spreads into a token, written with the grant
 * so the mint reads one column. Its events are its history. An approval is an agent's request to
 * widen a grant, waiting for the person; it keeps what the service declared when it was asked.
 */
function authority(engine: Engine): Migration {
  const bigint = engine === "sqlite" ? "integer" : "bigint";
  const statements = [
    `create table trust_grants (
      id text primary key,
      binding_id text not null references trust_bindings (id),
      human_id text not null references trust_humans (id),
      aud text not null,
      service_url text not null,
      permissions text not null,
      spend_limits text not null,
      claims text not null,
      expires_at ${bigint},
      revoked_at ${bigint},
      created_at ${bigint} not null,
      updated_at ${bigint} not null
    )`,
    "create unique index trust_grants_pair on trust_grants (binding_id, aud)",
    "create index trust_grants_human on trust_grants (human_id)",
    `create table trust_grant_events (
      id text primary key,
      grant_id text not null references trust_grants (id),
      at ${bigint} not null,
      kind text not null,
      permissions text not null,
      spend_limits text not null,
      expires_at ${bigint},
      method text not null,
      approval_id text
    )`,
    "create index trust_grant_events_grant on trust_grant_events (grant_id, at)",
    `create table trust_approvals (
      id text primary key,
      binding_id text not null references trust_bindings (id),
      human_id text not null references trust_humans (id),
      agent_did text not null,
      aud text not null,
      service_url text not null,
      declared text not null,
      permissions text not null,
      spend_limits text not null,
      reason text not null,
      status text not null,
      created_at ${bigint} not null,
      expires_at ${bigint} not null,
      decided_at ${bigint},
      method text
    )`,
    "create index trust_approvals_human on trust_approvals (human_id, created_at)",
    "create index trust_approvals_agent on trust_approvals (agent_did, created_at)",
    "create index trust_approvals_expiry on trust_approvals (expires_at)",
    // Set once a binding has a grant: the mint looks grants up only then (most bindings never
    // ask for more, and the mint is the attestor's hot path).
    "alter table trust_bindings add column has_grants integer not null default 0",
  ];
  return {
    async up(db: Kysely<unknown>) {
      for (const statement of statements) await sql.raw(statement).execute(db);
    },
  };
}

export interface AuthoritySchema {
  trust_grants: {
    id: string;
    binding_id: string;
    human_id: string;
    aud: string;
    /** The service's origin, where its discovery document (and so its descriptions) is read. */
    service_url: string;
    /** JSON array of permission names. */
    permissions: string;
    /** JSON array of spend limits in their wire form (RFC 9396 entries). */
    spend_limits: string;
    /** JSON object of the token claims: grant_id, scope, authorization_details. */
    claims: string;
    expires_at: number | null;
    revoked_at: number | null;
    created_at: number;
    updated_at: number;
  };
  trust_grant_events: {
    id: string;
    grant_id: string;
    at: number;
    /** granted, changed, revoked. */
    kind: string;
    permissions: string;
    spend_limits: string;
    expires_at: number | null;
    /** How the person approved: passkey or session. */
    method: string;
    approval_id: string | null;
  };
  trust_approvals: {
    id: string;
    binding_id: string;
    human_id: string;
    agent_did: string;
    aud: string;
    service_url: string;
    /** JSON: the service's declared permissions when the agent asked. */
    declared: string;
    permissions: string;
    spend_limits: string;
    reason: string;
    /** pending, approved, declined (expiry is read from expires_at). */
    status: string;
    created_at: number;
    expires_at: number;
    decided_at: number | null;
    method: string | null;
  };
}

export interface TrustSchema extends HumanSideSchema, PaymentSchema, AuthoritySchema {
  trust_state: { name: string; value: string };
  trust_binding_services: {
    binding_id: string;
    aud: string;
    first_mint_at: number;
    last_mint_at: number;
    suspended_at: number | null;
  };
  trust_signing_keys: {
    kid: string;
    public_x: string;
    private_enc: string;
    created_at: number;
    publish_at: number;
    activate_at: number;
  };
  trust_humans: { id: string; created_at: number };
  trust_verifications: {
    human_id: string;
    method: string;
    subject: string;
    created_at: number;
    revoked_at: number | null;
  };
  trust_bindings: {
    id: string;
    human_id: string;
    agent_did: string;
    agent_label: string | null;
    created_at: number;
    last_mint_at: number | null;
    expires_at: number;
    revoked_at: number | null;
    /** When the person published this agent's key for Web Bot Auth; null: not published. */
    wba_published_at: number | null;
    /** The daily window (`floor(now / window)`) that `mint_day_count` counts mints of. */
    mint_day: number;
    mint_day_count: number;
    /** 1 once the binding has had a grant (see the authority migration), else 0. */
    has_grants: number;
  };
  trust_link_requests: {
    id: string;
    agent_did: string;
    agent_pubkey: string;
    agent_label: string | null;
    callback_url: string | null;
    created_at: number;
    expires_at: number;
    phase: string;
    state: string;
    binding_id: string | null;
    human_id: string | null;
    resolved_at: number | null;
  };
}

export interface HumanSideSchema {
  trust_sessions: {
    id_hash: string;
    human_id: string;
    created_at: number;
    auth_at: number;
    auth_method: string;
    expires_at: number;
    revoked_at: number | null;
  };
  trust_magic_links: {
    token_hash: string;
    email: string;
    next: string;
    created_at: number;
    expires_at: number;
    used_at: number | null;
  };
  trust_oidc_codes: {
    code_hash: string;
    client_id: string;
    redirect_uri: string;
    code_challenge: string;
    nonce: string | null;
    human_id: string;
    auth_at: number;
    auth_method: string | null;
    scope: string | null;
    resource: string | null;
    created_at: number;
    expires_at: number;
    used_at: number | null;
    /** The grant its redemption created (codes for a resource); null before, and for sign-ins. */
    grant_id: string | null;
  };
  trust_oauth_grants: {
    id: string;
    human_id: string;
    client_id: string;
    client_name: string;
    resource: string;
    scope: string;
    auth_method: string | null;
    created_at: number;
    last_used_at: number;
    expires_at: number;
    revoked_at: number | null;
  };
  trust_oauth_refresh_tokens: {
    token_hash: string;
    grant_id: string;
    created_at: number;
    used_at: number | null;
  };
  trust_oauth_clients: {
    client_id: string;
    client_name: string;
    /** JSON array of exact redirect URIs. */
    redirect_uris: string;
    created_at: number;
    last_used_at: number;
  };
  trust_oidc_consents: {
    human_id: string;
    client_id: string;
    service_did: string;
    granted_at: number;
    last_used_at: number;
  };
  trust_passkeys: {
    credential_id: string;
    human_id: string;
    user_handle: string;
    public_key: string;
    counter: number;
    /** JSON array of the authenticator's transports. */
    transports: string;
    device_type: string;
    backed_up: number;
    name: string;
    created_at: number;
    last_used_at: number | null;
  };
  trust_webauthn_challenges: {
    challenge_hash: string;
    purpose: string;
    bound_to: string;
    human_id: string | null;
    created_at: number;
    expires_at: number;
    used_at: number | null;
  };
  trust_upstream_states: {
    state_hash: string;
    nonce: string;
    next: string;
    created_at: number;
    expires_at: number;
    used_at: number | null;
  };
}

export type SigningKeyRow = TrustSchema["trust_signing_keys"];
export type BindingRow = TrustSchema["trust_bindings"];
export type LinkRequestRow = TrustSchema["trust_link_requests"];
export type BindingServiceRow = TrustSchema["trust_binding_services"];
export type OidcConsentRow = TrustSchema["trust_oidc_consents"];

/**
 * Payment verification attempts: the opaque reference the provider sees instead of the human id,
 * and the provider's id for the attempt. A completed attempt records a `payment` verification once.
 */
function payment(engine: Engine): Migration {
  const bigint = engine === "sqlite" ? "integer" : "bigint";
  const statements = [
    `create table trust_payment_attempts (
      reference text primary key,
      human_id text not null references trust_humans (id),
      provider text not null,
      provider_reference text,
      created_at ${bigint} not null,
      completed_at ${bigint}
    )`,
    "create index trust_payment_attempts_human on trust_payment_attempts (human_id)",
  ];
  return {
    async up(db: Kysely<unknown>) {
      for (const statement of statements) await sql.raw(statement).execute(db);
    },
  };
}

export interface PaymentSchema {
  trust_payment_attempts: {
    reference: string;
    human_id: string;
    provider: string;
    provider_reference: string | null;
    created_at: number;
    completed_at: number | null;
  };
}
