import type { Recipient } from "@proto/protocol";
import type { KitResponse } from "./http.js";

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => ESCAPES[c] ?? c);
}

const STYLE =
  "body{font-family:system-ui,sans-serif;max-width:36rem;margin:3rem auto;padding:0 1rem;line-height:1.5}" +
  "h1{font-size:1.6rem;line-height:1.25}code{word-break:break-all}strong{overflow-wrap:anywhere}" +
  "button,.button{font:inherit;padding:.5rem 1rem;border:1px solid #333;border-radius:.3rem;background:#fff;color:#000;text-decoration:none;display:inline-block;margin:.25rem 0;max-width:100%;overflow-wrap:anywhere;text-align:left}" +
  ".error{color:#a00}.note{color:#555;font-size:.95em}" +
  "pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f6f6;padding:.75rem;border-radius:.3rem}" +
  "article{border-top:1px solid #ddd;padding-top:.5rem;margin-top:1rem}dl{display:grid;grid-template-columns:auto 1fr;gap:0 .75rem}dd{margin:0;overflow-wrap:anywhere}";

const MONTHS = [
  "January",
  "February",
  "March",
  "April",
  "May",
  "June",
  "July",
  "August",
  "September",
  "October",
  "November",
  "December",
];

/** `8 May 2026, 10:02 UTC`: a time a person reads (pages and mails). */
export function humanTime(ms: number): string {
  const date = new Date(ms);
  const pad = (n: number) => String(n).padStart(2, "0");
  return `${date.getUTCDate()} ${MONTHS[date.getUTCMonth()]} ${date.getUTCFullYear()}, ${pad(date.getUTCHours())}:${pad(date.getUTCMinutes())} UTC`;
}

/**
 * A self-contained page: no scripts, no external resources, not framed. The URL (a token) never
 * leaves: `strict-origin` sends at most the origin as Referer. (`no-referrer` would also make
 * browsers send `Origin: null` on the page's own form posts, which the e-mail sign-in checks.)
 */
export function htmlPage(
  status: number,
  title: string,
  body: string,
  headers: Record<string, string | string[]> = {},
): KitResponse {
  return {
    status,
    headers: {
      "content-type": "text/html; charset=utf-8",
      "cache-control": "no-store",
      "content-security-policy":
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
      "referrer-policy": "strict-origin",
      "x-content-type-options": "nosniff",
      ...headers,
    },
    body: `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><title>${escapeHtml(title)}</title><style>${STYLE}</style></head><body><h1>${escapeHtml(title)}</h1>${body}</body></html>`,
  };
}

export function errorPage(
  status: number,
  code: string,
  message: string,
  title = "This invitation cannot be used",
): KitResponse {
  return htmlPage(
    status,
    title,
    `<p class="error" data-code="${escapeHtml(code)}">${escapeHtml(message)}</p><p>Error code: <code>${escapeHtml(code)}</code></p>`,
  );
}

/** How a recipient is shown to whoever holds the claim link: enough to recognise, not the whole address. */
export function describeRecipient(recipient: Recipient): string {
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
      return `an account at ${recipient.value.issuer}`;
  }
}

/** How an identity of a session reads on a page. */
export function showIdentity(identity: Recipient): string {
  switch (identity.type) {
    case "oidc":
      return `${identity.value.sub} at ${identity.value.issuer}`;
    default:
      return identity.value;
  }
}

export interface ClaimPageInput {
  /** The service as people know it (the host of its public URL). */
  serviceName: string;
  agentDid: string;
  recipient: Recipient;
  /** Milliseconds since the epoch. */
  expiresAt: number;
  completionPath: string;
  /** Present when the visitor has an owner session. */
  session:
    | {
        csrf: string;
        identities: Recipient[];
        /** One of the identities is the invitation's recipient, authenticated recently enough to claim. */
        canClaim: boolean;
      }
    | undefined;
  signInLinks: { label: string; href: string }[];
  /** An `email` invitation: its link signs the recipient in, once (the e-mail ceremony). */
  emailSignIn?: { action: string; token: string; used: boolean } | undefined;
}

