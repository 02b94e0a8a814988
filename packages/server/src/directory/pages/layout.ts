import type { FastifyReply } from "fastify";
import { html, PAGE_CSP, pageHeaders, type SafeHtml, withDirectives } from "../../platform/html.js";

/** The platform's page policy, tightened: these pages run no script, and their one form submits here. */
export const DIRECTORY_PAGE_CSP = withDirectives(PAGE_CSP, { "script-src": "'none'", "form-action": "'self'" });

export interface PageOptions {
  title: string;
  body: SafeHtml;
  status?: number;
  /** The page's address on the operator's public URL (detail pages). */
  canonical?: string | undefined;
  /** Kept out of search engines (error pages, withdrawn listings). */
  noindex?: boolean;
}

export function layout(options: PageOptions): SafeHtml {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${options.title} · proto directory</title>
${options.noindex ? html`<meta name="robots" content="noindex">\n` : ""}${options.canonical ? html`<link rel="canonical" href="${options.canonical}">\n` : ""}<link rel="icon" href="data:,">
<link rel="stylesheet" href="/assets/site.css">
</head>
<body>
<a class="skip" href="#main">Skip to main content</a>
<header class="site"><a class="brand" href="/">proto directory</a>
<nav aria-label="Site"><a href="/">Browse listings</a></nav></header>
<main id="main" tabindex="-1">
${options.body}
</main>
<footer class="site">
<p>Services list themselves by proving control of their host; the directory checks that proof and the discovery document, and vouches for nothing else.</p>
<nav aria-label="For developers"><a href="/v1/listings">JSON API</a> <a href="/schemas/discovery-0.1.json">Discovery schema</a> <a href="/sitemap.xml">Sitemap</a></nav>
</footer>
</body>
</html>`;
}

export function pageHeadersForDirectory(): Record<string, string> {
  return { ...pageHeaders({ personal: false }), "content-security-policy": DIRECTORY_PAGE_CSP };
}

export function sendPage(reply: FastifyReply, options: PageOptions): FastifyReply {
  return reply
    .code(options.status ?? 200)
    .headers(pageHeadersForDirectory())
    .send(layout(options).value);
}

/** A page that says what went wrong and what to do next. */
export function sendMessage(reply: FastifyReply, status: number, title: string, message: string): FastifyReply {
  return sendPage(reply, {
    status,
    title,
    noindex: true,
    body: html`<h1>${title}</h1><p>${message}</p><p><a href="/">Browse all listings</a></p>`,
  });
}
