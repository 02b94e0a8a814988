import type { FastifyInstance } from "fastify";

/**
 * The one stylesheet of the browse pages, in the attestor's house style: readable on a phone
 * (long DIDs and attacker-chosen words wrap instead of widening the page), a visible focus ring,
 * AA contrast in light and dark schemes.
 */
const STYLESHEET = `
:root { color-scheme: light dark; --fg: #1b1b1f; --bg: #ffffff; --muted: #4a4a55; --accent: #0b57d0;
  --accent-fg: #ffffff; --border: #8e8e99; --card: #f6f6f9; --ok: #146c2e; --ok-bg: #e6f4ea;
  --warn: #7a4100; --warn-bg: #fff3e0; --danger: #b3261e; --danger-bg: #fdecea; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6e6ea; --bg: #121216; --muted: #b9b9c4; --accent: #8ab4f8;
  --accent-fg: #0b0b0f; --border: #6e6e78; --card: #1d1d23; --ok: #8fd19e; --ok-bg: #0f2a17;
  --warn: #ffc27a; --warn-bg: #33220a; --danger: #f2b8b5; --danger-bg: #3b1412; } }
* { box-sizing: border-box; }
body { margin: 0; font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); overflow-wrap: anywhere; }
main { display: block; max-width: 48rem; margin: 0 auto; padding: 1.5rem 1rem 3rem; }
main:focus { outline: none; }
.skip { position: absolute; left: .5rem; top: -4rem; background: var(--accent); color: var(--accent-fg); padding: .5rem .75rem; border-radius: .4rem; z-index: 1; }
.skip:focus { top: .5rem; }
header.site { border-bottom: 1px solid var(--border); padding: .75rem 1rem; display: flex; justify-content: space-between; align-items: center; gap: 1rem; flex-wrap: wrap; }
header.site a.brand { font-weight: 700; color: var(--fg); text-decoration: none; }
footer.site { border-top: 1px solid var(--border); max-width: 48rem; margin: 0 auto; padding: 1rem; color: var(--muted); font-size: .9rem; }
footer.site nav { display: flex; gap: 1rem; flex-wrap: wrap; }
nav a { margin-right: .25rem; }
h1 { font-size: 1.5rem; line-height: 1.25; margin: 0 0 .75rem; }
h2 { font-size: 1.2rem; margin: 2rem 0 .75rem; }
h3 { font-size: 1.05rem; margin: 1.5rem 0 .5rem; }
p, dl, ul { margin: 0 0 1rem; }
a { color: var(--accent); }
label { display: block; font-weight: 600; margin-bottom: .25rem; }
input[type=search], input[type=text] { width: 100%; font: inherit; padding: .6rem .7rem; border: 1px solid var(--border); border-radius: .4rem; background: var(--bg); color: var(--fg); }
button, .button { font: inherit; font-weight: 600; padding: .6rem 1rem; border-radius: .4rem; border: 1px solid var(--accent); background: var(--accent); color: var(--accent-fg); cursor: pointer; text-decoration: none; display: inline-block; }
.button.secondary { background: transparent; color: var(--accent); }
:focus-visible { outline: 3px solid var(--accent); outline-offset: 2px; }
form.search { display: grid; grid-template-columns: minmax(0, 1fr); gap: .75rem; align-items: end; margin-bottom: 1.5rem; }
@media (min-width: 40rem) { form.search { grid-template-columns: minmax(0, 2fr) minmax(0, 1fr) auto; } }
.actions { display: flex; gap: .75rem; flex-wrap: wrap; align-items: center; margin: 1rem 0; }
ul.listings { list-style: none; padding: 0; margin: 0; }
.card { background: var(--card); border: 1px solid var(--border); border-radius: .5rem; padding: 1rem; margin-bottom: 1rem; }
.card h2, .card h3 { font-size: 1.15rem; margin: 0 0 .35rem; }
.muted { color: var(--muted); }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: .95em; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: var(--card); border: 1px solid var(--border); border-radius: .4rem; padding: .75rem; margin: 0; }
dl { display: grid; grid-template-columns: minmax(0, max-content) minmax(0, 1fr); gap: .35rem 1rem; }
@media (max-width: 30rem) { dl { grid-template-columns: minmax(0, 1fr); gap: 0; } dd { margin-bottom: .5rem; } }
dt { font-weight: 600; }
dd { margin: 0; }
ul.plain { margin: 0; padding-left: 1.25rem; }
.badges { display: flex; flex-wrap: wrap; gap: .4rem; margin: 0 0 .5rem; }
.badge { display: inline-block; font-size: .85rem; font-weight: 700; line-height: 1.4; padding: .05rem .55rem; border-radius: 999px; border: 1px solid currentColor; }
.badge.active { color: var(--ok); background: var(--ok-bg); }
.badge.stale { color: var(--warn); background: var(--warn-bg); }
.badge.deleted, .badge.no-anchor { color: var(--danger); background: var(--danger-bg); }
.badge.granted { color: var(--ok); background: var(--ok-bg); }
.badge.passkey, .badge.spending { color: var(--warn); background: var(--warn-bg); }
ul.permissions { list-style: none; padding: 0; margin: 0 0 1rem; }
ul.permissions li { border-top: 1px solid var(--border); padding: .6rem 0; }
ul.permissions li:last-child { border-bottom: 1px solid var(--border); }
.permission-name { font-weight: 700; }
ul.permissions p { margin: .2rem 0 0; }
ul.permissions .badges { margin: .35rem 0 0; }
.notice { border-left: 4px solid currentColor; padding: .5rem .75rem; border-radius: .25rem; }
.notice.stale { color: var(--warn); background: var(--warn-bg); }
.notice.deleted, .notice.no-anchor { color: var(--danger); background: var(--danger-bg); }
.host { margin: 0 0 .35rem; }
.host.prominent { font-size: 1.1rem; }
.host strong { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }
.did { margin: 0 0 .35rem; }
ul.tags { list-style: none; padding: 0; margin: .5rem 0 0; display: flex; flex-wrap: wrap; gap: .4rem; }
ul.tags a { display: inline-block; padding: .05rem .55rem; border: 1px solid var(--border); border-radius: 999px; text-decoration: none; }
ul.tags a:hover { text-decoration: underline; }
nav.pagination { display: flex; gap: 1rem; flex-wrap: wrap; margin-top: 1.5rem; }
details summary { cursor: pointer; font-weight: 600; margin: 1rem 0 .5rem; }
`;

export function registerAssets(app: FastifyInstance): void {
  app.get("/assets/site.css", async (_request, reply) =>
    reply
      .header("cache-control", "public, max-age=3600")
      .header("x-content-type-options", "nosniff")
      .type("text/css; charset=utf-8")
      .send(STYLESHEET),
  );
}
