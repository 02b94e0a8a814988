import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { hasRawControlCharacter, hostileRedirects, launchChromium } from "@proto/testkit";
import type { Browser, BrowserContext, Locator, Page, Response } from "playwright-core";
import { contrastOf, inPage } from "./support/page-checks.js";
import { magicLinkOf, type SmtpCollector, startSmtpCollector } from "./support/smtp.js";
import { STORE_VARIANTS } from "./support/stores.js";
import {
  type Agent,
  assertError,
  freePort,
  newAgent,
  RELAXED_RATE_LIMITS,
  startTrustHarness,
  type TrustHarness,
} from "./support/trust.js";

/**
 * Issue 5: the human pages of the attestor in a real browser (Debian's Chromium driven by
 * playwright-core), with sign-in mail delivered over SMTP to a server in this process.
 */

const AUD = "did:web:service.example";
const SHOP = "did:web:shop.example";
const MAPS = "did:web:maps.example%3A8443:tiles";
const MAIL_FROM = "proto trust <signin@trust.test>";
// Markup in an agent label must come out as text, in element content and in attributes alike.
const HOSTILE_LABEL = `Ada's "agent" <script>alert(1)</script>`;

const launched = await launchChromium();
if (launched.skip !== undefined) process.stdout.write(`# browser tests skipped: ${launched.skip}\n`);

