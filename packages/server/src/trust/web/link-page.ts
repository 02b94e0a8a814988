import type {} from "@fastify/csrf-protection";
import type { FastifyInstance, FastifyReply } from "fastify";
import type { Clock } from "../../platform/clock.js";
import { ApiError } from "../../platform/errors.js";
import { html } from "../../platform/html.js";
import type { TrustService } from "../service.js";
import * as store from "../store.js";
import { sendMessage, sendPage } from "./layout.js";
import type { HumanSession, SessionManager } from "./session.js";

export interface LinkPageDeps {
  service: TrustService;
  sessions: SessionManager;
  clock: Clock;
  /** Only a session signed in with a passkey may answer (`TRUST_LINK_REQUIRES_PASSKEY`). */
  requirePasskey: boolean;
}

/** `did:key:z6MkhaXg…4CaUgr`: enough to recognise, the whole value one click away. */
export function shortenDid(did: string): string {
  return did.length <= 32 ? did : `${did.slice(0, 18)}…${did.slice(-6)}`;
}

function requestGone(reply: FastifyReply): FastifyReply {
  return sendMessage(
    reply,
    410,
    "This link request has expired",
    "Link requests last 30 minutes and can be answered once. Ask your agent to start a new one.",
  );
}

function requestUnknown(reply: FastifyReply): FastifyReply {
  return sendMessage(
    reply,
    404,
    "Unknown link request",
    "This link is not valid. Check that you opened the whole link.",
  );
}

export async function linkPageRoutes(app: FastifyInstance, deps: LinkPageDeps): Promise<void> {
  const { service, sessions, clock } = deps;
  const db = service.database.db;
  /** Where someone goes who may not answer yet: sign-in (with a passkey when required). */
  const signinFirst = (session: HumanSession | undefined, reqId: string): string | undefined => {
    if (session !== undefined && (!deps.requirePasskey || session.authMethod === "passkey")) return undefined;
    const next = `/signin?next=${encodeURIComponent(`/link?req=${reqId}`)}`;
    return deps.requirePasskey ? `${next}&passkey=required` : next;
  };

  app.get<{ Querystring: { req?: string } }>("/link", async (request, reply) => {
    const reqId = request.query.req ?? "";
    const row = reqId.length > 0 && reqId.length < 128 ? await store.findLinkRequest(db, reqId) : undefined;
    if (row === undefined) return requestUnknown(reply);
    if (row.state !== "pending" || row.expires_at <= clock.now()) return requestGone(reply);
    await service.markLinkOpened(reqId);
    const session = await sessions.current(request);
    const signin = signinFirst(session, reqId);
    if (signin !== undefined || session === undefined) return reply.redirect(signin ?? "/signin", 303);
    const csrf = reply.generateCsrf();
    const minutes = Math.max(1, Math.round((row.expires_at - clock.now()) / 60000));
    return sendPage(reply, {
      title: "Link an agent",
      signedIn: { csrf },
      body: html`<h1>Link this agent to your account?</h1>
<p>An AI agent asks to act with your verification. Services it uses will know a verified person stands behind it,
but not who you are.</p>
<dl class="card">
  <dt>Agent</dt><dd>${row.agent_label ?? html`<span class="muted">(no name given)</span>`}</dd>
  <dt>Agent DID</dt>
  <dd><code title="${row.agent_did}">${shortenDid(row.agent_did)}</code>
    <button type="button" class="secondary" data-copy="${row.agent_did}" aria-controls="copy-status">Copy DID</button>
    <span id="copy-status" role="status" class="muted"></span></dd>
  <dt>Expires</dt><dd><time datetime="${new Date(row.expires_at).toISOString()}">in about ${minutes} minute${minutes === 1 ? "" : "s"}</time></dd>
</dl>
<p>Only confirm if you started this from your own agent.</p>
<div class="actions">
  <form method="post" action="/link/confirm">
    <input type="hidden" name="_csrf" value="${csrf}"><input type="hidden" name="req" value="${reqId}">
    <button type="submit">Confirm</button>
  </form>
  <form method="post" action="/link/decline">
    <input type="hidden" name="_csrf" value="${csrf}"><input type="hidden" name="req" value="${reqId}">
    <button type="submit" class="danger">Decline</button>
  </form>
</div>`,
    });
  });

  app.post<{ Body: { req?: string } }>("/link/confirm", { preHandler: app.csrfProtection }, async (request, reply) => {
    const session = await sessions.current(request);
    const reqId = String(request.body?.req ?? "");
    const signin = signinFirst(session, reqId);
    if (signin !== undefined || session === undefined) return reply.redirect(signin ?? "/signin", 303);
    let result: { binding_id: string; callback_url: string | null };
    try {
      result = await service.confirmLink(reqId, session.humanId);
    } catch (error) {
      if (error instanceof ApiError && error.code === "agent_already_bound") {
        return sendMessage(
          reply,
          409,
          "This agent is already linked",
          "This agent is linked to another account. Its owner must revoke that link before it can be linked again.",
        );
      }
      if (error instanceof ApiError && error.status === 404) return requestUnknown(reply);
      if (error instanceof ApiError && error.status === 410) return requestGone(reply);
      throw error;
    }
    if (result.callback_url !== null) {
      const target = new URL(result.callback_url);
      target.searchParams.set("req_id", reqId);
      target.searchParams.set("state", "confirmed");
      target.searchParams.set("binding_id", result.binding_id);
      return reply.redirect(target.href, 303);
    }
    return sendPage(reply, {
      title: "Agent linked",
      signedIn: { csrf: reply.generateCsrf() },
      body: html`<h1>Agent linked</h1><p class="ok">Your agent can now vouch for you. You can return to it.</p>
<p><a href="/account">See your linked agents</a></p>`,
    });
  });

  app.post<{ Body: { req?: string } }>("/link/decline", { preHandler: app.csrfProtection }, async (request, reply) => {
    const session = await sessions.current(request);
    const reqId = String(request.body?.req ?? "");
    if (session === undefined) return reply.redirect("/signin", 303);
    await service.declineLink(reqId);
    return sendPage(reply, {
      title: "Link declined",
      signedIn: { csrf: reply.generateCsrf() },
      body: html`<h1>Link declined</h1><p>Nothing was linked. You can close this page.</p>`,
    });
  });
}
