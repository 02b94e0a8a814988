import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { addVirtualAuthenticator, launchChromium, lookAt, NO_PASSKEY_AUTOFILL, VIEWPORTS } from "@proto/testkit";
import { decodeJwt } from "jose";
import type { Browser, BrowserContext, Page } from "playwright-core";
import type { OutboxMailer } from "../src/trust/mail.js";
import { type DeclaringService, startDeclaringService } from "./support/declaring-service.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";
import {
  type Agent,
  freePort,
  newAgent,
  RELAXED_RATE_LIMITS,
  startTrustHarness,
  type TrustHarness,
} from "./support/trust.js";

/**
 * Issue 38, approvals in a real browser: the person follows the link of the mail their agent's
 * request sent, sees which agent asks what at which service and why (in the agent's words), and
 * approves a permission the service protects with a passkey through Chromium's virtual
 * authenticator; the agent's next token carries it. A request waits on /account; a person signed
 * out signs in first and comes back to it; a decline changes nothing.
 */

reportSkippedVariants();

const REASON = "Delete the three notes you asked me to clean up";

const launched = await launchChromium();
if (launched.skip !== undefined) process.stdout.write(`# browser tests skipped: ${launched.skip}\n`);

describe("approvals at the attestor, in a browser (issue 38)", { skip: launched.skip, timeout: 300_000 }, () => {
  const browser = launched.browser as Browser;
  let svc: DeclaringService;
  before(async () => {
    svc = await startDeclaringService();
  });
  after(async () => {
    await svc?.close();
    await browser.close();
  });

  for (const variant of STORE_VARIANTS) {
    describe(`(${variant.name})`, () => {
      let h: TrustHarness;
      let origin: string;
      let context: BrowserContext;
      let page: Page;
      const email = `ada-${Math.random().toString(36).slice(2)}@mail.test`;
      const cspViolations: string[] = [];

      before(async () => {
        const port = await freePort();
        // WebAuthn needs a secure context and a domain: localhost, not an IP address.
        origin = `http://localhost:${port}`;
        h = await startTrustHarness(variant, {
          port,
          fetchCa: svc.trustOptions.fetchCa,
          env: { ...svc.trustOptions.env, TRUST_PUBLIC_URL: origin, TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS },
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

      async function look(target: Page, name: string): Promise<void> {
        await lookAt(target, `approvals-${variant.name}-${name}`);
        await target.setViewportSize(VIEWPORTS[0]);
      }

      /** The newest mail to `to` in the development outbox. */
      function lastMailTo(to: string) {
        const mail = (h.app.mailer as OutboxMailer).entries.find((m) => m.to === to);
        assert.ok(mail, `a mail to ${to}`);
        return mail;
      }

      /** Signs `who` in on `target` through the mailed link, starting at `start`. */
      async function signInByMail(target: Page, who: string, start: string): Promise<void> {
        await target.goto(start);
        await target.getByLabel("E-mail address").fill(who);
        await target.getByRole("button", { name: "E-mail me a sign-in link" }).click();
        await target.getByRole("heading", { name: "Check your e-mail" }).waitFor();
        const link = /https?:\/\/\S+\/signin\/email\/verify\?token=\S+/.exec(lastMailTo(who).text)?.[0];
        assert.ok(link, "a sign-in link");
        await target.goto(link);
        await target.getByRole("button", { name: "Sign in" }).click();
      }

      /** An agent called `label`, linked to Ada. */
      async function adasAgent(label: string): Promise<Agent> {
        const agent = newAgent();
        const started = await h.startLink(agent, { agent_label: label });
        await h.hook("/__test/link/confirm", { req_id: started.json.req_id, email });
        assert.equal((await h.poll(agent, started.json.req_id as string)).json.state, "confirmed");
        return agent;
      }

      /** The agent asks; answers the approval's id and the link the person was mailed. */
      async function ask(agent: Agent, body: Record<string, unknown>): Promise<{ id: string; link: string }> {
        const answer = await h.signed(agent, "POST", "/v1/approvals", {
          aud: svc.aud,
          service_url: svc.url,
          ...body,
        });
        assert.equal(answer.status, 201, answer.text);
        const link = /https?:\/\/\S+\/approvals\/\S+/.exec(lastMailTo(email).text)?.[0];
        assert.equal(link, answer.json.approval_url);
        return { id: answer.json.approval_id as string, link: link as string };
      }

      async function nextToken(agent: Agent) {
        const minted = await h.mint(agent, svc.aud);
        assert.equal(minted.status, 200, minted.text);
        const { scope, authorization_details, grant_id } = decodeJwt(minted.json.jwt as string);
        return { scope, authorization_details, grant_id };
      }

      test("Ada approves, with her passkey, a permission the service protects and a spending limit", async () => {
        await signInByMail(page, email, `${origin}/signin?next=%2Faccount`);
        await page.getByRole("heading", { name: "Your account" }).waitFor();
        const key = await addVirtualAuthenticator(page);
        await page.getByLabel("Name of the new passkey").fill("Ada's laptop");
        await page.getByRole("button", { name: "Add a passkey" }).click();
        await page.getByText("Passkey added.").waitFor();

        const agent = await adasAgent("Research assistant");
        const { id, link } = await ask(agent, {
          permissions: ["notes:delete"],
          spend_limits: [
            { permission: "purchase", currency: "EUR", per_transaction: 50, per_period: 1000, period: "month" },
          ],
          reason: REASON,
        });
        assert.equal(
          lastMailTo(email).subject,
          `Your agent “Research assistant” asks for more at ${new URL(svc.url).host}`,
        );

        // The request waits on the account page, a link away.
        await page.goto(`${origin}/account`);
        const waiting = page.getByRole("list", { name: "Requests waiting for your answer" });
        assert.match(await waiting.innerText(), /Research assistant asks for more at notes\.test:\d+/);
        await look(page, "account-waiting");
        await waiting.getByRole("link").click();
        await page.waitForURL(link);

        await page.getByRole("heading", { name: /Allow your agent more at notes\.test:\d+\?/ }).waitFor();
        const main = await page.locator("main").innerText();
        assert.match(main, /Agent\s+Research assistant/);
        assert.ok(main.includes(`Your agent says:\n“${REASON}”`), main);
        assert.match(main, /These are your agent's words, not proto trust's\./);
        assert.match(main, /Delete your notes\s+Needs a passkey\s+notes:delete/);
        assert.match(
          main,
          /Spending: Pay for pinned notes\s+purchase\s+Now: no spending\s+After: up to 0\.50 EUR per transaction and 10\.00 EUR per month/,
        );
        assert.match(
          main,
          /Approving needs your passkey: it gives a permission the service protects with a passkey, and it allows spending\./,
        );
        // The agent's words are shown as text, never as markup of this site.
        assert.equal(await page.locator("main .lead").count(), 1);
        await look(page, "approval-passkey");

        await page.getByRole("button", { name: "Approve with your passkey" }).click();
        await page.getByText(/Approved .* with your passkey\./).waitFor();
        assert.equal(new URL(page.url()).pathname, `/approvals/${id}`);
        assert.equal(await page.getByRole("button", { name: /Approve|Decline/ }).count(), 0);
        await look(page, "approval-approved");

        const polled = await h.signed(agent, "GET", `/v1/approvals/${id}`);
        assert.equal(polled.json.status, "approved");
        const limit = {
          type: "spend_limit",
          permission: "purchase",
          currency: "EUR",
          per_transaction: 50,
          per_period: 1000,
          period: "month",
        };
        const token = await nextToken(agent);
        assert.equal(token.scope, "notes:read notes:delete purchase");
        assert.deepEqual(token.authorization_details, [limit]);
        assert.equal(token.grant_id, polled.json.grant.grant_id);

        // Answered, it no longer waits on the account page; the grant shows there.
        await page.goto(`${origin}/account`);
        assert.equal(await page.getByRole("list", { name: "Requests waiting for your answer" }).count(), 0);
        assert.match(await page.locator("main").innerText(), /Delete your notes/);
        await key.cdp.send("WebAuthn.removeVirtualAuthenticator", { authenticatorId: key.id });
        assert.deepEqual(cspViolations, []);
      });

      test("signed out, Ada signs in first and comes back to the request; she declines, nothing changes", async () => {
        const agent = await adasAgent("Inbox helper");
        const before = await nextToken(agent);
        const { id, link } = await ask(agent, { permissions: ["notes:write"], reason: "Fix the typos in your notes" });
        const elsewhere = await browser.newContext({ viewport: VIEWPORTS[0] });
        await elsewhere.addInitScript(NO_PASSKEY_AUTOFILL);
        const phone = await elsewhere.newPage();
        await phone.goto(link);
        await phone.waitForURL(
          (url) => url.pathname === "/signin" && url.searchParams.get("next") === `/approvals/${id}`,
        );
        await signInByMail(phone, email, phone.url());
        await phone.waitForURL(link);
        const main = await phone.locator("main").innerText();
        assert.match(main, /Write and edit your notes\s+notes:write/);
        assert.match(main, /Your agent keeps what it may do there already: Read your notes\./);
        assert.doesNotMatch(main, /passkey/i);
        await look(phone, "approval-session");

        await phone.getByRole("button", { name: "Decline" }).click();
        await phone.getByText(/Declined .*\. Nothing changed\./).waitFor();
        await look(phone, "approval-declined");
        assert.equal((await h.signed(agent, "GET", `/v1/approvals/${id}`)).json.status, "declined");
        assert.deepEqual(await nextToken(agent), before);
        await elsewhere.close();
        assert.deepEqual(cspViolations, []);
      });
    });
  }
});
