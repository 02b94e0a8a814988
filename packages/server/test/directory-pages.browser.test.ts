/**
 * Issue 9: the directory's browse pages. In a real browser (Debian's Chromium driven by
 * playwright-core): search, tag filter, pagination through the "Next page" link, the detail page,
 * hostile listing text shown as text, the no-domain-anchor indicator, stale marking, the phone
 * layout, keyboard focus and contrast, the CSP and that nothing is fetched from elsewhere. Over
 * plain HTTP (no browser needed): headers, error pages, the rate limit, its configuration, and the
 * sitemap's links to the pages.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { launchChromium, lookAt } from "@proto/testkit";
import type { Browser, BrowserContext, Locator, Page, Response } from "playwright-core";
import { readDirectoryConfig } from "../src/directory/config.js";
import { ConfigError } from "../src/platform/env.js";
import {
  type DirectoryHarness,
  didPath,
  type HttpResult,
  makeStale,
  type Site,
  startDirectoryHarness,
} from "./support/directory.js";
import { contrastOf, inPage } from "./support/page-checks.js";
import { STORE_VARIANTS } from "./support/stores.js";

const VARIANT = STORE_VARIANTS[0] ?? { name: "sqlite", engine: "sqlite" as const, redis: false };
const DAY = 86400;
/** Everything but the pages' own limit, raised so that setting up never meets a limiter. */
const SETUP_LIMITS = "challenge=100000/60,create=100000/60,write=100000/60,read=100000/60,sitemap=100000/60";

// Listing text and discovery members are whatever the host's owner wrote.
const HOSTILE_TITLE = "<script>alert(1)</script>";
const HOSTILE_DESCRIPTION = `<img src=x onerror=alert(1)> & "quotes" 'too'`;
const HOSTILE_TAGS = ["<b>bold</b>", `"><svg onload=alert(1)>`];
const DID_KEY = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";
const EXTERNAL_REL = ["nofollow", "noopener", "noreferrer"];

const pagePath = (did: string) => `/listings/${encodeURIComponent(did)}`;
/** A browser asks for HTML: on `/`, any other client gets the API's JSON index instead of the page. */
const AS_BROWSER = { headers: { accept: "text/html" } };

/** Discovery members a hostile host could publish that must never become links. */
function hostileDocument(site: Site): Record<string, unknown> {
  return site.document({
    endpoints: { ...(site.document().endpoints as object), claim_page: "javascript:alert(1)" },
    x402: {
      facilitator: "https://trusted.test@evil.test/pay",
      networks: ["data:text/html,<script>alert(1)</script>"],
      assets: [HOSTILE_TITLE],
      payment_endpoint: "JaVaScRiPt:alert(document.domain)",
    },
  });
}

async function registerWith(h: DirectoryHarness, doc: (site: Site) => Record<string, unknown>, extra = {}) {
  const site = h.site();
  site.serveDiscovery(doc(site));
  return h.register(site, extra);
}

/** A page's HTML headers, as every page must send them. */
function assertPageHeaders(res: { headers: Headers } | HttpResult, where: string): void {
  assert.equal(res.headers.get("content-type"), "text/html; charset=utf-8", where);
  const csp = res.headers.get("content-security-policy") ?? "";
  const directives = new Map(
    csp.split(";").map((d) => {
      const [name, ...values] = d.trim().split(/\s+/);
      return [name, values.join(" ")] as const;
    }),
  );
  assert.equal(directives.get("default-src"), "'none'", `${where}: ${csp}`);
  assert.equal(directives.get("script-src"), "'none'", `${where}: ${csp}`);
  assert.equal(directives.get("style-src"), "'self'", `${where}: ${csp}`);
  assert.equal(directives.get("form-action"), "'self'", `${where}: ${csp}`);
  assert.equal(directives.get("frame-ancestors"), "'none'", `${where}: ${csp}`);
  assert.equal(directives.get("base-uri"), "'none'", `${where}: ${csp}`);
  assert.equal(res.headers.get("x-content-type-options"), "nosniff", where);
  assert.equal(res.headers.get("x-frame-options"), "DENY", where);
  assert.equal(res.headers.get("referrer-policy"), "no-referrer", where);
}

// ---- in a browser -----------------------------------------------------------------------------

const launched = await launchChromium();
if (launched.skip !== undefined) process.stdout.write(`# browser tests skipped: ${launched.skip}\n`);

/** The text a person sees in an element (rendered, so hidden parts are left out). */
const seen = (locator: Locator) => locator.innerText();

