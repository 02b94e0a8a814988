import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import {
  addVirtualAuthenticator,
  createTestCA,
  launchChromium,
  NO_PASSKEY_AUTOFILL,
  type TestCA,
} from "@proto/testkit";
import { decodeJwt } from "jose";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { inPage } from "./support/page-checks.js";
import { startRelyingParty } from "./support/relying-party.js";
import { type Site, type SiteHost, startSiteHost } from "./support/sites.js";
import { magicLinkOf, type SmtpCollector, startSmtpCollector } from "./support/smtp.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";
import {
  assertError,
  freePort,
  newAgent,
  RELAXED_RATE_LIMITS,
  startTrustHarness,
  type TrustHarness,
} from "./support/trust.js";

/**
 * Issue 17 (items 3 and 4) in a real browser: the consent page of the OpenID provider (Allow,
 * Deny, remembered, disconnected on /account) and the account page's Revoke, which asks first
 * and then says what it did. Issue 38: an access request's scopes, each in its service's words,
 * left out when unticked; one that needs a passkey can be allowed only once signed in with a
 * passkey (Chromium's virtual authenticator); a spending one is said to spend nothing until a
 * limit is set. Screenshots at desktop and phone width (375 px) go to `PROTO_SCREENSHOT_DIR` when
 * set.
 */

reportSkippedVariants();

const SHOP = "did:web:shop.example";
const MAIL_FROM = "proto trust <signin@trust.test>";
const LABEL = "Ada's travel agent";

const launched = await launchChromium();
if (launched.skip !== undefined) process.stdout.write(`# browser tests skipped: ${launched.skip}\n`);

const VIEWPORTS = [
  { name: "desktop", width: 1280, height: 800 },
  { name: "phone", width: 375, height: 740 },
] as const;

/** What the notes service declares in its discovery document (docs/authority.md). */
const NOTES_PERMISSIONS = {
  "notes:read": { description: "Read your notes", default: true },
  "notes:delete": { description: "Delete your notes", phishing_resistant: true },
  purchase: { description: "Pay for pinned notes", currency: "EUR" },
};

