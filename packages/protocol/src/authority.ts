/**
 * Bounded authority (docs/authority.md): the grant an attestation or an access token carries, the
 * spend limits of RFC 9396 `authorization_details`, the calendar periods spends are counted in, and
 * the two refusals a service answers with. Shared by the attestor that writes the claims, the kit
 * that enforces them and the agent that explains them, so all three read one definition.
 */
import { isPermissionName, MAX_PERMISSIONS } from "./discovery.js";
import { ProtoError } from "./errors.js";

/** The RFC 9396 `type` of a spend limit in `authorization_details`. */
export const SPEND_LIMIT_TYPE = "spend_limit";
export const SPEND_PERIODS = ["day", "week", "month"] as const;
export type SpendPeriod = (typeof SPEND_PERIODS)[number];
/** Amounts are integers in minor units; this bound keeps every sum exact in a double and a bigint. */
export const MAX_AMOUNT = 1_000_000_000_000;
export const MAX_AUTHORIZATION_DETAILS = 16;
export const MAX_GRANT_ID_LENGTH = 64;
const GRANT_ID = /^[A-Za-z0-9_-]{1,64}$/;
const CURRENCY = /^[A-Z]{3}$/;

/** One spend limit: on `permission`, in `currency`, per transaction and/or per calendar period. */
export interface SpendLimit {
  permission: string;
  currency: string;
  /** The most one transaction may spend, in minor units. */
  perTransaction?: number;
  /** The most spent within one `period`, in minor units. */
  perPeriod?: number;
  period?: SpendPeriod;
}

/** What a person granted an agent at one service, as a token carries it. */
export interface AuthorityGrant {
  /** The grant identifier (`grant_id`): spends are counted under it. */
  id: string;
  /** The granted permission names (`scope`). */
  permissions: string[];
  spendLimits: SpendLimit[];
}

/** The claims that carry a grant: `scope`, `authorization_details` and `grant_id`. */
export interface GrantClaims {
  scope?: string;
  authorization_details?: Record<string, unknown>[];
  grant_id: string;
}

function isAmount(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0 && value <= MAX_AMOUNT;
}

/** A spend limit's problem, or undefined when it is well formed. */
export function spendLimitProblem(limit: SpendLimit): string | undefined {
  if (!isPermissionName(limit.permission)) return "permission must be a permission name";
  if (!CURRENCY.test(limit.currency)) return "currency must be an ISO 4217 code";
  if (limit.perTransaction === undefined && limit.perPeriod === undefined) {
    return "a spend limit needs per_transaction or per_period";
  }
  if (limit.perTransaction !== undefined && !isAmount(limit.perTransaction)) {
    return `per_transaction must be an integer from 0 to ${MAX_AMOUNT} (minor units)`;
  }
  if ((limit.perPeriod === undefined) !== (limit.period === undefined)) {
    return "per_period and period go together";
  }
  if (limit.perPeriod !== undefined && !isAmount(limit.perPeriod)) {
    return `per_period must be an integer from 0 to ${MAX_AMOUNT} (minor units)`;
  }
  if (limit.period !== undefined && !SPEND_PERIODS.includes(limit.period)) {
    return "period must be day, week or month";
  }
  return undefined;
}

/** A spend limit as an RFC 9396 authorization details entry. */
export function spendLimitDetail(limit: SpendLimit): Record<string, unknown> {
  const detail: Record<string, unknown> = {
    type: SPEND_LIMIT_TYPE,
    permission: limit.permission,
    currency: limit.currency,
  };
  if (limit.perTransaction !== undefined) detail.per_transaction = limit.perTransaction;
  if (limit.perPeriod !== undefined) {
    detail.per_period = limit.perPeriod;
    detail.period = limit.period;
  }
  return detail;
}

/** Reads one `spend_limit` entry; throws a message when it is malformed. */
export function readSpendLimit(detail: Record<string, unknown>): SpendLimit {
  const { permission, currency, per_transaction, per_period, period } = detail;
  if (typeof permission !== "string" || typeof currency !== "string") {
    throw new TypeError("a spend_limit names its permission and currency");
  }
  const limit: SpendLimit = { permission, currency };
  if (per_transaction !== undefined) limit.perTransaction = per_transaction as number;
  if (per_period !== undefined) limit.perPeriod = per_period as number;
  if (period !== undefined) limit.period = period as SpendPeriod;
  const problem = spendLimitProblem(limit);
  if (problem !== undefined) throw new TypeError(problem);
  return limit;
}

/** The claims of a grant, to be merged into an attestation or access token payload. */
export function grantClaims(grant: AuthorityGrant): GrantClaims {
  const claims: GrantClaims = { grant_id: grant.id };
  if (grant.permissions.length > 0) claims.scope = grant.permissions.join(" ");
  if (grant.spendLimits.length > 0) claims.authorization_details = grant.spendLimits.map(spendLimitDetail);
  return claims;
}

/**
 * The grant a token's payload carries: undefined when it carries none (an upstream or older
 * attestor: the service's default permissions apply). Throws a TypeError naming the problem when
 * the claims are present but malformed (the token is then invalid).
 * `authorization_details` entries of other types are ignored, as RFC 9396 lets a server do.
 */
