/**
 * The e-mail ceremony in a real browser (Debian's Chromium driven by playwright-core): the kit
 * listens on 127.0.0.1, mails the link over SMTP to a server in this process, and a person opens
 * it, continues as the invited address and claims. Every page is looked at desktop and phone wide
 * (`lookAt`: screenshots go to SCREENSHOT_DIR when it is set).
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { launchChromium, lookAt } from "@proto/testkit";
import { linkIn, type SmtpCollector, startSmtpCollector } from "@proto/testkit/smtp";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { type KitStore, openKitStore } from "../src/index.js";
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

const launched = await launchChromium();
if (launched.skip !== undefined) process.stdout.write(`# e-mail ceremony browser tests skipped: ${launched.skip}\n`);
after(async () => {
  await launched.browser?.close();
});

/** A kit service on a real port of 127.0.0.1 (plain http: a loopback host may mail http links). */
async function listening(
  options: Omit<Parameters<typeof startService>[0], "publicUrl" | "discovery">,
  clock: TestClock,
): Promise<TestService> {
  const port = await freePort();
  const service = await startService(
    {
      ...options,
      publicUrl: `http://127.0.0.1:${port}`,
      allowHttp: true,
      discovery: {
        service_did: `did:web:127.0.0.1%3A${port}`,
        billing: { unclaimed_mode: "free" },
        recipient_types: ["email", "oidc"],
      },
    },
    clock,
  );
  await service.app.listen({ port, host: "127.0.0.1" });
  return service;
}

/** Both widths, nothing wider than the screen; screenshots named by engine and page. */
const look = (page: Page, name: string, engine: string) => lookAt(page, `kit-${engine}-${name}`);

for (const engine of ENGINES) {
  describe(`the e-mail ceremony in a browser (${engine})`, { skip: launched.skip, timeout: 120_000 }, () => {
    let database: TestDatabase;
    let store: KitStore;
    let smtp: SmtpCollector;
    let service: TestService;
    let outbox: TestService;
    const clock = new TestClock();
    const contexts: BrowserContext[] = [];
    const cspViolations: string[] = [];
    const elsewhere: string[] = [];

    before(async () => {
      database = await createTestDatabase(engine);
      store = await openKitStore(database.url);
      smtp = await startSmtpCollector();
      service = await listening(
        { store, now: clock.now, mail: { smtpUrl: smtp.url, from: "Kit test <no-reply@kit.test>" } },
        clock,
      );
      outbox = await listening({ store, now: clock.now, mail: { developmentOutbox: true } }, clock);
    });

    after(async () => {
      for (const context of contexts) await context.close();
      await service?.close();
      await outbox?.close();
      await smtp?.close();
      await store?.close();
      await database?.drop();
    });

    async function newPage(): Promise<Page> {
      const context = await (launched.browser as Browser).newContext();
      contexts.push(context);
      context.on("request", (request) => {
        const origin = new URL(request.url()).origin;
        if (origin !== service.origin && origin !== outbox.origin) elsewhere.push(request.url());
      });
      context.on("console", (message) => {
        if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
      });
      return context.newPage();
    }

    test("open the mailed link, continue as the address, claim; the link does not work twice", async () => {
      const address = emailAddress("browser");
      const agent = newAgent();
      const invited = await service.signed(agent, "POST", INVITE, { body: { email: address } });
      assert.equal(invited.status, 202, invited.text);
      const link = linkIn(await smtp.nextMailTo(address), "/proto/claim");

      const page = await newPage();
      await page.goto(link);
      await page.getByRole("heading", { name: "Claim your agent" }).waitFor();
      assert.ok((await page.locator("body").textContent())?.includes(agent.did), "names the agent");
      const proceed = page.getByRole("button", { name: `Continue as ${address}` });
      await proceed.waitFor();
      await look(page, "continue", engine);

      // Another browser opened the same link before it was used.
      const other = await newPage();
      await other.goto(link);

      await proceed.click();
      await page.waitForURL(link);
      await page.getByText(`You are signed in as ${address}.`).waitFor();
      const claim = page.getByRole("button", { name: "Claim this agent" });
      await claim.waitFor();
      await look(page, "signed-in", engine);

      // The other browser's button now meets a spent link.
      await other.getByRole("button", { name: `Continue as ${address}` }).click();
      await other.getByRole("heading", { name: "This link cannot be used" }).waitFor();
      await other.getByText("already used to sign in, and it works only once").waitFor();
      await look(other, "link-used-refused", engine);
      await other.goto(link);
      await other.getByText("This link was already used to sign in").waitFor();
      assert.equal(await other.getByRole("button").count(), 0, "nothing to press");
      await look(other, "link-used", engine);

      await claim.click();
      await page.getByRole("heading", { name: "Agent claimed" }).waitFor();
      await look(page, "claimed", engine);
      const me = await service.signed(agent, "GET", "/proto/v1/accounts/me");
      assert.equal(me.json.state, "CLAIMED");
      assert.deepEqual(me.json.owner.identity, { type: "email", value: address });
    });

    test("the development outbox shows the mail; its link leads to the claim page", async () => {
      const address = emailAddress("outbox");
      const agent = newAgent();
      assert.equal((await outbox.signed(agent, "POST", INVITE, { body: { email: address } })).status, 202);
      const page = await newPage();
      await page.goto(`${outbox.origin}/proto/owner/dev/outbox`);
      await page.getByRole("heading", { name: "Development outbox" }).waitFor();
      await page.getByText(address).first().waitFor();
      await look(page, "outbox", engine);
      await page
        .getByRole("link", { name: /\/proto\/claim\?token=/ })
        .first()
        .click();
      await page.getByRole("button", { name: `Continue as ${address}` }).waitFor();
    });

    test("the pages ran no scripts and loaded nothing from elsewhere", () => {
      assert.deepEqual(cspViolations, []);
      assert.deepEqual(elsewhere, []);
    });
  });
}
