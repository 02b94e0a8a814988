/**
 * The claim page for an `oidc` invitation in a real browser (Debian's Chromium driven by
 * playwright-core) against OUR attestor: a person opens the claim link, signs in at the attestor
 * (its e-mail sign-in), comes back, claims, and is led on to the service's owner page. What is
 * asserted is what the person reads: the attestor and the service named in words, no internal key,
 * dates for people, nothing wider than a phone. Screenshots go to SCREENSHOT_DIR when it is set.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { launchChromium, lookAt } from "@proto/testkit";
import { decodeJwt } from "jose";
import type { Browser, BrowserContext, Page } from "playwright-core";
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
/** `26 November 2026, 14:05 UTC` */
const HUMAN_TIME =
  /^\d{1,2} (January|February|March|April|May|June|July|August|September|October|November|December) \d{4}, \d\d:\d\d UTC$/;

const launched = await launchChromium();
if (launched.skip !== undefined) process.stdout.write(`# claim page browser tests skipped: ${launched.skip}\n`);
after(async () => {
  await launched.browser?.close();
});

const look = (page: Page, name: string, engine: string) => lookAt(page, `kit-${engine}-${name}`);

for (const engine of ENGINES) {
  describe(`the claim page in a browser (${engine})`, { skip: launched.skip, timeout: 120_000 }, () => {
    const clock = new TestClock();
    let database: TestDatabase;
    let store: KitStore;
    let attestor: TestAttestor;
    let service: TestService;
    let serviceDid: string;
    const contexts: BrowserContext[] = [];
    const cspViolations: string[] = [];
    const elsewhere: string[] = [];

    before(async () => {
      database = await createTestDatabase(engine);
      store = await openKitStore(database.url);
      const port = await freePort();
      const origin = `http://127.0.0.1:${port}`;
      serviceDid = `did:web:127.0.0.1%3A${port}`;
      attestor = await TestAttestor.start(clock, [
        { client_id: serviceDid, service_did: serviceDid, redirect_uris: [`${origin}/proto/owner/callback`] },
      ]);
      service = await startService(
        {
          publicUrl: origin,
          allowHttp: true,
          serviceName: "Notes",
          ownerPage: "/owner",
          discovery: { service_did: serviceDid, recipient_types: ["oidc"] },
          attestors: { "proto-trust": { url: attestor.url, allowHttp: true, displayName: "Example Trust" } },
          store,
          now: clock.now,
          onError: (error) => {
            throw error;
          },
        },
        clock,
      );
      await service.app.listen({ port, host: "127.0.0.1" });
    });

    after(async () => {
      for (const context of contexts) await context.close();
      await service?.close();
      await attestor?.close();
      await store?.close();
      await database?.drop();
    });

    async function newPage(): Promise<Page> {
      const context = await (launched.browser as Browser).newContext();
      contexts.push(context);
      context.on("request", (request) => {
        const requestOrigin = new URL(request.url()).origin;
        if (requestOrigin !== service.origin && requestOrigin !== attestor.url) elsewhere.push(request.url());
      });
      context.on("console", (message) => {
        if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
      });
      return context.newPage();
    }

    /** An agent linked to `email` at the attestor, signed up with its attestation, inviting its person. */
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
      return { agent, subH, claimUrl: invited.json.claim_url as string };
    }

    /** The attestor's e-mail sign-in, as a person does it: the form, the mailed link, the button. */
    async function signInAtAttestor(page: Page, email: string): Promise<void> {
      await page.waitForURL((url) => url.origin === attestor.url);
      await page.getByLabel("E-mail address").fill(email);
      await page.getByRole("button", { name: "E-mail me a sign-in link" }).click();
      await page.waitForLoadState();
      await page.goto(attestor.magicLink(email));
      await page.getByRole("button", { name: "Sign in" }).click();
      // A person's first sign-in to this service at the attestor asks for consent first.
      await page.waitForURL((url) => url.origin !== attestor.url || url.pathname === "/oidc/authorize");
      if (new URL(page.url()).origin === attestor.url) await page.getByRole("button", { name: "Allow" }).click();
    }

    async function assertHumanTimes(page: Page): Promise<void> {
      const times = page.locator("time");
      assert.ok((await times.count()) > 0, "the page shows a time");
      for (const time of await times.all()) {
        assert.match((await time.textContent()) ?? "", HUMAN_TIME);
        assert.ok(!Number.isNaN(Date.parse((await time.getAttribute("datetime")) ?? "")), "datetime is an instant");
      }
      assert.doesNotMatch((await page.locator("body").textContent()) ?? "", /\d{4}-\d\d-\d\dT\d\d:/, "no ISO strings");
    }

    test("open the claim link, sign in at the attestor named in words, claim, go on to the owner page", async () => {
      const email = emailAddress("owner");
      const { agent, subH, claimUrl } = await invitingAgent(email);
      const page = await newPage();
      await page.goto(claimUrl);
      await page.getByRole("heading", { name: "Claim your agent" }).waitFor();
      assert.equal(await page.locator("header").textContent(), "Notes", "the service in words");
      assert.equal(await page.title(), "Claim your agent · Notes");
      let text = (await page.locator("body").textContent()) ?? "";
      assert.ok(text.includes(agent.did), "names the agent");
      assert.ok(text.includes("invited an account at Example Trust to become its owner"), text);
      assert.ok(!text.includes(attestor.url) && !text.includes("127.0.0.1"), "no address for a name");
      await assertHumanTimes(page);
      const signIn = page.getByRole("link", { name: "Sign in with Example Trust" });
      await signIn.waitFor();
      // The keyboard reaches the button and shows where it is.
      for (let presses = 0; !(await signIn.evaluate((e) => e.matches(":focus"))); presses++) {
        assert.ok(presses < 10, "Tab reaches the sign-in button");
        await page.keyboard.press("Tab");
      }
      const outline = await page.evaluate("getComputedStyle(document.activeElement).outlineStyle");
      assert.equal(outline, "solid", "visible focus");
      // The stylesheet applied (its hash in the CSP matches): the link looks like a button.
      const background = await page.evaluate("getComputedStyle(document.activeElement).backgroundColor");
      assert.equal(background, "rgb(11, 87, 208)", "styled, not the browser's default link");
      await look(page, "claim-signed-out", engine);

      await signIn.click();
      await signInAtAttestor(page, email);
      await page.waitForURL(claimUrl);
      const claim = page.getByRole("button", { name: "Claim this agent" });
      await claim.waitFor();
      text = (await page.locator("body").textContent()) ?? "";
      assert.ok(text.includes("You are signed in with"), text);
      assert.ok(text.includes("an account at Example Trust"), text);
      assert.ok(text.includes(`pseudonymous id ${subH.slice(0, 8)}…`), "a short pseudonymous id");
      assert.ok(!text.includes(subH), "never the whole internal subject");
      assert.ok(!text.includes("oidc:") && !text.includes("proto-trust"), "never the internal key or issuer name");
      await assertHumanTimes(page);
      await look(page, "claim-signed-in", engine);

      await claim.click();
      await page.getByRole("heading", { name: "Agent claimed" }).waitFor();
      text = (await page.locator("body").textContent()) ?? "";
      assert.ok(text.includes("You now own this agent on Notes"), text);
      assert.ok(text.includes(agent.did));
      await assertHumanTimes(page);
      const onward = page.getByRole("link", { name: "See your agents on Notes" });
      assert.equal(await onward.getAttribute("href"), "/owner", "onward to the service's owner page");
      await look(page, "claimed", engine);
      const me = await service.signed(agent, "GET", ME);
      assert.equal(me.json.state, "CLAIMED");
    });

    test("signed in as someone else, the page says so and offers to sign in again instead of a failing button", async () => {
      const invited = await invitingAgent(emailAddress("owner"));
      const stranger = emailAddress("stranger");
      await invitingAgent(stranger);
      const page = await newPage();
      await page.goto(invited.claimUrl);
      await page.getByRole("link", { name: "Sign in with Example Trust" }).click();
      await signInAtAttestor(page, stranger);
      await page.waitForURL(invited.claimUrl);
      await page.getByText("The account you are signed in with is not the one this invitation is for.").waitFor();
      assert.equal(await page.getByRole("button", { name: "Claim this agent" }).count(), 0, "no button that fails");
      await page.getByRole("link", { name: "Sign in with Example Trust" }).waitFor();
      await look(page, "claim-someone-else", engine);
    });

    test("signed in too long ago to claim, the page asks for a new sign-in, which brings the button back", async () => {
      const email = emailAddress("owner");
      const { claimUrl } = await invitingAgent(email);
      const page = await newPage();
      await page.goto(claimUrl);
      await page.getByRole("link", { name: "Sign in with Example Trust" }).click();
      await signInAtAttestor(page, email);
      await page.waitForURL(claimUrl);
      await page.getByRole("button", { name: "Claim this agent" }).waitFor();

      clock.advance(301);
      await page.reload();
      await page.getByText("Claiming needs a recent sign-in.").waitFor();
      assert.equal(await page.getByRole("button", { name: "Claim this agent" }).count(), 0, "no button that fails");
      await look(page, "claim-stale", engine);
      // Signing in again (the attestor may still know the person and come straight back) makes it fresh.
      await page.getByRole("link", { name: "Sign in with Example Trust" }).click();
      await page.waitForURL((url) => url.href === claimUrl || url.origin === attestor.url);
      if (new URL(page.url()).origin === attestor.url) await signInAtAttestor(page, email);
      await page.waitForURL(claimUrl);
      await page.getByRole("button", { name: "Claim this agent" }).waitFor();
    });

    test("a claim link that is not one is a page, in the same frame", async () => {
      const page = await newPage();
      const answer = await page.goto(`${service.origin}/proto/claim?token=${"x".repeat(40)}`);
      assert.equal(answer?.status(), 404);
      await page.getByRole("heading", { name: "This invitation cannot be used" }).waitFor();
      assert.equal(await page.locator("header").textContent(), "Notes");
      await look(page, "claim-unknown", engine);
    });

    test("the pages ran no scripts and loaded nothing from elsewhere", () => {
      assert.deepEqual(cspViolations, []);
      assert.deepEqual(elsewhere, []);
    });
  });
}
