/**
 * The human pages of the notes service: server-rendered, every value escaped, no scripts, nothing
 * loaded from anywhere (the one stylesheet is inline and allowed by its hash).
 */
import { createHash } from "node:crypto";

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/** Text and attribute values alike. */
export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => ESCAPES[c] ?? c);
}

const STYLE = [
  "body{font-family:system-ui,sans-serif;max-width:42rem;margin:2.5rem auto;padding:0 1rem;line-height:1.5;color:#111}",
  "header{border-bottom:1px solid #ccc;margin-bottom:1.5rem}",
  "code{word-break:break-all;font-size:.9em}",
  "section{border:1px solid #ccc;border-radius:.4rem;padding:0 1rem;margin:1rem 0}",
  "ol.notes{padding-left:1.25rem}",
  "ol.notes li{margin:.5rem 0}",
  ".text{white-space:pre-wrap;overflow-wrap:anywhere;margin:0}",
  ".muted{color:#555;font-size:.9em}",
  "a.button,button{font:inherit;padding:.45rem 1rem;border:1px solid #333;border-radius:.3rem;background:#fff;color:#000;text-decoration:none;display:inline-block;cursor:pointer}",
  "button.danger{border-color:#a00;color:#a00}",
  "button+a{margin-left:1rem}",
  "details{margin:.75rem 0 1rem}",
  "summary{cursor:pointer}",
  "label{display:block;margin:.5rem 0 .25rem}",
  "input[type=text]{font:inherit;width:100%;box-sizing:border-box;padding:.4rem;border:1px solid #555;border-radius:.3rem}",
  "form.inline{margin:.75rem 0}",
  ".notice{border-left:4px solid #2a6;padding:.25rem .75rem;background:#f3fbf6}",
  ".warning{border-left:4px solid #a60;padding:.25rem .75rem;background:#fdf7ee}",
].join("");

/** The Content-Security-Policy of every page: nothing but this inline stylesheet, forms to this origin only. */
export const PAGE_CSP = [
  "default-src 'none'",
  `style-src 'sha256-${createHash("sha256").update(STYLE).digest("base64")}'`,
  "form-action 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
].join("; ");

export const PAGE_HEADERS: Record<string, string> = {
  "content-type": "text/html; charset=utf-8",
  "cache-control": "no-store",
  "content-security-policy": PAGE_CSP,
  "referrer-policy": "no-referrer",
  "x-content-type-options": "nosniff",
  "cross-origin-opener-policy": "same-origin",
};

export function layout(title: string, body: string): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><title>${escapeHtml(title)} · Notes</title><style>${STYLE}</style></head><body><header><p><a href="/">Notes</a> · a small service for proto agents</p></header><main><h1>${escapeHtml(title)}</h1>${body}</main></body></html>`;
}

export interface HomeInput {
  serviceDid: string;
  discoveryPath: string;
  ownerPage: string;
}

export function homePage(input: HomeInput): string {
  return layout(
    "Notes for agents",
    `<p>Agents keep short notes here. An agent signs its requests with its own key and shows an attestation from an attestor this service trusts when it signs up; the person behind it can later claim it and read its notes.</p>
<p>Service DID: <code>${escapeHtml(input.serviceDid)}</code></p>
<p>Agents start at the <a href="${escapeHtml(input.discoveryPath)}">discovery document</a>.</p>
<p><a class="button" href="${escapeHtml(input.ownerPage)}">Read your agents' notes</a></p>`,
  );
}

export interface OwnerNote {
  text: string;
  createdAt: string;
  /** Pinned by the agent (a paid action): listed first. */
  pinned: boolean;
}

export interface OwnedAgent {
  did: string;
  claimedAt: string | undefined;
  /** Set when the owner revoked the agent's key and has not re-keyed it. */
  keyRevokedAt: string | undefined;
  notes: OwnerNote[];
}

export interface OwnerPageInput {
  /** Undefined when nobody is signed in. */
  session:
    | {
        issuer: string | undefined;
        /** The e-mail addresses the session proved (the kit's e-mail ceremony). */
        emails: string[];
        authenticatedAt: string | undefined;
        csrf: string;
        owned: OwnedAgent[];
        /** Agents the person's attestations signed up that nobody has claimed yet. */
        unclaimed: string[];
      }
    | undefined;
  signInLinks: { label: string; href: string }[];
  signOutPath: string;
}

function hidden(name: string, value: string): string {
  return `<input type="hidden" name="${name}" value="${escapeHtml(value)}">`;
}

/** Re-key and revoke (upstream §8.2, §8.4): each asks for confirmation on a page of its own. */
function keyControls(agent: OwnedAgent, csrf: string): string {
  const revoke =
    agent.keyRevokedAt === undefined
      ? `<form class="inline" method="post" action="/owner/revoke">${hidden("csrf", csrf)}${hidden("did", agent.did)}<button type="submit" class="danger">Revoke this key…</button></form>`
      : "";
  return `<details><summary>Manage this agent's key</summary>
<form class="inline" method="post" action="/owner/rekey">${hidden("csrf", csrf)}${hidden("did", agent.did)}
<label for="new-${escapeHtml(agent.did)}">New agent key (a <code>did:key</code>; on the agent's machine <code>proto keys rotate</code> makes one and prints it)</label>
<input type="text" id="new-${escapeHtml(agent.did)}" name="new_did" required maxlength="200" autocomplete="off" spellcheck="false" placeholder="did:key:z6Mk…">
<p><button type="submit">Re-key…</button></p></form>${revoke}</details>`;
}

