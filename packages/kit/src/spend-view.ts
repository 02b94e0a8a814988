/**
 * The spends of an agent as its person sees them on the owner route: by grant, newest first, each
 * amount written in its currency (`0.50 EUR`) next to the exact minor units.
 */
import { formatAmount } from "@proto/protocol";
import type { SpendRecord } from "./store/types.js";
import { isoTime } from "./util.js";

/** How many spends of one account the owner route lists (the newest). */
export const OWNER_SPENDS_PER_ACCOUNT = 50;

export interface SpendView {
  reference: string;
  permission: string;
  /** In minor units of `currency`. */
  amount: number;
  currency: string;
  /** The amount for people: `0.50 EUR`. */
  amount_text: string;
  spent_at: string;
}

/** The spends under one grant. */
export interface GrantSpendsView {
  grant_id: string;
  spends: SpendView[];
}

/** Each account's spends grouped by grant, in the order of their newest spend. */
export function spendsByAccount(spends: readonly SpendRecord[]): Map<string, GrantSpendsView[]> {
  const accounts = new Map<string, Map<string, GrantSpendsView>>();
  const newestFirst = [...spends].sort((a, b) => b.spentAt - a.spentAt);
  for (const spend of newestFirst) {
    let grants = accounts.get(spend.accountId);
    if (grants === undefined) {
      grants = new Map();
      accounts.set(spend.accountId, grants);
    }
    let grant = grants.get(spend.grantId);
    if (grant === undefined) {
      grant = { grant_id: spend.grantId, spends: [] };
      grants.set(spend.grantId, grant);
    }
    grant.spends.push({
      reference: spend.reference,
      permission: spend.permission,
      amount: spend.amount,
      currency: spend.currency,
      amount_text: formatAmount(spend.amount, spend.currency),
      spent_at: isoTime(spend.spentAt),
    });
  }
  return new Map([...accounts].map(([account, grants]) => [account, [...grants.values()]]));
}
