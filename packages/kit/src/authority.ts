/**
 * Bounded authority in the kit (docs/authority.md, "Enforcement in the kit"): the permissions a
 * caller holds, the check of a route's permissions, and spending under the limits of a grant.
 * Everything here reads the verified token: no network round trip, a set lookup and, to spend, one
 * store transaction.
 */
import {
  type AuthorityGrant,
  type AuthorityRefusalContext,
  type DiscoveryPermissions,
  insufficientPermission,
  MAX_AMOUNT,
  protoError,
  type SpendLimit,
  type SpendRefusal,
  spendLimitExceeded,
  spendPeriodKey,
} from "@proto/protocol";
import { KitConfigError } from "./config-error.js";
import { kitError } from "./errors.js";
import type { KitStore, SpendRecord } from "./store/types.js";

export const MAX_SPEND_REFERENCE_LENGTH = 200;
const CURRENCY = /^[A-Z]{3}$/;
/** Control characters (C0, DEL, C1) and the Unicode line and paragraph separators. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const NOT_ONE_LINE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/;

/** Who asks, as bounded authority sees it: the grant its token carried, and the attestor of that token. */
export interface AuthorityHolder {
  /** The grant of the verified token; undefined without one (the defaults apply). */
  grant: AuthorityGrant | undefined;
  /** The canonical issuer of the attestor that issued the token, when there is a token. */
  issuer: string | undefined;
  /**
   * What the token itself grants when it is no agent's (a person's MCP client: the scopes the
   * person consented to); undefined for agents, whose grant or the defaults decide.
   */
  consented?: readonly string[] | undefined;
}

/** An agent that spends: who it is, and its account. */
export interface Spender extends AuthorityHolder {
  did: string;
  accountId: string;
}

/** What a service asks to spend. `permission` is needed only when several permissions spend in `currency`. */
export interface SpendRequest {
  /** In minor units of `currency` (cents for EUR): an integer from 1 to 10^12. */
  amount: number;
  /** ISO 4217, the currency the spending permission declares. */
  currency: string;
  /** The service's name for this spend (`pin:42`), 1 to 200 characters on one line: the same one again is the same spend. */
  reference: string;
  permission?: string;
}

/** A spend as `kit.spend` answers it. */
export interface SpendResult {
  reference: string;
  amount: number;
  currency: string;
  permission: string;
  grantId: string;
  /** The calendar period it counts in (`2026-12`), when the grant limits one. */
  periodKey?: string;
  /** Spent in that period, this spend included. */
  spentInPeriod?: number;
  /** What may still be spent in that period. */
  remainingInPeriod?: number;
  /** True when the reference was spent before: this is the first spend's answer, and nothing was counted. */
  replayed: boolean;
}

export interface AuthorityDeps {
  permissions: Readonly<DiscoveryPermissions>;
  serviceDid: string;
  store: KitStore;
  now(): number;
  /** The `{trust_url}` of an attestor by its canonical issuer, when the kit knows it. */
  attestorUrl(issuer: string): string | undefined;
}

function malformed(message: string) {
  return protoError("malformed_request", { message });
}

function checkSpendRequest(request: SpendRequest): void {
  const { amount, currency, reference } = request;
  if (typeof amount !== "number" || !Number.isSafeInteger(amount) || amount < 1 || amount > MAX_AMOUNT) {
    throw malformed(`amount must be an integer from 1 to ${MAX_AMOUNT} (minor units)`);
  }
  if (typeof currency !== "string" || !CURRENCY.test(currency)) {
    throw malformed("currency must be an ISO 4217 code (three capital letters, EUR)");
  }
  if (
    typeof reference !== "string" ||
    reference.trim().length === 0 ||
    reference.length > MAX_SPEND_REFERENCE_LENGTH ||
    NOT_ONE_LINE.test(reference)
  ) {
    throw malformed(`reference must be 1 to ${MAX_SPEND_REFERENCE_LENGTH} characters on one line`);
  }
}

