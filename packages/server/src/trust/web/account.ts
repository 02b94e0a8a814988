import type {} from "@fastify/csrf-protection";
import type { FastifyInstance } from "fastify";
import { html } from "../../platform/html.js";
import type { TrustService } from "../service.js";
import { sendMessage, sendPage } from "./layout.js";
import { shortenDid } from "./link-page.js";
import type { SessionManager } from "./session.js";

export interface AccountDeps {
  service: TrustService;
  sessions: SessionManager;
  /** Extra actions offered on the account page (payment verification, upstream sign-in). */
  actions: () => { label: string; path: string }[];
}

const METHOD_NAMES: Record<string, string> = {
  email: "E-mail address",
  oauth: "Sign-in provider",
  payment: "Payment",
};

const date = (ms: number | null) =>
  ms === null
    ? html`<span class="muted">never</span>`
    : html`<time datetime="${new Date(ms).toISOString()}">${new Date(ms).toISOString().slice(0, 16).replace("T", " ")} UTC</time>`;

export async function accountRoutes(app: FastifyInstance, deps: AccountDeps): Promise<void> {
  const { service, sessions } = deps;

  app.get("/account", async (request, reply) => {
    const session = await sessions.current(request);
    if (session === undefined) return reply.redirect("/signin?next=%2Faccount", 303);
    const { verifications, bindings } = await service.accountOf(session.humanId);
    const csrf = reply.generateCsrf();
    const live = bindings.filter((b) => b.revoked_at === null);
    return sendPage(reply, {
      title: "Your account",
      signedIn: { csrf },
      body: html`<h1>Your account</h1>
<h2>Verification</h2>
${
  verifications.length === 0
    ? html`<p class="muted">No active verification. Agents cannot vouch for you until you add one.</p>`
    : html`<ul>${verifications.map(
        (v) => html`<li><strong>${METHOD_NAMES[v.method] ?? v.method}</strong>${v.label ? html`: ${v.label}` : ""}
          <span class="muted">(since ${date(v.created_at)})</span></li>`,
      )}</ul>`
}
${deps.actions().map((a) => html`<form method="post" action="${a.path}"><input type="hidden" name="_csrf" value="${csrf}"><button class="secondary" type="submit">${a.label}</button></form>`)}
<h2>Linked agents</h2>
${
  live.length === 0
    ? html`<p class="muted">No agent is linked to your account.</p>`
    : live.map(
        (b) => html`<section class="card" aria-label="${b.agent_label ?? "Agent"}">
  <dl>
    <dt>Agent</dt><dd>${b.agent_label ?? html`<span class="muted">(no name given)</span>`}</dd>
    <dt>DID</dt><dd><code title="${b.agent_did}">${shortenDid(b.agent_did)}</code></dd>
    <dt>Linked</dt><dd>${date(b.created_at)}</dd>
    <dt>Last token</dt><dd>${date(b.last_mint_at)}</dd>
    <dt>Lapses</dt><dd>${date(b.expires_at)}</dd>
  </dl>
  <form method="post" action="/account/bindings/${b.id}/revoke">
    <input type="hidden" name="_csrf" value="${csrf}">
    <button class="danger" type="submit">Revoke<span class="visually-hidden"> ${b.agent_label ?? b.agent_did}</span></button>
  </form>
</section>`,
      )
}
<h2>Session</h2>
<form method="post" action="/signout"><input type="hidden" name="_csrf" value="${csrf}"><button class="secondary" type="submit">Sign out</button></form>`,
    });
  });

  app.post<{ Params: { id: string } }>(
    "/account/bindings/:id/revoke",
    { preHandler: app.csrfProtection },
    async (request, reply) => {
      const session = await sessions.current(request);
      if (session === undefined) return reply.redirect("/signin?next=%2Faccount", 303);
      try {
        await service.revokeBinding(request.params.id, session.humanId);
      } catch {
        return sendMessage(reply, 404, "Unknown agent link", "That link does not exist or is not yours.");
      }
      return reply.redirect("/account", 303);
    },
  );
}
