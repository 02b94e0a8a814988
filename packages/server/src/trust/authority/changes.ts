/**
 * What a change to a grant does, in the terms the person approves: which permissions it adds or
 * removes, which limits it sets, and whether approving it needs a passkey (docs/authority.md:
 * a permission declared `phishing_resistant`, or any spend limit set or raised).
 */
import type { DiscoveryPermissions, SpendLimit } from "@proto/protocol";
import type { GrantContent } from "./grants.js";

export interface LimitChange {
  before: SpendLimit | undefined;
  after: SpendLimit | undefined;
}

export interface GrantDiff {
  added: string[];
  removed: string[];
  limits: LimitChange[];
  expiryChanged: boolean;
  /** Whether anything changes at all. */
  changes: boolean;
  /** Whether approving it needs a phishing-resistant ceremony. */
  needsPasskey: boolean;
}

const limitKey = (limit: SpendLimit) => `${limit.permission} ${limit.currency}`;

function sameLimit(a: SpendLimit, b: SpendLimit): boolean {
  return a.perTransaction === b.perTransaction && a.perPeriod === b.perPeriod && a.period === b.period;
}

/** Whether `after` allows more than `before`: a higher or newly present amount, or a longer period's bound. */
function raises(before: SpendLimit | undefined, after: SpendLimit): boolean {
  if (before === undefined) return true;
  const higher = (a: number | undefined, b: number | undefined) => b !== undefined && (a === undefined || b > a);
  return (
    higher(before.perTransaction, after.perTransaction) ||
    higher(before.perPeriod, after.perPeriod) ||
    before.period !== after.period
  );
}

/** The difference from `before` (undefined: no grant yet) to `after`, judged by the service's declaration. */
export function diffGrant(
  before: GrantContent | undefined,
  after: GrantContent,
  declared: DiscoveryPermissions,
): GrantDiff {
  const had = new Set(before?.permissions ?? []);
  const has = new Set(after.permissions);
  const added = after.permissions.filter((name) => !had.has(name));
  const removed = [...had].filter((name) => !has.has(name));
  const beforeLimits = new Map((before?.spendLimits ?? []).map((limit) => [limitKey(limit), limit]));
  const afterLimits = new Map(after.spendLimits.map((limit) => [limitKey(limit), limit]));
  const limits: LimitChange[] = [];
  for (const [key, limit] of afterLimits) {
    const previous = beforeLimits.get(key);
    if (previous === undefined || !sameLimit(previous, limit)) limits.push({ before: previous, after: limit });
  }
  for (const [key, limit] of beforeLimits) if (!afterLimits.has(key)) limits.push({ before: limit, after: undefined });
  const expiryChanged = (before?.expiresAt ?? null) !== after.expiresAt;
  const needsPasskey =
    added.some((name) => declared[name]?.phishing_resistant === true) ||
    limits.some((change) => change.after !== undefined && raises(change.before, change.after));
  return {
    added,
    removed,
    limits,
    expiryChanged,
    changes: added.length > 0 || removed.length > 0 || limits.length > 0 || expiryChanged,
    needsPasskey,
  };
}
