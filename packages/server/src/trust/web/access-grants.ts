import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Clock } from "../../platform/clock.js";
import { html, type SafeHtml } from "../../platform/html.js";
import { SINGLE_LINE } from "../../platform/input-rules.js";
import { activeGrants, type Grant, grantOf, revokeGrant } from "../oidc/grants.js";
import type { Db } from "../store.js";
import { date } from "./dates.js";
import { sendMessage } from "./layout.js";
import type { HumanSession } from "./session.js";

const revokeForm = {
  type: "object",
  required: ["grant_id"],
  properties: {
    _csrf: { type: "string", maxLength: 256 },
    grant_id: { type: "string", minLength: 1, maxLength: 64, pattern: SINGLE_LINE },
  },
} as const;

function resourceHost(resource: string): string {
  return new URL(resource).host;
}

/**
 * The applications that reach a resource as the person (OAuth grants, e.g. an MCP client), each
 * with its Revoke button: revoking ends its refresh token at once; an access token already
 * issued lives out its 10 minutes.
 */
export async function accessSection(db: Db, humanId: string, csrf: string, now: number): Promise<SafeHtml> {
  const grants = await activeGrants(db, humanId, now);
  if (grants.length === 0) {
    return html`<p class="muted">No application reaches a service as you.</p>`;
  }
  return html`<p class="muted">These applications reach a service as you until you revoke them (or they go unused for 30 days). Revoking stops them within 10 minutes.</p>
  <ul class="services" aria-label="Applications with access">${grants.map((g: Grant) => {
    const host = resourceHost(g.resource);
    return html`<li class="service">
    <div><strong>${g.clientName}</strong> <span class="muted">on</span> <strong title="${g.resource}">${host}</strong></div>
    ${g.scope === "" ? "" : html`<div class="muted">Scope <code>${g.scope}</code></div>`}
    <div class="muted">Allowed ${date(g.createdAt)}</div>
    <div class="muted">Last used ${date(g.lastUsedAt)}</div>
    <form method="post" action="/account/access/revoke">
      <input type="hidden" name="_csrf" value="${csrf}">
      <input type="hidden" name="grant_id" value="${g.id}">
      <button class="secondary" type="submit">Revoke<span class="visually-hidden"> ${g.clientName} on ${host}</span></button>
    </form>
  </li>`;
  })}</ul>`;
}

/**
 * The account page's notice after a Revoke (`?done=access-revoked&grant=...`): said only while
 * true, so a reload after the client was allowed again says nothing.
 */
export async function accessRevokedNotice(db: Db, humanId: string, grantId: unknown): Promise<SafeHtml | string> {
  if (typeof grantId !== "string" || grantId.length > 64) return "";
  const grant = await grantOf(db, humanId, grantId);
  if (grant === undefined || grant.revokedAt === null) return "";
  return html`<p class="notice" role="status"><strong>${grant.clientName} no longer has access to ${resourceHost(grant.resource)}.</strong> It cannot renew its access; a token it already holds stops working within 10 minutes.</p>`;
}

/** `POST /account/access/revoke`, behind the account forms' guard (`accountForm`). */
export function registerAccessRoutes(
  app: FastifyInstance,
  deps: {
    db: Db;
    clock: Clock;
    accountForm: (request: FastifyRequest, reply: FastifyReply) => Promise<HumanSession | FastifyReply>;
  },
): void {
  app.post<{ Body: { grant_id: string } }>(
    "/account/access/revoke",
    {
      schema: { body: revokeForm, consumes: ["application/x-www-form-urlencoded"] },
      preHandler: app.csrfProtection,
    },
    async (request, reply) => {
      const session = await deps.accountForm(request, reply);
      if (!("humanId" in session)) return session;
      const revoked = await revokeGrant(deps.db, session.humanId, request.body.grant_id, deps.clock.now());
      if (!revoked) {
        return sendMessage(
          reply,
          404,
          "Unknown access",
          "That application has no access to revoke.",
          html`<p><a class="button" href="/account">Go to your account</a></p>`,
        );
      }
      const query = new URLSearchParams({ done: "access-revoked", grant: request.body.grant_id });
      return reply.redirect(`/account?${query}`, 303);
    },
  );
}
