import type { FastifyReply } from "fastify";
import { html } from "../../platform/html.js";
import { sendPage } from "./layout.js";
import { shortenDid } from "./link-page.js";
import { serviceName } from "./service-names.js";

/** What the consent page needs to say, and the authorization request its form carries on. */
export interface ConsentView {
  csrf: string;
  serviceDid: string;
  /** The pairwise `sub` the service would receive. */
  pseudonym: string;
  /** Where the browser returns: shown so a look-alike name cannot hide a foreign address. */
  redirectUri: string;
  /** The authorization request's parameters, posted back unchanged with the answer. */
  request: Record<string, string>;
}

/**
 * The question asked on a person's first sign-in to a service: what the service will receive,
 * and Allow / Deny. One form with two submit buttons, so it works without JavaScript.
 */
export function sendConsentPage(reply: FastifyReply, view: ConsentView): FastifyReply {
  const name = serviceName(view.serviceDid);
  const returnTo = new URL(view.redirectUri).host;
  return sendPage(reply, {
    title: `Sign in to ${name}?`,
    signedIn: { csrf: view.csrf },
    body: html`<h1>Sign in to ${name}?</h1>
<p><strong>${name}</strong> asks to sign you in with your account here.</p>
<dl class="card">
  <dt>Service</dt><dd><code>${view.serviceDid}</code></dd>
  <dt>You return to</dt><dd><code title="${view.redirectUri}">${returnTo}</code></dd>
</dl>
<h2>${name} will receive</h2>
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
<form method="post" action="/oidc/consent">
  <input type="hidden" name="_csrf" value="${view.csrf}">
  ${Object.entries(view.request).map(([key, value]) => html`<input type="hidden" name="${key}" value="${value}">`)}
  <p class="muted">If you allow, ${name} can sign you in from now on without asking again, until you disconnect it on your account page.</p>
  <div class="actions">
    <button type="submit" name="decision" value="allow">Allow</button>
    <button type="submit" name="decision" value="deny" class="secondary">Deny</button>
  </div>
</form>`,
  });
}
