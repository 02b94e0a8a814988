/**
 * The person's own changes to a grant on `/account` (docs/authority.md, "Grants at the attestor"):
 * setting its whole content, or creating one for a service the agent used without one. Whether a
 * change needs a passkey is judged against what the agent's next token would carry without it
 * (the grant in force, else the service's defaults), so bringing back a revoked or used-up grant
 * is judged as the widening it is.
 */
import type { DiscoveryPermissions } from "@proto/protocol";
import type { Kysely } from "kysely";
import type { TrustSchema } from "../migrations.js";
import type { Db } from "../store.js";
import * as store from "../store.js";
import { diffGrant, type GrantDiff } from "./changes.js";
import {
  type ApprovalMethod,
  contentProblem,
  findGrant,
  type Grant,
  type GrantContent,
  grantById,
  inForce,
  putGrant,
  revokeGrant,
} from "./grants.js";

/** Which grant a change is for: one that exists (as the person saw it), or a new one. */
export type GrantTarget =
  | { kind: "existing"; grantId: string /** `updated_at` of the grant the form was made from. */; version: number }
  | { kind: "new"; bindingId: string; aud: string; serviceUrl: string };

export interface GrantEdit {
  humanId: string;
  target: GrantTarget;
  content: GrantContent;
  /** The service's declared permissions; undefined when its document could not be read. */
  declared: DiscoveryPermissions | undefined;
  /** The service's default permissions: what a token carries without a grant in force. */
  defaults: readonly string[];
  /** How the person confirmed this change: `passkey` when they just passed the ceremony. */
  method: ApprovalMethod;
  now: number;
}

export type GrantEditResult =
  | { outcome: "saved"; grant: Grant; diff: GrantDiff }
  /** Nothing would change; nothing was written. */
  | { outcome: "unchanged"; grant: Grant }
  /**
   * The change widens what the agent holds and was confirmed by session only; `diff` is from what
   * the agent holds now (heldNow) to what it would hold.
   */
  | { outcome: "needs_passkey"; diff: GrantDiff }
  /** The grant changed since the form was made (another tab, an approval): nothing was written. */
  | { outcome: "stale"; grant: Grant }
  /** A new grant was asked for, but the pair has one (made meanwhile). */
  | { outcome: "exists"; grant: Grant }
  /** Permissions the service does not declare were added, or limits on permissions not granted. */
  | { outcome: "invalid"; problem: string }
  /** Not the person's grant or agent, or the agent never used the service. */
  | { outcome: "unknown" }
  /** The agent's link was revoked: its grants are kept for their history only. */
  | { outcome: "agent_revoked" };

const NOTHING: GrantContent = { permissions: [], spendLimits: [], expiresAt: null };

/**
 * What the agent's next token for the service carries: the grant's content while it is in force,
 * nothing while it is revoked (the mint is refused), else the service's defaults without limits.
 */
export function heldNow(grant: Grant | undefined, defaults: readonly string[], now: number): GrantContent {
  if (grant !== undefined && grant.revokedAt !== null) return NOTHING;
  if (grant !== undefined && inForce(grant, now)) return grant;
  return { permissions: [...defaults], spendLimits: [], expiresAt: null };
}

/**
 * Whether saving `content` over `grant` needs a passkey. Without the service's declaration no
 * permission is known to be safe, so any permission added counts as one that needs a passkey.
 */
export function judgeChange(
  grant: Grant | undefined,
  content: GrantContent,
  declared: DiscoveryPermissions | undefined,
  defaults: readonly string[],
  now: number,
): GrantDiff {
  const held = heldNow(grant, defaults, now);
  // A content that is already past its expiry gives the agent nothing more than defaults.
  const after = inForce({ revokedAt: null, expiresAt: content.expiresAt }, now)
    ? content
    : heldNow(undefined, defaults, now);
  const judged =
    declared ??
    Object.fromEntries(after.permissions.map((name) => [name, { description: name, phishing_resistant: true }]));
  return diffGrant(held, after, judged);
}

