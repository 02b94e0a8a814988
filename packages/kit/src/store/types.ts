import type { Recipient } from "@proto/protocol";

/** A human as the service knows them: a canonical issuer and a pairwise subject (`sub_h` = `sub`). */
export interface PersonRecord {
  id: string;
  issuer: string;
  subject: string;
  createdAt: number;
}

export type InvitationStatus = "pending" | "replaced" | "claimed";

export interface InvitationRecord {
  id: string;
  accountId: string;
  tokenHash: string;
  /** `recipientKey` of the canonical recipient. */
  recipientKey: string;
  recipient: Recipient;
  createdAt: number;
  expiresAt: number;
  status: InvitationStatus;
  resolvedAt: number | undefined;
  /** Where the claim page sends the person after the claim (on the operator's allow-list). */
  redirectUrl: string | undefined;
  /** When the e-mail link of an `email` invitation signed its recipient in (it works once). */
  signedInAt: number | undefined;
}

export interface AccountRecord {
  id: string;
  did: string;
  createdAt: number;
  claimedAt: number | undefined;
  ownerKey: string | undefined;
  ownerRecipient: Recipient | undefined;
  ownerPersonId: string | undefined;
  personId: string | undefined;
  attestedIssuer: string | undefined;
  attestedVerification: string | undefined;
  attestedAt: number | undefined;
  attestedUntil: number | undefined;
  keyRevokedAt: number | undefined;
  /** The pending invitation, if any (it may have lapsed: compare `expiresAt`). */
  invitation: InvitationRecord | undefined;
}

export interface NewAccount {
  did: string;
  now: number;
  personId?: string | undefined;
  attestation?: AttestationUpdate | undefined;
}

export interface AttestationUpdate {
  issuer: string;
  verification: string | undefined;
  at: number;
  until: number;
}

export interface SessionRecord {
  idHash: string;
  createdAt: number;
  expiresAt: number;
  /** When the person last authenticated (ms); without it the session is always too stale. */
  authenticatedAt: number | undefined;
  identities: Recipient[];
  personId: string | undefined;
  csrf: string;
}

export interface SignInRequestRecord {
  stateHash: string;
  attestor: string;
  codeVerifier: string;
  nonce: string;
  returnTo: string;
  createdAt: number;
  expiresAt: number;
}

/** One spend under a grant, as stored (docs/authority.md). Amounts in minor units of `currency`. */
export interface SpendRecord {
  id: string;
  grantId: string;
  reference: string;
  permission: string;
  currency: string;
  amount: number;
  /** The calendar period it was counted in, when the grant limits one. */
  periodKey: string | undefined;
  /** The period's total with this spend. */
  periodTotal: number | undefined;
  /** The period's limit when it was spent. */
  periodLimit: number | undefined;
  accountId: string;
  agentDid: string;
  /** The canonical issuer of the attestor whose token carried the grant. */
  attestor: string | undefined;
  spentAt: number;
}

export type NewSpend = Omit<SpendRecord, "id" | "periodTotal">;

/**
 * What recording a spend did: `recorded` (with the period's new total), `over_limit` (nothing
 * written; the period's total now), or `duplicate` (the grant already has a spend with this
 * reference, answered as stored; nothing written).
 */
export type SpendOutcome =
  | { outcome: "recorded"; spend: SpendRecord }
  | { outcome: "over_limit"; total: number }
  | { outcome: "duplicate"; spend: SpendRecord };

export type RotateOutcome = "rotated" | "did_in_use" | "stale";

/**
 * Where the kit keeps accounts, invitations, owner sessions, the revocation list and rate counters.
 * `openKitStore` gives the SQLite and PostgreSQL implementation; every method that changes more
 * than one row is atomic.
 */
export interface KitStore {
  readonly engine: "sqlite" | "postgres";

  /** True when the DID is on the revocation list. */
  isRevoked(did: string): Promise<boolean>;

