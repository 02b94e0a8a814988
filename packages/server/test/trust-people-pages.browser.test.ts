import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { launchChromium } from "@proto/testkit";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { linkify } from "../src/trust/web/outbox-page.js";
import { type DirectoryHarness, startDirectoryHarness } from "./support/directory.js";
import { inPage } from "./support/page-checks.js";
import { STORE_VARIANTS } from "./support/stores.js";
import { freePort, newAgent, RELAXED_RATE_LIMITS, startTrustHarness, type TrustHarness } from "./support/trust.js";

/**
 * Issue 17 (attestor pages, items 1, 2, 5, 6): what a newcomer meets in a real browser. The
 * development outbox (no SMTP_URL), sign-in that says why, HTML instead of the API's JSON for
 * people, and the API docs page, each at desktop and phone width.
 */

const VARIANT = STORE_VARIANTS[0] ?? { name: "sqlite", engine: "sqlite" as const, redis: false };
const SHOP = "did:web:shop.example";
const SHOP_REDIRECT = "https://shop.example/callback";
// Markup in an agent label must come out as text.
const HOSTILE_LABEL = `Ada's "agent" <img src=x onerror=alert(1)>`;
const WIDTHS = [
  { name: "desktop", width: 1280, height: 800 },
  { name: "phone", width: 375, height: 812 },
] as const;

const launched = await launchChromium();
if (launched.skip !== undefined) process.stdout.write(`# browser tests skipped: ${launched.skip}\n`);

describe("linkify (the outbox's links)", () => {
  test("only http(s) URLs become links, escaped, without the sentence's closing punctuation", () => {
    const out = linkify(
      `Open https://trust.test/signin?token=a&b=1. Not javascript:alert(1) nor <b>bold</b> "x" (see http://h.test/p).`,
    ).value;
    assert.equal(
      out,
      `Open <a href="https://trust.test/signin?token=a&amp;b=1">https://trust.test/signin?token=a&amp;b=1</a>. ` +
        `Not javascript:alert(1) nor &lt;b&gt;bold&lt;/b&gt; &quot;x&quot; (see <a href="http://h.test/p">http://h.test/p</a>).`,
    );
    assert.equal(linkify(`https://"onmouseover=x`).value, "https://&quot;onmouseover=x");
  });
});