/** Title and DID of every listing card on the page, in order. */
async function cards(page: Page): Promise<{ title: string; did: string }[]> {
  const out: { title: string; did: string }[] = [];
  for (const card of await page.locator("article.listing").all()) {
    out.push({ title: await seen(card.locator("h3")), did: await seen(card.locator(".did code")) });
  }
  return out;
}

describe("directory browse pages in a browser", { skip: launched.skip, timeout: 60_000 }, () => {
  const browser = launched.browser as Browser;
  let h: DirectoryHarness;
  let origin: string;
  let context: BrowserContext;
  let page: Page;
  const requested: string[] = [];
  const documents: Response[] = [];
  const dialogs: string[] = [];
  const cspViolations: string[] = [];

  const weather: { did: string; title: string }[] = [];
  const bulk: string[] = [];
  let full: { did: string; site: Site };
  let hostile: { did: string; site: Site };
  let keyed: { did: string; site: Site };
  let stale: { did: string; site: Site };

  /** Every page the story opens is watched the same way, whichever context it is in. */
  function watch(target: BrowserContext): void {
    target.on("request", (request) => requested.push(request.url()));
    target.on("response", (response) => {
      if (response.request().resourceType() === "document") documents.push(response);
    });
    target.on("console", (message) => {
      if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
    });
    target.on("page", (tab) =>
      tab.on("dialog", (dialog) => {
        dialogs.push(dialog.message());
        void dialog.dismiss();
      }),
    );
  }

  before(async () => {
    h = await startDirectoryHarness(VARIANT, {
      sites: 32,
      env: { DIRECTORY_RATE_LIMITS: `${SETUP_LIMITS},pages=100000/60` },
    });
    origin = h.url;
    for (const [title, description] of [
      ["Weather Now", "Forecasts for agents"],
      ["Skyline", "Live WEATHER radar and alerts"],
    ] as const) {
      const { did } = await h.register(undefined, { title, description, tags: ["weather"] });
      weather.push({ did, title });
    }
    for (let i = 1; i <= 22; i++) {
      const n = String(i).padStart(2, "0");
      bulk.push((await h.register(undefined, { title: `Catalogue entry ${n}`, tags: ["bulk", `n${n}`] })).did);
    }
    full = await registerWith(
      h,
      (site) =>
        site.document({
          endpoints: { ...(site.document().endpoints as object), key_rotation: "/proto/v1/keys" },
          features: ["attestation", "key_rotation"],
          recipient_types: ["email", "oidc"],
          billing: { unclaimed_mode: "attested_only", accepted_attestors: ["proto-trust", "other-attestor"] },
          limits: { unclaimed_rate_limit_per_hour: 1200, unclaimed_ttl_seconds: 7 * DAY },
          x402: {
            facilitator: "https://facilitator.test/x402",
            networks: ["base", "base-sepolia"],
            assets: ["USDC"],
            payment_endpoint: "/proto/v1/pay",
          },
          permissions: {
            "notes:read": { description: "Read your notes", default: true },
            "notes:delete": { description: "Delete your notes", phishing_resistant: true },
            purchase: { description: "Pay for pinned notes", currency: "EUR" },
          },
        }),
      { title: "Full featured", description: "Every optional member", tags: ["complete"] },
    );
    hostile = await registerWith(h, hostileDocument, {
      title: HOSTILE_TITLE,
      description: HOSTILE_DESCRIPTION,
      tags: HOSTILE_TAGS,
    });
    keyed = await registerWith(h, (site) => site.document({ service_did: DID_KEY }), {
      title: "Keyed service",
      tags: ["keyed"],
    });
    stale = await h.register(undefined, { title: "Fading service", tags: ["fading"] });
    await makeStale(h, stale.site);
    const check = await h.request("GET", didPath(stale.did));
    assert.equal(check.json.status, "stale", "the fixture is stale");

    context = await browser.newContext();
    watch(context);
    page = await context.newPage();
  });

  after(async () => {
    await context?.close();
    await browser.close();
    await h?.close();
  });

  test("the search box finds titles and descriptions, case-insensitively, exactly as the API does", async () => {
    await page.goto(`${origin}/`);
    await page.getByRole("heading", { level: 1, name: "Service directory" }).waitFor();
    assert.equal(await page.title(), "Listings · proto directory");
    await page.getByRole("search").getByLabel("Search").fill("WEATHER");
    await page.getByRole("search").getByLabel("Search").press("Enter");
    await page.waitForURL((url) => url.searchParams.get("search") === "WEATHER");
    const found = await cards(page);
    assert.deepEqual(found.map((c) => c.title).sort(), ["Skyline", "Weather Now"]);
    const api = await h.request("GET", "/v1/listings?search=WEATHER&limit=20");
    assert.deepEqual(
      found.map((c) => c.did),
      api.json.listings.map((l: { service_did: string }) => l.service_did),
      "the same listings, in the same order",
    );
    assert.equal(await page.getByLabel("Search").inputValue(), "WEATHER", "the box keeps the query");
    assert.ok((await seen(page.locator("#results-count"))).startsWith("2 listings"));
    assert.equal(await page.getByRole("link", { name: "Next page" }).count(), 0);

    await page.getByLabel("Search").fill("no listing has this");
    await page.getByRole("button", { name: "Search" }).click();
    await page.getByText("No listing matches.").waitFor();
    assert.equal(await page.locator("article.listing").count(), 0);
  });

  test("tag filter and pagination: 20 a page, the Next link keeps the query, page 2 ends the list", async () => {
    // A tag on a card filters by it.
    await page.goto(`${origin}/?search=now`);
    await page.locator("article.listing").getByRole("link", { name: "weather", exact: true }).click();
    await page.waitForURL((url) => url.searchParams.get("tag") === "weather" && !url.searchParams.has("search"));
    assert.deepEqual((await cards(page)).map((c) => c.did).sort(), weather.map((w) => w.did).sort());
    assert.equal(await page.getByRole("search").getByLabel("Tag", { exact: true }).inputValue(), "weather");

    // Search and tag together, through the form, over two pages.
    await page.goto(`${origin}/`);
    await page.getByRole("search").getByLabel("Search").fill("catalogue");
    await page.getByRole("search").getByLabel("Tag", { exact: true }).fill("bulk");
    await page.getByRole("button", { name: "Search" }).click();
    await page.waitForURL((url) => url.searchParams.get("tag") === "bulk");
    const first = await cards(page);
    assert.equal(first.length, 20);
    const next = page.getByRole("navigation", { name: "Pages" }).getByRole("link", { name: "Next page" });
    assert.equal(await next.getAttribute("rel"), "next");
    const nextUrl = new URL((await next.getAttribute("href")) ?? "", origin);
    assert.equal(nextUrl.pathname, "/");
    assert.equal(nextUrl.searchParams.get("search"), "catalogue");
    assert.equal(nextUrl.searchParams.get("tag"), "bulk");
    assert.ok(nextUrl.searchParams.get("cursor"), "the cursor rides in the link");

    await next.click();
    await page.waitForURL((url) => url.searchParams.has("cursor"));
    assert.equal(new URL(page.url()).searchParams.get("search"), "catalogue");
    const second = await cards(page);
    assert.equal(second.length, 2);
    assert.equal(await page.getByRole("link", { name: "Next page" }).count(), 0, "the last page has no Next");
    assert.equal(
      await page.getByRole("link", { name: "First page" }).getAttribute("href"),
      "/?search=catalogue&tag=bulk",
    );
    const seenDids = [...first, ...second].map((c) => c.did);
    assert.equal(new Set(seenDids).size, seenDids.length, "no listing twice");
    assert.deepEqual([...seenDids].sort(), [...bulk].sort(), "every listing once");

    // The pages follow the API's pages one for one.
    const api1 = await h.request("GET", "/v1/listings?search=catalogue&tag=bulk&limit=20");
    const api2 = await h.request(
      "GET",
      `/v1/listings?search=catalogue&tag=bulk&limit=20&cursor=${encodeURIComponent(api1.json.next_cursor)}`,
    );
    const ids = (res: HttpResult) => res.json.listings.map((l: { service_did: string }) => l.service_did);
    assert.deepEqual(
      first.map((c) => c.did),
      ids(api1),
    );
    assert.deepEqual(
      second.map((c) => c.did),
      ids(api2),
    );
    assert.equal(api2.json.next_cursor, null);
  });

  test("the detail page shows the listing and its discovery document for people, with links to the JSON and the live document", async () => {
    await page.goto(`${origin}/?tag=complete`);
    await page.getByRole("link", { name: "Full featured" }).click();
    await page.waitForURL((url) => url.pathname === pagePath(full.did));
    await page.getByRole("heading", { level: 1, name: "Full featured" }).waitFor();
    assert.equal(await page.title(), "Full featured · proto directory");
    const api = (await h.request("GET", didPath(full.did))).json;

    const listing = page.getByRole("region", { name: "Listing" });
    const row = (scope: Locator, term: string) => scope.locator(`dt:text-is("${term}") + dd`);
    assert.equal(await seen(row(listing, "Service DID")), full.did);
    assert.equal(await seen(row(listing, "Host")), full.site.authority);
    assert.equal(await seen(row(listing, "Status")), "Active");
    assert.equal(await seen(row(listing, "Tags")), "complete");
    for (const [term, field] of [
      ["First listed", "first_listed_at"],
      ["Last fetched", "fetched_at"],
      ["Updated", "updated_at"],
    ] as const) {
      const time = row(listing, term).locator("time");
      assert.equal(await time.getAttribute("datetime"), api[field], term);
      assert.match(await seen(time), /^\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC$/, term);
    }
    assert.equal(await seen(page.locator("p.description")), "Every optional member");

    const doc = page.getByRole("region", { name: "Discovery document" });
    const text = await seen(doc);
    assert.equal(await seen(row(doc, "Protocol version")), "0.1");
    assert.equal(await seen(row(doc, "Signature algorithms")), "ed25519");
    assert.equal(await seen(row(doc, "Accounts")), "/proto/v1/accounts");
    assert.equal(await seen(row(doc, "Owner invitation")), "/proto/v1/accounts/me/owner-invitation");
    assert.equal(await seen(row(doc, "Claim completion")), "/proto/v1/claim");
    assert.equal(await seen(row(doc, "Key rotation")), "/proto/v1/keys");
    assert.equal(
      await row(doc, "Claim page").getByRole("link").getAttribute("href"),
      `https://${full.site.authority}/claim`,
    );
    for (const expected of [
      "Attestation",
      "Key rotation",
      "E-mail",
      "OpenID Connect",
      "proto-trust",
      "other-attestor",
    ]) {
      assert.ok(text.includes(expected), expected);
    }
    assert.match(await seen(row(doc, "Unclaimed accounts")), /^Attested only.*attested_only$/);
    assert.equal(await seen(row(doc, "Unclaimed accounts per hour")), "1,200 per hour");
    assert.equal(await seen(row(doc, "Unclaimed accounts expire")), "after 604,800 seconds (7 days)");
    assert.equal(await row(doc, "Facilitator").getByRole("link").getAttribute("href"), "https://facilitator.test/x402");
    assert.equal(await seen(row(doc, "Networks")), "base\nbase-sepolia");
    assert.equal(await seen(row(doc, "Assets")), "USDC");
    assert.equal(await seen(row(doc, "Payment endpoint")), "/proto/v1/pay");
    const permission = async (name: string) =>
      (await seen(doc.locator(`ul.permissions li[data-permission="${name}"]`))).replace(/\n+/g, "\n");
    assert.equal(await permission("notes:read"), "notes:read\nRead your notes\nGranted at sign-up");
    assert.equal(await permission("notes:delete"), "notes:delete\nDelete your notes\nNeeds a passkey to approve");
    assert.equal(await permission("purchase"), "purchase\nPay for pinned notes\nSpending, in EUR");
    await lookAt(page, "directory-listing-full");
    await page.setViewportSize({ width: 1280, height: 720 });

    // The live document: the discovery URL, never followed with a referrer or an opener.
    const live = page.getByRole("link", { name: "Live discovery document" });
    assert.equal(await live.getAttribute("href"), full.site.discoveryUrl);
    assert.deepEqual((await live.getAttribute("rel"))?.split(" ").sort(), EXTERNAL_REL);
    for (const link of await page.locator("a[href]").all()) {
      const href = new URL((await link.getAttribute("href")) ?? "", origin);
      if (href.origin !== origin) {
        assert.deepEqual((await link.getAttribute("rel"))?.split(" ").sort(), EXTERNAL_REL, href.href);
      }
    }

    // The raw JSON: the API's own answer.
    const raw = page.getByRole("link", { name: "Listing as JSON" });
    assert.equal(await raw.getAttribute("href"), didPath(full.did));
    await raw.click();
    await page.waitForURL((url) => url.pathname === didPath(full.did));
    assert.deepEqual(JSON.parse(await seen(page.locator("body"))), api);
  });

  test("listing text with markup or script renders as text: no dialog, no extra elements, no javascript: links", async () => {
    for (const path of [`/?search=${encodeURIComponent("alert(1)")}`, pagePath(hostile.did)]) {
      const response = await page.goto(`${origin}${path}`);
      assert.equal(response?.status(), 200, path);
      const heading = path.startsWith("/?")
        ? page.locator("article.listing h3")
        : page.getByRole("heading", { level: 1 });
      assert.equal(await seen(heading), HOSTILE_TITLE, path);
      assert.equal(await seen(page.locator("p.description")), HOSTILE_DESCRIPTION, path);
      assert.deepEqual(await page.locator("ul.tags a").allInnerTexts(), HOSTILE_TAGS, path);
      assert.equal(await page.locator("script, img, svg, iframe, object, embed, b").count(), 0, path);
      // No element carries an event handler, and every link is http(s) (or this origin).
      const handlers = await inPage<string[]>(
        page,
        `[...document.querySelectorAll("*")].flatMap((e) => e.getAttributeNames().filter((n) => /^on/i.test(n)))`,
      );
      assert.deepEqual(handlers, [], path);
      const protocols = await inPage<string[]>(page, "[...document.links].map((a) => new URL(a.href).protocol)");
      assert.ok(
        protocols.every((p) => p === "http:" || p === "https:"),
        `${path}: ${protocols.join(" ")}`,
      );
    }
    assert.equal(await page.title(), `${HOSTILE_TITLE} · proto directory`);
    // The hostile discovery members are shown, as text.
    const doc = page.getByRole("region", { name: "Discovery document" });
    const row = (term: string) => doc.locator(`dt:text-is("${term}") + dd`);
    assert.equal(await seen(row("Claim page")), "javascript:alert(1)");
    assert.equal(await row("Claim page").locator("a").count(), 0);
    assert.equal(await seen(row("Payment endpoint")), "JaVaScRiPt:alert(document.domain)");
    assert.equal(await seen(row("Networks")), "data:text/html,<script>alert(1)</script>");
    assert.equal(await seen(row("Facilitator")), "https://trusted.test@evil.test/pay");
    assert.equal(await row("Facilitator").locator("a").count(), 0, "a URL with credentials is not a link");
    assert.equal(await seen(row("Assets")), HOSTILE_TITLE);
    assert.deepEqual(dialogs, [], "no script from the listing ran");
  });

  test("a did:key listing carries the no-domain-anchor indicator and shows its host prominently", async () => {
    await page.goto(`${origin}/?tag=keyed`);
    const card = page.locator("article.listing");
    assert.equal(await card.count(), 1);
    const badge = card.getByText("No domain anchor", { exact: true });
    assert.ok(await badge.isVisible());
    assert.equal(await seen(card.locator(".host.prominent")), `Served from ${keyed.site.authority}`);
    assert.equal(await seen(card.locator(".did code")), DID_KEY);

    // did:web listings do not carry it.
    await page.goto(`${origin}/?tag=weather`);
    assert.equal(await page.getByText("No domain anchor").count(), 0);

    await page.goto(`${origin}${pagePath(DID_KEY)}`);
    await page.getByRole("heading", { level: 1, name: "Keyed service" }).waitFor();
    assert.ok(await page.locator(".badges").getByText("No domain anchor", { exact: true }).isVisible());
    const notice = page.locator("#no-anchor");
    assert.ok(await notice.isVisible());
    assert.ok((await seen(notice)).includes(keyed.site.authority));
    assert.equal(await seen(page.locator(".host.prominent")), `Served from ${keyed.site.authority}`);
  });

  test("a stale listing is visibly marked in the list and on its page", async () => {
    await page.goto(`${origin}/?search=fading`);
    const card = page.locator("article.listing");
    assert.equal(await card.count(), 1);
    const badge = card.locator(".badge", { hasText: "Stale" });
    assert.ok(await badge.isVisible());
    assert.ok((await seen(card)).includes("has not reached this service lately"));
    // Active listings say so instead.
    await page.goto(`${origin}/?tag=weather`);
    assert.equal(await page.locator(".badge", { hasText: "Stale" }).count(), 0);
    assert.equal(await page.locator(".badge", { hasText: "Active" }).count(), 2);

    await page.goto(`${origin}${pagePath(stale.did)}`);
    assert.ok(await page.locator(".badges .badge", { hasText: "Stale" }).isVisible());
    assert.ok((await seen(page.locator(".notice.stale"))).startsWith("Stale:"));
    assert.equal(await seen(page.locator('dt:text-is("Status") + dd')), "Stale");
  });

  test("an unknown DID is a 404 page", async () => {
    const response = await page.goto(`${origin}${pagePath("did:web:nobody.test")}`);
    assert.equal(response?.status(), 404);
    assert.equal(response?.headers()["content-type"], "text/html; charset=utf-8");
    await page.getByRole("heading", { level: 1, name: "No such listing" }).waitFor();
    assert.equal(await page.getByRole("link", { name: "Browse all listings" }).getAttribute("href"), "/");
  });

  test("on a phone: no sideways scrolling, keyboard focus visible, AA contrast in light and dark", async () => {
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
        const tab = await phone.newPage();
        for (const path of [
          "/?search=e",
          pagePath(hostile.did),
          pagePath(full.did),
          pagePath(DID_KEY),
          pagePath(stale.did),
        ]) {
          await tab.goto(`${origin}${path}`);
          const widths = await inPage<{ scroll: number; client: number }>(
            tab,
            "({ scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth })",
          );
          assert.ok(widths.scroll <= widths.client, `${colorScheme} ${path}: ${widths.scroll} > ${widths.client}`);
          const fontSize = await inPage<number>(tab, "Number.parseFloat(getComputedStyle(document.body).fontSize)");
          assert.ok(fontSize >= 16, `${path}: ${fontSize}px`);
          const low = (
            await contrastOf(tab, [
              "body",
              "h1",
              "h3",
              "p",
              "a",
              ".muted",
              "code",
              "dt",
              "dd",
              ".badge",
              ".notice",
              "button",
              "label",
            ])
          ).filter((r) => r.ratio < 4.5);
          assert.deepEqual(low, [], `${colorScheme} ${path}`);
        }

        // Keyboard: the skip link comes first and shows itself, then the search form.
        await tab.goto(`${origin}/`);
        await tab.keyboard.press("Tab");
        const skip = tab.getByRole("link", { name: "Skip to main content" });
        assert.ok(await skip.evaluate((e) => e.matches(":focus")), "the first Tab reaches the skip link");
        const box = await skip.boundingBox();
        assert.ok(box !== null && box.y >= 0, "the focused skip link is on screen");
        let tabs = 0;
        while (!(await tab.locator("#search").evaluate((e) => e.matches(":focus")))) {
          assert.ok(tabs++ < 10, "Tab never reached the search field");
          await tab.keyboard.press("Tab");
        }
        for (const selector of ["#search", "#tag", "button[type=submit]"]) {
          if (selector !== "#search") await tab.keyboard.press("Tab");
          const ring = await inPage(
            tab,
            `((e) => ({ focused: e.matches(":focus"), style: getComputedStyle(e).outlineStyle, width: getComputedStyle(e).outlineWidth }))(document.querySelector(${JSON.stringify(selector)}))`,
          );
          assert.deepEqual(ring, { focused: true, style: "solid", width: "3px" }, selector);
        }
      } finally {
        await phone.close();
      }
    }
  });

  test("every page sends a CSP of default-src 'none'; no request leaves the directory's origin", async () => {
    const pages = documents.filter(
      (r) => new URL(r.url()).origin === origin && (r.headers()["content-type"] ?? "").startsWith("text/html"),
    );
    const paths = new Set(pages.map((r) => new URL(r.url()).pathname));
    for (const path of ["/", pagePath(full.did), pagePath(DID_KEY)]) {
      assert.ok(paths.has(path), `the story visited ${path}: ${[...paths].join(", ")}`);
    }
    for (const response of pages) {
      assertPageHeaders({ headers: new Headers(response.headers()) }, response.url());
    }
    const elsewhere = requested.filter((url) => {
      const parsed = new URL(url);
      return parsed.protocol !== "data:" && parsed.origin !== origin;
    });
    assert.deepEqual(elsewhere, []);
    assert.ok(requested.includes(`${origin}/assets/site.css`));
    assert.deepEqual(cspViolations, []);
    assert.deepEqual(dialogs, []);
  });
});

