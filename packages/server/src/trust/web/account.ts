import type {} from "@fastify/csrf-protection";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Clock } from "../../platform/clock.js";
import { ApiError } from "../../platform/errors.js";
import { html, type SafeHtml } from "../../platform/html.js";
import { SINGLE_LINE } from "../../platform/input-rules.js";
import type { ServiceDeclarations } from "../authority/service-declarations.js";
import type { BindingRow, BindingServiceRow, OidcConsentRow } from "../migrations.js";
import * as consents from "../oidc/consents.js";
import type { Passkeys } from "../passkeys.js";
import type { TrustService } from "../service.js";
import { isPublishable, wbaDirectoryUrl } from "../web-bot-auth.js";
import { accessRevokedNotice, accessSection, registerAccessRoutes } from "./access-grants.js";
import { pendingApprovalsSection } from "./approval-page.js";
import { date } from "./dates.js";
import { registerGrantPages } from "./grant-pages.js";
import { type GrantsOnAccount, grantsOnAccount } from "./grants-view.js";
import { sendMessage, sendPage } from "./layout.js";
import { shortenDid } from "./link-page.js";
import { PASSKEY_SCRIPTS, passkeySection } from "./passkeys.js";
import { serviceName } from "./service-names.js";
import type { HumanSession, SessionManager } from "./session.js";

export interface AccountDeps {
  service: TrustService;
  sessions: SessionManager;
  /** `{trust_url}`: forms that change something are only taken from pages of this origin. */
  publicUrl: string;
  /** Extra actions offered on the account page (payment verification, upstream sign-in). */
  actions: () => { label: string; path: string }[];
  passkeys: Passkeys;
  clock: Clock;
  /** Services' declared permissions: the words grants are shown in. */
  declarations: ServiceDeclarations;
}

type ServiceAction = "suspend" | "restore";
type WbaAction = "publish" | "unpublish";

/** The notice the account page shows after a button was pressed (`?done=...`). */
type Done =
  | { kind: "service"; action: ServiceAction; binding: string; aud: string }
  | { kind: "wba"; action: WbaAction; binding: string }
  | { kind: "revoked"; binding: string }
  | { kind: "disconnected"; client: string; service: string };

/** What a card needs to say about Web Bot Auth: the directory's URL, the host it names, the time. */
interface WbaView {
  url: string;
  host: string;
  now: number;
}

const serviceForm = {
  type: "object",
  required: ["aud"],
  properties: {
    _csrf: { type: "string", maxLength: 256 },
    aud: { type: "string", minLength: 1, maxLength: 2048, pattern: SINGLE_LINE },
  },
} as const;

const connectionForm = {
  type: "object",
  required: ["client_id"],
  properties: {
    _csrf: { type: "string", maxLength: 256 },
    client_id: { type: "string", minLength: 1, maxLength: 512, pattern: SINGLE_LINE },
  },
} as const;

/** The forms that carry nothing but their CSRF token. */
const csrfOnlyForm = {
  type: "object",
  properties: { _csrf: { type: "string", maxLength: 256 } },
} as const;

const agentName = (b: Pick<BindingRow, "agent_label" | "agent_did">) => b.agent_label ?? shortenDid(b.agent_did);

const METHOD_NAMES: Record<string, string> = {
  email: "E-mail address",
  oauth: "Sign-in provider",
  payment: "Payment",
};

/** One service of a binding: its name, its DID, its last use, and the button that flips it. */
function serviceItem(b: BindingRow, row: BindingServiceRow, csrf: string, grants: GrantsOnAccount): SafeHtml {
  const name = serviceName(row.aud);
  const suspended = row.suspended_at !== null;
  const action: ServiceAction = suspended ? "restore" : "suspend";
  return html`<li class="service${suspended ? " suspended" : ""}">
    <div><strong title="${row.aud}">${name}</strong>${suspended ? html` <span class="badge">Suspended</span>` : ""}</div>
    <div><code>${row.aud}</code></div>
    <div class="muted">${suspended ? html`Suspended ${date(row.suspended_at)}` : html`Last token ${date(row.last_mint_at)}`}</div>
    <form method="post" action="/account/bindings/${b.id}/services/${action}">
      <input type="hidden" name="_csrf" value="${csrf}">
      <input type="hidden" name="aud" value="${row.aud}">
      <button${suspended ? "" : html` class="secondary"`} type="submit">${suspended ? "Restore" : "Suspend"}<span class="visually-hidden"> ${agentName(b)} for ${name}</span></button>
    </form>
    ${grants.ofService(b.id, row.aud)}
  </li>`;
}

