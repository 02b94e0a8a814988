/**
 * The approval page (docs/authority.md, "Approvals: asking the person"): the person sees which
 * agent asks for what at which service, the agent's reason as the agent's words, and exactly what
 * approving changes; then approves or declines. A change that needs a passkey is approved through
 * the passkey confirmation ceremony of web/passkeys.ts (the page's `passkey-confirm` form).
 */
import type {} from "@fastify/csrf-protection";
import type { SpendLimit } from "@proto/protocol";
import { spendLimitPhrase as limitPhrase } from "@proto/protocol";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Clock } from "../../platform/clock.js";
import { ApiError } from "../../platform/errors.js";
import { html, type SafeHtml } from "../../platform/html.js";
import { SINGLE_LINE } from "../../platform/input-rules.js";
import {
  type Approval,
  type ApprovalReview,
  approveApproval,
  declineApproval,
  pendingApprovals,
  reviewApproval,
} from "../authority/approvals.js";
import type { LimitChange } from "../authority/changes.js";
import type { ApprovalMethod } from "../authority/grants.js";
import type { Passkeys } from "../passkeys.js";
import type { Db } from "../store.js";
import { date } from "./dates.js";
import { sendMessage, sendPage } from "./layout.js";
import { shortenDid } from "./link-page.js";
import { MAX_PASSKEY_CONFIRMATION, PASSKEY_SCRIPTS, passkeyConfirmationProblem } from "./passkeys.js";
import { serviceName } from "./service-names.js";
import type { HumanSession, SessionManager } from "./session.js";

export interface ApprovalPageDeps {
  db: Db;
  sessions: SessionManager;
  clock: Clock;
  passkeys: Passkeys;
}

const params = {
  type: "object",
  required: ["id"],
  properties: { id: { type: "string", minLength: 1, maxLength: 128, pattern: SINGLE_LINE } },
} as const;

const answerForm = {
  type: "object",
  properties: {
    _csrf: { type: "string", maxLength: 256 },
    passkey: { type: "string", maxLength: MAX_PASSKEY_CONFIRMATION },
  },
} as const;

type Params = { id: string };
type AnswerBody = { passkey?: string };

const onward = html`<p><a class="button" href="/account">Go to your account</a></p>`;

function unknownRequest(reply: FastifyReply): FastifyReply {
  return sendMessage(
    reply,
    404,
    "Unknown request",
    "There is no such request for your account. Check that you opened the whole link, and that you are signed in to the account your agent is linked to.",
    onward,
  );
}

const agentName = (label: string | null) => (label === null || label.trim() === "" ? "your agent" : label);
const hostOf = (url: string) => new URL(url).host;

/** A permission in the service's words, with its name; `passkey`: say when giving it needs one. */
function permissionItem(approval: Approval, name: string, passkey: boolean): SafeHtml {
  const declared = approval.declared[name];
  return html`<li><div><strong>${declared?.description ?? name}</strong>${
    passkey && declared?.phishing_resistant === true ? html` <span class="badge">Needs a passkey</span>` : ""
  }</div><div><code>${name}</code></div></li>`;
}

function limitItem(approval: Approval, change: LimitChange): SafeHtml {
  const limit = (change.after ?? change.before) as SpendLimit;
  const description = approval.declared[limit.permission]?.description ?? limit.permission;
  return html`<li><div><strong>Spending: ${description}</strong></div><div><code>${limit.permission}</code></div>
  <div><strong>Now:</strong> ${limitPhrase(change.before)}</div><div><strong>After:</strong> ${limitPhrase(change.after)}</div></li>`;
}

