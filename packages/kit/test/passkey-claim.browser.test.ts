/**
 * `phishingResistantSignIn` in a real browser against OUR attestor (issue 18): the kit asks the
 * attestor for a passkey sign-in (`acr_values=phishing-resistant`) and claims only with an id_token
 * whose `acr` says so. Chromium's virtual authenticator is the person's passkey. The attestor runs
 * at `http://localhost:PORT` (WebAuthn needs a domain for its relying-party ID).
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { addVirtualAuthenticator, launchChromium, lookAt, NO_PASSKEY_AUTOFILL } from "@proto/testkit";
import { decodeJwt } from "jose";
import type { Browser, BrowserContext, Page, Route } from "playwright-core";
import { type KitStore, openKitStore } from "../src/index.js";
import { TestAttestor } from "./support/attestor.js";
import {
  createTestDatabase,
  ENGINES,
  emailAddress,
  freePort,
  newAgent,
  reportSkippedEngines,
  TestClock,
  type TestDatabase,
} from "./support/env.js";
import { startService, type TestService } from "./support/service.js";

reportSkippedEngines();

const INVITE = "/proto/v1/accounts/me/owner-invitation";
const ME = "/proto/v1/accounts/me";

const launched = await launchChromium();
if (launched.skip !== undefined) process.stdout.write(`# passkey claim browser tests skipped: ${launched.skip}\n`);
after(async () => {
  await launched.browser?.close();
});

for (const engine of ENGINES) {
  describe(`claims that demand a passkey (${engine})`, { skip: launched.skip, timeout: 120_000 }, () => {
    const clock = new TestClock();
    let database: TestDatabase;
    let store: KitStore;
    let attestor: TestAttestor;
    let service: TestService;
    let serviceDid: string;
    let context: BrowserContext;
    let page: Page;

    before(async () => {
      database = await createTestDatabase(engine);
      store = await openKitStore(database.url);
      const port = await freePort();
      const origin = `http://127.0.0.1:${port}`;
      serviceDid = `did:web:127.0.0.1%3A${port}`;
      attestor = await TestAttestor.start(
        clock,
        [{ client_id: serviceDid, service_did: serviceDid, redirect_uris: [`${origin}/proto/owner/callback`] }],
        "localhost",
      );
      service = await startService(
        {
          publicUrl: origin,
          allowHttp: true,
          serviceName: "Notes",
          discovery: { service_did: serviceDid, recipient_types: ["oidc"] },
          attestors: { "proto-trust": { url: attestor.url, allowHttp: true, displayName: "Example Trust" } },
          phishingResistantSignIn: true,
          store,
          now: clock.now,
          onError: (error) => {
            throw error;
          },
        },
        clock,
      );
      await service.app.listen({ port, host: "127.0.0.1" });
      context = await (launched.browser as Browser).newContext();
      // No passkey autofill: Chromium's virtual authenticator would answer it before the page
      // could be looked at; the attestor's own tests cover autofill.
      await context.addInitScript(NO_PASSKEY_AUTOFILL);
      page = await context.newPage();
    });

    after(async () => {
      await context?.close();
      await service?.close();
      await attestor?.close();
      await store?.close();
      await database?.drop();
    });

    async function invitingAgent(email: string) {
      const agent = await attestor.link(newAgent(), email);
      const jwt = await attestor.mint(agent, serviceDid);
      const signedUp = await service.signed(agent, "GET", ME, { attestation: jwt });
      assert.equal(signedUp.status, 200, signedUp.text);
      const subH = decodeJwt(jwt).sub_h as string;
      const invited = await service.signed(agent, "POST", INVITE, {
        body: { recipient: { type: "oidc", value: { issuer: attestor.url, sub: subH } } },
      });
      assert.equal(invited.status, 202, invited.text);
      return { agent, claimUrl: invited.json.claim_url as string };
    }

    test("an e-mail sign-in does not claim; after adding a passkey at the attestor, signing in with it does", async () => {
      const email = emailAddress("owner");
      const { agent, claimUrl } = await invitingAgent(email);

      // The claim page sends the person to the attestor, which asks for a passkey; this person
      // has none yet and signs in by e-mail, which the attestor does not take as enough.
      await page.goto(claimUrl);
      await page.getByRole("link", { name: "Sign in with Example Trust" }).click();
      await page.waitForURL((url) => url.origin === attestor.url && url.searchParams.get("passkey") === "required");
      await page.getByLabel("E-mail address").fill(email);
      await page.getByRole("button", { name: "E-mail me a sign-in link" }).click();
      await page.waitForLoadState();
      await page.goto(attestor.magicLink(email));
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.waitForURL((url) => url.origin === attestor.url && url.searchParams.get("passkey") === "required");
      await lookAt(page, `kit-${engine}-attestor-asks-passkey`);

      // An attestor that ignored the request would send an e-mail sign-in back: the kit refuses it.
      const startPath = "/proto/owner/signin";
      const dropAcr = async (route: Route) => {
        const response = await route.fetch({ maxRedirects: 0 });
        const location = new URL(response.headers().location ?? "");
        location.searchParams.delete("acr_values");
        await route.fulfill({ response, headers: { ...response.headers(), location: location.href } });
      };
      const signInStart = (url: URL) => url.origin === service.origin && url.pathname === startPath;
      await page.route(signInStart, dropAcr);
      await page.goto(claimUrl);
      await page.getByRole("link", { name: "Sign in with Example Trust" }).click();
      await page.waitForURL((url) => url.origin === attestor.url && url.pathname === "/oidc/authorize");
      await page.getByRole("button", { name: "Allow" }).click();
      await page.waitForURL((url) => url.origin === service.origin);
      assert.match((await page.locator("body").textContent()) ?? "", /takes only a sign-in with a passkey/);
      await lookAt(page, `kit-${engine}-refused-without-passkey`);
      await page.unroute(signInStart, dropAcr);

      // The person adds a passkey on their account at the attestor.
      await addVirtualAuthenticator(page);
      await page.goto(`${attestor.url}/account`);
      await page.getByLabel("Name of the new passkey").fill("Laptop");
      await page.getByRole("button", { name: "Add a passkey" }).click();
      await page.getByText("Passkey added.").waitFor();

      // Back at the claim link: the attestor asks for the passkey, and the claim goes through.
      await page.goto(claimUrl);
      await page.getByRole("link", { name: "Sign in with Example Trust" }).click();
      await page.waitForURL((url) => url.origin === attestor.url && url.searchParams.get("passkey") === "required");
      await page.getByRole("button", { name: "Sign in with a passkey" }).click();
      await page.waitForURL(claimUrl);
      await page.getByRole("button", { name: "Claim this agent" }).click();
      await page.getByRole("heading", { name: "Agent claimed" }).waitFor();
      const me = await service.signed(agent, "GET", ME);
      assert.equal(me.json.state, "CLAIMED");
    });
  });
}