function claimForm(input: ClaimPageInput, csrf: string): string {
  return `<form method="post" action="${escapeHtml(input.completionPath)}">
<input type="hidden" name="csrf" value="${escapeHtml(csrf)}">
<button type="submit">Claim this agent</button>
</form>
<p class="note">Claiming makes you the agent's owner: from then on only you can change or revoke its key.</p>`;
}

/** The claim page of an `email` invitation: confirm the address with the link, then claim. */
function emailClaimPage(input: ClaimPageInput, emailSignIn: NonNullable<ClaimPageInput["emailSignIn"]>): KitResponse {
  const address = escapeHtml(input.recipient.value as string);
  const intro = `<p>An agent on ${escapeHtml(input.serviceName)} asks to have <strong>${address}</strong> as its owner.</p>
<p>The agent: <code>${escapeHtml(input.agentDid)}</code></p>
<p>This invitation works until ${escapeHtml(humanTime(input.expiresAt))}.</p>`;
  let action: string;
  if (input.session?.canClaim === true) {
    action = `<p>You are signed in as <strong>${address}</strong>.</p>${claimForm(input, input.session.csrf)}`;
  } else if (!emailSignIn.used) {
    action = `<p>Is this your address? Continue to sign in with it; you can then claim the agent.</p>
<form method="post" action="${escapeHtml(emailSignIn.action)}">
<input type="hidden" name="token" value="${escapeHtml(emailSignIn.token)}">
<button type="submit">Continue as ${address}</button>
</form>
<p class="note">The link signs you in once. It shows only that you can read mail sent to this address: a basic level of assurance (AAL1).</p>
<p class="note">Don't know this agent? Close this page: nothing happens.</p>`;
  } else {
    action = `<p class="error" data-code="kit_link_used">This link was already used to sign in, and it works only once.</p>
<p>To claim the agent, ask it for a new invitation: a new link will be mailed to ${address}.</p>`;
  }
  return htmlPage(200, "Claim your agent", intro + action);
}

export function claimPage(input: ClaimPageInput): KitResponse {
  if (input.emailSignIn !== undefined && input.recipient.type === "email") {
    return emailClaimPage(input, input.emailSignIn);
  }
  const intro = `<p>An agent (<code>${escapeHtml(input.agentDid)}</code>) invited ${escapeHtml(describeRecipient(input.recipient))} to become its owner. The invitation works until ${escapeHtml(humanTime(input.expiresAt))}.</p>`;
  let action: string;
  if (input.session === undefined) {
    const links = input.signInLinks
      .map(
        (link) => `<p><a class="button" href="${escapeHtml(link.href)}">Sign in with ${escapeHtml(link.label)}</a></p>`,
      )
      .join("");
    action = `<p>Sign in to claim it.</p>${links || "<p>Sign in to this service first.</p>"}`;
  } else {
    const who = input.session.identities.map((i) => `<li><code>${escapeHtml(showIdentity(i))}</code></li>`).join("");
    action = `<p>You are signed in as:</p><ul>${who}</ul>${claimForm(input, input.session.csrf)}`;
  }
  return htmlPage(200, "Claim your agent", intro + action);
}

/** The development outbox (`{ownerPath}/dev/outbox`): the newest mails first, links clickable. */
export function outboxPage(entries: { to: string; subject: string; text: string; sentAt: number }[]): KitResponse {
  const linkify = (text: string) =>
    escapeHtml(text).replace(/https?:\/\/[^\s<>"]+/g, (url) => `<a href="${url}">${url}</a>`);
  const mails = entries
    .map(
      (
        mail,
      ) => `<article><dl><dt>To</dt><dd>${escapeHtml(mail.to)}</dd><dt>Sent</dt><dd>${escapeHtml(humanTime(mail.sentAt))}</dd><dt>Subject</dt><dd>${escapeHtml(mail.subject)}</dd></dl>
<pre>${linkify(mail.text)}</pre></article>`,
    )
    .join("");
  return htmlPage(
    200,
    "Development outbox",
    `<p class="note">Mails the service would have sent, newest first (at most 50, kept in memory). This page exists only in development.</p>${mails || "<p>No mail yet.</p>"}`,
  );
}

export function claimedPage(agentDid: string): KitResponse {
  return htmlPage(
    200,
    "Agent claimed",
    `<p>You now own the agent <code>${escapeHtml(agentDid)}</code>.</p><p>You can close this page.</p>`,
  );
}
