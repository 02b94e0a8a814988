/**
 * Approvals (docs/authority.md, "Approvals: asking the person"): an agent asks its person for more
 * at one service, the person approves or declines on the approval page, and approving widens the
 * grant. A request keeps what the service declared when it was asked (`declared`), so the page,
 * the passkey rule and the defaults a new grant starts from do not depend on a later fetch.
 */
import {
  type DiscoveryPermissions,
  didWebHost,
  isDidSyntax,
  isPermissionName,
  MAX_AUTHORIZATION_DETAILS,
  MAX_PERMISSIONS,
  readSpendLimit,
  type SpendLimit,
  spendLimitDetail,
} from "@proto/protocol";
import type { Clock } from "../../platform/clock.js";
import { isUniqueViolation } from "../../platform/database.js";
import { ApiError, invalidRequest, notFound, rateLimited } from "../../platform/errors.js";
import { type RateLimiter, type RateLimitRule, rateLimitKey } from "../../platform/rate-limit.js";
import { randomToken } from "../../platform/tokens.js";
import type { AuthoritySchema, BindingRow } from "../migrations.js";
import { FetchRefused } from "../oidc/bounded-fetches.js";
import type { Db } from "../store.js";
import * as store from "../store.js";
import { diffGrant, type GrantDiff } from "./changes.js";
import { heldNow } from "./grant-edits.js";
import {
  type ApprovalMethod,
  contentProblem,
  findGrant,
  type Grant,
  type GrantContent,
  mergeLimits,
  putGrant,
} from "./grants.js";
import {
  AudienceMismatch,
  DeclarationProblem,
  defaultPermissions,
  type ServiceDeclarations,
  serviceOrigin,
} from "./service-declarations.js";

/** How long a request waits for the person. */
export const APPROVAL_TTL_MS = 10 * 60 * 1000;
/** The seconds an agent waits between polls (the 201 answer's `interval`). */
export const APPROVAL_POLL_INTERVAL_SECONDS = 3;
export const MAX_REASON_LENGTH = 200;
/** Decided and expired requests are kept this long (the agent's last polls, the account page). */
const KEPT_AFTER_EXPIRY_MS = 7 * 86400 * 1000;
/** One line of text, not blank: no C0 or C1 control character, DEL, or line/paragraph separator. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: refusing control characters is the point
const ONE_LINE = /^(?=.*\S)[^\u0000-\u001f\u007f-\u009f\u2028\u2029]+$/u;
const APPROVAL_ID = /^apr_[A-Za-z0-9_-]{1,64}$/;

export type ApprovalRow = AuthoritySchema["trust_approvals"];
export type ApprovalStatus = "pending" | "approved" | "declined" | "expired";

export interface Approval {
  id: string;
  bindingId: string;
  humanId: string;
  agentDid: string;
  aud: string;
  serviceUrl: string;
  /** What the service declared when the agent asked. */
  declared: DiscoveryPermissions;
  permissions: string[];
  spendLimits: SpendLimit[];
  /** The agent's words, to be shown as such. */
  reason: string;
  /** `expired` once past `expiresAt` while still pending. */
  status: ApprovalStatus;
  createdAt: number;
  expiresAt: number;
  decidedAt: number | null;
  method: ApprovalMethod | null;
}

export function toApproval(row: ApprovalRow, now: number): Approval {
  const expiresAt = Number(row.expires_at);
  const stored = row.status as Exclude<ApprovalStatus, "expired">;
  return {
    id: row.id,
    bindingId: row.binding_id,
    humanId: row.human_id,
    agentDid: row.agent_did,
    aud: row.aud,
    serviceUrl: row.service_url,
    declared: JSON.parse(row.declared) as DiscoveryPermissions,
    permissions: JSON.parse(row.permissions) as string[],
    spendLimits: (JSON.parse(row.spend_limits) as Record<string, unknown>[]).map(readSpendLimit),
    reason: row.reason,
    status: stored === "pending" && expiresAt <= now ? "expired" : stored,
    createdAt: Number(row.created_at),
    expiresAt,
    decidedAt: row.decided_at === null ? null : Number(row.decided_at),
    method: row.method as ApprovalMethod | null,
  };
}

