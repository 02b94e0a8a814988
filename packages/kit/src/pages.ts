/** The kit's pages for people: the claim page, the page after a claim, errors, the development outbox. */
import type { Recipient } from "@proto/protocol";
import { html, type SafeHtml, timeElement } from "./html.js";
import type { KitResponse } from "./http.js";
import { htmlPage } from "./page-layout.js";

export { escapeHtml, humanTime } from "./html.js";
export { htmlPage } from "./page-layout.js";

/** What a person can do next, for the refusals a claim link meets. */
const NEXT_STEP: Record<string, string> = {
  invitation_not_found:
    "Check that you opened the whole link from the message. If it still fails, ask the agent for a new invitation.",
  invitation_expired: "Ask the agent for a new invitation: it can send one at any time.",
  already_claimed: "The agent already has an owner. If that is you, nothing more is needed.",
  kit_attestor_unavailable: "Nothing was changed. Wait a few seconds, then reload this page.",
};

export function errorPage(
  status: number,
  code: string,
  message: string,
  title = "This invitation cannot be used",
  serviceName?: string,
): KitResponse {
  return htmlPage(
    status,
    title,
    html`<p class="error" data-code="${code}">${message}</p>${NEXT_STEP[code] === undefined ? "" : html`<p>${NEXT_STEP[code]}</p>`}<p class="muted">Error code: <code>${code}</code></p>`,
    { serviceName },
  );
}

/** How a recipient is shown to whoever holds the claim link: enough to recognise, not the whole address. */
export function describeRecipient(recipient: Recipient, attestorName: (issuer: string) => string): string {
  switch (recipient.type) {
    case "email": {
      const [local = "", domain = ""] = recipient.value.split("@");
      return `the e-mail address ${local.slice(0, 1)}…@${domain}`;
    }
    case "phone":
      return `the phone number ending in ${recipient.value.slice(-2)}`;
    case "did":
      return `the DID ${recipient.value}`;
    case "oidc":
      return `an account at ${attestorName(recipient.value.issuer)}`;
  }
}

/**
 * A pseudonymous subject, short enough to recognise and compare ("4owQx7…"): the whole value is an
 * internal key that means nothing to a person.
 */
export function shortId(value: string): string {
  return value.length <= 10 ? value : `${value.slice(0, 8)}…`;
}

/** Who a session proved to be, in words: how they signed in, and a short pseudonymous id. */
export function showIdentity(identity: Recipient, attestorName: (issuer: string) => string): SafeHtml {
  switch (identity.type) {
    case "oidc":
      return html`an account at <strong>${attestorName(identity.value.issuer)}</strong> (pseudonymous id <code title="the id ${attestorName(identity.value.issuer)} gives you on this service">${shortId(identity.value.sub)}</code>), verified by signing in there`;
    case "email":
      return html`the e-mail address <strong>${identity.value}</strong>, verified by a mailed link`;
    case "phone":
      return html`the phone number <strong>${identity.value}</strong>`;
    case "did":
      return html`the DID <code>${identity.value}</code>`;
  }
}

export interface ClaimPageInput {
  /** The service in words (the kit's `serviceName`). */
  serviceName: string;
  agentDid: string;
  recipient: Recipient;
  /** Milliseconds since the epoch. */
  expiresAt: number;
  completionPath: string;
  /** An attestor's issuer name in words (its `displayName`). */
  attestorName: (issuer: string) => string;
  /** Present when the visitor has an owner session. */
  session:
    | {
        csrf: string;
        identities: Recipient[];
        /** One of the identities is the invitation's recipient. */
        isRecipient: boolean;
        /** Authenticated recently enough to claim. */
        fresh: boolean;
      }
    | undefined;
  signInLinks: { label: string; href: string }[];
  /** An `email` invitation: its link signs the recipient in, once (the e-mail ceremony). */
  emailSignIn?: { action: string; token: string; used: boolean } | undefined;
}

function claimForm(input: ClaimPageInput, csrf: string): SafeHtml {
  return html`<form method="post" action="${input.completionPath}">
<input type="hidden" name="csrf" value="${csrf}">
<button type="submit">Claim this agent</button>
</form>
<p class="muted">Claiming makes you the agent's owner on ${input.serviceName}: from then on only you can change or revoke its key.</p>`;
}

/** The agent and the invitation's lifetime, the same on every variant of the claim page. */
function invitationCard(input: ClaimPageInput, recipient: SafeHtml): SafeHtml {
  return html`<div class="card"><dl>
<dt>Agent</dt><dd><code>${input.agentDid}</code></dd>
<dt>Invitation for</dt><dd>${recipient}</dd>
<dt>Link works until</dt><dd>${timeElement(input.expiresAt)}</dd>
</dl></div>`;
}

function signInList(links: ClaimPageInput["signInLinks"]): SafeHtml {
  if (links.length === 0) return html`<p>Sign in to this service first.</p>`;
  return html`<ul class="actions">${links.map(
    (link) => html`<li><a class="button" href="${link.href}">Sign in with ${link.label}</a></li>`,
  )}</ul>`;
}