function servicesOf(
  b: BindingRow,
  entry: { rows: BindingServiceRow[]; total: number } | undefined,
  csrf: string,
  grants: GrantsOnAccount,
) {
  const unlisted = grants.unlisted(b.id, entry?.rows.map((row) => row.aud) ?? []);
  if ((entry === undefined || entry.rows.length === 0) && unlisted.length === 0) {
    return html`<p class="muted">No service yet: this agent has not asked for an attestation.</p>`;
  }
  return html`<p class="muted">Suspending a service stops new attestations for it at once; one already issued stays valid until it expires (at most 15 minutes).</p>
  <ul class="services" aria-label="Services of ${agentName(b)}">${entry?.rows.map((row) => serviceItem(b, row, csrf, grants))}${unlisted}</ul>
  ${
    entry !== undefined && entry.total > entry.rows.length
      ? html`<p class="muted">Showing ${entry.rows.length} of ${entry.total} services: suspended ones first, then the most recently used.</p>`
      : ""
  }`;
}

/**
 * The card's Web Bot Auth part: what publishing means, whether the key is published, and the
 * button that flips it. Only a `did:key` agent has a key the attestor can list.
 */
function wbaPart(b: BindingRow, wba: WbaView, csrf: string): SafeHtml {
  const explanation = html`<p class="muted">Sites that check Web Bot Auth will see this agent as signed by ${wba.host}; anyone can see that this key is linked at this attestor.</p>`;
  if (!isPublishable(b.agent_did)) {
    return html`<h3>Web Bot Auth</h3>
  <p class="muted">This agent's DID is not a <code>did:key</code>, so the attestor has no key of it to publish.</p>`;
  }
  const lapsed = b.expires_at <= wba.now;
  const published = b.wba_published_at !== null;
  const action: WbaAction = published ? "unpublish" : "publish";
  const state = published
    ? html`<p><span class="badge published">Published</span> since ${date(b.wba_published_at)}${
        lapsed ? html` <span class="muted">(not listed while this agent's link has lapsed)</span>` : ""
      }</p>
  <p>Directory: <code>${wba.url}</code></p>
  <p class="muted">The agent names it in its requests: <code>Signature-Agent: sig1="${wba.url}"</code></p>`
    : html`<p class="muted">Not published.</p>`;
  const button =
    !published && lapsed
      ? html`<p class="muted">This agent's link has lapsed: link it again to publish its key.</p>`
      : html`<form method="post" action="/account/bindings/${b.id}/wba/${action}">
    <input type="hidden" name="_csrf" value="${csrf}">
    <button class="secondary" type="submit">${
      published
        ? html`Stop publishing<span class="visually-hidden"> the key of ${agentName(b)}</span>`
        : html`Publish this agent's key for Web Bot Auth<span class="visually-hidden"> (${agentName(b)})</span>`
    }</button>
  </form>`;
  return html`<h3>Web Bot Auth</h3>
  ${explanation}
  ${state}
  ${button}`;
}

/** The services the person signs in to with this account, each with its Disconnect button. */
function connectedServices(connected: OidcConsentRow[], csrf: string): SafeHtml {
  if (connected.length === 0) {
    return html`<p class="muted">No service signs you in with this account yet.</p>`;
  }
  return html`<p class="muted">These services may sign you in with this account without asking. Disconnecting one makes its next sign-in ask you again; what it already knows stays with it.</p>
  <ul class="services" aria-label="Connected services">${connected.map(
    (c) => html`<li class="service">
    <div><strong title="${c.service_did}">${serviceName(c.service_did)}</strong></div>
    <div><code>${c.service_did}</code></div>
    <div class="muted">Allowed ${date(c.granted_at)}</div>
    <div class="muted">Last sign-in ${date(c.last_used_at)}</div>
    <form method="post" action="/account/connections/disconnect">
      <input type="hidden" name="_csrf" value="${csrf}">
      <input type="hidden" name="client_id" value="${c.client_id}">
      <button class="secondary" type="submit">Disconnect<span class="visually-hidden"> ${serviceName(c.service_did)}</span></button>
    </form>
  </li>`,
  )}</ul>`;
}

/** The outcome of the last button pressed, when the page was reached after one. */
function doneNotice(
  done: Done | undefined,
  bindings: BindingRow[],
  services: Map<string, { rows: BindingServiceRow[] }>,
  wba: WbaView,
  connected: OidcConsentRow[],
): SafeHtml | string {
  if (done === undefined) return "";
  if (done.kind === "disconnected") {
    // Said only while it is true: after the next "Allow" the service is connected again.
    if (connected.some((c) => c.client_id === done.client)) return "";
    return html`<p class="notice" role="status"><strong>${serviceName(done.service)} is disconnected.</strong> If it asks to sign you in again, you will be asked first.</p>`;
  }
  if (done.kind === "revoked") {
    const revoked = bindings.find((b) => b.id === done.binding && b.revoked_at !== null);
    if (revoked === undefined) return "";
    return html`<p class="notice" role="status"><strong>Agent ${agentName(revoked)} revoked.</strong> It can no longer get attestations for you; those already issued expire within 15 minutes.</p>`;
  }
  const binding = bindings.find((b) => b.id === done.binding && b.revoked_at === null);
  if (done.kind === "wba") {
    // Said only when it is still true, as for services below.
    if (binding === undefined || (binding.wba_published_at !== null) !== (done.action === "publish")) return "";
    return done.action === "publish"
      ? html`<p class="notice" role="status">Agent ${agentName(binding)}'s key is published at <code>${wba.url}</code>.</p>`
      : html`<p class="notice" role="status">Agent ${agentName(binding)}'s key is no longer published. Sites that fetched the directory may keep it for up to 5 minutes.</p>`;
  }
  const row = services.get(done.binding)?.rows.find((r) => r.aud === done.aud);
  // Said only when it is still true: a reload after the other button was pressed says nothing.
  if (binding === undefined || row === undefined || (row.suspended_at !== null) !== (done.action === "suspend")) {
    return "";
  }
  const name = serviceName(done.aud);
  return done.action === "suspend"
    ? html`<p class="notice" role="status"><strong>Suspended.</strong> ${agentName(binding)} can no longer get attestations for ${name}. Its other services are not affected. Restore it below whenever you like.</p>`
    : html`<p class="notice" role="status"><strong>Restored.</strong> ${agentName(binding)} can get attestations for ${name} again.</p>`;
}

