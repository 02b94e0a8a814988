import type { Recipient } from "@proto/protocol";
import type { AccountRecord } from "./store/types.js";
import { isoTime } from "./util.js";

export type AccountState = "UNCLAIMED" | "INVITED" | "CLAIMED";

/**
 * The account resource (`GET {accounts}/me`, and every kit answer that returns an account).
 * Times are RFC 3339 UTC strings; members that do not apply are `null`, never absent.
 */
export interface AccountResource {
  /** Stable id of the account; it survives key rotation. */
  id: string;
  /** The agent DID the account answers to. */
  did: string;
  state: AccountState;
  created_at: string;
  /** When an unclaimed account expires (`limits.unclaimed_ttl_seconds`); null without a TTL or once claimed. */
  expires_at: string | null;
  /** The latest accepted attestation. The pseudonym (`sub_h`) is kept by the service, not echoed. */
  attested: {
    issuer: string;
    verification: string | null;
    attested_at: string;
    /** End of the attested session: the attestation's `exp`, or the extended window. */
    session_expires_at: string | null;
  } | null;
  /** The pending invitation (state INVITED). */
  invitation: { recipient: Recipient; expires_at: string } | null;
  /** The owner (state CLAIMED): the recipient identity that claimed it. */
  owner: { recipient: Recipient; claimed_at: string } | null;
  /** Set when the owner revoked the agent key and has not bound a new one. */
  key_revoked_at: string | null;
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
    id: record.id,
    did: record.did,
    state,
    created_at: isoTime(record.createdAt),
    expires_at: expiresAt === undefined ? null : isoTime(expiresAt),
    attested:
      record.attestedIssuer === undefined || record.attestedAt === undefined
        ? null
        : {
            issuer: record.attestedIssuer,
            verification: record.attestedVerification ?? null,
            attested_at: isoTime(record.attestedAt),
            session_expires_at: record.attestedUntil === undefined ? null : isoTime(record.attestedUntil),
          },
    invitation:
      state === "INVITED" && record.invitation !== undefined
        ? { recipient: record.invitation.recipient, expires_at: isoTime(record.invitation.expiresAt) }
        : null,
    owner:
      record.claimedAt !== undefined && record.ownerRecipient !== undefined
        ? { recipient: record.ownerRecipient, claimed_at: isoTime(record.claimedAt) }
        : null,
    key_revoked_at: record.keyRevokedAt === undefined ? null : isoTime(record.keyRevokedAt),
  };
}
