import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  addVirtualAuthenticator,
  createTestCA,
  launchChromium,
  lookAt,
  NO_PASSKEY_AUTOFILL,
  type TestCA,
  VIEWPORTS,
} from "@proto/testkit";
import { decodeJwt } from "jose";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { putGrant } from "../src/trust/authority/grants.js";
import type { OutboxMailer } from "../src/trust/mail.js";
import * as store from "../src/trust/store.js";
import { type Site, type SiteHost, startSiteHost } from "./support/sites.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";
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
 * Issue 38, grants on the person's side, in a real browser: the account page shows each agent's
 * grant at each service in the service's own words (or names, when its document cannot be read),
 * and the service's defaults where there is none; the grant's page narrows it with the session,
 * widens it only with a passkey (Chromium's virtual authenticator), revokes it, and tells its
 * history; each change shows in the agent's next token. Another person gets a 404 page.
 */

reportSkippedVariants();

const NOTES_PERMISSIONS = {
  "notes:read": { description: "Read your notes", default: true },
  "notes:write": { description: "Write and edit your notes", default: true },
  "notes:delete": { description: "Delete your notes", phishing_resistant: true },
  purchase: { description: "Pay for pinned notes", currency: "EUR" },
};
const SHOP_PERMISSIONS = {
  "orders:read": { description: "See your orders", default: true },
  "orders:place": { description: "Place orders for you", default: true },
  refunds: { description: "Ask for refunds", phishing_resistant: true },
};

const launched = await launchChromium();
if (launched.skip !== undefined) process.stdout.write(`# browser tests skipped: ${launched.skip}\n`);

describe("grants on the account page, in a browser (issue 38)", { skip: launched.skip, timeout: 300_000 }, () => {
  const browser = launched.browser as Browser;
  let ca: TestCA;
  let sites: SiteHost;
  before(async () => {
    ca = await createTestCA();
    sites = await startSiteHost(ca, 3 * STORE_VARIANTS.length);
  });
  after(async () => {
    await sites?.close();
    await browser.close();
  });

  for (const variant of STORE_VARIANTS) {
    describe(`(${variant.name})`, () => {
      let h: TrustHarness;
      let origin: string;
      let context: BrowserContext;
      let page: Page;
      let notes: Site;
      let shop: Site;
      let broken: Site;
      const cspViolations: string[] = [];

      before(async () => {
        notes = sites.site();
        shop = sites.site();
        broken = sites.site();
        notes.serveDiscovery(notes.document({ permissions: NOTES_PERMISSIONS }));
        shop.serveDiscovery(shop.document({ permissions: SHOP_PERMISSIONS }));
        broken.setHandler("/.well-known/proto", (_req, res) => {
          res.writeHead(503, { "content-type": "text/plain" });
          res.end("down");
        });
        const port = await freePort();
        // WebAuthn needs a secure context and a domain: localhost, not an IP address.
        origin = `http://localhost:${port}`;
        h = await startTrustHarness(variant, {
          port,
          fetchCa: ca.certPem,
          env: {
            TRUST_PUBLIC_URL: origin,
            TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS,
            PROTO_FETCH_ALLOW_PRIVATE: "1",
            PROTO_FETCH_RESOLVE: sites.resolveEntries(),
          },
        });
        context = await browser.newContext({ viewport: VIEWPORTS[0] });
        await context.addInitScript(NO_PASSKEY_AUTOFILL);
        context.on("console", (message) => {
          if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
        });
        page = await context.newPage();
      });

      after(async () => {
        await context?.close();
        await h?.close();
      });

      /** Screenshots at desktop and phone width (nothing wider than the screen), then back to desktop. */
      async function look(target: Page, name: string): Promise<void> {
        await lookAt(target, `grants-${variant.name}-${name}`);
        await target.setViewportSize(VIEWPORTS[0]);
      }

      /** Signs `email` in on `target` through the mailed link (the development outbox). */
      async function signIn(target: Page, email: string): Promise<void> {
        await target.goto(`${origin}/signin?next=%2Faccount`);
        await target.getByLabel("E-mail address").fill(email);
        await target.getByRole("button", { name: "E-mail me a sign-in link" }).click();
        await target.getByRole("heading", { name: "Check your e-mail" }).waitFor();
        const mail = [...(h.app.mailer as OutboxMailer).entries].reverse().find((m) => m.to === email);
        const link = /https?:\/\/\S+\/signin\/email\/verify\?token=\S+/.exec(mail?.text ?? "")?.[0];
        assert.ok(link, `a sign-in mail to ${email}`);
        await target.goto(link);
        await target.getByRole("button", { name: "Sign in" }).click();
        await target.getByRole("heading", { name: "Your account" }).waitFor();
      }

      /** The grant claims of the agent's next attestation for `aud`. */
      async function nextToken(agent: Agent, aud: string): Promise<Record<string, unknown>> {
        const minted = await h.mint(agent, aud);
        assert.equal(minted.status, 200, minted.text);
        const { scope, authorization_details, grant_id } = decodeJwt(minted.json.jwt as string);
        return { scope, authorization_details, grant_id };
      }

      /** The text of one service's entry on the account page. */
      const serviceEntry = (site: Site) => page.locator("ul.services > li.service").filter({ hasText: site.did });

      test("a person sees, narrows, widens with a passkey and revokes a grant; each change is in the next token", async () => {
        const email = `ada-${Math.random().toString(36).slice(2)}@mail.test`;
        const agent = newAgent();
        const { bindingId } = await h.link(agent, email);
        for (const site of [notes, shop, broken]) assert.equal((await h.mint(agent, site.did)).status, 200);

        // The grants the agent holds, as an earlier approval would have left them.
        const db = h.app.service.database.db;
        const binding = await store.findBinding(db, bindingId);
        assert.ok(binding);
        const now = await h.nowMs();
        const change = { bindingId, humanId: binding.human_id, now, method: "passkey" as const };
        const granted = await db.transaction().execute(async (trx) => {
          const grant = await putGrant(
            trx,
            { ...change, aud: notes.did, serviceUrl: `https://${notes.authority}` },
            {
              permissions: ["notes:read", "notes:write", "notes:delete", "purchase"],
              spendLimits: [
                { permission: "purchase", currency: "EUR", perTransaction: 2000, perPeriod: 10000, period: "month" },
              ],
              expiresAt: null,
            },
          );
          await putGrant(
            trx,
            { ...change, aud: broken.did, serviceUrl: `https://${broken.authority}` },
            { permissions: ["status:read"], spendLimits: [], expiresAt: null },
          );
          return grant;
        });
        assert.deepEqual(await nextToken(agent, notes.did), {
          grant_id: granted.id,
          scope: "notes:read notes:write notes:delete purchase",
          authorization_details: [
            {
              type: "spend_limit",
              permission: "purchase",
              currency: "EUR",
              per_transaction: 2000,
              per_period: 10000,
              period: "month",
            },
          ],
        });

        // The account page: the grant in the service's words, with its limits as money...
        await signIn(page, email);
        const notesEntry = serviceEntry(notes);
        const notesText = await notesEntry.innerText();
        assert.match(notesText, /Permissions\s+In force/);
        for (const words of [
          "Read your notes",
          "Write and edit your notes",
          "Delete your notes",
          "Pay for pinned notes",
        ]) {
          assert.ok(notesText.includes(words), `${words} in ${notesText}`);
        }
        assert.match(notesText, /up to 20\.00 EUR per transaction and 100\.00 EUR per month/);
        assert.match(notesText, /No end date/);
        // ...a service used without a grant: its defaults, in its words...
        const shopText = await serviceEntry(shop).innerText();
        assert.match(shopText, /Default permissions of the service/);
        assert.match(shopText, /See your orders/);
        assert.match(shopText, /Place orders for you/);
        assert.doesNotMatch(shopText, /Ask for refunds/);
        // ...and a grant at a service whose document cannot be read: names, and why.
        const brokenText = await serviceEntry(broken).innerText();
        assert.match(brokenText, /status:read/);
        assert.match(brokenText, /descriptions could not be loaded/);
        await look(page, "account");

        // The grant's page: the form in the service's words, and its history.
        await notesEntry.getByRole("link", { name: /Change or revoke/ }).click();
        await page.waitForURL((url) => url.pathname === `/account/grants/${granted.id}`);
        assert.equal(await page.locator("h1").innerText(), `What test agent may do at ${notes.authority}`);
        for (const name of [
          "Read your notes",
          "Write and edit your notes",
          "Delete your notes",
          "Pay for pinned notes",
        ]) {
          assert.equal(await page.getByRole("checkbox", { name: new RegExp(name) }).isChecked(), true, name);
        }
        assert.equal(await page.getByLabel("Most per transaction").inputValue(), "20.00");
        assert.equal(await page.getByLabel("Most per period").inputValue(), "100.00");
        const history = page.locator("ol.history > li");
        assert.equal(await history.count(), 1);
        assert.match(
          await history.nth(0).innerText(),
          /Granted[\s\S]*Approved with a passkey[\s\S]*Delete your notes \(notes:delete\)/,
        );
        await look(page, "grant");

        // A mistake is named next to its field, on the page; nothing is saved.
        await page.getByLabel("Most per transaction").fill("12.345");
        await page.getByLabel("Last day").fill("2001-01-01");
        await page.getByRole("button", { name: "Save changes" }).click();
        const problems = page.getByRole("alert");
        await problems.waitFor();
        assert.match(await problems.innerText(), /Nothing was saved\. 2 things need fixing/);
        assert.match(
          await problems.innerText(),
          /Most per transaction for “Pay for pinned notes” must be an amount in EUR, like 20 or 20\.50/,
        );
        assert.match(await problems.innerText(), /The end date must be today or later/);
        assert.equal(await page.getByLabel("Most per transaction").getAttribute("aria-invalid"), "true");
        await look(page, "grant-mistakes");
        assert.equal(await history.count(), 1, "nothing saved");

        // Narrowing needs only the session: untick a permission, lower a limit.
        await page.goto(`${origin}/account/grants/${granted.id}`);
        await page.getByRole("checkbox", { name: /Delete your notes/ }).uncheck();
        await page.getByLabel("Most per transaction").fill("10");
        await page.getByRole("button", { name: "Save changes" }).click();
        await page.waitForURL((url) => url.search === "?done=saved");
        await page.getByText("Saved.").waitFor();
        assert.match(
          await history.nth(0).innerText(),
          /Changed[\s\S]*Approved with your signed-in session[\s\S]*Removed: Delete your notes[\s\S]*up to 10\.00 EUR per transaction and 100\.00 EUR per month \(was up to 20\.00 EUR/,
        );
        assert.deepEqual(await nextToken(agent, notes.did), {
          grant_id: granted.id,
          scope: "notes:read notes:write purchase",
          authorization_details: [
            {
              type: "spend_limit",
              permission: "purchase",
              currency: "EUR",
              per_transaction: 1000,
              per_period: 10000,
              period: "month",
            },
          ],
        });

        // Raising a limit asks for a passkey: first the person adds one on their account page.
        const key = await addVirtualAuthenticator(page);
        await page.goto(`${origin}/account`);
        await page.getByLabel("Name of the new passkey").fill("Ada's laptop");
        await page.getByRole("button", { name: "Add a passkey" }).click();
        await page.getByText("Passkey added.").waitFor();
        await page.goto(`${origin}/account/grants/${granted.id}`);
        await page.getByLabel("Most per transaction").fill("50");
        await page.getByRole("button", { name: "Save changes" }).click();
        await page.getByRole("heading", { name: "Confirm with your passkey" }).waitFor();
        assert.match(
          await page.locator("ul.changes").innerText(),
          /Pay for pinned notes \(purchase\): up to 50\.00 EUR per transaction and 100\.00 EUR per month \(now up to 10\.00 EUR/,
        );
        await look(page, "grant-confirm");
        // Not yet saved: the session alone changed nothing.
        assert.equal(
          ((await nextToken(agent, notes.did)).authorization_details as { per_transaction: number }[])[0]
            ?.per_transaction,
          1000,
        );
        await page.getByRole("button", { name: "Confirm with a passkey" }).click();
        await page.waitForURL(
          (url) => url.pathname === `/account/grants/${granted.id}` && url.search === "?done=saved",
        );
        assert.match(
          await history.nth(0).innerText(),
          /Changed[\s\S]*Approved with a passkey[\s\S]*up to 50\.00 EUR per transaction/,
        );
        assert.equal(
          ((await nextToken(agent, notes.did)).authorization_details as { per_transaction: number }[])[0]
            ?.per_transaction,
          5000,
        );

        // Revoking needs no passkey; the next mint is refused.
        await page.getByRole("button", { name: /^Revoke/ }).click();
        await page.waitForURL((url) => url.search === "?done=revoked");
        await page.getByText("Revoked.", { exact: true }).waitFor();
        assert.match(await page.locator("dl.card").innerText(), /State\s+Revoked/);
        assert.match(await history.nth(0).innerText(), /Revoked[\s\S]*with your signed-in session/);
        assert.equal(await history.count(), 4);
        assertError(await h.mint(agent, notes.did), 403, "grant_revoked");
        await look(page, "grant-revoked");
        await key.cdp.send("WebAuthn.removeVirtualAuthenticator", { authenticatorId: key.id });

        // A service used without a grant: permissions set from its defaults (narrowing: no passkey).
        await page.goto(`${origin}/account`);
        await serviceEntry(shop)
          .getByRole("link", { name: /Set permissions/ })
          .click();
        await page.getByRole("heading", { name: `What test agent may do at ${shop.authority}` }).waitFor();
        assert.equal(await page.getByRole("checkbox", { name: /See your orders/ }).isChecked(), true);
        assert.equal(await page.getByRole("checkbox", { name: /Place orders for you/ }).isChecked(), true);
        assert.equal(await page.getByRole("checkbox", { name: /Ask for refunds/ }).isChecked(), false);
        await page.getByRole("checkbox", { name: /Place orders for you/ }).uncheck();
        await look(page, "grant-new");
        await page.getByRole("button", { name: "Set permissions" }).click();
        await page.getByText("Permissions set.").waitFor();
        const created = await nextToken(agent, shop.did);
        assert.equal(created.scope, "orders:read");
        assert.equal(new URL(page.url()).pathname, `/account/grants/${created.grant_id as string}`);
        assert.match(
          await history.nth(0).innerText(),
          /Granted[\s\S]*Approved with your signed-in session[\s\S]*See your orders/,
        );

        // A page opened before a change saves nothing over it: it shows the grant as it is now.
        const shopGrant = `${origin}${new URL(page.url()).pathname}`;
        const older = await context.newPage();
        await older.goto(shopGrant);
        // A last day: today (UTC, the attestor's clock). Setting an end only narrows: no passkey.
        const today = new Date(await h.nowMs()).toISOString().slice(0, 10);
        await page.getByLabel("Last day").fill(today);
        await page.getByRole("button", { name: "Save changes" }).click();
        await page.waitForURL((url) => url.search === "?done=saved");
        assert.match(
          await page.locator("dl.card").innerText(),
          new RegExp(`State\\s+In force Last day ${today} \\(UTC\\)`),
        );
        await older.getByRole("checkbox", { name: /See your orders/ }).uncheck();
        await older.getByRole("button", { name: "Save changes" }).click();
        await older.getByText("These permissions changed since you opened the page.").waitFor();
        assert.equal(await older.getByLabel("Last day").inputValue(), today, "the form shows the grant as it is now");
        await older.close();
        assert.equal((await nextToken(agent, shop.did)).scope, "orders:read");

        // After the last day the grant is used up: the agent's tokens carry the service's defaults.
        await h.advance(2 * 86_400);
        await page.goto(shopGrant);
        assert.match(await page.locator("dl.card").innerText(), /State\s+Used up ended/);
        assert.match(await history.nth(0).innerText(), /Used up[\s\S]*The last day passed/);
        assert.deepEqual(await nextToken(agent, shop.did), {
          scope: undefined,
          authorization_details: undefined,
          grant_id: undefined,
        });
        await look(page, "grant-used-up");

        // Another person: the grant's page is not theirs to see, nor to change.
        const other = await browser.newContext({ viewport: VIEWPORTS[0] });
        try {
          const stranger = await other.newPage();
          await signIn(stranger, `eve-${Math.random().toString(36).slice(2)}@mail.test`);
          const answer = await stranger.goto(`${origin}/account/grants/${granted.id}`);
          assert.equal(answer?.status(), 404);
          assert.equal(await stranger.locator("h1").innerText(), "Unknown permissions");
          assert.doesNotMatch(await stranger.locator("main").innerText(), /notes/);
          await look(stranger, "grant-stranger");
        } finally {
          await other.close();
        }
        assert.deepEqual(cspViolations, []);
      });
    });
  }
});
