/**
 * A person at the in-process attestor, through its pages as a browser without JavaScript uses
 * them: sign-in by the mailed link (the development outbox), consent answered by its form.
 */
import assert from "node:assert/strict";
import { unescapeHtml } from "@proto/testkit";
import type { OutboxMailer } from "../../src/trust/mail.js";
import { type Browserless, field, type PageAnswer } from "./browser-session.js";
import type { TrustHarness } from "./trust.js";

/** Signs `b` in as `email` by the link the attestor mails (it must keep mail in its outbox). */
export async function signInByEmail(h: TrustHarness, b: Browserless, email: string): Promise<void> {
  // The sign-in form allows 10 mails a minute per client address: start a fresh window.
  await h.alignTo(60);
  const page = await b.get("/signin");
  assert.equal(page.status, 200, page.text);
  const sent = await b.send("POST", "/signin/email", {
    form: { _csrf: field(page.text, "_csrf"), next: field(page.text, "next"), email },
  });
  assert.equal(sent.status, 200, sent.text);
  const mail = [...(h.app.mailer as OutboxMailer).entries].reverse().find((m) => m.to === email);
  assert.ok(mail, `a mail to ${email}`);
  const link = /https?:\/\/\S+\/signin\/email\/verify\?token=\S+/.exec(mail.text)?.[0];
  assert.ok(link, mail.text);
  const opened = await b.get(link);
  assert.equal(opened.status, 200, opened.text);
  const done = await b.send("POST", "/signin/email/verify", {
    form: { _csrf: field(opened.text, "_csrf"), token: field(opened.text, "token") },
  });
  assert.equal(done.status, 303, done.text);
}

/** A page's text as a person reads it: no tags, entities decoded, spaces collapsed. */
export function visibleText(page: PageAnswer): string {
  return unescapeHtml(page.text.replace(/<(script|style)[\s\S]*?<\/\1>/g, " ").replace(/<[^>]+>/g, " "))
    .replace(/\s+/g, " ")
    .replace(/ ([.,;?!])/g, "$1")
    .trim();
}

/** A box of the consent page's scopes: its scope, and how the page shows it. */
export interface ConsentBox {
  scope: string;
  checked: boolean;
  disabled: boolean;
}

/** The scope boxes of a consent page, in their order. */
export function consentBoxes(page: PageAnswer): ConsentBox[] {
  return [
    ...page.text.matchAll(/<input type="checkbox" name="granted\.\d+" value="([^"]*)"( checked)?( disabled)?>/g),
  ].map((m) => ({ scope: unescapeHtml(m[1] as string), checked: m[2] !== undefined, disabled: m[3] !== undefined }));
}

/**
 * Presses Allow or Deny on the consent page `page`, posting its form as a browser does: with the
 * scope boxes as the page ticked them, or with `granted` ticked instead (whatever a forged form
 * might name, too).
 */
export async function answerConsent(
  b: Browserless,
  page: PageAnswer,
  decision: "allow" | "deny",
  options: { granted?: readonly string[] } = {},
): Promise<PageAnswer> {
  assert.equal(page.status, 200, page.text);
  const consent = /<form method="post" action="\/oidc\/consent">([\s\S]*?)<\/form>/.exec(page.text)?.[1];
  assert.ok(consent !== undefined, "a consent form");
  const form: [string, string][] = [["decision", decision]];
  for (const m of consent.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)) {
    form.push([m[1] as string, unescapeHtml(m[2] as string)]);
  }
  const granted =
    options.granted ??
    consentBoxes(page)
      .filter((box) => box.checked && !box.disabled)
      .map((box) => box.scope);
  for (const [index, scope] of granted.entries()) form.push([`granted.${index}`, scope]);
  return b.send("POST", "/oidc/consent", { form });
}
