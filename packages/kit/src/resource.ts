import type { Recipient } from "@proto/protocol";
import type { AccountRecord } from "./store/types.js";
import { isoTime } from "./util.js";

export type AccountState = "UNCLAIMED" | "INVITED" | "CLAIMED";

/**
 * The account resource of upstream §6.5, what introspection answers; explicit signup (§6.4) and
 * claim completion (§7.4) answer parts of it (`SignupAnswer`, `ClaimAnswer`). Times are RFC 3339 UTC strings. `owner` is set only once CLAIMED
 * (never the pending recipient, §13.2); `unclaimed_expires_at` is present only while an unclaimed
 * account has a TTL (`limits.unclaimed_ttl_seconds`).
 */
export interface AccountResource {
  /** Stable id of the account; it survives key rotation. */
  account_id: string;
  /** The agent DID the account answers to. */
  agent_did: string;
  state: AccountState;
  created_at: string;
  unclaimed_expires_at?: string;
  owner: AccountOwner | null;
}

export interface AccountOwner {
  /** The normalised recipient verified at claim time (§7.7). */
  identity: Recipient;
  /** The person behind the identity at this service, when one is known (a sign-in with an attestor). */
  user_id: string | null;
  claimed_at: string;
}

/**
 * What the kit tells a signed-in person about an account they own or were attested for (the kit's
 * own owner route, not an upstream shape): the resource plus what only the person may see.
 */
export interface OwnerAccountView extends AccountResource {
  relation: "owner" | "attested";
  /** The latest accepted attestation. The pseudonym (`sub_h`) is kept by the service, not echoed. */
  attested: {
    issuer: string;
    verification: string | null;
    attested_at: string;
    /** End of the attested session: the attestation's `exp`, or the extended window. */
    session_expires_at: string | null;
  } | null;
  /** Set when the owner revoked the agent key and has not bound a new one. */
  key_revoked_at: string | null;
}

/** Explicit signup's answer (upstream §6.4): the resource without `owner`. */
export type SignupAnswer = Omit<AccountResource, "owner">;

/** Claim completion's answer (upstream §7.4): the account, its state and its new owner. */
export interface ClaimAnswer {
  account_id: string;
  state: AccountState;
  owner: AccountOwner | null;
}

/** Pre-claim key rotation's answer (upstream §8.1): the account's new DID and when the old one stopped. */
export interface KeyRotationAnswer {
  account_id: string;
  agent_did: string;
  old_revoked_at: string;
}

export function toSignupAnswer(resource: AccountResource): SignupAnswer {
  const { owner: _owner, ...answer } = resource;
  return answer;
}

export function toClaimAnswer(resource: AccountResource): ClaimAnswer {
  return { account_id: resource.account_id, state: resource.state, owner: resource.owner };
}

export function accountState(record: AccountRecord, now: number): AccountState {
  if (record.claimedAt !== undefined) return "CLAIMED";
  if (record.invitation !== undefined && record.invitation.expiresAt > now) return "INVITED";
  return "UNCLAIMED";
}

export function accountExpiresAt(record: AccountRecord, ttlSeconds: number | undefined): number | undefined {
  if (ttlSeconds === undefined || record.claimedAt !== undefined) return undefined;
  return record.createdAt + ttlSeconds * 1000;
}

export function toAccountResource(record: AccountRecord, now: number, ttlSeconds: number | undefined): AccountResource {
  const state = accountState(record, now);
  const expiresAt = accountExpiresAt(record, ttlSeconds);
  return {
    account_id: record.id,
    agent_did: record.did,
    state,
    created_at: isoTime(record.createdAt),
    ...(expiresAt === undefined ? {} : { unclaimed_expires_at: isoTime(expiresAt) }),
    owner:
      record.claimedAt !== undefined && record.ownerRecipient !== undefined
        ? {
            identity: record.ownerRecipient,
            user_id: record.ownerPersonId ?? null,
            claimed_at: isoTime(record.claimedAt),
          }
        : null,
  };
}

export function toOwnerAccountView(
  record: AccountRecord,
  resource: AccountResource,
  relation: OwnerAccountView["relation"],
): OwnerAccountView {
  return {
    ...resource,
    relation,
    attested:
      record.attestedIssuer === undefined || record.attestedAt === undefined
        ? null
        : {
            issuer: record.attestedIssuer,
            verification: record.attestedVerification ?? null,
            attested_at: isoTime(record.attestedAt),
            session_expires_at: record.attestedUntil === undefined ? null : isoTime(record.attestedUntil),
          },
    key_revoked_at: record.keyRevokedAt === undefined ? null : isoTime(record.keyRevokedAt),
  };
}