export class Authority {
  readonly #deps: AuthorityDeps;
  /** Granted at sign-up: what a token without a grant holds. */
  readonly #defaults: ReadonlySet<string>;

  constructor(deps: AuthorityDeps) {
    this.#deps = deps;
    this.#defaults = new Set(
      Object.entries(deps.permissions)
        .filter(([, declaration]) => declaration.default === true)
        .map(([name]) => name),
    );
  }

  /**
   * A route's `permissions`, checked when the route is defined: each must be declared, so that a
   * typo fails at start instead of locking the route for everyone. `where` names the route.
   */
  routePermissions(permissions: readonly string[] | undefined, where: string): readonly string[] {
    if (permissions === undefined) return [];
    if (!Array.isArray(permissions)) {
      throw new KitConfigError("permissions", `${where}: permissions must be an array of permission names`);
    }
    const declared = Object.keys(this.#deps.permissions);
    for (const name of permissions) {
      if (typeof name !== "string" || !Object.hasOwn(this.#deps.permissions, name)) {
        throw new KitConfigError(
          "permissions",
          `${where}: permission ${JSON.stringify(name)} is not declared in createKit's permissions (${declared.length === 0 ? "none declared" : declared.join(", ")})`,
        );
      }
    }
    return Object.freeze([...new Set(permissions)]);
  }

  /** The permissions a caller holds: its grant's when its token carries one, else the defaults. */
  held(holder: AuthorityHolder | undefined): ReadonlySet<string> {
    if (holder?.consented !== undefined) return new Set(holder.consented);
    if (holder?.grant !== undefined) return new Set(holder.grant.permissions);
    return this.#defaults;
  }

  /** Throws 403 `insufficient_permission` naming what `holder` lacks of `permissions`. */
  require(holder: AuthorityHolder | undefined, permissions: readonly string[]): void {
    const held = this.held(holder);
    const missing = permissions.filter((name) => !held.has(name));
    if (missing.length > 0) throw insufficientPermission(missing, this.#refusalContext(holder));
  }

  /**
   * Spends `amount` under the spender's grant (docs/authority.md): the permission must be granted
   * with a spend limit; `per_transaction` first, then `per_period` for the current calendar period,
   * counted atomically; the same reference again answers the first spend and counts nothing.
   */
  async spend(spender: Spender, request: SpendRequest): Promise<SpendResult> {
    checkSpendRequest(request);
    const { amount, currency, reference } = request;
    const permission = this.#spendingPermission(request.permission, currency);
    const context = this.#refusalContext(spender);
    this.require(spender, [permission]);
    const grant = spender.grant;
    const nothing = (): SpendRefusal => ({ permission, currency, limit: "per_transaction", remaining: 0 });
    // Held without a grant (a default spending permission): no limit was set, so nothing may be spent.
    if (grant === undefined) throw spendLimitExceeded(nothing(), context);
    const store = this.#deps.store;
    const first = await store.findSpend(grant.id, reference);
    if (first !== undefined) return this.#replay(first, request, permission);
    const limit = grant.spendLimits.find((entry) => entry.permission === permission && entry.currency === currency);
    if (limit === undefined) throw spendLimitExceeded(nothing(), context);
    const now = this.#deps.now();
    const period =
      limit.period !== undefined && limit.perPeriod !== undefined
        ? { name: limit.period, key: spendPeriodKey(limit.period, now), limit: limit.perPeriod }
        : undefined;
    if (limit.perTransaction !== undefined && amount > limit.perTransaction) {
      const left =
        period === undefined ? Infinity : period.limit - (await store.spentInPeriod(grant.id, permission, period.key));
      throw spendLimitExceeded(this.#refusal(limit, "per_transaction", left), context);
    }
    const outcome = await store.recordSpend({
      grantId: grant.id,
      reference,
      permission,
      currency,
      amount,
      periodKey: period?.key,
      periodLimit: period?.limit,
      accountId: spender.accountId,
      agentDid: spender.did,
      attestor: spender.issuer,
      spentAt: now,
    });
    if (outcome.outcome === "duplicate") return this.#replay(outcome.spend, request, permission);
    if (outcome.outcome === "over_limit") {
      throw spendLimitExceeded(this.#refusal(limit, "per_period", (period?.limit ?? 0) - outcome.total), context);
    }
    return toResult(outcome.spend, false);
  }

  /** What the refusal tells the agent may still be spent in one transaction now. */
  #refusal(limit: SpendLimit, which: SpendRefusal["limit"], leftInPeriod: number): SpendRefusal {
    const remaining = Math.max(0, Math.min(limit.perTransaction ?? Infinity, leftInPeriod));
    return {
      permission: limit.permission,
      currency: limit.currency,
      limit: which,
      remaining,
      ...(limit.period === undefined ? {} : { period: limit.period }),
    };
  }

  /** The first spend of a reference again: its answer, unless the request is another spend. */
  #replay(first: SpendRecord, request: SpendRequest, permission: string): SpendResult {
    if (first.amount !== request.amount || first.currency !== request.currency || first.permission !== permission) {
      throw kitError(
        "kit_spend_reference_reused",
        `the reference ${JSON.stringify(first.reference)} was spent already, for ${first.amount} ${first.currency} on ${first.permission}: a new spend needs a new reference`,
      );
    }
    return toResult(first, true);
  }

  /** The spending permission a spend is counted under: named, or the one declared with `currency`. */
  #spendingPermission(name: string | undefined, currency: string): string {
    const declared = this.#deps.permissions;
    if (name !== undefined) {
      const declaration = Object.hasOwn(declared, name) ? declared[name] : undefined;
      if (declaration === undefined) throw new Error(`kit.spend: permission ${JSON.stringify(name)} is not declared`);
      if (declaration.currency === undefined) {
        throw new Error(
          `kit.spend: permission ${JSON.stringify(name)} declares no currency: it is not a spending permission`,
        );
      }
      if (declaration.currency !== currency) throw malformed(`currency must be ${declaration.currency} for ${name}`);
      return name;
    }
    const spending = Object.entries(declared).filter(([, declaration]) => declaration.currency !== undefined);
    if (spending.length === 0)
      throw new Error("kit.spend: the service declares no spending permission (one with a currency)");
    const matching = spending.filter(([, declaration]) => declaration.currency === currency).map(([n]) => n);
    if (matching.length > 1) {
      throw new Error(`kit.spend: ${matching.join(", ")} all spend in ${currency}: name the permission`);
    }
    const [only] = matching;
    if (only === undefined) {
      const currencies = [...new Set(spending.map(([, declaration]) => declaration.currency))];
      throw malformed(`currency must be ${currencies.join(" or ")}: this service spends in no other`);
    }
    return only;
  }

  #refusalContext(holder: AuthorityHolder | undefined): AuthorityRefusalContext {
    const attestor = holder?.issuer === undefined ? undefined : this.#deps.attestorUrl(holder.issuer);
    return { audience: this.#deps.serviceDid, ...(attestor === undefined ? {} : { attestor }) };
  }
}

function toResult(spend: SpendRecord, replayed: boolean): SpendResult {
  const result: SpendResult = {
    reference: spend.reference,
    amount: spend.amount,
    currency: spend.currency,
    permission: spend.permission,
    grantId: spend.grantId,
    replayed,
  };
  if (spend.periodKey !== undefined) result.periodKey = spend.periodKey;
  if (spend.periodTotal !== undefined) result.spentInPeriod = spend.periodTotal;
  if (spend.periodTotal !== undefined && spend.periodLimit !== undefined) {
    result.remainingInPeriod = Math.max(0, spend.periodLimit - spend.periodTotal);
  }
  return result;
}