/** A loopback page the agent listens on for the link page's redirect after confirmation. */
async function startCallbackServer(): Promise<{ server: Server; url: string; hits: URL[] }> {
  const hits: URL[] = [];
  const server = createServer((request, response) => {
    hits.push(new URL(request.url ?? "/", "http://127.0.0.1"));
    response.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    response.end("<!doctype html><title>Agent</title><p>Your agent got the answer. You can close this tab.</p>");
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no address");
  return { server, url: `http://127.0.0.1:${address.port}/linked`, hits };
}

/** The text a person sees in an element (rendered, so hidden parts are left out). */
const seen = (locator: Locator) => locator.innerText();

/** Whether the element is the one that has keyboard focus. */
const focused = (page: Page, selector: string) =>
  page.locator(selector).evaluate((element) => element.matches(":focus"));

describe("attestor pages in a browser", { skip: launched.skip, timeout: 180_000 }, () => {
  const browser = launched.browser as Browser;
  let h: TrustHarness;
  let smtp: SmtpCollector;
  let callback: Awaited<ReturnType<typeof startCallbackServer>>;
  let origin: string;
  let context: BrowserContext;
  let page: Page;
  const requested: string[] = [];
  const documents: Response[] = [];
  const dialogs: string[] = [];
  const cspViolations: string[] = [];
  /** The person the first story signs in (the next story goes on in the same browser). */
  let personEmail = "";
  /** Where screenshots go: `PROTO_SCREENSHOT_DIR` keeps them to look at, else a temporary folder. */
  const shotDir = process.env.PROTO_SCREENSHOT_DIR ?? mkdtempSync(join(tmpdir(), "proto-trust-pages-"));

  /** Every page a story opens is watched the same way, whichever context it is in. */
  function watch(target: BrowserContext): void {
    target.on("request", (request) => requested.push(request.url()));
    target.on("response", (response) => {
      if (response.request().resourceType() === "document") documents.push(response);
    });
    target.on("console", (message) => {
      if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
    });
  }

  before(async () => {
    smtp = await startSmtpCollector();
    callback = await startCallbackServer();
    const port = await freePort();
    origin = `http://127.0.0.1:${port}`;
    h = await startTrustHarness(STORE_VARIANTS[0] ?? { name: "sqlite", engine: "sqlite", redis: false }, {
      port,
      env: {
        TRUST_PUBLIC_URL: origin,
        SMTP_URL: smtp.url,
        MAIL_FROM,
        TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS,
      },
    });
    context = await browser.newContext();
    await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin });
    watch(context);
    page = await context.newPage();
    page.on("dialog", (dialog) => {
      dialogs.push(dialog.message());
      void dialog.dismiss();
    });
  });

  after(async () => {
    if (process.env.PROTO_SCREENSHOT_DIR === undefined) rmSync(shotDir, { recursive: true, force: true });
    await context?.close();
    await browser.close();
    await h?.close();
    await smtp?.close();
    await new Promise<void>((resolve) => (callback ? callback.server.close(() => resolve()) : resolve()));
  });

  test("link, sign in by e-mail, confirm, poll, account, revoke: what the person and the agent see", async () => {
    const email = `ada-${Math.random().toString(36).slice(2)}@mail.test`;
    personEmail = email;
    const agent: Agent = newAgent();
    const beforeStart = await h.nowMs();
    const started = await h.startLink(agent, { agent_label: HOSTILE_LABEL, callback_url: callback.url });
    const afterStart = await h.nowMs();
    assert.equal(started.status, 200, started.text);
    const reqId: string = started.json.req_id;
    assert.equal(new URL(started.json.link_url).origin, origin);

    // Not signed in: the link page sends the person to sign in, and the agent learns it was opened.
    await page.goto(started.json.link_url);
    await page.waitForURL((url) => url.pathname === "/signin");
    assert.equal(new URL(page.url()).searchParams.get("next"), `/link?req=${reqId}`);
    assert.deepEqual((await h.poll(agent, reqId)).json, { state: "pending", phase: "awaiting_confirm" });
    assert.equal(await page.title(), "Sign in · proto trust");

    // Keyboard only: focus reaches the labelled e-mail field, then the submit button.
    const emailInput = page.getByLabel("E-mail address");
    assert.equal(await emailInput.getAttribute("type"), "email");
    let tabs = 0;
    while (!(await focused(page, "#email"))) {
      assert.ok(tabs++ < 10, "Tab never reached the e-mail field");
      await page.keyboard.press("Tab");
    }
    await page.keyboard.type(email);
    await page.keyboard.press("Tab");
    assert.ok(await focused(page, 'form[action="/signin/email"] button[type="submit"]'), "Tab after the field");
    assert.equal((await seen(page.locator(":focus"))).trim(), "E-mail me a sign-in link");
    await page.keyboard.press("Enter");
    await page.getByRole("heading", { name: "Check your e-mail" }).waitFor();
    assert.ok((await seen(page.locator("main"))).includes(email));

    // The mail arrives over SMTP, to that address, with a link on the attestor's origin.
    const mail = await smtp.nextMailTo(email);
    assert.deepEqual(mail.rcptTo, [email]);
    assert.ok(mail.headers.get("to")?.includes(email), mail.headers.get("to"));
    assert.equal(mail.headers.get("subject"), "Your sign-in link");
    assert.ok(mail.headers.get("from")?.includes("signin@trust.test"), mail.headers.get("from"));
    const link = magicLinkOf(mail);
    assert.equal(new URL(link).origin, origin);
    assert.ok(mail.html?.includes(`href="${link}"`), "the HTML part links to the same URL");

    // Opening the link shows a button and signs nobody in.
    await page.goto(link);
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
    assert.ok((await seen(page.locator("main"))).includes(email));
    assert.equal(
      (await context.cookies()).find((c) => c.name === "proto_session"),
      undefined,
    );
    await page.goto(started.json.link_url);
    await page.waitForURL((url) => url.pathname === "/signin");
    await page.goto(link);
    await page.getByRole("button", { name: "Sign in" }).click();

    // Back on the link page, signed in.
    await page.waitForURL((url) => url.pathname === "/link");
    const session = (await context.cookies()).find((c) => c.name === "proto_session");
    assert.ok(session, "a session cookie after the POST");
    assert.equal(session.httpOnly, true);
    assert.equal(session.sameSite, "Lax");
    await page.getByRole("heading", { name: "Link this agent to your account?" }).waitFor();
    const details = page.locator("dl.card");
    // The label is shown as text: no dialog, no extra script element.
    assert.equal(await seen(details.locator("dd").first()), HOSTILE_LABEL);
    assert.equal(await page.locator("script").count(), 1);
    assert.equal(await page.locator('script[src="/assets/site.js"]').count(), 1);
    // The DID, shortened, with the whole value in the title and a copy button.
    const didCode = details.locator("code");
    const shown = await seen(didCode);
    assert.ok(shown.length < agent.did.length, shown);
    assert.ok(shown.includes("…"), shown);
    assert.ok(agent.did.startsWith(shown.split("…")[0] as string), shown);
    assert.ok(agent.did.endsWith(shown.split("…")[1] as string), shown);
    assert.equal(await didCode.getAttribute("title"), agent.did);
    await page.getByRole("button", { name: "Copy DID" }).click();
    await page.getByRole("status").filter({ hasText: "Copied" }).waitFor();
    assert.equal(await page.evaluate("navigator.clipboard.readText()"), agent.did);
    // The expiry: half an hour after the start.
    const expiry = details.locator("time");
    assert.equal(await seen(expiry), "in about 30 minutes");
    const expiresAt = Date.parse((await expiry.getAttribute("datetime")) ?? "");
    assert.ok(
      expiresAt >= beforeStart + 1800_000 && expiresAt <= afterStart + 1800_000,
      `expires ${new Date(expiresAt).toISOString()}`,
    );

    const shotDir = mkdtempSync(join(tmpdir(), "proto-link-page-"));
    try {
      const shot = join(shotDir, "link-page.png");
      await page.screenshot({ path: shot, fullPage: true });
      assert.ok(statSync(shot).size > 0, "the screenshot is not empty");
    } finally {
      rmSync(shotDir, { recursive: true, force: true });
    }

    // Confirm: the browser goes to the agent's loopback callback with the outcome.
    await page.getByRole("button", { name: "Confirm" }).click();
    await page.waitForURL((url) => url.href.startsWith(callback.url));
    const landed = new URL(page.url());
    assert.equal(landed.searchParams.get("req_id"), reqId);
    assert.equal(landed.searchParams.get("state"), "confirmed");
    const bindingId = landed.searchParams.get("binding_id") ?? "";
    assert.match(bindingId, /^bnd_/);
    // (The browser may also ask that origin for a favicon.)
    assert.equal(callback.hits.filter((hit) => hit.pathname === "/linked").length, 1);

    // The agent's poll gets the binding, once.
    const polled = await h.poll(agent, reqId);
    assert.equal(polled.status, 200, polled.text);
    assert.equal(polled.json.state, "confirmed");
    assert.equal(polled.json.binding_id, bindingId);
    const minted = await h.mint(agent, AUD);
    assert.equal(minted.status, 200, minted.text);
    assert.equal(minted.json.verification, "email");

    // The account page lists the binding.
    await page.goto(`${origin}/account`);
    await page.getByRole("heading", { name: "Your account" }).waitFor();
    assert.ok((await seen(page.locator("main"))).includes(email), "the verified address is shown");
    const card = page.getByRole("region", { name: HOSTILE_LABEL });
    await card.waitFor();
    const row = (term: string) => card.locator(`dt:text-is("${term}") + dd`);
    assert.equal(await seen(row("Agent")), HOSTILE_LABEL);
    assert.equal(await row("DID").locator("code").getAttribute("title"), agent.did);
    assert.equal(await seen(row("DID")), shown);
    for (const term of ["Linked", "Last token", "Lapses"]) {
      const datetime = await row(term).locator("time").getAttribute("datetime");
      assert.ok(datetime !== null && !Number.isNaN(Date.parse(datetime)), `${term}: ${datetime}`);
      assert.match(await seen(row(term)), /^\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC$/);
    }
    // Scripts of this origin only, none inline: the site's, and the passkey helpers.
    assert.deepEqual(await page.locator("script").evaluateAll((scripts) => scripts.map((s) => s.getAttribute("src"))), [
      "/assets/site.js",
      "/assets/webauthn.js",
      "/assets/passkeys.js",
    ]);

    // Revoke: the binding leaves the page, and the agent's next mint is refused.
    // It asks first (trust-consent.browser.test.ts looks at that page), then says it is done.
    await card.getByRole("button", { name: /^Revoke/ }).click();
    await page.getByRole("heading", { name: "Revoke this agent?" }).waitFor();
    await page.getByRole("button", { name: `Revoke ${HOSTILE_LABEL}` }).click();
    await page.waitForURL((url) => url.pathname === "/account");
    await page
      .getByRole("status")
      .filter({ hasText: `Agent ${HOSTILE_LABEL} revoked.` })
      .waitFor();
    await page.getByText("No agent is linked to your account.").waitFor();
    assert.equal(await page.getByRole("region", { name: HOSTILE_LABEL }).count(), 0);
    assertError(await h.mint(agent, AUD), 403, "binding_revoked");

    assert.deepEqual(dialogs, [], "no script from the label ran");
  });

  test("suspend one service of one agent on /account, restore it on a phone: notices, mints, layout", async () => {
    const agent = newAgent();
    const started = await h.startLink(agent, { agent_label: "Ada's helper" });
    assert.equal(started.status, 200, started.text);
    await h.hook("/__test/link/confirm", { req_id: started.json.req_id, email: personEmail });
    assert.equal((await h.poll(agent, started.json.req_id)).json.state, "confirmed");
    for (const aud of [SHOP, MAPS]) assert.equal((await h.mint(agent, aud)).status, 200, aud);

    // Each service by the name a person reads (most recent first), its DID one step away.
    await page.goto(`${origin}/account`);
    const card = page.getByRole("region", { name: "Ada's helper" });
    const services = card.getByRole("list", { name: "Services of Ada's helper" });
    const items = services.getByRole("listitem");
    assert.equal(await items.count(), 2);
    assert.equal(await seen(items.nth(0).locator("strong")), "maps.example:8443/tiles");
    assert.equal(await items.nth(0).locator("strong").getAttribute("title"), MAPS);
    assert.equal(await seen(items.nth(1).locator("strong")), "shop.example");
    assert.match(await seen(items.nth(1)), /Last token \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC/);

    // Keyboard: Tab reaches the shop's Suspend button; Enter presses it.
    const suspend = card.getByRole("button", { name: "Suspend Ada's helper for shop.example" });
    let tabs = 0;
    while (!(await suspend.evaluate((element) => element.matches(":focus")))) {
      assert.ok(tabs++ < 40, "Tab never reached the Suspend button");
      await page.keyboard.press("Tab");
    }
    await page.keyboard.press("Enter");
    await page.waitForURL((url) => url.pathname === "/account" && url.searchParams.get("done") === "suspended");
    assert.equal(
      (await seen(page.getByRole("status"))).trim(),
      "Suspended. Ada's helper can no longer get attestations for shop.example. Its other services are not affected. Restore it below whenever you like.",
    );
    const shop = services.getByRole("listitem").filter({ hasText: "shop.example" });
    assert.match(await seen(shop), /Suspended/);
    await shop.getByRole("button", { name: "Restore Ada's helper for shop.example" }).waitFor();
    assert.equal(await services.getByRole("button", { name: /^Suspend/ }).count(), 1, "maps is still active");
    // The agent's side: refused for the shop only.
    assertError(await h.mint(agent, SHOP), 403, "service_suspended");
    assert.equal((await h.mint(agent, MAPS)).status, 200);
    await page.screenshot({ path: join(shotDir, "account-suspended-desktop.png"), fullPage: true });
    assert.ok(statSync(join(shotDir, "account-suspended-desktop.png")).size > 0);

    // On a phone (light and dark): nothing scrolls sideways, text keeps its contrast; restore there.
    const afterSuspend = page.url();
    for (const colorScheme of ["light", "dark"] as const) {
      const phone = await browser.newContext({
        viewport: { width: 360, height: 740 },
        deviceScaleFactor: 2,
        isMobile: true,
        hasTouch: true,
        colorScheme,
      });
      watch(phone);
      try {
        await phone.addCookies(await context.cookies());
        const tab = await phone.newPage();
        await tab.goto(afterSuspend);
        await tab.getByRole("status").waitFor();
        const widths = await inPage<{ scroll: number; client: number }>(
          tab,
          "({ scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth })",
        );
        assert.ok(widths.scroll <= widths.client, `${colorScheme}: ${widths.scroll} > ${widths.client}`);
        const low = (
          await contrastOf(tab, [
            "h1",
            "h2",
            "h3",
            "p",
            "strong",
            ".muted",
            "code",
            ".badge",
            ".notice",
            "button",
            "time",
          ])
        ).filter((r) => r.ratio < 4.5);
        assert.deepEqual(low, [], colorScheme);
        await tab.screenshot({ path: join(shotDir, `account-suspended-phone-${colorScheme}.png`), fullPage: true });
        if (colorScheme === "dark") {
          await tab.getByRole("button", { name: "Restore Ada's helper for shop.example" }).tap();
          await tab.waitForURL((url) => url.searchParams.get("done") === "restored");
          assert.equal(
            (await seen(tab.getByRole("status"))).trim(),
            "Restored. Ada's helper can get attestations for shop.example again.",
          );
          await tab.screenshot({ path: join(shotDir, "account-restored-phone-dark.png"), fullPage: true });
        }
      } finally {
        await phone.close();
      }
    }
    assert.equal((await h.mint(agent, SHOP)).status, 200, "restored");
    // Back on the desktop, the old notice is not repeated now that it no longer holds.
    await page.goto(afterSuspend);
    assert.equal(await page.getByRole("status").count(), 0);
    assert.equal(await card.getByRole("button", { name: /^Restore/ }).count(), 0);
  });

  test("publish an agent's key for Web Bot Auth on /account, stop on a phone: notices, the directory, layout", async () => {
    const agent = newAgent();
    const started = await h.startLink(agent, { agent_label: "Grace's crawler" });
    assert.equal(started.status, 200, started.text);
    await h.hook("/__test/link/confirm", { req_id: started.json.req_id, email: personEmail });
    assert.equal((await h.poll(agent, started.json.req_id)).json.state, "confirmed");
    const directoryUrl = `${origin}/.well-known/http-message-signatures-directory`;
    const listed = async () =>
      ((await h.request("GET", "/.well-known/http-message-signatures-directory")).json.keys as { x: string }[]).some(
        (k) => k.x === agent.publicKeyB64,
      );
    assert.equal(await listed(), false, "off by default");

    // What publishing means is said before the button, in the agent's card.
    await page.goto(`${origin}/account`);
    const card = page.getByRole("region", { name: "Grace's crawler" });
    await card
      .getByText(
        `Sites that check Web Bot Auth will see this agent as signed by ${new URL(origin).host}; anyone can see that this key is linked at this attestor.`,
      )
      .waitFor();
    await card.getByText("Not published.").waitFor();
    await card.getByRole("button", { name: "Publish this agent's key for Web Bot Auth (Grace's crawler)" }).click();
    await page.waitForURL((url) => url.pathname === "/account" && url.searchParams.get("done") === "published");
    assert.equal(
      (await seen(page.getByRole("status"))).trim(),
      `Agent Grace's crawler's key is published at ${directoryUrl}.`,
    );
    assert.match(await seen(card.locator(".badge.published")), /^Published$/);
    await card.getByText(`Signature-Agent: sig1="${directoryUrl}"`).waitFor();
    assert.equal(await listed(), true);
    await page.screenshot({ path: join(shotDir, "account-wba-published-desktop.png"), fullPage: true });
    assert.ok(statSync(join(shotDir, "account-wba-published-desktop.png")).size > 0);

    // On a phone (light and dark): no sideways scroll, contrast kept; stop publishing there.
    const afterPublish = page.url();
    for (const colorScheme of ["light", "dark"] as const) {
      const phone = await browser.newContext({
        viewport: { width: 360, height: 740 },
        deviceScaleFactor: 2,
        isMobile: true,
        hasTouch: true,
        colorScheme,
      });
      watch(phone);
      try {
        await phone.addCookies(await context.cookies());
        const tab = await phone.newPage();
        await tab.goto(afterPublish);
        await tab.getByRole("status").waitFor();
        const widths = await inPage<{ scroll: number; client: number }>(
          tab,
          "({ scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth })",
        );
        assert.ok(widths.scroll <= widths.client, `${colorScheme}: ${widths.scroll} > ${widths.client}`);
        const low = (
          await contrastOf(tab, ["h3", "p", ".muted", "code", ".badge", ".notice", "button", "time"])
        ).filter((r) => r.ratio < 4.5);
        assert.deepEqual(low, [], colorScheme);
        await tab.screenshot({ path: join(shotDir, `account-wba-published-phone-${colorScheme}.png`), fullPage: true });
        if (colorScheme === "dark") {
          const phoneCard = tab.getByRole("region", { name: "Grace's crawler" });
          await phoneCard.getByRole("button", { name: "Stop publishing the key of Grace's crawler" }).tap();
          await tab.waitForURL((url) => url.searchParams.get("done") === "unpublished");
          assert.equal(
            (await seen(tab.getByRole("status"))).trim(),
            "Agent Grace's crawler's key is no longer published. Sites that fetched the directory may keep it for up to 5 minutes.",
          );
          await phoneCard.getByText("Not published.").waitFor();
          await tab.screenshot({ path: join(shotDir, "account-wba-stopped-phone-dark.png"), fullPage: true });
        }
      } finally {
        await phone.close();
      }
    }
    assert.equal(await listed(), false, "stopped");
    // Back on the desktop, the old notice is not repeated now that it no longer holds.
    await page.goto(afterPublish);
    assert.equal(await page.getByRole("status").count(), 0);
    await card.getByRole("button", { name: /^Publish this agent's key/ }).waitFor();
  });

  test("every page sends a CSP of default-src 'none' and loads nothing from elsewhere; personal pages are no-store", async () => {
    assert.ok(documents.length > 0);
    const attestorPages = documents.filter(
      (r) => new URL(r.url()).origin === origin && (r.headers()["content-type"] ?? "").startsWith("text/html"),
    );
    const paths = new Set(attestorPages.map((r) => new URL(r.url()).pathname));
    for (const path of ["/signin", "/signin/email", "/signin/email/verify", "/link", "/account"]) {
      assert.ok(paths.has(path), `the story visited ${path}: ${[...paths].join(", ")}`);
    }
    for (const response of attestorPages) {
      const headers = response.headers();
      const where = `${response.request().method()} ${response.url()}`;
      assert.match(headers["content-security-policy"] ?? "", /(^|;\s*)default-src 'none'(;|$)/, where);
      assert.equal(headers["x-content-type-options"], "nosniff", where);
    }
    for (const response of attestorPages) {
      const path = new URL(response.url()).pathname;
      if (["/link", "/account", "/signin/email/verify"].includes(path)) {
        assert.equal(response.headers()["cache-control"], "no-store", `${path} is personal`);
      }
    }
    // Every request the browser made went to the attestor, but for the agent's own callback page.
    const callbackOrigin = new URL(callback.url).origin;
    const elsewhere = requested.filter((url) => ![origin, callbackOrigin].includes(new URL(url).origin));
    assert.deepEqual(elsewhere, []);
    assert.ok(requested.some((url) => url === `${origin}/assets/site.css`));
    assert.ok(requested.some((url) => url === `${origin}/assets/site.js`));
    assert.deepEqual(cspViolations, []);
  });

  test("a hostile next: after the e-mail sign-in the browser is on the attestor's own account page", async () => {
    const fresh = await browser.newContext();
    // Every request the browser makes anywhere but the attestor (evil.example never resolves).
    const offsite: string[] = [];
    fresh.on("request", (request) => {
      if (new URL(request.url()).origin !== origin) offsite.push(request.url());
    });
    try {
      const tab = await fresh.newPage();
      for (const { name, value } of hostileRedirects(origin)) {
        // Ten sign-in mails a minute from one address: each case in a window of its own.
        await h.alignTo(60);
        const email = `mallory-${Math.random().toString(36).slice(2)}@mail.test`;
        const opened = await tab.goto(`${origin}/signin?${new URLSearchParams({ next: value })}`);
        if (hasRawControlCharacter(value)) {
          // Refused before any redirect logic: an error page of the attestor's own.
          assert.equal(opened?.status(), 400, name);
          assert.equal(new URL(tab.url()).origin, origin, name);
          await tab.getByRole("heading", { name: "This address does not work" }).waitFor();
          continue;
        }
        await tab.getByLabel("E-mail address").fill(email);
        await tab.getByRole("button", { name: "E-mail me a sign-in link" }).click();
        await tab.getByRole("heading", { name: "Check your e-mail" }).waitFor();
        await tab.goto(magicLinkOf(await smtp.nextMailTo(email)));
        await tab.getByRole("button", { name: "Sign in" }).click();
        await tab.waitForURL((url) => url.pathname !== "/signin/email/verify");
        const landed = new URL(tab.url());
        assert.equal(landed.origin, origin, `${name}: ${tab.url()}`);
        assert.equal(landed.pathname, "/account", name);
        await tab.getByRole("heading", { name: "Your account" }).waitFor();
        await fresh.clearCookies();
      }
      assert.deepEqual(offsite, []);
    } finally {
      await fresh.close();
    }
  });

  test("a GET of the magic link after sign-in, from a fresh browser, still signs nobody in", async () => {
    const email = `grace-${Math.random().toString(36).slice(2)}@mail.test`;
    const fresh = await browser.newContext();
    try {
      const tab = await fresh.newPage();
      await tab.goto(`${origin}/signin`);
      await tab.getByLabel("E-mail address").fill(email);
      await tab.getByRole("button", { name: "E-mail me a sign-in link" }).click();
      await tab.getByRole("heading", { name: "Check your e-mail" }).waitFor();
      const link = magicLinkOf(await smtp.nextMailTo(email));
      // A mail scanner fetches the link twice: nothing happens, and the person can still use it.
      await tab.goto(link);
      await tab.goto(link);
      assert.equal(
        (await fresh.cookies()).find((c) => c.name === "proto_session"),
        undefined,
      );
      await tab.getByRole("button", { name: "Sign in" }).click();
      await tab.waitForURL((url) => url.pathname === "/account");
      await tab.getByRole("heading", { name: "Your account" }).waitFor();
      // Used once: the link now answers that it no longer works.
      const again = await tab.goto(link);
      assert.equal(again?.status(), 410);
      await tab.getByRole("heading", { name: "This sign-in link no longer works" }).waitFor();
    } finally {
      await fresh.close();
    }
  });
});
