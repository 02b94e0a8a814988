import type { Recipient } from "@proto/protocol";
import type { KitResponse } from "./http.js";

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => ESCAPES[c] ?? c);
}

const STYLE =
  "body{font-family:system-ui,sans-serif;max-width:36rem;margin:3rem auto;padding:0 1rem;line-height:1.5}" +
  "code{word-break:break-all}button,.button{font:inherit;padding:.5rem 1rem;border:1px solid #333;border-radius:.3rem;background:#fff;color:#000;text-decoration:none;display:inline-block;margin:.25rem 0}" +
  ".error{color:#a00}";

/** A self-contained page: no scripts, no external resources, not framed, the URL (a token) never sent on. */
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
      "referrer-policy": "no-referrer",
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

export interface ClaimPageInput {
  agentDid: string;
  recipient: Recipient;
  expiresAt: string;
  token: string;
  completionPath: string;
  /** Present when the visitor has an owner session. */
  session: { csrf: string; identities: string[] } | undefined;
  signInLinks: { label: string; href: string }[];
}

export function claimPage(input: ClaimPageInput): KitResponse {
  const intro = `<p>An agent (<code>${escapeHtml(input.agentDid)}</code>) invited ${escapeHtml(describeRecipient(input.recipient))} to become its owner. The invitation expires at ${escapeHtml(input.expiresAt)}.</p>`;
  let action: string;
  if (input.session === undefined) {
    const links = input.signInLinks
      .map(
        (link) => `<p><a class="button" href="${escapeHtml(link.href)}">Sign in with ${escapeHtml(link.label)}</a></p>`,
      )
      .join("");
    action = `<p>Sign in to claim it.</p>${links || "<p>Sign in to this service first.</p>"}`;
  } else {
    const who = input.session.identities.map((i) => `<li><code>${escapeHtml(i)}</code></li>`).join("");
    action = `<p>You are signed in as:</p><ul>${who}</ul>
<form method="post" action="${escapeHtml(input.completionPath)}">
<input type="hidden" name="csrf" value="${escapeHtml(input.session.csrf)}">
<button type="submit">Claim this agent</button>
</form>`;
  }
  return htmlPage(200, "Claim your agent", intro + action);
}

export function claimedPage(agentDid: string): KitResponse {
  return htmlPage(200, "Agent claimed", `<p>You now own the agent <code>${escapeHtml(agentDid)}</code>.</p>`);
}
