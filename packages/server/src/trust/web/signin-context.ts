import { html, type SafeHtml } from "../../platform/html.js";
import { toApproval } from "../authority/approvals.js";
import type { OidcClient } from "../oidc/clients.js";
import type { TrustService } from "../service.js";
import * as store from "../store.js";
import { serviceName } from "./service-names.js";

export interface SigninContextDeps {
  service: TrustService;
  /** The relying parties of the attestor's OpenID provider. */
  oidcClients: readonly OidcClient[];
  now: () => number;
}

/**
 * Why someone is asked to sign in, read from where they go next (`next`, already a same-origin
 * path): a pending link request names its agent, an agent's pending approval request its
 * service, an OpenID authorization its service.
 * Only what the attestor itself holds is shown (the stored label, a registered client with that
 * exact redirect URI); nothing of `next` is shown as such, and anything else shows nothing.
 */
export async function signinContext(next: string, deps: SigninContextDeps): Promise<SafeHtml | undefined> {
  const target = new URL(next, "http://attestor.invalid");
  if (target.pathname === "/link") {
    const reqId = target.searchParams.get("req") ?? "";
    if (reqId.length === 0 || reqId.length >= 128) return undefined;
    const row = await store.findLinkRequest(deps.service.database.db, reqId);
    if (row === undefined || row.state !== "pending" || row.expires_at <= deps.now()) return undefined;
    const agent =
      row.agent_label === null || row.agent_label.trim() === ""
        ? html`An AI agent`
        : html`An agent called <strong>${row.agent_label}</strong>`;
    return html`<p class="lead">${agent} asks to be linked to you. Sign in to see the request and answer it.</p>`;
  }
  const approval = /^\/approvals\/(apr_[A-Za-z0-9_-]{1,64})$/.exec(target.pathname);
  if (approval !== null) {
    const row = await deps.service.database.db
      .selectFrom("trust_approvals")
      .selectAll()
      .where("id", "=", approval[1] as string)
      .executeTakeFirst();
    if (row === undefined || toApproval(row, deps.now()).status !== "pending") return undefined;
    return html`<p class="lead">One of your agents asks for more at <strong>${serviceName(row.aud)}</strong>. Sign in to see the request and answer it.</p>`;
  }
  if (target.pathname === "/oidc/authorize") {
    const clientId = target.searchParams.get("client_id");
    const redirectUri = target.searchParams.get("redirect_uri");
    const client = deps.oidcClients.find((c) => c.client_id === clientId);
    if (client === undefined || redirectUri === null || !client.redirect_uris.includes(redirectUri)) return undefined;
    return html`<p class="lead"><strong>${serviceName(client.service_did)}</strong> asks you to sign in. You go back there afterwards.</p>`;
  }
  return undefined;
}