/** The problem with `content` for a service that declares `declared`, given what was granted before. */
export function editProblem(
  before: GrantContent | undefined,
  content: GrantContent,
  declared: DiscoveryPermissions | undefined,
): string | undefined {
  const problem = contentProblem(content);
  if (problem !== undefined) return problem;
  const had = new Set(before?.permissions ?? []);
  const undeclared = content.permissions.filter((name) => !had.has(name) && declared?.[name] === undefined);
  if (undeclared.length > 0) return `the service does not declare ${undeclared.join(", ")}`;
  const granted = new Set(content.permissions);
  const loose = content.spendLimits.find((limit) => !granted.has(limit.permission));
  if (loose !== undefined) return `a limit on ${loose.permission}, which is not granted`;
  return undefined;
}

async function sameVersion(trx: Db, humanId: string, grantId: string, version: number): Promise<boolean> {
  // A write that changes nothing, so that on PostgreSQL the row stays locked until this change
  // commits: a concurrent change (another tab, an approval) waits, then finds another version.
  const locked = await trx
    .updateTable("trust_grants")
    .set((eb) => ({ updated_at: eb.ref("updated_at") }))
    .where("id", "=", grantId)
    .where("human_id", "=", humanId)
    .where("updated_at", "=", version)
    .executeTakeFirst();
  return Number(locked.numUpdatedRows) === 1;
}

/** Sets a grant's content as the person asked, in one transaction (see GrantEditResult). */
export async function editGrant(db: Kysely<TrustSchema>, edit: GrantEdit): Promise<GrantEditResult> {
  return db.transaction().execute((trx) => run(trx, edit));
}

async function run(trx: Db, edit: GrantEdit): Promise<GrantEditResult> {
  const { target, humanId, now } = edit;
  let current: Grant | undefined;
  let change: { bindingId: string; aud: string; serviceUrl: string };
  if (target.kind === "existing") {
    const locked = await sameVersion(trx, humanId, target.grantId, target.version);
    current = await grantById(trx, target.grantId);
    if (current === undefined || current.humanId !== humanId) return { outcome: "unknown" };
    if (!locked) return { outcome: "stale", grant: current };
    change = { bindingId: current.bindingId, aud: current.aud, serviceUrl: current.serviceUrl };
  } else {
    if ((await store.findServiceUse(trx, target.bindingId, target.aud)) === undefined) return { outcome: "unknown" };
    change = { bindingId: target.bindingId, aud: target.aud, serviceUrl: target.serviceUrl };
    const existing = await findGrant(trx, target.bindingId, target.aud);
    if (existing !== undefined) return { outcome: "exists", grant: existing };
  }
  const binding = await store.findBinding(trx, change.bindingId);
  if (binding === undefined || binding.human_id !== humanId) return { outcome: "unknown" };
  if (binding.revoked_at !== null) return { outcome: "agent_revoked" };
  // What a revoked grant held is given anew, so it must be declared like any addition.
  const problem = editProblem(current?.revokedAt === null ? current : undefined, edit.content, edit.declared);
  if (problem !== undefined) return { outcome: "invalid", problem };
  const diff = diffGrant(current, edit.content, edit.declared ?? {});
  if (current !== undefined && current.revokedAt === null && !diff.changes)
    return { outcome: "unchanged", grant: current };
  const judged = judgeChange(current, edit.content, edit.declared, edit.defaults, now);
  if (judged.needsPasskey && edit.method !== "passkey") return { outcome: "needs_passkey", diff: judged };
  const grant = await putGrant(trx, { ...change, humanId, now, method: edit.method }, edit.content);
  return { outcome: "saved", grant, diff };
}

/** Revokes the person's grant (no passkey: revoking only takes away). False when there is nothing to revoke. */
export async function revokeOwnGrant(
  db: Kysely<TrustSchema>,
  humanId: string,
  grantId: string,
  now: number,
): Promise<boolean> {
  return db.transaction().execute((trx) => revokeGrant(trx, humanId, grantId, { now, method: "session" }));
}