describe("attestor pages for people in a browser (issue 17)", { skip: launched.skip, timeout: 180_000 }, () => {
  const browser = launched.browser as Browser;
  let h: TrustHarness;
  let directory: DirectoryHarness;
  let origin: string;
  let context: BrowserContext;
  let page: Page;
  const cspViolations: string[] = [];
  const dialogs: string[] = [];
  const shotDir = process.env.PROTO_SCREENSHOT_DIR ?? mkdtempSync(join(tmpdir(), "proto-people-pages-"));

  /** Screenshots at desktop and phone width; at each, nothing is wider than the window. */
  async function look(target: Page, name: string): Promise<void> {
    for (const size of WIDTHS) {
      await target.setViewportSize({ width: size.width, height: size.height });
      const widths = await inPage<{ scroll: number; inner: number }>(
        target,
        "({ scroll: document.documentElement.scrollWidth, inner: window.innerWidth })",
      );
      assert.ok(widths.scroll <= widths.inner, `${name} is ${widths.scroll}px wide in a ${widths.inner}px window`);
      await target.screenshot({ path: join(shotDir, `${name}-${size.name}.png`), fullPage: true });
    }
    await target.setViewportSize({ width: WIDTHS[0].width, height: WIDTHS[0].height });
  }

  function watch(target: BrowserContext): void {
    target.on("console", (message) => {
      if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
    });
    target.on("page", (p) => p.on("dialog", (d) => dialogs.push(d.message())));
  }

  async function freshPage(): Promise<{ context: BrowserContext; page: Page }> {
    const c = await browser.newContext();
    watch(c);
    return { context: c, page: await c.newPage() };
  }

  before(async () => {
    const port = await freePort();
    origin = `http://127.0.0.1:${port}`;
    // No SMTP_URL: mail goes to the development outbox, as on a developer's machine.
    h = await startTrustHarness(VARIANT, {
      port,
      env: {
        TRUST_PUBLIC_URL: origin,
        TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS,
        TRUST_OIDC_CLIENTS: JSON.stringify([{ client_id: SHOP, service_did: SHOP, redirect_uris: [SHOP_REDIRECT] }]),
      },
    });
    ({ context, page } = await freshPage());
  });

  after(async () => {
    if (process.env.PROTO_SCREENSHOT_DIR === undefined) rmSync(shotDir, { recursive: true, force: true });
    await context?.close();
    await browser.close();
    await h?.close();
    await directory?.close();
  });

  test("a link request: sign-in names the agent, the check-mail page leads to the outbox, the outbox's link signs in", async () => {
    // An earlier mail to someone else: the outbox lists the newest first.
    const other = await freshPage();
    await other.page.goto(`${origin}/signin`);
    await other.page.fill("#email", "someone-else@mail.test");
    await other.page.getByRole("button", { name: "E-mail me a sign-in link" }).click();
    await other.page.getByRole("heading", { name: "Check your e-mail" }).waitFor();
    await other.context.close();

    const agent = newAgent();
    const started = await h.startLink(agent, { agent_label: HOSTILE_LABEL });
    assert.equal(started.status, 200, started.text);
    await page.goto(started.json.link_url as string);
    assert.equal(new URL(page.url()).pathname, "/signin");
    const lead = page.locator("main .lead");
    assert.equal(
      await lead.innerText(),
      `An agent called ${HOSTILE_LABEL} asks to be linked to you. Sign in to see the request and answer it.`,
    );
    assert.equal(await page.locator("main .lead strong").innerText(), HOSTILE_LABEL);
    assert.equal(await page.locator("main img").count(), 0, "the label's markup is text");
    await look(page, "signin-link-request");

    const email = `ada-${Math.random().toString(36).slice(2)}@mail.test`;
    await page.fill("#email", email);
    await page.getByRole("button", { name: "E-mail me a sign-in link" }).click();
    assert.equal(await page.locator("h1").innerText(), "Check your e-mail");
    const outboxLink = page.getByRole("link", { name: "development outbox" });
    assert.equal(await outboxLink.getAttribute("href"), "/dev/outbox");
    await look(page, "signin-check-mail-dev");

    await outboxLink.click();
    assert.equal(new URL(page.url()).pathname, "/dev/outbox");
    const mails = page.locator("main section.card");
    assert.equal(await mails.count(), 2);
    assert.match(await mails.nth(0).innerText(), new RegExp(email.replace(/[.]/g, "\\.")), "newest first");
    assert.match(await mails.nth(1).innerText(), /someone-else@mail\.test/);
    const signinLink = mails.nth(0).locator("pre a");
    assert.equal(await signinLink.count(), 1, "the sign-in link is a link");
    const href = (await signinLink.getAttribute("href")) ?? "";
    assert.ok(href.startsWith(`${origin}/signin/email/verify?token=`), href);
    assert.equal(await signinLink.innerText(), href, "the link shows the whole address it goes to");
    await look(page, "outbox");

    await signinLink.click();
    assert.equal(new URL(page.url()).pathname, "/signin/email/verify");
    await page.getByRole("button", { name: "Sign in" }).click();
    assert.equal(new URL(page.url()).pathname, "/link");
    assert.equal(await page.locator("h1").innerText(), "Link this agent to your account?");
  });

  test("a service's sign-in: the page names the registered service; an unregistered return address names nothing", async () => {
    const fresh = await freshPage();
    try {
      const query = new URLSearchParams({
        client_id: SHOP,
        redirect_uri: SHOP_REDIRECT,
        response_type: "code",
        scope: "openid",
        code_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
        code_challenge_method: "S256",
        state: "st",
      });
      await fresh.page.goto(`${origin}/oidc/authorize?${query}`);
      assert.equal(new URL(fresh.page.url()).pathname, "/signin");
      assert.equal(
        await fresh.page.locator("main .lead").innerText(),
        "shop.example asks you to sign in. You go back there afterwards.",
      );
      await look(fresh.page, "signin-oidc");

      // `next` is only a way back: a client it names with an address the client never registered
      // (or an unknown link request) earns no words on the page.
      for (const next of [
        `/oidc/authorize?client_id=${encodeURIComponent(SHOP)}&redirect_uri=${encodeURIComponent("https://evil.example/cb")}`,
        "/oidc/authorize?client_id=did%3Aweb%3Aevil.example&redirect_uri=x",
        "/link?req=lr_unknown",
      ]) {
        await fresh.page.goto(`${origin}/signin?next=${encodeURIComponent(next)}`);
        assert.equal(await fresh.page.locator("main .lead").count(), 0, next);
        assert.equal(await fresh.page.locator("h1").innerText(), "Sign in");
      }
    } finally {
      await fresh.context.close();
    }
  });

  test("people get pages, API clients keep JSON: the start page, a form's address, unknown paths", async () => {
    const fresh = await freshPage();
    try {
      const p = fresh.page;
      const home = await p.goto(`${origin}/`);
      assert.equal(home?.status(), 200);
      assert.match(home?.headers()["content-type"] ?? "", /^text\/html/);
      assert.equal(await p.locator("h1").innerText(), "proto trust");
      assert.match(await p.locator("main").innerText(), /vouches that a verified person stands behind an AI agent/);
      assert.equal(await p.getByRole("link", { name: "Sign in" }).getAttribute("href"), "/signin?next=%2Faccount");
      assert.equal(await p.getByRole("link", { name: "Your account" }).getAttribute("href"), "/account");
      assert.equal(await p.getByRole("link", { name: "The API documentation" }).getAttribute("href"), "/docs");
      await look(p, "landing");

      // The address of a form, opened again (refresh, Back, a pasted URL): the page it belongs to.
      await p.goto(`${origin}/signin/email`);
      assert.equal(new URL(p.url()).pathname, "/signin");
      assert.equal(await p.locator("h1").innerText(), "Sign in");
      await p.goto(`${origin}/link/confirm`);
      assert.equal(new URL(p.url()).pathname, "/signin", "signed out: /account sends to sign-in");
      assert.equal(new URL(p.url()).searchParams.get("next"), "/account");
      await p.goto(`${origin}/account/bindings/bnd_anything/revoke`);
      assert.equal(new URL(p.url()).pathname, "/signin", "a form whose address carries an id");

      const missing = await p.goto(`${origin}/no/such/page?x=1`);
      assert.equal(missing?.status(), 404);
      assert.equal(await p.locator("h1").innerText(), "Page not found");
      assert.equal(await p.getByRole("link", { name: "Go to the start page" }).getAttribute("href"), "/");
      await look(p, "not-found");

      // API clients: the same JSON envelope and status as before (on `/`, the API's index: api-index.test.ts).
      for (const accept of [undefined, "application/json", "*/*", "application/json, text/html"]) {
        // (`/account/bindings/:id/revoke` is a page of its own since revoking asks first.)
        for (const path of ["/no/such/page", "/signin/email", "/link/confirm"]) {
          const answer = await h.request("GET", path, accept === undefined ? {} : { headers: { accept } });
          assert.equal(answer.status, 404, `${accept} ${path}`);
          assert.match(answer.headers.get("content-type") ?? "", /^application\/json/);
          assert.equal(answer.json.error.code, "not_found");
          assert.equal(answer.json.error.message, `no route for GET ${path}`);
        }
      }
      // The API's own routes are untouched by the pages' fallback.
      assert.equal((await h.request("GET", "/.well-known/jwks.json")).status, 200);
    } finally {
      await fresh.context.close();
    }
  });

  test("/docs on the attestor and the directory: the project's name, not the framework's logo; fits a phone", async () => {
    directory = await startDirectoryHarness(VARIANT, { sites: 1 });
    for (const [name, base, title] of [
      ["docs-attestor", origin, "proto trust attestor"],
      ["docs-directory", directory.url, "proto listing directory"],
    ] as const) {
      const fresh = await freshPage();
      try {
        const p = fresh.page;
        await p.goto(`${base}/docs`);
        await p.locator(".topbar a img").waitFor();
        await p.locator(".information-container .title").waitFor();
        assert.equal(
          await p.locator('meta[name="viewport"]').getAttribute("content"),
          "width=device-width, initial-scale=1",
        );
        const logo = (await p.locator(".topbar a img").getAttribute("src")) ?? "";
        const svg = Buffer.from(logo.replace(/^data:image\/svg\+xml;base64,/, ""), "base64").toString("utf8");
        assert.match(svg, new RegExp(`>${title}</text>`), "the logo is the project's name");
        assert.equal(await p.locator(".topbar a.link > *").count(), 1, "the name alone, no framework logo");
        assert.match(await p.locator(".information-container .title").innerText(), new RegExp(title));
        // The phone's layout width is the phone's, not 980px shrunk.
        await p.setViewportSize({ width: 375, height: 812 });
        assert.equal(await inPage(p, "window.innerWidth"), 375);
        await look(p, name);
      } finally {
        await fresh.context.close();
      }
    }
  });

  test("no page broke its Content-Security-Policy or opened a dialog", () => {
    assert.deepEqual(cspViolations, []);
    assert.deepEqual(dialogs, []);
  });
});