function agentSection(agent: OwnedAgent, index: number, csrf: string): string {
  const id = `agent-${index}`;
  const notes =
    agent.notes.length === 0
      ? `<p class="muted">No notes yet.</p>`
      : `<ol class="notes">${agent.notes
          .map(
            (note) =>
              `<li><p class="text">${escapeHtml(note.text)}</p><p class="muted">${note.pinned ? "Pinned · " : ""}<time datetime="${escapeHtml(note.createdAt)}">${escapeHtml(note.createdAt)}</time></p></li>`,
          )
          .join("")}</ol>`;
  const claimed = agent.claimedAt === undefined ? "" : `<p class="muted">Claimed at ${escapeHtml(agent.claimedAt)}</p>`;
  const revoked =
    agent.keyRevokedAt === undefined
      ? ""
      : `<p class="warning">You revoked this agent's key at ${escapeHtml(agent.keyRevokedAt)}: it cannot act here until you re-key it.</p>`;
  return `<section aria-labelledby="${id}"><h2 id="${id}">Agent <code>${escapeHtml(agent.did)}</code></h2>${claimed}${revoked}${notes}${keyControls(agent, csrf)}</section>`;
}

export function ownerPage(input: OwnerPageInput): string {
  const session = input.session;
  if (session === undefined) {
    const links = input.signInLinks
      .map(
        (link) => `<p><a class="button" href="${escapeHtml(link.href)}">Sign in with ${escapeHtml(link.label)}</a></p>`,
      )
      .join("");
    return layout(
      "Your agents' notes",
      `<p>Sign in with the attestor your agent is linked to. You see the notes of the agents you have claimed.</p>${links}<p class="muted">Invited by e-mail? Open the link in that mail to sign in.</p>`,
    );
  }
  const who =
    session.issuer === undefined
      ? session.emails.length > 0
        ? `<p>You are signed in as <strong>${session.emails.map(escapeHtml).join("</strong>, <strong>")}</strong>.</p>`
        : "<p>You are signed in.</p>"
      : `<p>You are signed in with <strong>${escapeHtml(session.issuer)}</strong>${
          session.authenticatedAt === undefined
            ? ""
            : ` since <time datetime="${escapeHtml(session.authenticatedAt)}">${escapeHtml(session.authenticatedAt)}</time>`
        }.</p>`;
  const owned =
    session.owned.length === 0
      ? "<p>You own no agent here yet. Open the claim link your agent gave you, or the one mailed to you, to claim it.</p>"
      : session.owned.map((agent, index) => agentSection(agent, index, session.csrf)).join("");
  const unclaimed =
    session.unclaimed.length === 0
      ? ""
      : `<h2>Agents waiting to be claimed</h2><p>Your attestations signed these agents up. Their notes show here once you claim them with the link they give you.</p><ul>${session.unclaimed
          .map((did) => `<li><code>${escapeHtml(did)}</code></li>`)
          .join("")}</ul>`;
  const signOut = `<form method="post" action="${escapeHtml(input.signOutPath)}"><input type="hidden" name="csrf" value="${escapeHtml(session.csrf)}"><button type="submit">Sign out</button></form>`;
  return layout("Your agents' notes", `${who}${owned}${unclaimed}${signOut}`);
}

export interface ConfirmInput {
  title: string;
  /** What will happen, in a sentence or two. */
  explanation: string;
  action: string;
  fields: Record<string, string>;
  button: string;
  danger: boolean;
}

/** "Are you sure?": the same form again with `confirm=yes`, and a way back. */
export function confirmPage(input: ConfirmInput): string {
  const fields = Object.entries({ ...input.fields, confirm: "yes" })
    .map(([name, value]) => hidden(name, value))
    .join("");
  return layout(
    input.title,
    `<p>${input.explanation}</p><form method="post" action="${escapeHtml(input.action)}">${fields}<p><button type="submit"${input.danger ? ' class="danger"' : ""}>${escapeHtml(input.button)}</button> <a href="/owner">Cancel</a></p></form>`,
  );
}

/** After an owner operation: what happened, and the way back. */
export function donePage(title: string, html: string): string {
  return layout(title, `<p class="notice">${html}</p><p><a class="button" href="/owner">Back to your agents</a></p>`);
}

/** The session is too old for an owner operation (upstream §7.5): sign in again, then repeat it. */
export function signInAgainPage(signInLinks: { label: string; href: string }[], emailOwner: boolean): string {
  const links = signInLinks
    .map(
      (link) =>
        `<p><a class="button" href="${escapeHtml(link.href)}">Sign in again with ${escapeHtml(link.label)}</a></p>`,
    )
    .join("");
  const email = emailOwner
    ? '<p class="muted">Claimed with an e-mail link? Ask your agent for a new invitation link to sign in again.</p>'
    : "";
  return layout(
    "Sign in again",
    `<p>Changing an agent's key needs a sign-in from the last five minutes, so that nobody can do it with a session left open. Sign in again, then repeat the change.</p>${links}${email}<p><a href="/owner">Back to your agents</a></p>`,
  );
}

export function messagePage(title: string, message: string): string {
  return layout(title, `<p>${escapeHtml(message)}</p><p><a href="/">Back to the start</a></p>`);
}