/** The claim page of an `email` invitation: confirm the address with the link, then claim. */
function emailClaimPage(input: ClaimPageInput, emailSignIn: NonNullable<ClaimPageInput["emailSignIn"]>): KitResponse {
  const address = input.recipient.value as string;
  const intro = html`<p>An agent on ${input.serviceName} asks to have <strong>${address}</strong> as its owner.</p>${invitationCard(input, html`<strong>${address}</strong>`)}`;
  let action: SafeHtml;
  if (input.session?.isRecipient === true && input.session.fresh) {
    action = html`<p>You are signed in as <strong>${address}</strong>.</p>${claimForm(input, input.session.csrf)}`;
  } else if (!emailSignIn.used) {
    action = html`<p>Is this your address? Continue to sign in with it; you can then claim the agent.</p>
<form method="post" action="${emailSignIn.action}">
<input type="hidden" name="token" value="${emailSignIn.token}">
<button type="submit">Continue as ${address}</button>
</form>
<p class="muted">The link signs you in once. It shows only that you can read mail sent to this address: a basic level of assurance (AAL1).</p>
<p class="muted">Don't know this agent? Close this page: nothing happens.</p>`;
  } else {
    action = html`<p class="error" data-code="kit_link_used">This link was already used to sign in, and it works only once.</p>
<p>To claim the agent, ask it for a new invitation: a new link will be mailed to ${address}.</p>`;
  }
  return htmlPage(200, "Claim your agent", html`${intro}${action}`, { serviceName: input.serviceName });
}

export function claimPage(input: ClaimPageInput): KitResponse {
  if (input.emailSignIn !== undefined && input.recipient.type === "email") {
    return emailClaimPage(input, input.emailSignIn);
  }
  const recipient = describeRecipient(input.recipient, input.attestorName);
  const intro = html`<p>An agent on ${input.serviceName} invited ${recipient} to become its owner.</p>${invitationCard(input, html`${recipient}`)}`;
  const session = input.session;
  let action: SafeHtml;
  if (session === undefined) {
    action = html`<p>Sign in to claim it.</p>${signInList(input.signInLinks)}
<p class="muted">Don't know this agent? Close this page: nothing happens.</p>`;
  } else {
    const who = session.identities.map((identity) => html`<li>${showIdentity(identity, input.attestorName)}</li>`);
    const signedIn = html`<p>You are signed in with</p><ul>${who}</ul>`;
    if (!session.isRecipient) {
      action = html`${signedIn}<p class="error">The account you are signed in with is not the one this invitation is for.</p>
<p>Sign in with the account the agent is linked to. If you are still signed in there as someone else, sign out there first.</p>${signInList(input.signInLinks)}`;
    } else if (!session.fresh) {
      action = html`${signedIn}<p>Claiming needs a recent sign-in. Sign in again to claim the agent:</p>${signInList(input.signInLinks)}`;
    } else {
      action = html`${signedIn}${claimForm(input, session.csrf)}`;
    }
  }
  return htmlPage(200, "Claim your agent", html`${intro}${action}`, { serviceName: input.serviceName });
}

/** The development outbox (`{ownerPath}/dev/outbox`): the newest mails first, links clickable. */
export function outboxPage(
  entries: { to: string; subject: string; text: string; sentAt: number }[],
  serviceName?: string,
): KitResponse {
  // Split around the URLs so that each piece goes through `html` (escaped), and URLs become links.
  const linkify = (text: string): SafeHtml[] =>
    text
      .split(/(https?:\/\/[^\s<>"]+)/g)
      .map((piece, i) => (i % 2 === 1 ? html`<a href="${piece}">${piece}</a>` : html`${piece}`));
  const mails = entries.map(
    (
      mail,
    ) => html`<article><dl><dt>To</dt><dd>${mail.to}</dd><dt>Sent</dt><dd>${timeElement(mail.sentAt)}</dd><dt>Subject</dt><dd>${mail.subject}</dd></dl>
<pre>${linkify(mail.text)}</pre></article>`,
  );
  return htmlPage(
    200,
    "Development outbox",
    html`<p class="muted">Mails the service would have sent, newest first (at most 50, kept in memory). This page exists only in development.</p>${mails.length === 0 ? html`<p>No mail yet.</p>` : mails}`,
    { serviceName },
  );
}

export interface ClaimedPageInput {
  serviceName: string;
  agentDid: string;
  /** Milliseconds since the epoch. */
  claimedAt: number;
  /** The service's page for owners (the kit's `ownerPage`), if it has one. */
  ownerPage: string | undefined;
}

export function claimedPage(input: ClaimedPageInput): KitResponse {
  const onward =
    input.ownerPage === undefined
      ? html`<p>You can close this page.</p>`
      : html`<p><a class="button" href="${input.ownerPage}">See your agents on ${input.serviceName}</a></p>`;
  return htmlPage(
    200,
    "Agent claimed",
    html`<p class="notice">You now own this agent on ${input.serviceName}. From now on only you can change or revoke its key.</p>
<div class="card"><dl><dt>Agent</dt><dd><code>${input.agentDid}</code></dd><dt>Claimed</dt><dd>${timeElement(input.claimedAt)}</dd></dl></div>${onward}`,
    { serviceName: input.serviceName },
  );
}
