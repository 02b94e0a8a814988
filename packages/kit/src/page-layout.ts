/**
 * The frame of every kit page: the service's name on top, one inline stylesheet allowed by its
 * hash (no `unsafe-inline`, no scripts, nothing loaded from elsewhere), readable on a phone, with
 * a visible focus ring. The colours follow the attestor's pages.
 */
import { createHash } from "node:crypto";
import { html, SafeHtml } from "./html.js";
import type { KitResponse } from "./http.js";

const STYLE = [
  ":root{color-scheme:light dark;--fg:#1b1b1f;--bg:#fff;--muted:#4a4a55;--accent:#0b57d0;--accent-fg:#fff;--border:#c4c4cc;--danger:#b3261e;--ok:#146c2e;--card:#f6f6f9}",
  "@media (prefers-color-scheme:dark){:root{--fg:#e6e6ea;--bg:#121216;--muted:#b9b9c4;--accent:#8ab4f8;--accent-fg:#0b0b0f;--border:#44444c;--danger:#f2b8b5;--ok:#8fd19e;--card:#1d1d23}}",
  "*{box-sizing:border-box}",
  'body{margin:0;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}',
  "header.site{border-bottom:1px solid var(--border);padding:.75rem 1rem;font-weight:700;overflow-wrap:anywhere}",
  "main{max-width:40rem;margin:0 auto;padding:1.5rem 1rem 3rem}",
  "h1{font-size:1.5rem;line-height:1.25;margin:0 0 1rem}",
  "p,dl,ul{margin:0 0 1rem}",
  "a{color:var(--accent)}",
  "button,.button{font:inherit;font-weight:600;padding:.6rem 1rem;border-radius:.4rem;border:1px solid var(--accent);background:var(--accent);color:var(--accent-fg);cursor:pointer;text-decoration:none;display:inline-block;max-width:100%;overflow-wrap:anywhere;text-align:left}",
  ":focus-visible{outline:3px solid var(--accent);outline-offset:2px}",
  ".card{background:var(--card);border:1px solid var(--border);border-radius:.5rem;padding:1rem;margin-bottom:1rem;overflow-wrap:anywhere}",
  ".card>:last-child{margin-bottom:0}",
  "form{margin:0 0 1rem}",
  ".muted{color:var(--muted)}",
  ".error{color:var(--danger);font-weight:600}",
  ".notice{background:var(--card);border:1px solid var(--border);border-left:4px solid var(--ok);border-radius:.4rem;padding:.75rem 1rem;margin:0 0 1rem}",
  "code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.9em;overflow-wrap:anywhere;word-break:break-all}",
  "strong{overflow-wrap:anywhere}",
  "dl{display:grid;grid-template-columns:max-content 1fr;gap:.25rem 1rem}",
  "dt{font-weight:600}",
  "dd{margin:0;overflow-wrap:anywhere;min-width:0}",
  // A phone: each term above its value, so that long values (DIDs, addresses) get the whole width.
  "@media (max-width:30rem){dl{grid-template-columns:1fr;gap:0}dd{margin-bottom:.5rem}}",
  "pre{white-space:pre-wrap;overflow-wrap:anywhere;background:var(--card);padding:.75rem;border-radius:.4rem}",
  "article{border-top:1px solid var(--border);padding-top:.5rem;margin-top:1rem}",
  "ul.actions{list-style:none;padding:0;display:grid;gap:.5rem;justify-items:start}",
].join("");

/**
 * No scripts, nothing from elsewhere, not framed, forms to this origin only. The URL (a token) never
 * leaves: `strict-origin` sends at most the origin as Referer. (`no-referrer` would also make
 * browsers send `Origin: null` on the page's own form posts, which the e-mail sign-in checks.)
 */
export const PAGE_CSP = [
  "default-src 'none'",
  `style-src 'sha256-${createHash("sha256").update(STYLE).digest("base64")}'`,
  "form-action 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
].join("; ");

export interface PageFrame {
  /** The service in words (the kit's `serviceName`), shown on top of the page. */
  serviceName?: string | undefined;
}

export function htmlPage(
  status: number,
  title: string,
  body: SafeHtml,
  frame: PageFrame = {},
  headers: Record<string, string | string[]> = {},
): KitResponse {
  const site = frame.serviceName === undefined ? "" : html`<header class="site">${frame.serviceName}</header>`;
  const fullTitle = frame.serviceName === undefined ? title : `${title} · ${frame.serviceName}`;
  return {
    status,
    headers: {
      "content-type": "text/html; charset=utf-8",
      "cache-control": "no-store",
      "content-security-policy": PAGE_CSP,
      "referrer-policy": "strict-origin",
      "x-content-type-options": "nosniff",
      ...headers,
    },
    body: html`<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><title>${fullTitle}</title><style>${new SafeHtml(STYLE)}</style></head><body>${site}<main><h1>${title}</h1>${body}</main></body></html>`
      .value,
  };
}