// ---- over plain HTTP --------------------------------------------------------------------------

describe("directory browse pages over HTTP", { timeout: 60_000 }, () => {
  let h: DirectoryHarness;
  let plain: { did: string; site: Site };
  let hostile: { did: string; site: Site };

  /** The start of a fresh rate-limit window, so a whole window is left for the test. */
  async function freshWindow(windowSeconds = 60): Promise<void> {
    const res = await h.request("POST", "/__test/clock", { body: {} });
    const now = Date.parse(res.json.now);
    const windowMs = windowSeconds * 1000;
    await h.advance((windowMs - (now % windowMs)) / 1000);
  }

  before(async () => {
    // The pages keep their default limit here.
    h = await startDirectoryHarness(VARIANT, { sites: 6, env: { DIRECTORY_RATE_LIMITS: SETUP_LIMITS } });
    plain = await h.register(undefined, { title: "Plain service", tags: ["plain"] });
    hostile = await registerWith(h, hostileDocument, {
      title: HOSTILE_TITLE,
      description: HOSTILE_DESCRIPTION,
      tags: HOSTILE_TAGS,
    });
    await registerWith(h, (site) => site.document({ service_did: DID_KEY }), { title: "Keyed" });
  });
  after(() => h?.close());

  test("pages are HTML with the strict CSP and the page headers; the JSON API is unchanged", async () => {
    for (const path of ["/", "/?search=plain&tag=plain", pagePath(plain.did), pagePath(hostile.did)]) {
      const res = await h.request("GET", path, AS_BROWSER);
      assert.equal(res.status, 200, path);
      assertPageHeaders(res, path);
      assert.equal(res.headers.get("cache-control"), "no-cache", path);
      assert.equal(res.headers.get("access-control-allow-origin"), null, path);
      assert.ok(res.text.startsWith("<!doctype html>"), path);
      assert.ok(res.text.includes('<link rel="stylesheet" href="/assets/site.css">'), path);
      assert.ok(!/<script/i.test(res.text), `${path} has no script element`);
    }
    const detail = await h.request("GET", pagePath(plain.did));
    assert.ok(
      detail.text.includes(`<link rel="canonical" href="https://directory.test${pagePath(plain.did)}">`),
      "the canonical address is on the public URL",
    );
    const css = await h.request("GET", "/assets/site.css");
    assert.equal(css.status, 200);
    assert.equal(css.headers.get("content-type"), "text/css; charset=utf-8");
    assert.equal(css.headers.get("x-content-type-options"), "nosniff");
    assert.ok(!/url\(|@import/i.test(css.text), "the stylesheet loads nothing");

    const list = await h.request("GET", "/v1/listings");
    assert.equal(list.status, 200);
    assert.equal(list.headers.get("content-type"), "application/json; charset=utf-8");
    assert.equal(list.headers.get("cache-control"), "public, max-age=30, s-maxage=120");
    assert.equal(list.headers.get("access-control-allow-origin"), "*");
    assert.equal(list.json.listings.length, 3);
    const missing = await h.request("GET", didPath("did:web:nobody.test"));
    assert.equal(missing.status, 404);
    assert.deepEqual(Object.keys(missing.json), ["error"]);
    assert.equal(missing.json.error.code, "not_found");
    const badCursor = await h.request("GET", "/v1/listings?cursor=nope");
    assert.equal(badCursor.status, 400);
    assert.equal(badCursor.json.error.code, "invalid_request");
    const unknown = await h.request("GET", "/no/such/route");
    assert.equal(unknown.status, 404);
    assert.equal(unknown.json.error.code, "not_found");
  });

  test("attacker text is escaped in the markup, in elements and attributes alike", async () => {
    for (const path of ["/", pagePath(hostile.did)]) {
      const res = await h.request("GET", path, AS_BROWSER);
      assert.equal(res.status, 200, path);
      for (const raw of ["<script>alert", "<img src=x", "<b>bold", "<svg", `"><svg`]) {
        assert.ok(!res.text.includes(raw), `${path}: ${raw} appears unescaped`);
      }
      assert.ok(res.text.includes("&lt;script&gt;alert(1)&lt;/script&gt;"), path);
      assert.ok(res.text.includes("&lt;img src=x onerror=alert(1)&gt; &amp; &quot;quotes&quot; &#39;too&#39;"), path);
      assert.ok(
        !/<a\b[^>]*\bhref\s*=\s*["']?\s*(javascript|data):/i.test(res.text),
        `${path}: a javascript: or data: link`,
      );
    }
  });

  test("a DID in the page path is percent-decoded once, as in the API (decisions §10)", async () => {
    assert.match(plain.did, /%3A/, "the harness DIDs carry a percent-encoded port");
    const encoded = await h.request("GET", pagePath(plain.did));
    const raw = await h.request("GET", `/listings/${plain.did.replaceAll("%", "%25")}`);
    assert.equal(encoded.status, 200);
    assert.equal(raw.status, 200);
    assert.equal(raw.text, encoded.text);
    // Decoded once only: the DID itself, unescaped, names no listing.
    const twice = await h.request("GET", `/listings/${plain.did}`);
    assert.equal(twice.status, 404);
  });

  test("unknown DIDs and malformed queries get HTML error pages, not the JSON envelope", async () => {
    for (const [path, status, heading] of [
      [pagePath("did:web:nobody.test"), 404, "No such listing"],
      ["/listings/did:key:z6MkNobody", 404, "No such listing"],
      ["/listings/", 404, "No such listing"],
      ["/?cursor=not-a-cursor", 400, "This link does not work"],
      [`/?search=${"x".repeat(201)}`, 400, "This search cannot be run"],
      ["/?tag=a&tag=b", 400, "This search cannot be run"],
    ] as const) {
      const res = await h.request("GET", path, AS_BROWSER);
      assert.equal(res.status, status, path);
      assertPageHeaders(res, path);
      assert.ok(res.text.includes(`<h1>${heading}</h1>`), `${path}: ${res.text.slice(0, 400)}`);
      assert.ok(res.text.includes('<meta name="robots" content="noindex">'), path);
      assert.equal(res.json, undefined, `${path} is not JSON`);
    }
    // A cursor is bound to its search: taken to another one, it is refused.
    const all = await h.request("GET", "/v1/listings?limit=1");
    const cursor = encodeURIComponent(all.json.next_cursor);
    assert.equal((await h.request("GET", `/?cursor=${cursor}&tag=plain`, AS_BROWSER)).status, 400);
  });

  test("a withdrawn listing keeps its page, marked deleted and kept out of search engines and the list", async () => {
    const gone = await h.register(undefined, { title: "Withdrawn service" });
    assert.equal((await h.request("DELETE", didPath(gone.did), { token: gone.token })).status, 204);
    const res = await h.request("GET", pagePath(gone.did));
    assert.equal(res.status, 200, "single reads ignore status, as in the API");
    assert.ok(res.text.includes('<span class="badge deleted" data-status="deleted">Deleted</span>'));
    assert.ok(res.text.includes('<p class="notice deleted">Deleted:'));
    assert.ok(res.text.includes('<meta name="robots" content="noindex">'));
    const list = await h.request("GET", "/?search=withdrawn", AS_BROWSER);
    assert.ok(list.text.includes("No listing matches."));
  });

  test("the pages have their own limit: 120 a minute per IP, then a 429 page with Retry-After", async () => {
    await freshWindow();
    for (let i = 0; i < 120; i++) {
      const res = await h.request("GET", i % 2 === 0 ? "/" : pagePath(plain.did), AS_BROWSER);
      if (res.status !== 200) assert.fail(`page #${i + 1}: ${res.status}`);
    }
    for (const path of ["/", pagePath(plain.did), "/?search=x"]) {
      const denied = await h.request("GET", path, AS_BROWSER);
      assert.equal(denied.status, 429, path);
      assertPageHeaders(denied, path);
      const retryAfter = denied.headers.get("retry-after") ?? "";
      assert.match(retryAfter, /^\d+$/, path);
      assert.ok(Number(retryAfter) >= 1 && Number(retryAfter) <= 60, `${path}: Retry-After ${retryAfter}`);
      assert.ok(denied.text.includes("<h1>Too many requests</h1>"), path);
      assert.match(denied.text, new RegExp(`Wait ${retryAfter} seconds?, then reload`), path);
    }
    // The API's reads and the stylesheet are other buckets.
    assert.equal((await h.request("GET", didPath(plain.did))).status, 200);
    assert.equal((await h.request("GET", "/assets/site.css")).status, 200);
    await h.advance(60);
    assert.equal((await h.request("GET", "/", AS_BROWSER)).status, 200, "next window");
  });

  test("DIRECTORY_RATE_LIMITS configures the pages scope (default 120/60)", () => {
    assert.deepEqual(readDirectoryConfig({}).settings.rateLimits.pages, {
      name: "dir.pages",
      limit: 120,
      windowSeconds: 60,
    });
    assert.deepEqual(
      readDirectoryConfig({ DIRECTORY_RATE_LIMITS: "read=10/60,pages=7/30" }).settings.rateLimits.pages,
      {
        name: "dir.pages",
        limit: 7,
        windowSeconds: 30,
      },
    );
    assert.throws(
      () => readDirectoryConfig({ DIRECTORY_RATE_LIMITS: "page=7/30" }),
      (error: unknown) => error instanceof ConfigError && error.message.includes("pages"),
    );
  });

  test("the sitemap links to the pages of active listings, and each link opens that listing's page", async () => {
    const res = await h.request("GET", "/sitemap.xml");
    assert.equal(res.status, 200);
    const locs = [...res.text.matchAll(/<loc>([^<]*)<\/loc>/g)].map((m) => (m[1] as string).replaceAll("&amp;", "&"));
    const listed = (await h.request("GET", "/v1/listings?status=active")).json.listings.map(
      (l: { service_did: string }) => l.service_did,
    );
    assert.deepEqual(
      [...locs].sort(),
      listed.map((did: string) => `https://directory.test/listings/${encodeURIComponent(did)}`).sort(),
    );
    await freshWindow();
    for (const loc of locs) {
      const path = loc.slice("https://directory.test".length);
      const page = await h.request("GET", path);
      assert.equal(page.status, 200, loc);
      assert.ok(page.text.includes(`<link rel="canonical" href="${loc.replaceAll("&", "&amp;")}">`), loc);
    }
  });
});
