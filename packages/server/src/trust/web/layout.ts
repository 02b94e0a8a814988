import type { FastifyReply } from "fastify";
import { type HtmlValue, html, PAGE_CSP, pageHeaders, type SafeHtml, withDirectives } from "../../platform/html.js";

export interface PageOptions {
  title: string;
  body: SafeHtml;
  status?: number;
  /** Personal pages are never cached (`no-store`). */
  personal?: boolean;
  signedIn?: { csrf: string } | undefined;
  /** Scripts of this origin the page needs besides the site's own. */
  scripts?: readonly string[];
}

export function layout(options: PageOptions): SafeHtml {
  const nav: HtmlValue = options.signedIn
    ? html`<nav aria-label="Account"><a href="/account">Account</a>
        <form class="inline" method="post" action="/signout"><input type="hidden" name="_csrf" value="${options.signedIn.csrf}">
        <button class="secondary" type="submit">Sign out</button></form></nav>`
    : "";
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${options.title} · proto trust</title>
<link rel="stylesheet" href="/assets/site.css">
<script src="/assets/site.js" defer></script>
${(options.scripts ?? []).map(
  (src) => html`<script src="${src}" defer></script>
`,
)}</head>
<body>
<header class="site"><a class="brand" href="/">proto trust</a>${nav}</header>
<main id="main">
${options.body}
</main>
</body>
</html>`;
}

/** A page with scripts of its own may call this origin (passkey ceremonies), and no other. */
const SCRIPTED_PAGE_CSP = withDirectives(PAGE_CSP, { "connect-src": "'self'" });

export function sendPage(reply: FastifyReply, options: PageOptions): FastifyReply {
  const headers = pageHeaders({ personal: options.personal ?? true });
  if (options.scripts !== undefined && options.scripts.length > 0)
    headers["content-security-policy"] = SCRIPTED_PAGE_CSP;
  return reply
    .code(options.status ?? 200)
    .headers(headers)
    .send(layout(options).value);
}

/** A page that only says something went wrong and what to do. */
export function sendMessage(
  reply: FastifyReply,
  status: number,
  title: string,
  message: string,
  extra?: SafeHtml,
): FastifyReply {
  return sendPage(reply, {
    status,
    title,
    body: html`<h1>${title}</h1><p>${message}</p>${extra}`,
  });
}
