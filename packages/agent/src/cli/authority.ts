/**
 * What the agent may do, in plain words: `proto trust token --explain` (what one token allows at
 * one service) and `proto grants` (what the person granted it, service by service).
 */
import { type DiscoveryPermissions, didWebHost, isDidSyntax, type SpendLimit, spendLimitDetail } from "@proto/protocol";
import type { Agent } from "../agent.js";
import type { HeldGrant } from "../approvals.js";
import { explainToken } from "../authority.js";
import { AgentError, UsageError } from "../errors.js";
import { discoverService } from "../service.js";
import { describePermissions, whenText } from "./authority-text.js";
import { attestationDocument } from "./documents.js";
import type { Output } from "./output.js";
import { inline } from "./terminal-text.js";

/** A service named by its DID, or by any https URL on it (its discovery document gives the DID). */
interface ServiceTarget {
  aud: string;
  /** Its declared permissions, when its discovery document was read. */
  declared: DiscoveryPermissions | undefined;
  /** Why they could not be read, for a did:web. */
  unread?: string;
}

async function resolveService(agent: Agent, service: string, signal: AbortSignal): Promise<ServiceTarget> {
  const http = { ...agent.httpOptions(), signal };
  if (/^https?:\/\//i.test(service)) {
    const discovery = await discoverService(service, http);
    return { aud: discovery.did, declared: discovery.document.permissions ?? {} };
  }
  if (!isDidSyntax(service)) {
    throw new UsageError("invalid_aud", `${JSON.stringify(service)} is neither a service DID nor an https URL`);
  }
  const host = didWebHost(service);
  if (host === undefined) return { aud: service, declared: undefined };
  // A did:web names where its document is: its descriptions make the explanation readable.
  try {
    const discovery = await discoverService(`https://${host}`, http);
    if (discovery.did === service) return { aud: service, declared: discovery.document.permissions ?? {} };
    return { aud: service, declared: undefined, unread: `https://${host} names another service` };
  } catch (error) {
    if (signal.aborted) throw error;
    return { aud: service, declared: undefined, unread: error instanceof AgentError ? error.code : "unreadable" };
  }
}

/** `proto trust token --explain <service>`. */
export async function runExplain(
  agent: Agent,
  service: string,
  options: { attestor?: string | undefined; fresh?: boolean | undefined },
  out: Output,
  signal: AbortSignal,
): Promise<void> {
  const target = await resolveService(agent, service, signal);
  const token = await agent.attestor(options.attestor).token(target.aud, { fresh: options.fresh === true, signal });
  const explained = explainToken(token.jwt);
  const grant = explained.grant;
  const defaults =
    target.declared === undefined
      ? null
      : Object.entries(target.declared)
          .filter(([, declaration]) => declaration.default === true)
          .map(([name]) => name);
  const lines = [
    `Token for ${inline(target.aud)} from ${inline(token.iss ?? "?")} at ${token.attestor_url} (${token.cached ? "cached" : "minted now"})`,
    `  expires ${whenText(token.expires_at)}; the person verified by ${inline(token.verification)}`,
    "",
  ];
  if (grant !== undefined) {
    lines.push(
      `The person's grant ${inline(grant.id)} allows${grant.permissions.length === 0 && grant.spendLimits.length === 0 ? " nothing at this service." : ":"}`,
      ...describePermissions(grant.permissions, grant.spendLimits, target.declared),
    );
  } else if (defaults === null) {
    lines.push(
      "No grant: the service's default permissions apply, and no spending.",
      `  (which these are, its discovery document says: ${target.unread === undefined ? "give the service's https URL to read it" : `it could not be read (${inline(target.unread)})`})`,
    );
  } else {
    lines.push(
      defaults.length === 0
        ? "No grant: the service's default permissions apply (it declares none), and no spending."
        : "No grant: the service's default permissions apply, and no spending:",
      ...describePermissions(defaults, [], target.declared),
    );
  }
  // An explanation, not the token: the bearer token stays out of it (`proto trust token` prints it).
  const { jwt: _jwt, ...described } = attestationDocument(token);
  out.result(
    {
      ...described,
      grant:
        grant === undefined
          ? null
          : { grant_id: grant.id, permissions: grant.permissions, spend_limits: grant.spendLimits.map(wireLimit) },
      default_permissions: grant === undefined ? defaults : null,
      service_permissions: target.declared ?? null,
    },
    lines,
  );
}

/** A spend limit as the wire writes it (RFC 9396 `authorization_details` entry). */
function wireLimit(limit: SpendLimit): Record<string, unknown> {
  return spendLimitDetail(limit);
}

type GrantState = "live" | "expired" | "revoked";

function stateOf(grant: HeldGrant, nowMs: number): GrantState {
  if (grant.revokedAt !== null) return "revoked";
  if (grant.expiresAt !== null && Date.parse(grant.expiresAt) <= nowMs) return "expired";
  return "live";
}

const STATE_TEXT: Record<GrantState, (grant: HeldGrant) => string> = {
  live: (grant) => (grant.expiresAt === null ? "live" : `live until ${grant.expiresAt}`),
  expired: (grant) => `used up ${grant.expiresAt ?? ""}: its tokens carry the service's defaults again`,
  revoked: (grant) => `revoked ${grant.revokedAt ?? ""}: no token for this service until the person approves again`,
};

/** `proto grants`. */
export async function runGrants(
  agent: Agent,
  options: { attestor?: string | undefined },
  out: Output,
  signal: AbortSignal,
): Promise<void> {
  const attestor = agent.attestor(options.attestor);
  const grants = await attestor.listGrants(signal);
  const now = Date.now();
  const lines: string[] = [];
  if (grants.length === 0) {
    lines.push(
      `No grants at ${attestor.url}: every service gives this agent its default permissions, and no spending.`,
    );
  } else {
    lines.push(`What the person granted this agent at ${attestor.url}, per service:`);
    for (const grant of grants) {
      const state = stateOf(grant, now);
      const name = grant.serviceName === undefined ? "" : ` ${inline(grant.serviceName)}`;
      const where = grant.serviceUrl === undefined ? "" : ` (${inline(grant.serviceUrl)})`;
      lines.push("", `${inline(grant.aud)}${name}${where}: ${STATE_TEXT[state](grant)}`);
      lines.push(
        ...(grant.permissions.length === 0 && grant.spendLimits.length === 0
          ? ["  no permissions"]
          : describePermissions(grant.permissions, grant.spendLimits, undefined)),
      );
    }
  }
  out.result(
    {
      attestor_url: attestor.url,
      grants: grants.map((grant) => ({
        grant_id: grant.id,
        aud: grant.aud,
        service_url: grant.serviceUrl ?? null,
        service_name: grant.serviceName ?? null,
        state: stateOf(grant, now),
        permissions: grant.permissions,
        spend_limits: grant.spendLimits.map(wireLimit),
        expires_at: grant.expiresAt,
        revoked_at: grant.revokedAt,
        updated_at: grant.updatedAt,
      })),
    },
    lines,
  );
}