export function readGrantClaims(payload: Record<string, unknown>): AuthorityGrant | undefined {
  const { grant_id: id, scope, authorization_details: details } = payload;
  if (id === undefined) {
    if (scope !== undefined || details !== undefined) {
      throw new TypeError("scope and authorization_details come with a grant_id");
    }
    return undefined;
  }
  if (typeof id !== "string" || !GRANT_ID.test(id)) throw new TypeError("grant_id must be a short identifier");
  let permissions: string[] = [];
  if (scope !== undefined) {
    if (typeof scope !== "string" || scope.length > 64 * MAX_PERMISSIONS) throw new TypeError("scope must be a string");
    permissions = scope.split(" ").filter((name) => name !== "");
    if (permissions.length > MAX_PERMISSIONS || !permissions.every(isPermissionName)) {
      throw new TypeError("scope must list permission names");
    }
  }
  const spendLimits: SpendLimit[] = [];
  if (details !== undefined) {
    if (!Array.isArray(details) || details.length > MAX_AUTHORIZATION_DETAILS) {
      throw new TypeError(`authorization_details must be an array of at most ${MAX_AUTHORIZATION_DETAILS}`);
    }
    for (const detail of details) {
      if (typeof detail !== "object" || detail === null || Array.isArray(detail)) {
        throw new TypeError("authorization_details holds objects");
      }
      const entry = detail as Record<string, unknown>;
      if (typeof entry.type !== "string") throw new TypeError("an authorization_details entry names its type");
      if (entry.type === SPEND_LIMIT_TYPE) spendLimits.push(readSpendLimit(entry));
    }
  }
  return { id, permissions: [...new Set(permissions)], spendLimits };
}

function pad(value: number, width = 2): string {
  return String(value).padStart(width, "0");
}

/**
 * The calendar period (UTC) that `nowMs` falls in, as the key spends are counted under: `2026-12-02`
 * for a day, the ISO week `2026-W49` for a week (Monday first), `2026-12` for a month.
 */
export function spendPeriodKey(period: SpendPeriod, nowMs: number): string {
  const date = new Date(nowMs);
  const year = date.getUTCFullYear();
  if (period === "month") return `${year}-${pad(date.getUTCMonth() + 1)}`;
  if (period === "day") return `${year}-${pad(date.getUTCMonth() + 1)}-${pad(date.getUTCDate())}`;
  // ISO 8601 week: the week of the Thursday of this week.
  const day = Date.UTC(year, date.getUTCMonth(), date.getUTCDate());
  const weekday = (date.getUTCDay() + 6) % 7;
  const thursday = new Date(day + (3 - weekday) * 86_400_000);
  const weekYear = thursday.getUTCFullYear();
  const week = Math.floor((thursday.getTime() - Date.UTC(weekYear, 0, 1)) / (7 * 86_400_000)) + 1;
  return `${weekYear}-W${pad(week)}`;
}

/** When the period that `nowMs` falls in ends (UTC), in milliseconds. */
export function spendPeriodEnd(period: SpendPeriod, nowMs: number): number {
  const date = new Date(nowMs);
  const start = Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), date.getUTCDate());
  if (period === "day") return start + 86_400_000;
  if (period === "week") return start + (7 - ((date.getUTCDay() + 6) % 7)) * 86_400_000;
  return Date.UTC(date.getUTCFullYear(), date.getUTCMonth() + 1, 1);
}

/** The codes of bounded authority a service answers with. */
export const AUTHORITY_ERRORS = {
  insufficient_permission: { status: 403, message: "The person has not granted this permission" },
  spend_limit_exceeded: { status: 403, message: "The spend exceeds the limit the person set" },
} as const;

export type AuthorityErrorCode = keyof typeof AUTHORITY_ERRORS;

/** What the agent is told to ask for: the attestor that can widen the grant. */
export interface AuthorityRefusalContext {
  /** The attestor's `{trust_url}`, when the service knows it. */
  attestor?: string;
  /** The service's DID (the grant's audience). */
  audience: string;
}

/** 403 `insufficient_permission`, naming what is missing in `details.missing`. */
export function insufficientPermission(missing: readonly string[], context: AuthorityRefusalContext): ProtoError {
  const spec = AUTHORITY_ERRORS.insufficient_permission;
  const details: Record<string, unknown> = { missing: [...missing], audience: context.audience };
  if (context.attestor !== undefined) details.attestor = context.attestor;
  return new ProtoError("insufficient_permission", spec.status, `${spec.message}: ${missing.join(", ")}`, { details });
}

export interface SpendRefusal {
  permission: string;
  currency: string;
  /** Which limit refused: the transaction's or the period's. */
  limit: "per_transaction" | "per_period";
  /** What may still be spent in one transaction now, in minor units. */
  remaining: number;
  period?: SpendPeriod;
}

/** 403 `spend_limit_exceeded`, with the remaining amount in `details.remaining`. */
export function spendLimitExceeded(refusal: SpendRefusal, context: AuthorityRefusalContext): ProtoError {
  const spec = AUTHORITY_ERRORS.spend_limit_exceeded;
  const details: Record<string, unknown> = {
    permission: refusal.permission,
    currency: refusal.currency,
    limit: refusal.limit,
    remaining: refusal.remaining,
    audience: context.audience,
  };
  if (refusal.period !== undefined) details.period = refusal.period;
  if (context.attestor !== undefined) details.attestor = context.attestor;
  return new ProtoError("spend_limit_exceeded", spec.status, spec.message, { details });
}
