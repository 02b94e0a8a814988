/** Table shapes of the kit's store. Timestamps are integer milliseconds since the epoch. */

export interface KitPeopleTable {
  id: string;
  /** The canonical issuer (the attestor's configured name, e.g. `proto-trust`). */
  issuer: string;
  /** The pairwise subject: an attestation's `sub_h`, an id_token's `sub`. */
  subject: string;
  created_at: number;
}

export interface KitAccountsTable {
  id: string;
  /** The agent DID the account answers to now (after an owner revocation: the last one, revoked). */
  did: string;
  created_at: number;
  claimed_at: number | null;
  /** `recipientKey` of the identity that claimed the account. */
  owner_key: string | null;
  /** The canonical recipient that claimed it, as JSON. */
  owner_recipient: string | null;
  /** The person (issuer + subject) of the session that claimed it, when it came from a sign-in. */
  owner_person_id: string | null;
  /** The person the agent's attestations name (canonical issuer + `sub_h`). */
  person_id: string | null;
  attested_issuer: string | null;
  attested_verification: string | null;
  attested_at: number | null;
  /** End of the attested session (attestation `exp`, or the extended window). */
  attested_until: number | null;
  /** Set when the owner revoked the agent key and no new key is bound yet. */
  key_revoked_at: number | null;
}

export interface KitRevokedKeysTable {
  did: string;
  account_id: string | null;
  revoked_at: number;
  reason: string;
}

export interface KitInvitationsTable {
  id: string;
  account_id: string;
  token_hash: string;
  recipient_key: string;
  recipient: string;
  created_at: number;
  expires_at: number;
  /** `pending`, `replaced` or `claimed`. */
  status: string;
  resolved_at: number | null;
  /** Where the claim page sends the person after the claim (on the operator's allow-list). */
  redirect_url: string | null;
  /** When the e-mail link of an `email` invitation signed its recipient in (once). */
  signed_in_at: number | null;
}

export interface KitSessionsTable {
  id_hash: string;
  created_at: number;
  expires_at: number;
  authenticated_at: number | null;
  identities: string;
  person_id: string | null;
  csrf: string;
}

export interface KitSignInRequestsTable {
  state_hash: string;
  attestor: string;
  code_verifier: string;
  nonce: string;
  return_to: string;
  created_at: number;
  expires_at: number;
}

export interface KitRateCountersTable {
  bucket: string;
  window_start: number;
  count: number;
}

/** One spend under a grant (docs/authority.md); amounts in minor units of `currency`. */
export interface KitSpendsTable {
  id: string;
  grant_id: string;
  /** The service's reference of the spend: the same one again is the same spend. */
  reference: string;
  permission: string;
  currency: string;
  amount: number;
  /** The calendar period it was counted in (`2026-12`), when the grant limits one. */
  period_key: string | null;
  /** The period's total with this spend, and its limit then. */
  period_total: number | null;
  period_limit: number | null;
  account_id: string;
  agent_did: string;
  /** The canonical issuer of the attestor whose token carried the grant. */
  attestor: string | null;
  spent_at: number;
}

/** What a grant spent on a permission within one calendar period. */
export interface KitSpendTotalsTable {
  grant_id: string;
  permission: string;
  period_key: string;
  total: number;
}

export interface KitDatabase {
  kit_people: KitPeopleTable;
  kit_accounts: KitAccountsTable;
  kit_revoked_keys: KitRevokedKeysTable;
  kit_invitations: KitInvitationsTable;
  kit_sessions: KitSessionsTable;
  kit_signin_requests: KitSignInRequestsTable;
  kit_rate_counters: KitRateCountersTable;
  kit_spends: KitSpendsTable;
  kit_spend_totals: KitSpendTotalsTable;
}
