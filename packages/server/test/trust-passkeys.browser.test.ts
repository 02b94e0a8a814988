import assert from "node:assert/strict";
import { createHash, generateKeyPairSync, randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { addVirtualAuthenticator as addAuthenticator, launchChromium, NO_PASSKEY_AUTOFILL } from "@proto/testkit";
import { decodeJwt } from "jose";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { inPage } from "./support/page-checks.js";
import { startRelyingParty } from "./support/relying-party.js";
import { magicLinkOf, type SmtpCollector, startSmtpCollector } from "./support/smtp.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";
import { freePort, newAgent, RELAXED_RATE_LIMITS, startTrustHarness, type TrustHarness } from "./support/trust.js";

/**
 * Issue 18 in a real browser: Chromium's virtual authenticator (the DevTools protocol's WebAuthn
 * domain) stands in for a phone or security key. A person adds a passkey on /account, signs out,
 * signs in with the passkey alone (no mail), and removes it; another authenticator's passkey and
 * a replayed assertion are refused. The attestor's origin is `http://localhost:PORT`: WebAuthn
 * needs a secure context and a domain for its relying-party ID, which an IP address is not.
 */

reportSkippedVariants();

const MAIL_FROM = "proto trust <signin@trust.test>";
const SHOP = "did:web:shop.example";
const VIEWPORTS = [
  { name: "desktop", width: 1280, height: 800 },
  { name: "phone", width: 375, height: 740 },
] as const;

const launched = await launchChromium();
if (launched.skip !== undefined) process.stdout.write(`# browser tests skipped: ${launched.skip}\n`);

describe("passkeys at the attestor, in a browser (issue 18)", { skip: launched.skip, timeout: 240_000 }, () => {
  const browser = launched.browser as Browser;
  const shotRoot = process.env.PROTO_SCREENSHOT_DIR ?? mkdtempSync(join(tmpdir(), "proto-passkeys-"));
  after(async () => {
    if (process.env.PROTO_SCREENSHOT_DIR === undefined) rmSync(shotRoot, { recursive: true, force: true });
    await browser.close();
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

      async function signOut(): Promise<void> {
        await page.goto(`${origin}/account`);
        await page.getByRole("navigation").getByRole("button", { name: "Sign out" }).click();
        await page.waitForURL((url) => url.pathname === "/signin");
      }

      /** Clicks "Sign in with a passkey"; resolves with the page's status text if it stays. */
      async function passkeySignIn(): Promise<void> {
        await page.goto(`${origin}/signin`);
        await page.getByRole("button", { name: "Sign in with a passkey" }).click();
      }

      before(async () => {
        smtp = await startSmtpCollector();
        rp = await startRelyingParty();
        const port = await freePort();
        origin = `http://localhost:${port}`;
        h = await startTrustHarness(variant, {
          port,
          env: {
            TRUST_PUBLIC_URL: origin,
            SMTP_URL: smtp.url,
            MAIL_FROM,
            TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS,
            TRUST_LINK_REQUIRES_PASSKEY: "1",
            TRUST_OIDC_CLIENTS: JSON.stringify([{ client_id: SHOP, service_did: SHOP, redirect_uris: [rp.url] }]),
          },
        });
        context = await browser.newContext({ viewport: VIEWPORTS[0] });
        // A browser without passkey autofill (conditional mediation): the button is the way in.
        // Chromium's virtual authenticator answers an autofill request at once, which would sign
        // in before a test could press anything; autofill has its own step below.
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

      /** Signs `who` in through the mailed link, on the current page. */
      async function signInByMail(who: string, start = `${origin}/signin?next=%2Faccount`): Promise<void> {
        await page.goto(start);
        await page.getByLabel("E-mail address").fill(who);
        await page.getByRole("button", { name: "E-mail me a sign-in link" }).click();
        await page.getByRole("heading", { name: "Check your e-mail" }).waitFor();
        await page.goto(magicLinkOf(await smtp.nextMailTo(who)));
        await page.getByRole("button", { name: "Sign in" }).click();
      }

      /** An OpenID authorization request as the shop builds it, with a fresh PKCE pair. */
      function authorizeUrl(extra: Record<string, string>): { url: string; verifier: string } {
        const verifier = randomBytes(32).toString("base64url");
        const query = new URLSearchParams({
          client_id: SHOP,
          redirect_uri: rp.url,
          response_type: "code",
          scope: "openid",
          code_challenge: createHash("sha256").update(verifier).digest("base64url"),
          code_challenge_method: "S256",
          state: "s-1",
          nonce: "n-1",
          ...extra,
        });
        return { url: `${origin}/oidc/authorize?${query}`, verifier };
      }

      /** Waits for the browser at the shop's callback; its code redeemed for the id_token's claims. */
      async function landedAtShop(verifier: string): Promise<Record<string, unknown>> {
        await page.waitForURL((url) => url.href.startsWith(rp.url));
        const code = new URL(page.url()).searchParams.get("code");
        assert.ok(code, page.url());
        const tokens = await fetch(`${origin}/oidc/token`, {
          method: "POST",
          headers: { "content-type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams({
            grant_type: "authorization_code",
            code,
            code_verifier: verifier,
            client_id: SHOP,
            redirect_uri: rp.url,
          }),
        });
        assert.equal(tokens.status, 200);
        return decodeJwt(((await tokens.json()) as { id_token: string }).id_token);
      }

      test("add a passkey, sign out, sign in with it alone, refuse a stranger's and a replay, remove it", async () => {
        // Signed in once by e-mail: the account exists.
        await page.goto(`${origin}/signin?next=%2Faccount`);
        await page.getByLabel("E-mail address").fill(email);
        await page.getByRole("button", { name: "E-mail me a sign-in link" }).click();
        await page.getByRole("heading", { name: "Check your e-mail" }).waitFor();
        await page.goto(magicLinkOf(await smtp.nextMailTo(email)));
        await page.getByRole("button", { name: "Sign in" }).click();
        await page.getByRole("heading", { name: "Your account" }).waitFor();
        assert.match(await page.locator("main").innerText(), /No passkey yet\./);

        // Add one: named, listed with when it was added and that it was never used.
        const mine = await addAuthenticator(page);
        await page.getByLabel("Name of the new passkey").fill("Ada's laptop");
        await page.getByRole("button", { name: "Add a passkey" }).click();
        await page
          .waitForURL((url) => url.search === "?passkey=added", { timeout: 10_000 })
          .catch(async () => {
            assert.fail(`no passkey added: ${await page.locator("#passkey-add-status").innerText()}`);
          });
        await page.getByText("Passkey added.").waitFor();
        const listed = page.locator("#passkeys + p.notice ~ ul.services li");
        assert.equal(await listed.count(), 1);
        assert.match(await listed.innerText(), /Ada's laptop\s+Added \d{4}-\d\d-\d\d \d\d:\d\d UTC · last used never/);
        await look("account-passkey");
        const stored = await mine.cdp.send("WebAuthn.getCredentials", { authenticatorId: mine.id });
        assert.equal(stored.credentials.length, 1);
        assert.equal(stored.credentials[0]?.isResidentCredential, true, "a discoverable credential");
        assert.equal(stored.credentials[0]?.rpId, "localhost");

        // Signed out, the passkey alone signs in: no new mail is sent.
        await signOut();
        // The e-mail field takes passkeys from the browser's autofill where it offers them.
        assert.equal(await page.locator("#email").getAttribute("autocomplete"), "email webauthn");
        const mailsBefore = smtp.mails.length;
        await look("signin-passkey");
        await passkeySignIn();
        await page.waitForURL((url) => url.pathname === "/account");
        assert.match(await page.locator("main").innerText(), /last used \d{4}-\d\d-\d\d \d\d:\d\d UTC/);
        assert.equal(smtp.mails.length, mailsBefore, "no mail for a passkey sign-in");

        // A replayed assertion: the same answer sent again is refused (its challenge is used up).
        await signOut();
        const captured: { body?: string } = {};
        await page.route("**/signin/passkey", async (route) => {
          captured.body = route.request().postData() ?? undefined;
          await route.continue();
        });
        await passkeySignIn();
        await page.waitForURL((url) => url.pathname === "/account");
        await page.unroute("**/signin/passkey");
        assert.ok(captured.body !== undefined);
        await signOut();
        // Sent again from a signed-out page, with its own valid CSRF token and a new ceremony
        // started: only the assertion is old.
        await page.goto(`${origin}/signin`);
        const replay = await inPage<{ status: number; json: { error?: string } }>(
          page,
          `(async () => {
            const body = ${captured.body};
            body._csrf = document.querySelector("#passkey-signin input[name=_csrf]").value;
            const headers = { "content-type": "application/json" };
            await fetch("/signin/passkey/options", { method: "POST", headers, body: JSON.stringify({ _csrf: body._csrf }) });
            const response = await fetch("/signin/passkey", { method: "POST", headers, body: JSON.stringify(body) });
            return { status: response.status, json: await response.json() };
          })()`,
        );
        assert.equal(replay.status, 400);
        assert.equal(replay.json.error, "challenge", JSON.stringify(replay.json));
        await page.goto(`${origin}/account`);
        assert.equal(new URL(page.url()).pathname, "/signin", "the replay signed nobody in");

        // With autofill (the browser offers passkeys in the e-mail field), opening the sign-in page
        // is enough: the person picks the passkey there (the virtual authenticator picks at once).
        const autofill = await browser.newContext({ viewport: VIEWPORTS[0] });
        const autofillPage = await autofill.newPage();
        const now = await mine.cdp.send("WebAuthn.getCredentials", { authenticatorId: mine.id });
        await mine.cdp.send("WebAuthn.removeVirtualAuthenticator", { authenticatorId: mine.id });
        const inAutofill = await addAuthenticator(autofillPage);
        for (const credential of now.credentials)
          await inAutofill.cdp.send("WebAuthn.addCredential", { authenticatorId: inAutofill.id, credential });
        await autofillPage.goto(`${origin}/signin`);
        await autofillPage.waitForURL((url) => url.pathname === "/account");
        assert.match(await autofillPage.locator("main").innerText(), /Ada's laptop/);
        const afterAutofill = await inAutofill.cdp.send("WebAuthn.getCredentials", { authenticatorId: inAutofill.id });
        await autofill.close();
        // The passkey goes back to the first browser, its counter moved on by the autofill sign-in.
        const mineAgain = await addAuthenticator(page);
        for (const credential of afterAutofill.credentials)
          await mineAgain.cdp.send("WebAuthn.addCredential", { authenticatorId: mineAgain.id, credential });
        Object.assign(mine, mineAgain);

        // Another authenticator holds no passkey of this site: the browser finds none to offer.
        const current = await mine.cdp.send("WebAuthn.getCredentials", { authenticatorId: mine.id });
        assert.ok(
          (current.credentials[0]?.signCount ?? 0) > (stored.credentials[0]?.signCount ?? 0),
          "the sign-ins moved the counter",
        );
        await mine.cdp.send("WebAuthn.removeVirtualAuthenticator", { authenticatorId: mine.id });
        const stranger = await addAuthenticator(page);
        await stranger.cdp.send("WebAuthn.addCredential", {
          authenticatorId: stranger.id,
          credential: {
            credentialId: Buffer.from("a-stranger's-credential").toString("base64"),
            isResidentCredential: true,
            rpId: "localhost",
            privateKey: strangerKey(),
            userHandle: Buffer.from("someone else").toString("base64"),
            signCount: 0,
          },
        });
        await passkeySignIn();
        const status = page.locator("#passkey-signin-status");
        await status.filter({ hasText: /not registered here/ }).waitFor();
        await page.goto(`${origin}/account`);
        assert.equal(new URL(page.url()).pathname, "/signin");
        await stranger.cdp.send("WebAuthn.removeVirtualAuthenticator", { authenticatorId: stranger.id });

        // A copy of the passkey as it was when added (its counter at 0, behind the two sign-ins
        // since): refused as a cloned authenticator would be.
        const copy = await addAuthenticator(page);
        for (const credential of stored.credentials)
          await copy.cdp.send("WebAuthn.addCredential", { authenticatorId: copy.id, credential });
        await passkeySignIn();
        await status.filter({ hasText: /counter went backwards/ }).waitFor();
        await copy.cdp.send("WebAuthn.removeVirtualAuthenticator", { authenticatorId: copy.id });

        // Back with the real one, then removed: it stops working.
        const again = await addAuthenticator(page);
        for (const credential of current.credentials)
          await again.cdp.send("WebAuthn.addCredential", { authenticatorId: again.id, credential });
        await passkeySignIn();
        await page.waitForURL((url) => url.pathname === "/account");
        await page.getByRole("button", { name: "Remove Ada's laptop" }).click();
        await page.getByText("Passkey removed.").waitFor();
        assert.match(await page.locator("main").innerText(), /No passkey yet\./);
        await signOut();
        await passkeySignIn();
        await status.filter({ hasText: /not registered here, or it was removed/ }).waitFor();
        await again.cdp.send("WebAuthn.removeVirtualAuthenticator", { authenticatorId: again.id });

        assert.deepEqual(cspViolations, []);
      });

      test("services can demand a passkey: acr_values at the OpenID provider, TRUST_LINK_REQUIRES_PASSKEY at the link page", async () => {
        const grace = `grace-${Math.random().toString(36).slice(2)}@mail.test`;
        await context.clearCookies();
        await signInByMail(grace);
        await page.getByRole("heading", { name: "Your account" }).waitFor();
        const key = await addAuthenticator(page);
        await page.getByLabel("Name of the new passkey").fill("Grace's phone");
        await page.getByRole("button", { name: "Add a passkey" }).click();
        await page.getByText("Passkey added.").waitFor();

        // Signed in by e-mail: the id_token says so, and claims nothing phishing-resistant.
        const plain = authorizeUrl({});
        await page.goto(plain.url);
        await page.getByRole("button", { name: "Allow" }).click();
        const byMail = await landedAtShop(plain.verifier);
        assert.deepEqual(byMail.amr, ["email"]);
        assert.equal(byMail.acr, undefined);

        // The shop asks for a phishing-resistant sign-in: the e-mail session is not enough, the
        // person is asked for their passkey, and the request resumes after it.
        const demanding = authorizeUrl({ acr_values: "phishing-resistant" });
        await page.goto(demanding.url);
        await page.waitForURL((url) => url.pathname === "/signin" && url.searchParams.get("passkey") === "required");
        assert.match(await page.locator("#passkey-required").innerText(), /sign in with a passkey/);
        await look("signin-passkey-required");
        await page.getByRole("button", { name: "Sign in with a passkey" }).click();
        const claims = await landedAtShop(demanding.verifier);
        assert.equal(claims.acr, "phishing-resistant");
        assert.deepEqual(claims.amr, ["hwk", "user"]);
        const prompted = await fetch(`${origin}/.well-known/openid-configuration`).then(
          (r) => r.json() as Promise<{ acr_values_supported?: string[] }>,
        );
        assert.deepEqual(prompted.acr_values_supported, ["phishing-resistant"]);

        // The link page (TRUST_LINK_REQUIRES_PASSKEY=1): a passkey session answers at once...
        const agent = newAgent();
        const started = await h.startLink(agent, { agent_label: "Grace's agent" });
        await page.goto(started.json.link_url as string);
        await page.getByRole("heading", { name: "Link this agent to your account?" }).waitFor();
        // ...an e-mail session is sent to sign in with a passkey first, then comes back to it.
        await page.getByRole("navigation").getByRole("button", { name: "Sign out" }).click();
        await signInByMail(grace, started.json.link_url as string);
        await page.waitForURL((url) => url.pathname === "/signin" && url.searchParams.get("passkey") === "required");
        await page.getByRole("button", { name: "Sign in with a passkey" }).click();
        await page.getByRole("heading", { name: "Link this agent to your account?" }).waitFor();
        await page.getByRole("button", { name: "Confirm" }).click();
        const polled = await h.poll(agent, started.json.req_id as string);
        assert.equal(polled.json.state, "confirmed", polled.text);
        await key.cdp.send("WebAuthn.removeVirtualAuthenticator", { authenticatorId: key.id });
        assert.deepEqual(cspViolations, []);
      });
    });
  }
});

/** A P-256 private key in PKCS#8, base64: the credential of an authenticator nobody registered. */
function strangerKey(): string {
  const { privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  return privateKey.export({ format: "der", type: "pkcs8" }).toString("base64");
}