/** The refusals of deciding, each a state the page explains. */
export const approvalDecided = () => new ApiError(409, "approval_decided", "this request was already answered");
export const approvalExpired = () => new ApiError(410, "approval_expired", "this request has expired");
export const bindingEnded = () =>
  new ApiError(
    410,
    "binding_expired",
    "the agent's link has ended; it must be linked again before it can be granted anything",
  );
export const passkeyRequired = () =>
  new ApiError(403, "passkey_required", "approving this needs a passkey (a phishing-resistant ceremony)");

// ---------------------------------------------------------------------------------------------
// Asking
// ---------------------------------------------------------------------------------------------

interface Asked {
  aud: string;
  origin: string;
  permissions: string[];
  spendLimits: SpendLimit[];
  reason: string;
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** Reads a `POST /v1/approvals` body; throws 400 `invalid_request` naming the first problem. */
export function readAsked(body: unknown, production: boolean): Asked {
  if (!isObject(body))
    throw invalidRequest("the body must be a JSON object with aud, permissions or spend_limits, and reason");
  const { aud, service_url: serviceUrl, permissions = [], spend_limits: limits = [], reason } = body;
  if (typeof aud !== "string" || aud.length > 2048 || !/^did:(web|key):/.test(aud) || !isDidSyntax(aud)) {
    throw invalidRequest("aud must be the service's DID (did:web: or did:key:)");
  }
  if (serviceUrl !== undefined && (typeof serviceUrl !== "string" || serviceUrl.length > 2048)) {
    throw invalidRequest("service_url must be the service's origin (https://host[:port])");
  }
  const origin = serviceOrigin(aud, serviceUrl as string | undefined, production);
  if (origin === undefined) {
    throw invalidRequest(
      serviceUrl === undefined
        ? "service_url is required when aud is not a did:web"
        : "service_url must be the service's origin: https://host[:port], no path, query or credentials",
    );
  }
  // The descriptions and passkey needs a person is shown must be the service's own: a did:web
  // service speaks for itself only from its host.
  const host = didWebHost(aud);
  if (host !== undefined && new URL(origin).host !== new URL(`https://${host}`).host) {
    throw invalidRequest(`service_url must be on ${host}, the host ${aud} names`);
  }
  if (!Array.isArray(permissions) || permissions.length > MAX_PERMISSIONS) {
    throw invalidRequest(`permissions must be an array of at most ${MAX_PERMISSIONS} permission names`);
  }
  for (const name of permissions) {
    if (typeof name !== "string" || !isPermissionName(name)) {
      throw invalidRequest(
        "permissions must hold permission names (lowercase segments separated by colons, like notes:read)",
      );
    }
  }
  if (!Array.isArray(limits) || limits.length > MAX_AUTHORIZATION_DETAILS) {
    throw invalidRequest(`spend_limits must be an array of at most ${MAX_AUTHORIZATION_DETAILS} limits`);
  }
  const spendLimits = limits.map((entry, index) => {
    if (!isObject(entry) || (entry.type !== undefined && entry.type !== "spend_limit")) {
      throw invalidRequest(`spend_limits[${index}] must be a spend limit object`);
    }
    try {
      return readSpendLimit(entry);
    } catch (error) {
      throw invalidRequest(`spend_limits[${index}]: ${(error as Error).message}`);
    }
  });
  if (permissions.length === 0 && spendLimits.length === 0) {
    throw invalidRequest("ask for at least one permission or spend limit");
  }
  const problem = contentProblem({ permissions: [], spendLimits, expiresAt: null });
  if (problem !== undefined) throw invalidRequest(`spend_limits: ${problem}`);
  if (typeof reason !== "string" || reason.length > MAX_REASON_LENGTH * 2) {
    throw invalidRequest(`reason must be one line of 1 to ${MAX_REASON_LENGTH} characters`);
  }
  const length = [...reason].length;
  if (length < 1 || length > MAX_REASON_LENGTH || !ONE_LINE.test(reason)) {
    throw invalidRequest(
      `reason must be one line of 1 to ${MAX_REASON_LENGTH} characters, not blank, without line breaks or control characters`,
    );
  }
  // A limit on a permission the grant lacks would allow nothing: asking for one asks for both.
  const names = [...new Set([...(permissions as string[]), ...spendLimits.map((limit) => limit.permission)])];
  return { aud, origin, permissions: names, spendLimits, reason };
}

/** The asked permissions and limits checked against what the service declares. */
function checkDeclared(asked: Asked, declared: DiscoveryPermissions): void {
  for (const name of asked.permissions) {
    if (!Object.hasOwn(declared, name)) {
      throw invalidRequest(`${asked.aud} declares no permission ${name}`, { permission: name });
    }
  }
  for (const limit of asked.spendLimits) {
    const currency = declared[limit.permission]?.currency;
    if (currency === undefined) {
      throw invalidRequest(`${limit.permission} is not a spending permission of ${asked.aud}`, {
        permission: limit.permission,
      });
    }
    if (currency !== limit.currency) {
      throw invalidRequest(`${limit.permission} spends in ${currency}, not ${limit.currency}`, {
        permission: limit.permission,
      });
    }
  }
}

export interface AskDeps {
  db: Db;
  clock: Clock;
  limiter: RateLimiter;
  rules: { perAgent: RateLimitRule; perPerson: RateLimitRule };
  declarations: ServiceDeclarations;
  production: boolean;
  /** Seconds a service's unreadable document is answered from memory: when asking again can help. */
  unreadableRetryAfterSeconds: number;
  /** The agent's binding in force, or the contract's refusal (401, 403, 410). */
  bindingInForce(agentDid: string): Promise<BindingRow>;
  /** Tells the person (e-mail); its failure does not undo the request, which also waits on /account. */
  notify(approval: Approval, binding: BindingRow): Promise<void>;
}

/** `POST /v1/approvals` from `agentDid` (its signature verified), from the address `clientIp`. */
export async function askApproval(deps: AskDeps, agentDid: string, body: unknown, clientIp: string): Promise<Approval> {
  const binding = await deps.bindingInForce(agentDid);
  const asked = readAsked(body, deps.production);
  const byAgent = await deps.limiter.hit(deps.rules.perAgent, rateLimitKey("agent", agentDid));
  if (!byAgent.allowed) throw rateLimited(byAgent.retryAfterSeconds, "too many approval requests from this agent");
  const byPerson = await deps.limiter.hit(deps.rules.perPerson, rateLimitKey("human", binding.human_id));
  if (!byPerson.allowed) {
    throw rateLimited(byPerson.retryAfterSeconds, "too many approval requests for this person; try again later");
  }
  const declared = await readDeclaration(deps, asked, clientIp);
  checkDeclared(asked, declared);
  const now = deps.clock.now();
  const row: ApprovalRow = {
    id: randomToken("apr_", 16),
    binding_id: binding.id,
    human_id: binding.human_id,
    agent_did: agentDid,
    aud: asked.aud,
    service_url: asked.origin,
    declared: JSON.stringify(declared),
    permissions: JSON.stringify(asked.permissions),
    spend_limits: JSON.stringify(asked.spendLimits.map(spendLimitDetail)),
    reason: asked.reason,
    status: "pending",
    created_at: now,
    expires_at: now + APPROVAL_TTL_MS,
    decided_at: null,
    method: null,
  };
  await deps.db.insertInto("trust_approvals").values(row).execute();
  const approval = toApproval(row, now);
  await deps.notify(approval, binding);
  return approval;
}

async function readDeclaration(deps: AskDeps, asked: Asked, clientIp: string): Promise<DiscoveryPermissions> {
  try {
    return (await deps.declarations.of(asked.origin, asked.aud, clientIp)).permissions;
  } catch (error) {
    if (error instanceof AudienceMismatch) throw invalidRequest(error.message);
    // The agent named a service without a readable document (none there, unreachable, invalid):
    // its request cannot be judged. A client's mistake, not the attestor's outage; the failure is
    // remembered a short while, which the message says.
    if (error instanceof DeclarationProblem) {
      throw new ApiError(
        400,
        "invalid_request",
        `${error.message}; the attestor needs it to know what ${asked.aud} declares (it is read again after ${deps.unreadableRetryAfterSeconds} seconds)`,
        { service_url: asked.origin },
      );
    }
    if (error instanceof FetchRefused) {
      if (error.status === 429) throw rateLimited(error.retryAfterSeconds, "too many services' documents fetched");
      throw new ApiError(503, "service_unavailable", error.message, undefined, error.retryAfterSeconds);
    }
    throw error;
  }
}

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------

async function findRow(db: Db, id: string): Promise<ApprovalRow | undefined> {
  if (!APPROVAL_ID.test(id)) return undefined;
  return db.selectFrom("trust_approvals").selectAll().where("id", "=", id).executeTakeFirst();
}

/** What the agent reads of its request: the approval, and what its approval granted. */
export interface AgentApprovalView {
  approval: Approval;
  /** When approved: the grant as the approval left it. */
  granted: { grantId: string; permissions: string[]; spendLimits: SpendLimit[] } | undefined;
}

/**
 * `GET /v1/approvals/{id}` by an agent whose binding is in force: only the agent that asked sees
 * its request (another's is 404, as an unknown one).
 */
export async function approvalForAgent(
  deps: Pick<AskDeps, "db" | "clock" | "bindingInForce">,
  agentDid: string,
  id: string,
): Promise<AgentApprovalView> {
  await deps.bindingInForce(agentDid);
  const { db } = deps;
  const now = deps.clock.now();
  const row = await findRow(db, id);
  if (row === undefined || row.agent_did !== agentDid) throw notFound("no such approval request");
  const approval = toApproval(row, now);
  if (approval.status !== "approved") return { approval, granted: undefined };
  const event = await db
    .selectFrom("trust_grant_events")
    .select(["grant_id", "permissions", "spend_limits"])
    .where("approval_id", "=", id)
    .executeTakeFirst();
  return {
    approval,
    granted:
      event === undefined
        ? undefined
        : {
            grantId: event.grant_id,
            permissions: JSON.parse(event.permissions) as string[],
            spendLimits: (JSON.parse(event.spend_limits) as Record<string, unknown>[]).map(readSpendLimit),
          },
  };
}

/** What approving would do: the authority in force now, and the grant's content after. */
export interface ProposedChange {
  before: GrantContent;
  after: GrantContent;
  diff: GrantDiff;
  /** The grant was revoked: approving restores it (from the service's defaults). */
  revoked: boolean;
}

/**
 * The change an approval makes to `grant` (the pair's grant, undefined without one) at `now`.
 * The base is what the agent holds now: a grant in force as it is; no grant, or an expired one,
 * the service's defaults (what tokens carry without a grant); a revoked grant nothing, and it is
 * restored from the defaults. The asked permissions are added and the asked limits merged in.
 */
export function proposedChange(approval: Approval, grant: Grant | undefined, now: number): ProposedChange {
  const defaults = defaultPermissions({
    serviceUrl: approval.serviceUrl,
    serviceDid: approval.aud,
    permissions: approval.declared,
  });
  const revoked = grant !== undefined && grant.revokedAt !== null;
  const before = heldNow(grant, defaults, now);
  const base = revoked ? heldNow(undefined, defaults, now) : before;
  const after: GrantContent = {
    permissions: [...new Set([...base.permissions, ...approval.permissions])],
    spendLimits: mergeLimits(base.spendLimits, approval.spendLimits),
    expiresAt: base.expiresAt,
  };
  return { before, after, diff: diffGrant(before, after, approval.declared), revoked };
}

/** The approval as its person reviews it on the approval page. */
export interface ApprovalReview {
  approval: Approval;
  agentLabel: string | null;
  /** The pair's grant now (undefined without one). */
  grant: Grant | undefined;
  change: ProposedChange;
}

/** The binding a decision applies to: the agent's live one, when it is still this person's. */
async function liveBindingOf(db: Db, approval: Approval, now: number): Promise<BindingRow | undefined> {
  const binding = await store.liveBindingForAgent(db, approval.agentDid);
  return binding !== undefined && binding.human_id === approval.humanId && binding.expires_at > now
    ? binding
    : undefined;
}

/** The approval page's view; undefined when there is none or it is another person's. */
export async function reviewApproval(
  db: Db,
  humanId: string,
  id: string,
  now: number,
): Promise<ApprovalReview | undefined> {
  const row = await findRow(db, id);
  if (row === undefined || row.human_id !== humanId) return undefined;
  const approval = toApproval(row, now);
  const binding = (await liveBindingOf(db, approval, now)) ?? (await store.findBinding(db, approval.bindingId));
  const grant = binding === undefined ? undefined : await findGrant(db, binding.id, approval.aud);
  return { approval, agentLabel: binding?.agent_label ?? null, grant, change: proposedChange(approval, grant, now) };
}

/** A person's requests still waiting for them, newest first (at most 20), with their agents' labels. */
export async function pendingApprovals(
  db: Db,
  humanId: string,
  now: number,
): Promise<(Approval & { agentLabel: string | null })[]> {
  const rows = await db
    .selectFrom("trust_approvals as a")
    .innerJoin("trust_bindings as b", "b.id", "a.binding_id")
    .selectAll("a")
    .select("b.agent_label")
    .where("a.human_id", "=", humanId)
    .where("a.status", "=", "pending")
    .where("a.expires_at", ">", now)
    .orderBy("a.created_at", "desc")
    .limit(20)
    .execute();
  return rows.map((row) => ({ ...toApproval(row, now), agentLabel: row.agent_label }));
}

// ---------------------------------------------------------------------------------------------
// Deciding
// ---------------------------------------------------------------------------------------------

/** Marks a pending, unexpired request decided; false when it was not (any more). */
async function settle(
  db: Db,
  id: string,
  status: "approved" | "declined",
  method: ApprovalMethod | null,
  now: number,
): Promise<boolean> {
  const result = await db
    .updateTable("trust_approvals")
    .set({ status, decided_at: now, method })
    .where("id", "=", id)
    .where("status", "=", "pending")
    .where("expires_at", ">", now)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

function stillOpen(approval: Approval): void {
  if (approval.status === "expired") throw approvalExpired();
  if (approval.status !== "pending") throw approvalDecided();
}

/**
 * The person approves (`method`: how they proved it now). In one transaction: the request is
 * still pending and unexpired, the agent still linked to them, the grant widened and its event
 * recorded with the approval's id. Refused with `passkey_required` when the change needs a passkey
 * and `method` is not one.
 */
export async function approveApproval(
  db: Db,
  humanId: string,
  id: string,
  method: ApprovalMethod,
  clock: Clock,
): Promise<Grant> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await db.transaction().execute(async (trx) => {
        const now = clock.now();
        const row = await findRow(trx, id);
        if (row === undefined || row.human_id !== humanId) throw notFound("no such approval request");
        const approval = toApproval(row, now);
        stillOpen(approval);
        const binding = await liveBindingOf(trx, approval, now);
        if (binding === undefined) throw bindingEnded();
        // Taken before the grant is read, so two approvals for one pair widen it one after the other.
        await trx
          .updateTable("trust_grants")
          .set((eb) => ({ updated_at: eb.ref("updated_at") }))
          .where("binding_id", "=", binding.id)
          .where("aud", "=", approval.aud)
          .execute();
        const change = proposedChange(approval, await findGrant(trx, binding.id, approval.aud), now);
        if (change.diff.needsPasskey && method !== "passkey") throw passkeyRequired();
        if (!(await settle(trx, id, "approved", method, now))) throw approvalDecided();
        return putGrant(
          trx,
          {
            bindingId: binding.id,
            humanId,
            aud: approval.aud,
            serviceUrl: approval.serviceUrl,
            now,
            method,
            approvalId: id,
          },
          change.after,
        );
      });
    } catch (error) {
      // Two first approvals for one pair both created its grant: the second, again, widens it.
      if (attempt === 0 && isUniqueViolation(error)) continue;
      throw error;
    }
  }
}

/** The person declines: nothing else changes. */
export async function declineApproval(db: Db, humanId: string, id: string, now: number): Promise<void> {
  const row = await findRow(db, id);
  if (row === undefined || row.human_id !== humanId) throw notFound("no such approval request");
  stillOpen(toApproval(row, now));
  if (!(await settle(db, id, "declined", null, now))) throw approvalDecided();
}

/** Forgets requests a week past their expiry, decided or not. */
export async function purgeApprovals(db: Db, now: number): Promise<void> {
  await db
    .deleteFrom("trust_approvals")
    .where("expires_at", "<", now - KEPT_AFTER_EXPIRY_MS)
    .execute();
}