  /** The person for (issuer, subject), created on first use. */
  upsertPerson(issuer: string, subject: string, now: number): Promise<PersonRecord>;
  findPerson(id: string): Promise<PersonRecord | undefined>;

  findAccountByDid(did: string): Promise<AccountRecord | undefined>;
  findAccountById(id: string): Promise<AccountRecord | undefined>;
  /** Creates the account for `did`, or answers the one that exists (`created: false`). */
  createAccount(input: NewAccount): Promise<{ account: AccountRecord; created: boolean }>;
  /** Records a presented attestation; links the person when the account has none yet. */
  recordAttestation(accountId: string, personId: string | undefined, update: AttestationUpdate): Promise<void>;
  /** Accounts the person's agents created (attested) or that the person owns. */
  listAccountsForPerson(personId: string | undefined, ownerKeys: string[]): Promise<AccountRecord[]>;

  /**
   * Moves the account from `fromDid` to `toDid` and puts `fromDid` on the revocation list, in one
   * transaction. `unclaimedOnly` makes it fail (`stale`) once the account is claimed.
   */
  rotateKey(input: {
    accountId: string;
    fromDid: string;
    toDid: string;
    now: number;
    reason: string;
    unclaimedOnly: boolean;
  }): Promise<RotateOutcome>;
  /** Puts the account's current DID on the revocation list. False when it already was. */
  revokeKey(input: { accountId: string; did: string; now: number; reason: string }): Promise<boolean>;

  /** Stores a new pending invitation, marking any pending one `replaced`, atomically. */
  replaceInvitation(input: {
    accountId: string;
    tokenHash: string;
    recipient: Recipient;
    recipientKey: string;
    redirectUrl?: string | undefined;
    now: number;
    expiresAt: number;
  }): Promise<InvitationRecord>;
  findInvitationByTokenHash(tokenHash: string): Promise<InvitationRecord | undefined>;
  /**
   * Records that the e-mail link of a pending, unexpired invitation signed its recipient in: true
   * the first time only (the link works once), false when it was used, or the invitation is no
   * longer pending and unexpired.
   */
  markEmailSignIn(invitationId: string, now: number): Promise<boolean>;
  /**
   * Consumes the pending invitation and makes its account CLAIMED, atomically. False when the
   * invitation is no longer pending and unexpired, or the account is already claimed.
   */
  claim(input: {
    invitationId: string;
    accountId: string;
    ownerKey: string;
    ownerRecipient: Recipient;
    ownerPersonId: string | undefined;
    now: number;
  }): Promise<boolean>;

  createSession(record: SessionRecord): Promise<void>;
  findSession(idHash: string, now: number): Promise<SessionRecord | undefined>;
  deleteSession(idHash: string): Promise<void>;
  createSignInRequest(record: SignInRequestRecord): Promise<void>;
  /** Removes and answers the sign-in request (single use), unless it expired. */
  takeSignInRequest(stateHash: string, now: number): Promise<SignInRequestRecord | undefined>;

  /** Adds one to a fixed-window counter and answers the new count. */
  incrementCounter(bucket: string, windowStart: number): Promise<number>;

  /** The grant's spend with `reference`, if any. */
  findSpend(grantId: string, reference: string): Promise<SpendRecord | undefined>;
  /** What the grant spent on `permission` in the period `periodKey` (0 when nothing). */
  spentInPeriod(grantId: string, permission: string, periodKey: string): Promise<number>;
  /**
   * Records a spend in one transaction: with a `periodKey` and `periodLimit`, only when the
   * period's total stays within the limit (exact under concurrent spends, across replicas on
   * PostgreSQL); never twice for one grant and reference.
   */
  recordSpend(spend: NewSpend): Promise<SpendOutcome>;
  /** The newest spends of these accounts, at most `limit` per account, newest first. */
  listSpends(accountIds: string[], limit: number): Promise<SpendRecord[]>;

  /** Deletes expired sessions, sign-in requests and rate counters older than `counterHorizon`. */
  purgeExpired(now: number, counterHorizon: number): Promise<void>;
  close(): Promise<void>;
}
