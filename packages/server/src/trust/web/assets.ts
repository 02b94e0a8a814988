import type { FastifyInstance } from "fastify";
import { PASSKEY_SCRIPT, WEBAUTHN_SCRIPT } from "./passkeys.js";

/** One stylesheet for every page: readable on a phone, visible focus, AA contrast. */
const STYLESHEET = `
:root { color-scheme: light dark; --fg: #1b1b1f; --bg: #ffffff; --muted: #4a4a55; --accent: #0b57d0;
  --accent-fg: #ffffff; --border: #c4c4cc; --danger: #b3261e; --ok: #146c2e; --warn: #8a5300; --card: #f6f6f9; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6e6ea; --bg: #121216; --muted: #b9b9c4; --accent: #8ab4f8;
  --accent-fg: #0b0b0f; --border: #44444c; --danger: #f2b8b5; --ok: #8fd19e; --warn: #f0c674; --card: #1d1d23; } }
* { box-sizing: border-box; }
body { margin: 0; font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
main { max-width: 40rem; margin: 0 auto; padding: 1.5rem 1rem 3rem; }
header.site { border-bottom: 1px solid var(--border); padding: .75rem 1rem; display: flex; justify-content: space-between; align-items: center; gap: 1rem; flex-wrap: wrap; }
header.site a.brand { font-weight: 700; color: var(--fg); text-decoration: none; }
h1 { font-size: 1.5rem; line-height: 1.25; margin: 0 0 1rem; }
h2 { font-size: 1.15rem; margin: 2rem 0 .75rem; }
p, dl, ul { margin: 0 0 1rem; }
a { color: var(--accent); }
label { display: block; font-weight: 600; margin-bottom: .25rem; }
input[type=email], input[type=text] { width: 100%; font: inherit; padding: .6rem .7rem; border: 1px solid var(--border); border-radius: .4rem; background: var(--bg); color: var(--fg); }
button, .button { font: inherit; font-weight: 600; padding: .6rem 1rem; border-radius: .4rem; border: 1px solid var(--accent); background: var(--accent); color: var(--accent-fg); cursor: pointer; text-decoration: none; display: inline-block; }
button.secondary, .button.secondary { background: transparent; color: var(--accent); }
button.danger { background: transparent; color: var(--danger); border-color: var(--danger); }
:focus-visible { outline: 3px solid var(--accent); outline-offset: 2px; }
.actions { display: flex; gap: .75rem; flex-wrap: wrap; margin-top: 1rem; }
.card { background: var(--card); border: 1px solid var(--border); border-radius: .5rem; padding: 1rem; margin-bottom: 1rem; overflow-wrap: anywhere; }
.muted { color: var(--muted); }
.error { color: var(--danger); font-weight: 600; }
.ok { color: var(--ok); font-weight: 600; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: .95em; overflow-wrap: anywhere; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem; }
dt { font-weight: 600; }
dd { margin: 0; overflow-wrap: anywhere; }
form.inline { display: inline; }
h3 { font-size: 1rem; margin: 1.25rem 0 .5rem; }
.notice { background: var(--card); border: 1px solid var(--border); border-left: 4px solid var(--ok); border-radius: .4rem; padding: .75rem 1rem; margin: 0 0 1rem; }
.notice.caution { border-left-color: var(--warn); }
ul.services { list-style: none; padding: 0; margin: 0 0 1rem; }
ul.services li { border-top: 1px solid var(--border); padding: .75rem 0; display: grid; gap: .25rem; justify-items: start; }
ul.services li:last-child { border-bottom: 1px solid var(--border); }
.badge { display: inline-block; font-size: .85em; font-weight: 600; padding: 0 .4rem; border: 1px solid var(--danger); border-radius: .3rem; color: var(--danger); }
.badge.published { border-color: var(--ok); color: var(--ok); }
/* Grants: under each service on /account, and their own page (form, limits, history). */
.badge.live { border-color: var(--ok); color: var(--ok); }
.badge.used-up { border-color: var(--warn); color: var(--warn); }
.grant { justify-self: stretch; border-left: 3px solid var(--border); padding-left: .75rem; margin-top: .35rem; }
.grant p, .grant ul { margin: 0 0 .35rem; }
.grant h4 { font-size: 1rem; margin: 0 0 .35rem; }
ul.granted, ul.changes, ol.history ul { padding-left: 1.25rem; }
/* Not the services list's rows: a plain list inside one of them. */
.grant ul.granted li { display: list-item; border: 0; padding: 0; margin: 0 0 .2rem; }
ul.granted code { font-size: .85em; color: var(--muted); }
fieldset { border: 0; padding: 0; margin: 0 0 1rem; min-width: 0; }
legend { font-weight: 600; padding: 0; margin-bottom: .5rem; }
fieldset.limits { margin: .6rem 0 0 2rem; padding: .6rem .75rem .25rem; border: 1px solid var(--border); border-radius: .4rem; }
fieldset.limits legend { font-size: .95em; padding: 0 .25rem; margin-bottom: .25rem; }
fieldset.limits p { margin: .25rem 0 .5rem; font-size: .95em; }
.limit-row { display: grid; grid-template-columns: max-content 1fr; gap: .25rem .75rem; align-items: center; margin-bottom: .5rem; }
.limit-row label { margin: 0; font-weight: 400; }
.amount { display: flex; flex-wrap: wrap; gap: .5rem; align-items: center; }
.amount input, select, input[type=date] { font: inherit; padding: .45rem .6rem; border: 1px solid var(--border); border-radius: .4rem; background: var(--bg); color: var(--fg); }
.amount input { width: 8.5rem; }
[aria-invalid=true] { border: 2px solid var(--danger); }
.grant-form .actions { align-items: center; }
ul.choices .choice-note { grid-column: 2; font-size: .85em; color: var(--muted); }
ol.history { padding-left: 1.5rem; }
ol.history > li { margin-bottom: .9rem; }
ol.history p { margin: 0; }
p.back { margin: 0 0 .5rem; }
@media (max-width: 30rem) { .limit-row { grid-template-columns: 1fr; } fieldset.limits { margin-left: 0; } }
/* What acts on the whole card (revoking the link) stands apart from its sections' own buttons. */
.card-end { border-top: 1px solid var(--border); margin-top: 1rem; padding-top: 1rem; }
/* Why someone is asked to sign in (the agent or service that sent them). */
.lead { font-size: 1.1rem; background: var(--card); border: 1px solid var(--border); border-left: 4px solid var(--accent); border-radius: .4rem; padding: .75rem 1rem; overflow-wrap: anywhere; }
/* Mail in the development outbox: its long lines (sign-in links) wrap instead of widening the page. */
pre.mail-text { white-space: pre-wrap; overflow-wrap: anywhere; margin: 0; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: .9rem; }
/* Boxes a person ticks (the consent page's scopes): the box, the words, then the name, wrapping on a phone. */
ul.choices { list-style: none; padding: 0; margin: 0 0 1rem; }
ul.choices li { border-top: 1px solid var(--border); padding: .6rem 0; }
ul.choices li:last-child { border-bottom: 1px solid var(--border); }
ul.choices label { display: grid; grid-template-columns: auto 1fr; gap: .1rem .75rem; font-weight: 400; margin: 0; cursor: pointer; overflow-wrap: anywhere; }
ul.choices input[type=checkbox] { width: 1.25rem; height: 1.25rem; margin: .15rem 0 0; grid-row: span 2; accent-color: var(--accent); }
ul.choices input[type=checkbox]:disabled + span { opacity: .85; }
ul.choices code { grid-column: 2; font-size: .85em; color: var(--muted); }
.visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
`;

/** Copies `data-copy` values to the clipboard; the pages work without it. */
const SCRIPT = `
document.addEventListener("click", (event) => {
  const button = event.target instanceof Element ? event.target.closest("[data-copy]") : null;
  if (!button) return;
  navigator.clipboard.writeText(button.getAttribute("data-copy") || "").then(() => {
    const status = document.getElementById(button.getAttribute("aria-controls") || "");
    if (status) status.textContent = "Copied";
  });
});
`;

export function registerAssets(app: FastifyInstance): void {
  for (const [path, type, body] of [
    ["/assets/site.css", "text/css; charset=utf-8", STYLESHEET],
    ["/assets/site.js", "text/javascript; charset=utf-8", SCRIPT],
    ["/assets/webauthn.js", "text/javascript; charset=utf-8", WEBAUTHN_SCRIPT],
    ["/assets/passkeys.js", "text/javascript; charset=utf-8", PASSKEY_SCRIPT],
  ] as const) {
    app.get(path, async (_request, reply) =>
      reply
        .header("cache-control", "public, max-age=3600")
        .header("x-content-type-options", "nosniff")
        .type(type)
        .send(body),
    );
  }
}