/** What approving changes, item by item, and what the agent keeps. */
function changesPart(review: ApprovalReview): SafeHtml {
  const { approval, change } = review;
  const { diff } = change;
  const limited = new Set(diff.limits.map((c) => (c.after ?? c.before)?.permission));
  const added = diff.added.filter((name) => !limited.has(name) || !approval.declared[name]?.currency);
  const kept = change.before.permissions.filter((name) => change.after.permissions.includes(name));
  const revokedNotice =
    change.revoked && review.grant?.revokedAt != null
      ? html`<p class="notice caution">You revoked this agent's grant at this service ${date(review.grant.revokedAt)}. Approving restores it, with the service's default permissions and what is asked here.</p>`
      : "";
  if (!diff.changes) {
    return html`${revokedNotice}<p>Nothing changes: your agent already holds everything it asks for here.</p>`;
  }
  return html`${revokedNotice}<ul class="services" aria-label="What changes">${added.map((name) =>
    permissionItem(approval, name, true),
  )}${diff.limits.map((limitChange) => limitItem(approval, limitChange))}</ul>
<p class="muted">The descriptions are the service's own words.${
    kept.length > 0
      ? html` Your agent keeps what it may do there already: ${kept
          .map((name) => approval.declared[name]?.description ?? name)
          .join("; ")}.`
      : ""
  }</p>`;
}

/** What a decided or expired request asked for (the grant may have changed since). */
function askedPart(approval: Approval): SafeHtml {
  const limited = new Set(approval.spendLimits.map((limit) => limit.permission));
  return html`<ul class="services" aria-label="What it asked for">${approval.permissions
    .filter((name) => !limited.has(name))
    .map((name) => permissionItem(approval, name, false))}${approval.spendLimits.map(
    (limit) =>
      html`<li><div><strong>Spending: ${approval.declared[limit.permission]?.description ?? limit.permission}</strong></div><div><code>${limit.permission}</code></div><div>${limitPhrase(limit)}</div></li>`,
  )}</ul>`;
}

/** Why approving needs a passkey, in the person's terms. */
function passkeyReason(review: ApprovalReview): string {
  const { diff } = review.change;
  const sensitive = diff.added.some((name) => review.approval.declared[name]?.phishing_resistant === true);
  const spending = diff.limits.some((c) => c.after !== undefined);
  if (sensitive && spending) return "it gives a permission the service protects with a passkey, and it allows spending";
  if (sensitive) return "it gives a permission the service protects with a passkey";
  return "it sets or raises a spending limit";
}

function stateNotice(approval: Approval): SafeHtml {
  switch (approval.status) {
    case "approved":
      return html`<p class="notice" role="status"><strong>Approved</strong> ${date(approval.decidedAt)}${
        approval.method === "passkey" ? " with your passkey" : ""
      }. Your agent's next token for ${hostOf(approval.serviceUrl)} carries it.</p>`;
    case "declined":
      return html`<p class="notice" role="status"><strong>Declined</strong> ${date(approval.decidedAt)}. Nothing changed.</p>`;
    case "expired":
      return html`<p class="notice caution" role="status"><strong>Expired</strong> ${date(approval.expiresAt)} without an answer. Nothing changed; your agent can ask again.</p>`;
    default:
      return html``;
  }
}