/** The grant a Revoke under "Applications with access" just ended (`?done=access-revoked`). */
function accessRevoked(query: unknown): unknown {
  const { done, grant } = (query ?? {}) as Record<string, unknown>;
  return done === "access-revoked" ? grant : undefined;
}

function readDone(query: unknown): Done | undefined {
  const { done, binding, aud, client, service } = (query ?? {}) as Record<string, unknown>;
  if (done === "disconnected" && typeof client === "string" && typeof service === "string") {
    return { kind: "disconnected", client, service };
  }
  if (typeof binding !== "string") return undefined;
  if (done === "revoked") return { kind: "revoked", binding };
  if (done === "published" || done === "unpublished") {
    return { kind: "wba", action: done === "published" ? "publish" : "unpublish", binding };
  }
  if ((done !== "suspended" && done !== "restored") || typeof aud !== "string") return undefined;
  return { kind: "service", action: done === "suspended" ? "suspend" : "restore", binding, aud };
}

export async function accountRoutes(app: FastifyInstance, deps: AccountDeps): Promise<void> {
  const { service, sessions } = deps;
  const publicOrigin = new URL(deps.publicUrl).origin;
  const wbaUrl = wbaDirectoryUrl(deps.publicUrl);
  const wbaHost = new URL(deps.publicUrl).host;
  const grantDeps = { db: service.database.db, declarations: deps.declarations };

  /**
   * The guard of every account form: refused when it came from another site, sent to sign-in
   * when signed out; otherwise the person's session.
   */
  async function accountForm(request: FastifyRequest, reply: FastifyReply): Promise<HumanSession | FastifyReply> {
    const refused = crossOrigin(request, reply, publicOrigin);
    if (refused !== undefined) return refused;
    return (await sessions.current(request)) ?? reply.redirect("/signin?next=%2Faccount", 303);
  }

  app.get("/account", async (request, reply) => {
    const session = await sessions.current(request);
    if (session === undefined) return reply.redirect("/signin?next=%2Faccount", 303);
    const { verifications, bindings, services, now } = await service.accountOf(session.humanId);
    const connected = await consents.consentsOf(service.database.db, session.humanId);
    const csrf = reply.generateCsrf();
    const live = bindings.filter((b) => b.revoked_at === null);
    const wba: WbaView = { url: wbaUrl, host: wbaHost, now };
    const grants = await grantsOnAccount(
      grantDeps,
      live.map((b) => b.id),
      services,
      request.ip,
      now,
    );
    return sendPage(reply, {
      title: "Your account",
      signedIn: { csrf },
      scripts: PASSKEY_SCRIPTS,
      body: html`<h1>Your account</h1>
${doneNotice(readDone(request.query), bindings, services, wba, connected)}
${await accessRevokedNotice(service.database.db, session.humanId, accessRevoked(request.query))}
${await pendingApprovalsSection(service.database.db, session.humanId, now)}
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
${await passkeySection(deps.passkeys, session.humanId, csrf, request.query)}
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
  <h3>Services</h3>
  ${servicesOf(b, services.get(b.id), csrf, grants)}
  ${wbaPart(b, wba, csrf)}
  <form method="get" action="/account/bindings/${b.id}/revoke" class="card-end">
    <button class="danger" type="submit">Revoke<span class="visually-hidden"> ${b.agent_label ?? b.agent_did}</span></button>
  </form>
</section>`,
      )
}
<h2>Connected services</h2>
${connectedServices(connected, csrf)}
<h2 id="access">Applications with access</h2>
${await accessSection(service.database.db, session.humanId, csrf, now)}
<h2>Session</h2>
<form method="post" action="/signout"><input type="hidden" name="_csrf" value="${csrf}"><button class="secondary" type="submit">Sign out</button></form>`,
    });
  });

  // Revoking cannot be undone, so the button on the account page asks first: this page, reached
  // by a plain GET form, says what revoking does and carries the POST that does it.
  app.get<{ Params: { id: string } }>("/account/bindings/:id/revoke", async (request, reply) => {
    const session = await sessions.current(request);
    if (session === undefined) return reply.redirect("/signin?next=%2Faccount", 303);
    const { bindings } = await service.accountOf(session.humanId);
    const b = bindings.find((row) => row.id === request.params.id && row.revoked_at === null);
    if (b === undefined) return unknownAgent(reply);
    const csrf = reply.generateCsrf();
    return sendPage(reply, {
      title: `Revoke ${agentName(b)}?`,
      signedIn: { csrf },
      body: html`<h1>Revoke this agent?</h1>
<dl class="card">
  <dt>Agent</dt><dd>${b.agent_label ?? html`<span class="muted">(no name given)</span>`}</dd>
  <dt>DID</dt><dd><code title="${b.agent_did}">${shortenDid(b.agent_did)}</code></dd>
  <dt>Linked</dt><dd>${date(b.created_at)}</dd>
</dl>
<p>Once revoked, it can no longer get attestations for you, for any service. Attestations already issued stay valid until they expire (at most 15 minutes).</p>
<p>This cannot be undone: to use this agent again, link it again from the agent.</p>
<div class="actions">
  <form method="post" action="/account/bindings/${b.id}/revoke">
    <input type="hidden" name="_csrf" value="${csrf}">
    <button class="danger" type="submit">Revoke ${agentName(b)}</button>
  </form>
  <form method="get" action="/account"><button class="secondary" type="submit">Cancel</button></form>
</div>`,
    });
  });

  app.post<{ Params: { id: string } }>(
    "/account/bindings/:id/revoke",
    {
      schema: { body: csrfOnlyForm, consumes: ["application/x-www-form-urlencoded"] },
      preHandler: app.csrfProtection,
    },
    async (request, reply) => {
      const session = await accountForm(request, reply);
      if (!("humanId" in session)) return session;
      try {
        await service.revokeBinding(request.params.id, session.humanId);
      } catch (error) {
        if (!(error instanceof ApiError) || error.status >= 500) throw error;
        return unknownAgent(reply);
      }
      return reply.redirect(`/account?${new URLSearchParams({ done: "revoked", binding: request.params.id })}`, 303);
    },
  );

  registerAccessRoutes(app, { db: service.database.db, clock: deps.clock, accountForm });
  registerGrantPages(app, { ...grantDeps, clock: deps.clock, passkeys: deps.passkeys, sessions, accountForm });

  app.post<{ Body: { client_id: string } }>(
    "/account/connections/disconnect",
    {
      schema: { body: connectionForm, consumes: ["application/x-www-form-urlencoded"] },
      preHandler: app.csrfProtection,
    },
    async (request, reply) => {
      const session = await accountForm(request, reply);
      if (!("humanId" in session)) return session;
      const clientId = request.body.client_id;
      const serviceDid = await consents.withdrawConsent(service.database.db, session.humanId, clientId);
      if (serviceDid === undefined) {
        return sendMessage(
          reply,
          404,
          "Unknown service",
          "That service is not connected to your account.",
          html`<p><a class="button" href="/account">Go to your account</a></p>`,
        );
      }
      const query = new URLSearchParams({ done: "disconnected", client: clientId, service: serviceDid });
      return reply.redirect(`/account?${query}`, 303);
    },
  );

  for (const action of ["suspend", "restore"] as const) {
    app.post<{ Params: { id: string }; Body: { aud: string } }>(
      `/account/bindings/:id/services/${action}`,
      {
        schema: { body: serviceForm, consumes: ["application/x-www-form-urlencoded"] },
        preHandler: app.csrfProtection,
      },
      async (request, reply) => {
        const session = await accountForm(request, reply);
        if (!("humanId" in session)) return session;
        const { aud } = request.body;
        try {
          await service.setServiceSuspended(request.params.id, session.humanId, aud, action === "suspend");
        } catch (error) {
          if (!(error instanceof ApiError) || error.status !== 404) throw error;
          return sendMessage(
            reply,
            404,
            "Unknown agent or service",
            "That agent is not linked to your account, or it has not used that service.",
            html`<p><a class="button" href="/account">Go to your account</a></p>`,
          );
        }
        const done = action === "suspend" ? "suspended" : "restored";
        return reply.redirect(`/account?${new URLSearchParams({ done, binding: request.params.id, aud })}`, 303);
      },
    );
  }

  for (const action of ["publish", "unpublish"] as const) {
    app.post<{ Params: { id: string } }>(
      `/account/bindings/:id/wba/${action}`,
      {
        schema: { body: csrfOnlyForm, consumes: ["application/x-www-form-urlencoded"] },
        preHandler: app.csrfProtection,
      },
      async (request, reply) => {
        const session = await accountForm(request, reply);
        if (!("humanId" in session)) return session;
        const onward = html`<p><a class="button" href="/account">Go to your account</a></p>`;
        try {
          await service.setWbaPublished(request.params.id, session.humanId, action === "publish");
        } catch (error) {
          if (!(error instanceof ApiError)) throw error;
          if (error.status === 404) {
            return sendMessage(reply, 404, "Unknown agent", "That agent is not linked to your account.", onward);
          }
          if (error.status === 410) {
            return sendMessage(
              reply,
              410,
              "This agent's link has lapsed",
              "Its key can be published again once the agent is linked again.",
              onward,
            );
          }
          if (error.status === 400) {
            return sendMessage(
              reply,
              400,
              "This agent has no key to publish",
              "Only an agent identified by a did:key has a key the attestor can publish.",
              onward,
            );
          }
          throw error;
        }
        const done = action === "publish" ? "published" : "unpublished";
        return reply.redirect(`/account?${new URLSearchParams({ done, binding: request.params.id })}`, 303);
      },
    );
  }
}

function unknownAgent(reply: FastifyReply): FastifyReply {
  return sendMessage(
    reply,
    404,
    "Unknown agent link",
    "That link does not exist, is not yours, or was already revoked.",
    html`<p><a class="button" href="/account">Go to your account</a></p>`,
  );
}

/**
 * A form that changes something is taken only from the attestor's own pages. SameSite=Lax keeps
 * the cookies off cross-site posts, not off another origin of the same site (a sibling
 * subdomain); what the browser says of the request's origin tells them apart. `Sec-Fetch-Site`
 * first: browsers send it whatever the page's referrer policy, while under this site's
 * `Referrer-Policy: no-referrer` they send `Origin: null` even for a form of the same origin.
 * Without either (or with only `Origin: null`, from browsers older than `Sec-Fetch-Site`), the
 * CSRF token alone decides.
 */
function crossOrigin(request: FastifyRequest, reply: FastifyReply, publicOrigin: string): FastifyReply | undefined {
  const site = request.headers["sec-fetch-site"];
  const origin = request.headers.origin;
  const foreign =
    site !== undefined ? site !== "same-origin" : origin !== undefined && origin !== "null" && origin !== publicOrigin;
  if (!foreign) return undefined;
  return sendMessage(
    reply,
    403,
    "This form came from another site",
    "Changes to your account are only accepted from this site's own pages. Open your account here and try again.",
    html`<p><a class="button" href="/account">Go to your account</a></p>`,
  );
}
