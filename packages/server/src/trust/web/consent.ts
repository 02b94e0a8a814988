import type { FastifyReply } from "fastify";
import { html, type SafeHtml } from "../../platform/html.js";
import type { ScopeChoice } from "../oidc/resource-permissions.js";
import { sendPage } from "./layout.js";
import { shortenDid } from "./link-page.js";
import { serviceName } from "./service-names.js";

/** What the consent page needs to say, and the authorization request its form carries on. */
export interface ConsentView {
  csrf: string;
  client: {
    /** Its own name (from its metadata), or the operator's service DID for a registered one. */
    name: string;
    id: string;
    serviceDid: string | undefined;
    /** Registered by the operator: the name is vouched for; any other client names itself. */
    registered: boolean;
    /** Every redirect URI is on the person's own machine (a desktop or command-line client). */
    loopbackOnly: boolean;
  };
  /** The resource (an MCP server) an access token is asked for; absent for a sign-in. */
  resource: string | undefined;
  /** The scopes asked for the resource, each as the person may allow it; absent for a sign-in. */
  scopes?: ScopeChoice[];
  /** Where the person signs in with a passkey and comes back to this request. */
  passkeySignIn: string;
  /** The pairwise `sub` the service would receive. */
  pseudonym: string;
  /** Where the browser returns: shown so a look-alike name cannot hide a foreign address. */
  redirectUri: string;
  /** The authorization request's parameters, posted back unchanged with the answer. */
  request: Record<string, string>;
}

/** How the client is known here: the operator's service DID, its metadata document's URL, or neither. */
function applicationOf(client: ConsentView["client"]) {
  if (client.serviceDid !== undefined) return html`<code>${client.serviceDid}</code>`;
  if (client.id.startsWith("https://")) return html`<code title="${client.id}">${client.id}</code>`;
  return html`${client.name} <span class="muted">(registered itself here)</span>`;
}

/** What a scope lets the application do, in the service's words when it has some. */
function scopeWords(choice: ScopeChoice, appName: string): SafeHtml {
  // The id_token goes to the application, with a pseudonym of its own (not the resource's).
  if (choice.kind === "identity") return html`Confirm to ${appName} who you are, by an identifier made for it alone`;
  // The service's own words: third-party text, isolated so it cannot reorder what follows.
  if (choice.kind === "declared") return html`<bdi>${choice.description}</bdi>`;
  return choice.grantable
    ? html`<span class="muted">Not described by the service. Tick it only if you know what it allows.</span>`
    : html`<span class="muted">Not described by the service, so it cannot be allowed.</span>`;
}

/** How the boxes below are answered, as they stand when the page opens. */
function scopeHint(host: string, scopes: ScopeChoice[]): string {
  if (scopes.some((choice) => choice.ticked)) return "Untick anything you do not want to allow.";
  if (scopes.some((choice) => choice.grantable)) return "Tick only what you want to allow.";
  if (scopes.some((choice) => choice.needsPasskey)) return "What is asked here needs a passkey to allow.";
  return `${host} describes none of these, so none can be allowed.`;
}

/** What the person should know beside a box: a passkey it needs, spending it does not allow. */
function scopeNotes(choice: ScopeChoice, passkeySignIn: string): SafeHtml | string {
  const notes: SafeHtml[] = [];
  if (choice.needsPasskey) {
    notes.push(html`needs a passkey: <a href="${passkeySignIn}">sign in with a passkey</a> to allow it`);
  }
  // Consent sets no spend limit, and without one a spending permission spends nothing.
  if (choice.currency !== undefined) {
    notes.push(html`spends in ${choice.currency} · no spending until you set a limit on your account`);
  }
  if (notes.length === 0) return "";
  return html`<span class="choice-note">${notes.map((note, index) => (index === 0 ? note : html` · ${note}`))}</span>`;
}