describe("consent and revoke in a browser", { skip: launched.skip, timeout: 240_000 }, () => {
  const browser = launched.browser as Browser;
  const shotRoot = process.env.PROTO_SCREENSHOT_DIR ?? mkdtempSync(join(tmpdir(), "proto-consent-"));
  let ca: TestCA;
  let sites: SiteHost;
  /** An MCP resource whose service declares NOTES_PERMISSIONS, over HTTPS. */
  let notes: Site;
  before(async () => {
    ca = await createTestCA();
    sites = await startSiteHost(ca, 1);
    notes = sites.site();
    notes.serveDiscovery(notes.document({ permissions: NOTES_PERMISSIONS }));
  });
  after(async () => {
    if (process.env.PROTO_SCREENSHOT_DIR === undefined) rmSync(shotRoot, { recursive: true, force: true });
    await browser.close();
    await sites?.close();
  });

  for (const variant of STORE_VARIANTS) {
    describe(`(${variant.name})`, () => {
      let h: TrustHarness;
      let smtp: SmtpCollector;
      let rp: Awaited<ReturnType<typeof startRelyingParty>>;
      let origin: string;
      let context: BrowserContext;
      let page: Page;
      const email = `ada-${Math.random().toString(36).slice(2)}@mail.test`;
      const cspViolations: string[] = [];
      const shotDir = join(shotRoot, variant.name);

      /** Nothing wider than the screen at either width; a full-page screenshot of each. */
      async function look(name: string): Promise<void> {
        mkdirSync(shotDir, { recursive: true });
        for (const viewport of VIEWPORTS) {
          await page.setViewportSize({ width: viewport.width, height: viewport.height });
          const widths = await inPage<{ scroll: number; client: number }>(
            page,
            "({ scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth })",
          );
          assert.ok(widths.scroll <= widths.client, `${name} at ${viewport.width}px: ${widths.scroll} wide`);
          await page.screenshot({ path: join(shotDir, `${name}-${viewport.name}.png`), fullPage: true });
        }
        await page.setViewportSize(VIEWPORTS[0]);
      }

      /** An authorization request as a relying party builds it, with a fresh PKCE pair and state. */
      function authorizeUrl() {
        const verifier = randomBytes(32).toString("base64url");
        const state = randomBytes(8).toString("hex");
        const query = new URLSearchParams({
          client_id: SHOP,
          redirect_uri: rp.url,
          response_type: "code",
          scope: "openid",
          code_challenge: createHash("sha256").update(verifier).digest("base64url"),
          code_challenge_method: "S256",
          state,
          nonce: "n-1",
        });
        return { url: `${origin}/oidc/authorize?${query}`, verifier, state };
      }

      /** Waits for the browser to land at the relying party's callback, and answers its query. */
      async function landedAtShop(): Promise<URLSearchParams> {
        await page.waitForURL((url) => url.href.startsWith(rp.url));
        assert.equal(await page.locator("p").innerText(), "Back at the shop.");
        return new URL(page.url()).searchParams;
      }

      before(async () => {
        smtp = await startSmtpCollector();
        rp = await startRelyingParty();
        const port = await freePort();
        // WebAuthn needs a secure context and a domain: localhost, not an IP address.
        origin = `http://localhost:${port}`;
        h = await startTrustHarness(variant, {
          port,
          fetchCa: ca.certPem,
          env: {
            PROTO_FETCH_ALLOW_PRIVATE: "1",
            PROTO_FETCH_RESOLVE: sites.resolveEntries(),
            TRUST_PUBLIC_URL: origin,
            SMTP_URL: smtp.url,
            MAIL_FROM,
            TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS,
            TRUST_OIDC_CLIENTS: JSON.stringify([{ client_id: SHOP, service_did: SHOP, redirect_uris: [rp.url] }]),
          },
        });
        context = await browser.newContext({ viewport: VIEWPORTS[0] });
        // The passkey is used when the person presses for it, not offered at once by autofill.
        await context.addInitScript(NO_PASSKEY_AUTOFILL);
        context.on("console", (message) => {
          if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
        });
        page = await context.newPage();
      });

      after(async () => {
        await context?.close();
        await h?.close();
        await smtp?.close();
        await new Promise<void>((resolve) => (rp ? rp.server.close(() => resolve()) : resolve()));
      });

      test("consent: sign in, Deny goes back with access_denied, Allow is remembered, Disconnect asks again", async () => {
        // Not signed in: sign in first, then the request resumes on the consent page.
        const first = authorizeUrl();
        await page.goto(first.url);
        await page.waitForURL((url) => url.pathname === "/signin");
        await page.getByLabel("E-mail address").fill(email);
        await page.getByRole("button", { name: "E-mail me a sign-in link" }).click();
        await page.getByRole("heading", { name: "Check your e-mail" }).waitFor();
        await page.goto(magicLinkOf(await smtp.nextMailTo(email)));
        await page.getByRole("button", { name: "Sign in" }).click();

        await page.getByRole("heading", { name: "Sign in to shop.example?" }).waitFor();
        const main = page.locator("main");
        const text = await main.innerText();
        assert.match(text, /shop\.example will receive/);
        assert.match(text, /An identifier made for this service alone/);
        assert.match(text, /It will not receive\s+Your e-mail address, or how you are verified\./);
        assert.ok(!text.includes(email), "the address is not on the page that says it is not shared");
        assert.match(text, /You return to\s+127\.0\.0\.1:\d+/);
        assert.equal(await page.title(), "Sign in to shop.example? · proto trust");
        await look("consent");

        // Deny: the shop hears access_denied with its state, and gets no code.
        await page.getByRole("button", { name: "Deny" }).click();
        const denied = await landedAtShop();
        assert.equal(denied.get("error"), "access_denied");
        assert.equal(denied.get("state"), first.state);
        assert.equal(denied.get("code"), null);

        // A Deny is not remembered: the next sign-in asks again. Allow (by keyboard) goes on.
        const second = authorizeUrl();
        await page.goto(second.url);
        await page.getByRole("heading", { name: "Sign in to shop.example?" }).waitFor();
        await page.getByRole("button", { name: "Allow" }).focus();
        await page.keyboard.press("Enter");
        const allowed = await landedAtShop();
        assert.equal(allowed.get("state"), second.state);
        const code = allowed.get("code");
        assert.ok(code, page.url());
        const tokens = await fetch(`${origin}/oidc/token`, {
          method: "POST",
          headers: { "content-type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams({
            grant_type: "authorization_code",
            code,
            code_verifier: second.verifier,
            client_id: SHOP,
            redirect_uri: rp.url,
          }),
        });
        assert.equal(tokens.status, 200);
        const claims = decodeJwt(((await tokens.json()) as { id_token: string }).id_token);
        assert.equal(claims.aud, SHOP);

        // Remembered: the next sign-in goes straight back to the shop with a code.
        const third = authorizeUrl();
        await page.goto(third.url);
        const straight = await landedAtShop();
        assert.ok(straight.get("code"));
        assert.equal(straight.get("state"), third.state);

        // The account page lists the shop among connected services.
        await page.goto(`${origin}/account`);
        const connected = page.getByRole("list", { name: "Connected services" });
        await connected.waitFor();
        assert.match(
          await connected.innerText(),
          /shop\.example\s+did:web:shop\.example\s+Allowed \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC\s+Last sign-in \d{4}/,
        );
        await look("account-connected");

        // Disconnect: a notice, the shop leaves the list, and its next sign-in asks again.
        await connected.getByRole("button", { name: "Disconnect shop.example" }).click();
        await page.waitForURL((url) => url.pathname === "/account");
        const notice = page.getByRole("status");
        assert.match(
          await notice.innerText(),
          /^shop\.example is disconnected\. If it asks to sign you in again, you will be asked first\./,
        );
        assert.equal(await page.getByRole("list", { name: "Connected services" }).count(), 0);
        await page.getByText("No service signs you in with this account yet.").waitFor();
        await look("account-disconnected");
        await page.goto(authorizeUrl().url);
        await page.getByRole("heading", { name: "Sign in to shop.example?" }).waitFor();
        assert.deepEqual(cspViolations, []);
      });

      test("revoke asks first (Cancel keeps the agent), then says 'Agent <label> revoked'", async () => {
        const agent = newAgent();
        const started = await h.startLink(agent, { agent_label: LABEL });
        assert.equal(started.status, 200, started.text);
        // The person confirms the link on its page, signed in as in the story above.
        await page.goto(started.json.link_url);
        await page.getByRole("button", { name: "Confirm" }).click();
        await page.getByRole("heading", { name: "Agent linked" }).waitFor();
        assert.equal((await h.poll(agent, started.json.req_id)).status, 200);
        assert.equal((await h.mint(agent, SHOP)).status, 200);

        await page.goto(`${origin}/account`);
        const card = page.getByRole("region", { name: LABEL });
        await card.getByRole("button", { name: `Revoke ${LABEL}` }).click();
        // The question: nothing is revoked yet.
        await page.getByRole("heading", { name: "Revoke this agent?" }).waitFor();
        assert.equal(await page.locator('dt:text-is("Agent") + dd').innerText(), LABEL);
        assert.match(await page.locator("main").innerText(), /This cannot be undone/);
        assert.equal((await h.mint(agent, SHOP)).status, 200, "asking revokes nothing");
        await look("revoke-confirm");

        // Cancel goes back with the agent still there.
        await page.getByRole("button", { name: "Cancel" }).click();
        await page.waitForURL((url) => url.pathname === "/account");
        await card.waitFor();
        assert.equal(await page.getByRole("status").count(), 0);

        // Revoke, confirmed: the notice names the agent, the card is gone, the mint is refused.
        await card.getByRole("button", { name: `Revoke ${LABEL}` }).click();
        await page.getByRole("button", { name: `Revoke ${LABEL}` }).click();
        await page.waitForURL((url) => url.pathname === "/account");
        assert.match(await page.getByRole("status").innerText(), new RegExp(`^Agent ${LABEL} revoked\\.`));
        assert.equal(await page.getByRole("region", { name: LABEL }).count(), 0);
        assertError(await h.mint(agent, SHOP), 403, "binding_revoked");
        await look("account-revoked");

        // The revoke page of a link that is not the person's (here: no link at all) is a 404 page.
        const revokePath = `/account/bindings/${started.json.req_id}/revoke`;
        const unknown = await page.goto(`${origin}${revokePath}`);
        assert.equal(unknown?.status(), 404);
        await page.getByRole("heading", { name: "Unknown agent link" }).waitFor();
        assert.deepEqual(cspViolations, []);
      });

      test("an MCP client's access: consent names it, /account lists it, Revoke says what ended and its refresh token stops", async () => {
        const registered = await fetch(`${origin}/oidc/register`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ client_name: "Desk Assistant", redirect_uris: [rp.url] }),
        });
        assert.equal(registered.status, 201);
        const clientId = ((await registered.json()) as { client_id: string }).client_id;
        const verifier = randomBytes(32).toString("base64url");
        const query = new URLSearchParams({
          client_id: clientId,
          redirect_uri: rp.url,
          response_type: "code",
          scope: "notes",
          resource: "https://notes.example/mcp",
          code_challenge: createHash("sha256").update(verifier).digest("base64url"),
          code_challenge_method: "S256",
          state: "s-mcp",
        });
        // Signed in since the first story: the consent page comes at once.
        await page.goto(`${origin}/oidc/authorize?${query}`);
        await page.getByRole("heading", { name: /Let Desk Assistant use notes\.example/ }).waitFor();
        // notes.example publishes no permissions: its scope is offered unticked, and the person ticks it.
        const notesBox = page.getByRole("checkbox", { name: /Not described by the service.*notes$/ });
        assert.equal(await notesBox.isChecked(), false);
        await look("consent-unreadable");
        await notesBox.check();
        await page.getByRole("button", { name: "Allow" }).click();
        const back = await landedAtShop();
        const tokens = await fetch(`${origin}/oidc/token`, {
          method: "POST",
          headers: { "content-type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams({
            grant_type: "authorization_code",
            code: back.get("code") ?? "",
            code_verifier: verifier,
            client_id: clientId,
            redirect_uri: rp.url,
            resource: "https://notes.example/mcp",
          }),
        });
        assert.equal(tokens.status, 200);
        const refreshToken = ((await tokens.json()) as { refresh_token: string }).refresh_token;

        await page.goto(`${origin}/account`);
        const access = page.getByRole("list", { name: "Applications with access" });
        await access.waitFor();
        assert.match(
          await access.innerText(),
          /Desk Assistant on notes\.example\s+Scope notes\s+Allowed \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC\s+Last used \d{4}/,
        );
        await look("account-access");

        await access.getByRole("button", { name: "Revoke Desk Assistant on notes.example" }).click();
        await page.waitForURL((url) => url.pathname === "/account");
        assert.match(
          await page.getByRole("status").innerText(),
          /^Desk Assistant no longer has access to notes\.example\. It cannot renew its access/,
        );
        assert.equal(await page.getByRole("list", { name: "Applications with access" }).count(), 0);
        await page.getByText("No application reaches a service as you.").waitFor();
        await look("account-access-revoked");
        const refreshed = await fetch(`${origin}/oidc/token`, {
          method: "POST",
          headers: { "content-type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams({ grant_type: "refresh_token", refresh_token: refreshToken, client_id: clientId }),
        });
        assert.equal(refreshed.status, 400);
        assert.equal(((await refreshed.json()) as { error: string }).error, "invalid_grant");
        assert.deepEqual(cspViolations, []);
      });

      test("an MCP client's scopes: each in the service's words, an unticked one left out of the token; `admin` is not described, unticked, and never granted; deleting needs a passkey sign-in, paying spends nothing until a limit is set", async () => {
        const registered = await fetch(`${origin}/oidc/register`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ client_name: "Note Taker", redirect_uris: [rp.url] }),
        });
        assert.equal(registered.status, 201);
        const clientId = ((await registered.json()) as { client_id: string }).client_id;
        const resource = `https://${notes.authority}/mcp`;
        /** Asks for `scope` at the notes resource, and answers the tokens of the code it comes back with. */
        async function authorizeFor(scope: string, answer: () => Promise<void>) {
          const verifier = randomBytes(32).toString("base64url");
          const query = new URLSearchParams({
            client_id: clientId,
            redirect_uri: rp.url,
            response_type: "code",
            scope,
            resource,
            code_challenge: createHash("sha256").update(verifier).digest("base64url"),
            code_challenge_method: "S256",
            state: "s-scopes",
          });
          await page.goto(`${origin}/oidc/authorize?${query}`);
          await page.getByRole("heading", { name: `Let Note Taker use ${notes.authority} as you?` }).waitFor();
          await answer();
          const back = await landedAtShop();
          const tokens = await fetch(`${origin}/oidc/token`, {
            method: "POST",
            headers: { "content-type": "application/x-www-form-urlencoded" },
            body: new URLSearchParams({
              grant_type: "authorization_code",
              code: back.get("code") ?? "",
              code_verifier: verifier,
              client_id: clientId,
              redirect_uri: rp.url,
            }),
          });
          assert.equal(tokens.status, 200);
          return (await tokens.json()) as { access_token: string; scope?: string };
        }

        // Every scope asked for is named, in the service's words, with its box.
        const tokens = await authorizeFor("notes:read notes:delete purchase admin", async () => {
          const scopes = page.getByRole("list", { name: `What Note Taker may do at ${notes.authority}` });
          assert.deepEqual(
            (await scopes.getByRole("listitem").allInnerTexts()).map((item) => item.replace(/\s+/g, " ").trim()),
            [
              "Read your notes notes:read",
              // Signed in by e-mail: what the service protects with a passkey cannot be given.
              "Delete your notes notes:delete needs a passkey: sign in with a passkey to allow it",
              "Pay for pinned notes purchase spends in EUR · no spending until you set a limit on your account",
              "Not described by the service, so it cannot be allowed. admin",
            ],
          );
          const read = scopes.getByRole("checkbox", { name: "Read your notes notes:read" });
          const remove = scopes.getByRole("checkbox", { name: /^Delete your notes notes:delete/ });
          const purchase = scopes.getByRole("checkbox", { name: /^Pay for pinned notes purchase/ });
          const admin = scopes.getByRole("checkbox", { name: /admin$/ });
          assert.equal(await read.isChecked(), true);
          assert.equal(await remove.isChecked(), false);
          assert.equal(await remove.isDisabled(), true);
          assert.equal(await purchase.isChecked(), true);
          assert.equal(await admin.isChecked(), false);
          assert.equal(await admin.isDisabled(), true);
          await look("consent-scopes");
          // The person leaves paying out.
          await purchase.uncheck();
          await page.getByRole("button", { name: "Allow" }).click();
        });
        assert.equal(tokens.scope, "notes:read");
        assert.equal(decodeJwt(tokens.access_token).scope, "notes:read");

        // `admin` alone: nothing the service describes, nothing ticked, nothing granted.
        const adminOnly = await authorizeFor("admin", async () => {
          const admin = page.getByRole("checkbox", { name: /admin$/ });
          assert.equal(await admin.isChecked(), false);
          assert.match(
            await page.locator("main").innerText(),
            /Not described by the service, so it cannot be allowed\./,
          );
          await look("consent-undescribed");
          await page.getByRole("button", { name: "Allow" }).click();
        });
        assert.equal(adminOnly.scope, undefined);
        assert.equal(decodeJwt(adminOnly.access_token).scope, undefined);

        // Deleting needs a passkey: the person adds one, follows the page's link, signs in with
        // it, and comes back to the same question with the box free to tick.
        const key = await addVirtualAuthenticator(page);
        await page.goto(`${origin}/account`);
        await page.getByLabel("Name of the new passkey").fill("Ada's laptop");
        await page.getByRole("button", { name: "Add a passkey" }).click();
        await page.getByText("Passkey added.").waitFor();
        const withPasskey = await authorizeFor("notes:read notes:delete", async () => {
          const scopes = page.getByRole("list", { name: `What Note Taker may do at ${notes.authority}` });
          assert.equal(await scopes.getByRole("checkbox", { name: /^Delete your notes/ }).isDisabled(), true);
          await scopes.getByRole("link", { name: "sign in with a passkey" }).click();
          await page.waitForURL((url) => url.pathname === "/signin");
          await page.getByText("To go on, sign in with a passkey").waitFor();
          await page.getByRole("button", { name: "Sign in with a passkey" }).click();
          await page.getByRole("heading", { name: `Let Note Taker use ${notes.authority} as you?` }).waitFor();
          const remove = scopes.getByRole("checkbox", { name: /^Delete your notes/ });
          assert.equal(await remove.isDisabled(), false);
          assert.equal(await remove.isChecked(), true);
          assert.doesNotMatch(await scopes.innerText(), /needs a passkey/);
          await look("consent-passkey");
          await page.getByRole("button", { name: "Allow" }).click();
        });
        assert.equal(withPasskey.scope, "notes:read notes:delete");
        assert.equal(decodeJwt(withPasskey.access_token).scope, "notes:read notes:delete");
        await key.cdp.send("WebAuthn.removeVirtualAuthenticator", { authenticatorId: key.id });
        assert.deepEqual(cspViolations, []);
      });
    });
  }
});
