/**
 * Bounded authority end to end, as a person lives it: their agent's `proto call -X DELETE` on a
 * note is refused by the notes service for want of `notes:delete`, and the command asks them
 * through OUR attestor. In Chromium (with the DevTools protocol's virtual authenticator for a
 * passkey) the person opens the approval link, signs in by the mailed link, adds a passkey on
 * their account page as the approval page tells them, and approves with it; the waiting command
 * mints a token carrying the grant, sends the call again, and the note is gone. The grant and its
 * history show on /account. On SQLite, and on PostgreSQL + Redis when TEST_POSTGRES_URL and
 * TEST_REDIS_URL are set.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { dirname, join, resolve } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import type { Agent, ServiceClient } from "@proto/agent";
import { addVirtualAuthenticator, launchChromium, lookAt, NO_PASSKEY_AUTOFILL, VIEWPORTS } from "@proto/testkit";
import { linkIn, type SmtpCollector, startSmtpCollector } from "@proto/testkit/smtp";
import type { BrowserContext, Page } from "playwright-core";
import { reportSkippedVariants, STORE_VARIANTS } from "../../../packages/server/test/support/stores.js";
import { type NotesStack, startNotesStack } from "./support/notes-stack.js";
import { start, stopAll } from "./support/processes.js";

reportSkippedVariants();

const AGENT_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "../../../packages/agent");

const launched = await launchChromium();
if (launched.skip !== undefined) process.stdout.write(`# browser part skipped: ${launched.skip}\n`);

after(async () => {
  stopAll();
  await launched.browser?.close();
});

for (const variant of STORE_VARIANTS) {
  describe(`an agent's delete approved with a passkey, end to end (${variant.name})`, {
    skip: launched.skip,
    timeout: 180_000,
  }, () => {
    const email = `ada-${randomBytes(5).toString("hex")}@mail.test`;
    let smtp: SmtpCollector;
    let stack: NotesStack;
    let context: BrowserContext;
    let page: Page;
    const cspViolations: string[] = [];

    before(async () => {
      smtp = await startSmtpCollector();
      stack = await startNotesStack(variant, {
        attestorHost: "localhost",
        trustEnv: { SMTP_URL: smtp.url, MAIL_FROM: "proto trust <signin@trust.test>" },
      });
      context = await (launched.browser as NonNullable<typeof launched.browser>).newContext({
        viewport: VIEWPORTS[0],
      });
      // The passkey is asked for with the approval's button, not offered by autofill at sign-in.
      await context.addInitScript(NO_PASSKEY_AUTOFILL);
      context.on("console", (message) => {
        if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
      });
      page = await context.newPage();
    });

    after(async () => {
      await context?.close();
      await stack?.close();
      await smtp?.close();
    });

    /** `proto ...` as the person runs it in a terminal, in the agent's home, the test CA trusted. */
    function proto(agent: Agent, args: string[]) {
      const env: Record<string, string> = {};
      for (const [name, value] of Object.entries(process.env)) {
        if (value !== undefined && !/^(PROTO_|NODE_TEST_CONTEXT|NODE_OPTIONS)/.test(name)) env[name] = value;
      }
      return start(
        process.execPath,
        ["--conditions=source", "--import", "tsx", join(AGENT_DIR, "src/cli.ts"), ...args],
        {
          cwd: AGENT_DIR,
          env: { ...env, PROTO_HOME: agent.store.home, NODE_EXTRA_CA_CERTS: stack.caFile },
          timeoutMs: 150_000,
        },
      );
    }

    async function notesOf(client: ServiceClient): Promise<string[]> {
      const listed = await client.fetch("/notes");
      assert.equal(listed.status, 200);
      return ((await listed.json()) as { notes: { text: string }[] }).notes.map((note) => note.text);
    }

    test("proto call -X DELETE is refused and asks; the person approves with a new passkey; the retry deletes", async () => {
      // The agent, linked to Ada, signed up with two notes; its attestation carries no grant.
      const agent = await stack.linkAgent("Tidy-up assistant", email);
      const client = await agent.service(stack.publicUrl);
      const written: string[] = [];
      for (const text of ["Old shopping list", "Keep: the door code"]) {
        const answer = await client.fetch("/notes", {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ text }),
        });
        assert.equal(answer.status, 201);
        written.push(((await answer.json()) as { note: { id: string } }).note.id);
      }
      const target = `${stack.publicUrl}/notes/${written[0]}`;

      // The command: refused, then an approval link, and it waits.
      const call = proto(agent, ["call", "-X", "DELETE", target]);
      const [link] = await call.waitFor(new RegExp(`${stack.trustUrl}/approvals/[A-Za-z0-9_-]+`));
      assert.match(call.stdout(), /HTTP 403/);
      assert.match(call.stdout(), /notes:delete/);

      // The person is told by mail too, with the same link.
      const told = await smtp.nextMailTo(email);
      assert.match(told.text, /Tidy-up assistant.* asks for more at localhost:\d+/);
      assert.ok(told.text.includes(link), told.text);

      // The person opens the link: signed out, they sign in by the mailed link and come back.
      await page.goto(link);
      await page.waitForURL((url) => url.pathname === "/signin");
      await page.getByLabel("E-mail address").fill(email);
      await page.getByRole("button", { name: "E-mail me a sign-in link" }).click();
      await page.getByRole("heading", { name: "Check your e-mail" }).waitFor();
      await page.goto(linkIn(await smtp.nextMailTo(email), "/signin/email/verify"));
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.waitForURL(link);

      // The page says who asks what, in the service's and the agent's words; a passkey is needed.
      const asked = await page.locator("main").innerText();
      assert.match(asked, /Tidy-up assistant/);
      assert.match(asked, /Delete your notes\s+Needs a passkey\s+notes:delete/);
      assert.ok(asked.includes(`DELETE ${target}`), `the agent's words name the call:\n${asked}`);
      assert.match(asked, /You have no passkey yet/);
      await lookAt(page, `authority-${variant.name}-approval-no-passkey`);
      await page.setViewportSize(VIEWPORTS[0]);

      // As the page says: a passkey on the account page, then back to the request.
      await page.getByRole("link", { name: "Add one on your account page" }).click();
      await page.getByRole("heading", { name: "Your account" }).waitFor();
      const key = await addVirtualAuthenticator(page);
      await page.getByLabel("Name of the new passkey").fill("Ada's laptop");
      await page.getByRole("button", { name: "Add a passkey" }).click();
      await page.getByText("Passkey added.").waitFor();
      await page.goto(link);
      await page.getByRole("button", { name: "Approve with your passkey" }).click();
      await page.getByText(/Approved .* with your passkey\./).waitFor();
      await lookAt(page, `authority-${variant.name}-approval-approved`);
      await page.setViewportSize(VIEWPORTS[0]);

      // The waiting command sees the approval, retries with a fresh token, and the note is gone.
      const { code } = await call.exited;
      assert.equal(code, 0, `${call.stdout()}\n${call.stderr()}`);
      assert.match(call.stdout(), /HTTP 200/);
      assert.match(call.stdout(), /"deleted": ?1/);
      assert.deepEqual(await notesOf(client), ["Keep: the door code"]);

      // The grant and its history, on the person's account page.
      await page.goto(`${stack.trustUrl}/account`);
      const entry = page.locator("ul.services > li.service").filter({ hasText: stack.notes.serviceDid });
      const granted = await entry.innerText();
      for (const words of ["Read your notes", "Add notes", "Delete your notes"]) {
        assert.ok(granted.includes(words), `${words} in ${granted}`);
      }
      await entry.getByRole("link", { name: /Change or revoke/ }).click();
      const history = page.locator("ol.history > li");
      assert.equal(await history.count(), 1);
      assert.match(await history.nth(0).innerText(), /Granted[\s\S]*Approved with a passkey[\s\S]*notes:delete/);
      await lookAt(page, `authority-${variant.name}-grant`);
      await key.cdp.send("WebAuthn.removeVirtualAuthenticator", { authenticatorId: key.id });
      assert.deepEqual(cspViolations, []);
    });
  });
}