/** The scopes asked for, one box each: ticked for what the service describes, the person unticks any. */
function scopeList(appName: string, host: string, scopes: ScopeChoice[], passkeySignIn: string): SafeHtml {
  if (scopes.length === 0) {
    return html`<h2>What ${appName} may do at ${host}</h2>
<p>It asks for no permission by name.</p>`;
  }
  return html`<h2 id="scopes-title">What ${appName} may do at ${host}</h2>
<p class="muted">${scopeHint(host, scopes)}</p>
<ul class="choices" aria-labelledby="scopes-title">
  ${scopes.map(
    (choice, index) =>
      html`<li><label><input type="checkbox" name="granted.${index}" value="${choice.name}"${
        choice.ticked ? html` checked` : ""
      }${choice.grantable ? "" : html` disabled`}><span>${scopeWords(choice, appName)}</span><code>${choice.name}</code>${scopeNotes(
        choice,
        passkeySignIn,
      )}</label></li>`,
  )}
</ul>`;
}

/**
 * The question asked on a person's first sign-in to a service, or first access to a resource
 * through an application: what it will receive, and Allow / Deny. One form with two submit
 * buttons, so it works without JavaScript.
 */
export function sendConsentPage(reply: FastifyReply, view: ConsentView): FastifyReply {
  const { client } = view;
  const name = client.serviceDid !== undefined ? serviceName(client.serviceDid) : client.name;
  const returnTo = new URL(view.redirectUri).host || view.redirectUri;
  const resourceHost = view.resource === undefined ? undefined : new URL(view.resource).host;
  const title = resourceHost === undefined ? `Sign in to ${name}?` : `Let ${name} use ${resourceHost} as you?`;
  const unverified = client.registered
    ? ""
    : html`<p class="notice caution" role="note"><strong>${name}</strong> named itself: this attestor has not checked who makes it.
  Allow only if you started this from an application you trust.</p>`;
  // An operator-registered client is vouched for wherever it returns to.
  const loopback =
    client.loopbackOnly && !client.registered
      ? html`<p class="notice caution" role="note">After you answer, your browser returns to an address on <strong>this computer</strong>
  (<code>${returnTo}</code>): a desktop or command-line application. If you did not just start one, deny.</p>`
      : "";
  const intro =
    resourceHost === undefined
      ? html`<p><strong>${name}</strong> asks to sign you in with your account here.</p>`
      : html`<p><strong>${name}</strong> asks to reach <strong>${resourceHost}</strong> on your behalf, as you.</p>`;
  return sendPage(reply, {
    title,
    signedIn: { csrf: view.csrf },
    body: html`<h1>${title}</h1>
${intro}
${unverified}
${loopback}
<dl class="card">
  <dt>${client.registered ? "Service" : "Application"}</dt><dd>${applicationOf(client)}</dd>
  ${view.resource === undefined ? "" : html`<dt>Resource</dt><dd><code>${view.resource}</code></dd>`}
  <dt>You return to</dt><dd><code title="${view.redirectUri}">${returnTo}</code></dd>
</dl>
<form method="post" action="/oidc/consent">
  <input type="hidden" name="_csrf" value="${view.csrf}">
  ${Object.entries(view.request).map(([key, value]) => html`<input type="hidden" name="${key}" value="${value}">`)}
  ${resourceHost === undefined ? "" : scopeList(name, resourceHost, view.scopes ?? [], view.passkeySignIn)}
<h2>${resourceHost ?? name} will receive</h2>
<ul>
  <li>An identifier made for this service alone: <code title="${view.pseudonym}">${shortenDid(view.pseudonym)}</code>.
    Every service gets a different one, so services cannot tell that they see the same person.</li>
  <li>That you signed in here, and when.</li>
</ul>
<h2>It will not receive</h2>
<ul>
  <li>Your e-mail address, or how you are verified.</li>
  <li>Your agents, or the other services you use.</li>
</ul>
  <p class="muted">${
    resourceHost === undefined
      ? `If you allow, ${name} can sign you in from now on without asking again, until you disconnect it on your account page.`
      : `If you allow, ${name} keeps access until you revoke it on your account page (or it goes unused for 30 days).`
  }</p>
  <div class="actions">
    <button type="submit" name="decision" value="allow">Allow</button>
    <button type="submit" name="decision" value="deny" class="secondary">Deny</button>
  </div>
</form>`,
  });
}
