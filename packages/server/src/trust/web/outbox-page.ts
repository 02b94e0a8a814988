import type { FastifyInstance } from "fastify";
import { html, type SafeHtml } from "../../platform/html.js";
import type { OutboxMailer } from "../mail.js";
import { sendPage } from "./layout.js";

const URL_IN_TEXT = /https?:\/\/[^\s<>"']+/g;
/** Punctuation that ends a sentence after a link rather than belonging to it. */
const TRAILING = /[.,;:!?)\]]+$/;

/**
 * A mail's text with its http(s) links made clickable. Everything goes through `html`, so the
 * text stays text; only what parses as an http(s) URL becomes a link, and to exactly that URL.
 */
export function linkify(text: string): SafeHtml {
  const parts: (string | SafeHtml)[] = [];
  let last = 0;
  for (const match of text.matchAll(URL_IN_TEXT)) {
    const candidate = match[0].replace(TRAILING, "");
    const start = match.index;
    let url: URL | undefined;
    try {
      url = new URL(candidate);
    } catch {
      url = undefined;
    }
    if (url === undefined || (url.protocol !== "http:" && url.protocol !== "https:")) continue;
    parts.push(text.slice(last, start), html`<a href="${url.href}">${candidate}</a>`);
    last = start + candidate.length;
  }
  parts.push(text.slice(last));
  return html`${parts}`;
}

/** `2026-11-26 11:38:03 UTC`: the time a mail was kept, for a developer to tell mails apart. */
function shownTime(iso: string): string {
  return `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC`;
}

/**
 * `/dev/outbox`: the mails kept instead of sent when `SMTP_URL` is unset, newest first, their
 * long lines wrapped so the page fits a phone.
 */
export function outboxPage(app: FastifyInstance, mailer: OutboxMailer): void {
  app.get("/dev/outbox", { schema: { hide: true } }, async (_request, reply) => {
    const mails = [...mailer.entries].sort((a, b) => b.sentAt.localeCompare(a.sentAt));
    return sendPage(reply, {
      title: "Development outbox",
      body: html`<h1>Development outbox</h1>
<p class="muted">SMTP_URL is not set, so mail is kept here instead of being sent, newest first. This page does not exist in production.</p>
${mails.length === 0 ? html`<p>No mail yet.</p>` : ""}
${mails.map(
  // Scripts (the test suites among them) find a mail by this markup: the card and its To line.
  (m) => html`<section class="card"><p><strong>To:</strong> ${m.to}<br><strong>Subject:</strong> ${m.subject}<br>
  <time class="muted" datetime="${m.sentAt}">${shownTime(m.sentAt)}</time></p><pre class="mail-text">${linkify(m.text)}</pre></section>`,
)}`,
    });
  });
}