export async function approvalPageRoutes(app: FastifyInstance, deps: ApprovalPageDeps): Promise<void> {
  const { db, sessions, clock } = deps;
  const pagePath = (id: string) => `/approvals/${encodeURIComponent(id)}`;
  const signinFirst = (id: string) => `/signin?next=${encodeURIComponent(pagePath(id))}`;

  async function page(
    reply: FastifyReply,
    session: HumanSession,
    review: ApprovalReview,
    problem?: { status: number; message: string },
  ): Promise<FastifyReply> {
    const { approval } = review;
    const csrf = reply.generateCsrf();
    const agent = agentName(review.agentLabel);
    const service = serviceName(approval.aud);
    const pending = approval.status === "pending";
    const needsPasskey = pending && review.change.diff.needsPasskey;
    const hasPasskey = needsPasskey && (await deps.passkeys.list(session.humanId)).length > 0;
    const minutes = Math.max(1, Math.ceil((approval.expiresAt - clock.now()) / 60000));
    const action = `${pagePath(approval.id)}/approve`;
    const decline = html`<form method="post" action="${pagePath(approval.id)}/decline">
    <input type="hidden" name="_csrf" value="${csrf}">
    <button type="submit" class="danger">Decline</button>
  </form>`;
    let answer: SafeHtml | string = "";
    if (pending && !needsPasskey) {
      answer = html`<div class="actions">
  <form method="post" action="${action}">
    <input type="hidden" name="_csrf" value="${csrf}">
    <button type="submit">Approve</button>
  </form>
  ${decline}
</div>`;
    } else if (pending && hasPasskey) {
      answer = html`<div class="actions">
  <form id="passkey-confirm" data-passkey="confirm" method="post" action="${action}" hidden>
    <input type="hidden" name="_csrf" value="${csrf}">
    <input type="hidden" name="passkey" value="">
    <button type="submit">Approve with your passkey</button>
    <span id="passkey-confirm-status" aria-live="polite"></span>
  </form>
  ${decline}
</div>
<p class="muted" data-passkey-unsupported>Approving needs a browser with passkeys and JavaScript.</p>`;
    } else if (pending) {
      answer = html`<p>You have no passkey yet. <a href="/account#passkeys">Add one on your account page</a>, then come back to <a href="${pagePath(approval.id)}">this request</a> to approve it. It waits until ${date(approval.expiresAt)}.</p>
<div class="actions">${decline}</div>`;
    }
    const title = pending ? `Allow ${agent} more at ${service}?` : `${agent}'s request for ${service}`;
    return sendPage(reply, {
      status: problem?.status ?? 200,
      title,
      signedIn: { csrf },
      ...(needsPasskey && hasPasskey ? { scripts: PASSKEY_SCRIPTS } : {}),
      body: html`<h1>${pending ? html`Allow your agent more at ${service}?` : html`Your agent's request for ${service}`}</h1>
${problem === undefined ? "" : html`<p class="notice caution" role="alert"><strong>Not approved.</strong> ${problem.message}</p>`}
${stateNotice(approval)}
<dl class="card">
  <dt>Agent</dt><dd>${review.agentLabel ?? html`<span class="muted">(no name given)</span>`}<br><code title="${approval.agentDid}">${shortenDid(approval.agentDid)}</code></dd>
  <dt>Service</dt><dd><strong>${service}</strong><br><code>${approval.aud}</code>${
    hostOf(approval.serviceUrl) === service
      ? ""
      : html`<br><span class="muted">at ${hostOf(approval.serviceUrl)}</span>`
  }</dd>
  <dt>Asked</dt><dd>${date(approval.createdAt)}</dd>
  ${pending ? html`<dt>Expires</dt><dd><time datetime="${new Date(approval.expiresAt).toISOString()}">in about ${minutes} minute${minutes === 1 ? "" : "s"}</time></dd>` : ""}
</dl>
<h2>${pending ? "Why it asks" : "Why it asked"}</h2>
<p class="lead"><span class="muted">Your agent says:</span><br>“${approval.reason}”</p>
<p class="muted">These are your agent's words, not proto trust's.${pending ? " Judge the request by what it changes." : ""}</p>
${
  pending
    ? html`<h2>What changes if you approve</h2>
${changesPart(review)}
${needsPasskey ? html`<p class="notice caution">Approving needs your passkey: ${passkeyReason(review)}.</p>` : ""}
<p class="muted">It takes effect at your agent's next token. You can narrow or revoke it any time on <a href="/account">your account page</a>.</p>`
    : html`<h2>What it asked for</h2>
${askedPart(approval)}`
}
${answer}
${pending ? "" : onward}`,
    });
  }

  /** The person's session, or the way to sign in and come back; undefined when a reply was sent. */
  async function sessionOr(request: FastifyRequest, reply: FastifyReply, id: string) {
    const session = await sessions.current(request);
    if (session === undefined) {
      await reply.redirect(signinFirst(id), 303);
      return undefined;
    }
    return session;
  }

  const pageDoc = {
    summary: "An agent's request for more (page)",
    description:
      "The person's session (else sign-in first, then back). Which agent asks what at which service, its reason as its words, and what approving changes; Approve and Decline while pending. Another person's request, or an unknown one, is a 404 page.",
  };
  app.get<{ Params: Params }>("/approvals/:id", { schema: { params, ...pageDoc } }, async (request, reply) => {
    const { id } = request.params;
    const session = await sessionOr(request, reply, id);
    if (session === undefined) return reply;
    const review = await reviewApproval(db, session.humanId, id, clock.now());
    if (review === undefined) return unknownRequest(reply);
    return page(reply, session, review);
  });

  app.post<{ Params: Params; Body: AnswerBody }>(
    "/approvals/:id/approve",
    {
      schema: {
        summary: "Approve an agent's request (form)",
        description:
          "Form fields `_csrf`, and `passkey` (the answer of the passkey confirmation ceremony) when the change needs a passkey: a permission declared `phishing_resistant`, or a spend limit set or raised. Widens the grant at once; answers 303 to the request's page. Without a needed passkey the page says so (403).",
        params,
        body: answerForm,
        consumes: ["application/x-www-form-urlencoded"],
      },
      preHandler: app.csrfProtection,
    },
    async (request, reply) => {
      const { id } = request.params;
      const session = await sessionOr(request, reply, id);
      if (session === undefined) return reply;
      const again = async (status: number, message: string) => {
        const review = await reviewApproval(db, session.humanId, id, clock.now());
        return review === undefined ? unknownRequest(reply) : page(reply, session, review, { status, message });
      };
      let method: ApprovalMethod = "session";
      const assertion = request.body?.passkey ?? "";
      if (assertion !== "") {
        const problem = await passkeyConfirmationProblem(deps.passkeys, session, assertion);
        if (problem !== undefined) return again(400, problem);
        method = "passkey";
      }
      try {
        await approveApproval(db, session.humanId, id, method, clock);
      } catch (error) {
        if (!(error instanceof ApiError)) throw error;
        if (error.status === 404) return unknownRequest(reply);
        if (error.code === "passkey_required") {
          return again(
            403,
            "Approving this needs your passkey. Press the button again and follow your browser's prompt.",
          );
        }
        if (error.code === "binding_expired") {
          return sendMessage(
            reply,
            410,
            "This agent's link has ended",
            "The agent that asked is no longer linked to your account, so nothing can be granted to it. Link it again from the agent first.",
            onward,
          );
        }
        if (error.code !== "approval_decided" && error.code !== "approval_expired") throw error;
      }
      return reply.redirect(pagePath(id), 303);
    },
  );

  app.post<{ Params: Params }>(
    "/approvals/:id/decline",
    {
      schema: {
        summary: "Decline an agent's request (form)",
        description:
          "Form field `_csrf`. Nothing changes; the agent reads `declined`. Answers 303 to the request's page.",
        params,
        body: answerForm,
        consumes: ["application/x-www-form-urlencoded"],
      },
      preHandler: app.csrfProtection,
    },
    async (request, reply) => {
      const { id } = request.params;
      const session = await sessionOr(request, reply, id);
      if (session === undefined) return reply;
      try {
        await declineApproval(db, session.humanId, id, clock.now());
      } catch (error) {
        if (!(error instanceof ApiError)) throw error;
        if (error.status === 404) return unknownRequest(reply);
        if (error.code !== "approval_decided" && error.code !== "approval_expired") throw error;
      }
      return reply.redirect(pagePath(id), 303);
    },
  );
}

/** The account page's list of requests waiting for the person (nothing when there are none). */
export async function pendingApprovalsSection(db: Db, humanId: string, now: number): Promise<SafeHtml> {
  const pending = await pendingApprovals(db, humanId, now);
  if (pending.length === 0) return html``;
  return html`<h2 id="approvals">Waiting for your answer</h2>
<ul class="services" aria-label="Requests waiting for your answer">${pending.map(
    (
      approval,
    ) => html`<li><a href="/approvals/${approval.id}"><strong>${agentName(approval.agentLabel)}</strong> asks for more at ${serviceName(approval.aud)}</a>
  <span class="muted">Asked ${date(approval.createdAt)} · expires ${date(approval.expiresAt)}</span></li>`,
  )}</ul>`;
}
