/**
 * The attestor's answers about bounded authority (docs/authority.md): the agent's grants
 * (`GET /v1/grants`) and approval requests (`POST /v1/approvals`, `GET /v1/approvals/{id}`), read
 * into typed values; and the checks an approval request passes before it is sent.
 */
import {
  type AuthorityGrant,
  isDidSyntax,
  isPermissionName,
  MAX_AUTHORIZATION_DETAILS,
  MAX_PERMISSIONS,
  readGrantClaims,
  type SpendLimit,
  spendLimitDetail,
  spendLimitProblem,
} from "@proto/protocol";
import { UsageError } from "./errors.js";

/** A grant the agent holds at one service, as `GET /v1/grants` lists it. */
export interface HeldGrant extends AuthorityGrant {
  /** The service's DID. */
  aud: string;
  /** Where the service answers, when the attestor says. */
  serviceUrl?: string;
  /** The service's name, when the attestor says. */
  serviceName?: string;
  /** ISO 8601, or null: when the grant is used up (tokens then carry the defaults again). */
  expiresAt: string | null;
  /** ISO 8601, or null: when the person revoked it (minting for the service is then refused). */
  revokedAt: string | null;
  updatedAt: string | null;
}

export type ApprovalStatus = "pending" | "approved" | "declined" | "expired";
const STATUSES: readonly ApprovalStatus[] = ["pending", "approved", "declined", "expired"];

/** An approval request and where it stands. */
export interface Approval {
  /** `approval_id`. */
  id: string;
  status: ApprovalStatus;
  /** ISO 8601: the request lives 10 minutes. */
  expiresAt: string;
  /** The page the person opens to approve (in the answer to the request). */
  url?: string;
  /** Seconds between polls, as the attestor asks. */
  interval?: number;
  /** The widened grant, once approved. */
  grant?: AuthorityGrant;
}

export interface ApprovalRequestOptions {
  /** The service's DID. */
  aud: string;
  /** Where the attestor reads the service's declared permissions; default `https://` + the did:web host. */
  serviceUrl?: string;
  /** Permissions to add. */
  permissions?: readonly string[];
  /** Spend limits to set or raise (amounts in minor units). */
  spendLimits?: readonly SpendLimit[];
  /** One line shown to the person as the agent's words: 1 to 200 characters. */
  reason: string;
  signal?: AbortSignal;
}

export const MAX_REASON_LENGTH = 200;
/** Control characters (C0, DEL, C1) and the Unicode line and paragraph separators. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const NOT_ONE_LINE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/;

/** The body of `POST /v1/approvals`, after the checks the attestor applies too (UsageError otherwise). */
export function approvalBody(options: ApprovalRequestOptions): Record<string, unknown> {
  const { aud, serviceUrl, reason } = options;
  const permissions = [...new Set(options.permissions ?? [])];
  const spendLimits = options.spendLimits ?? [];
  if (!isDidSyntax(aud)) {
    throw new UsageError("invalid_aud", `the audience must be a service DID, got ${JSON.stringify(aud)}`);
  }
  if (permissions.length === 0 && spendLimits.length === 0) {
    throw new UsageError("invalid_argument", "an approval asks for at least one permission or spend limit");
  }
  if (permissions.length > MAX_PERMISSIONS || spendLimits.length > MAX_AUTHORIZATION_DETAILS) {
    throw new UsageError(
      "invalid_argument",
      `an approval asks for at most ${MAX_PERMISSIONS} permissions and ${MAX_AUTHORIZATION_DETAILS} spend limits`,
    );
  }
  const badName = permissions.find((name) => !isPermissionName(name));
  if (badName !== undefined) {
    throw new UsageError("invalid_argument", `${JSON.stringify(badName)} is not a permission name`);
  }
  for (const limit of spendLimits) {
    const problem = spendLimitProblem(limit);
    if (problem !== undefined)
      throw new UsageError("invalid_argument", `spend limit on ${limit.permission}: ${problem}`);
  }
  if (reason.trim().length === 0 || reason.length > MAX_REASON_LENGTH || NOT_ONE_LINE.test(reason)) {
    throw new UsageError(
      "invalid_reason",
      `the reason is one line of 1 to ${MAX_REASON_LENGTH} characters, shown to the person as the agent's words`,
    );
  }
  return {
    aud,
    ...(serviceUrl === undefined ? {} : { service_url: serviceUrl }),
    ...(permissions.length === 0 ? {} : { permissions }),
    ...(spendLimits.length === 0
      ? {}
      : { spend_limits: spendLimits.map((limit) => withoutType(spendLimitDetail(limit))) }),
    reason,
  };
}

function withoutType(detail: Record<string, unknown>): Record<string, unknown> {
  const { type: _type, ...rest } = detail;
  return rest;
}

const text = (value: unknown) => (typeof value === "string" ? value : undefined);
const time = (value: unknown) => (typeof value === "string" ? value : null);

/**
 * One entry of `GET /v1/grants`; undefined when it is not of the contract's shape (the listing
 * goes on without it).
 */
export function readHeldGrant(entry: unknown): HeldGrant | undefined {
  if (typeof entry !== "object" || entry === null) return undefined;
  const raw = entry as Record<string, unknown>;
  const aud = text(raw.aud);
  if (aud === undefined) return undefined;
  const grant = grantOf(raw);
  if (grant === undefined) return undefined;
  const serviceUrl = text(raw.service_url);
  const serviceName = text(raw.service_name);
  return {
    ...grant,
    aud,
    ...(serviceUrl === undefined ? {} : { serviceUrl }),
    ...(serviceName === undefined ? {} : { serviceName }),
    expiresAt: time(raw.expires_at),
    revokedAt: time(raw.revoked_at),
    updatedAt: time(raw.updated_at),
  };
}

/** `{ grant_id, scope, authorization_details }` read as a token's claims are (an empty scope: none). */
function grantOf(raw: Record<string, unknown>): AuthorityGrant | undefined {
  try {
    return readGrantClaims({
      grant_id: raw.grant_id,
      ...(raw.scope === undefined || raw.scope === "" ? {} : { scope: raw.scope }),
      ...(raw.authorization_details === undefined ? {} : { authorization_details: raw.authorization_details }),
    });
  } catch {
    return undefined;
  }
}

/** An approval as the attestor answers it; undefined when the answer lacks its id, status or expiry. */
export function readApproval(body: unknown): Approval | undefined {
  if (typeof body !== "object" || body === null) return undefined;
  const raw = body as Record<string, unknown>;
  const id = text(raw.approval_id);
  const status = STATUSES.find((each) => each === raw.status);
  const expiresAt = text(raw.expires_at);
  if (id === undefined || status === undefined || expiresAt === undefined) return undefined;
  const url = text(raw.approval_url);
  const interval = raw.interval;
  const grant =
    typeof raw.grant === "object" && raw.grant !== null ? grantOf(raw.grant as Record<string, unknown>) : undefined;
  return {
    id,
    status,
    expiresAt,
    ...(url === undefined ? {} : { url }),
    ...(typeof interval === "number" && Number.isFinite(interval) && interval > 0 ? { interval } : {}),
    ...(grant === undefined ? {} : { grant }),
  };
}
