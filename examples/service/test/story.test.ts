/**
 * The whole story of the notes service, black-box: OUR attestor and directory (@proto/server) in
 * this process, the notes service over real HTTPS (test CA, host name `notes.test` pinned to
 * 127.0.0.1), agents made with the @proto/agent SDK, and their owners in a real browser (Debian's
 * Chromium driven by playwright-core): one invited as the person the agent's attestations name,
 * who signs in at the attestor through a link mailed over SMTP to a server in this process; one
 * invited by e-mail address, who claims through the link the notes service mails (the kit's e-mail
 * ceremony). Pages are looked at desktop and phone wide (screenshots in SCREENSHOT_DIR when set).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import {
  Agent,
  AgentIdentity,
  DirectoryClient,
  discoverService,
  ServiceClient,
  type ServiceDiscovery,
  writeProofFile,
} from "@proto/agent";
import { buildDirectoryApp, buildTrustApp, readDirectoryConfig, readTrustConfig } from "@proto/server";
import { createTestCA, freePort, launchChromium, lookAt, quietStream, type TestFetch, testFetch } from "@proto/testkit";
import { linkIn, type SmtpCollector, startSmtpCollector } from "@proto/testkit/smtp";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { buildNotesService, MAX_NOTE_LENGTH, type NotesService } from "../src/app.js";

const NOTES_HOST = "notes.test";
const OWNER_EMAIL = `owner-${Math.random().toString(36).slice(2, 10)}@mail.test`;
/** The owner a second agent invites by e-mail address (given in mixed case; matched normalised). */
const MAIL_OWNER = `mail-owner-${Math.random().toString(36).slice(2, 10)}@mail.test`;
const MAIL_NOTE = "Water the plants on Friday";
// Markup in a note must reach the owner as text.
const NOTE = `Buy oat milk & "eggs" <img src=x onerror=alert(1)>\nand call Ada`;

/** The JSON of an answer the SDK's fetch returned. */
// biome-ignore lint/suspicious/noExplicitAny: answers of many shapes, asserted field by field
async function json(response: Response): Promise<any> {
  return response.json();
}

function errorCode(body: { error?: { code?: unknown } }): unknown {
  return body.error?.code;
}

const notesPort = await freePort();
const publicUrl = `https://${NOTES_HOST}:${notesPort}`;
const launched = await launchChromium([`--host-resolver-rules=MAP ${NOTES_HOST} 127.0.0.1`]);
if (launched.skip !== undefined) process.stdout.write(`# browser part of the story skipped: ${launched.skip}\n`);

describe("the notes service: agent signs up, writes, invites; owner claims in a browser; listed", {
  timeout: 120_000,
}, () => {
  let temp: string;
  let smtp: SmtpCollector;
  let trust: Awaited<ReturnType<typeof buildTrustApp>>;
  let trustUrl: string;
  let directory: Awaited<ReturnType<typeof buildDirectoryApp>>;
  let directoryUrl: string;
  let notes: NotesService;
  let proofDir: string;
  let fetch: TestFetch;
  let agent: Agent;
  let discovery: ServiceDiscovery;
  let client: ServiceClient;
  let subH: string;
  let claimUrl: string;
  let claimed = false;
  let mailAgent: Agent;
  let mailClient: ServiceClient;
  let mailedLink: string;

  before(async () => {
    temp = mkdtempSync(join(tmpdir(), "proto-notes-story-"));
    proofDir = join(temp, "webroot");
    const ca = await createTestCA();
    smtp = await startSmtpCollector();

    // OUR attestor: test hooks on, the notes service registered as an OpenID client, mail over SMTP.
    const trustPort = await freePort();
    trustUrl = `http://127.0.0.1:${trustPort}`;
    const serviceDid = `did:web:${NOTES_HOST}%3A${notesPort}`;
    trust = await buildTrustApp(
      readTrustConfig({
        PROTO_TEST_HOOKS: "1",
        TRUST_PUBLIC_URL: trustUrl,
        TRUST_DATABASE_URL: `sqlite:${join(temp, "trust.db")}`,
        TRUST_KEY_ENCRYPTION_KEY: Buffer.alloc(32, 7).toString("base64url"),
        TRUST_PSEUDONYM_KEY: Buffer.alloc(32, 9).toString("base64url"),
        TRUST_OIDC_CLIENTS: JSON.stringify([
          { client_id: serviceDid, service_did: serviceDid, redirect_uris: [`${publicUrl}/proto/owner/callback`] },
        ]),
        SMTP_URL: smtp.url,
        MAIL_FROM: "proto trust <signin@trust.test>",
        LOG_LEVEL: "warn",
      }),
      { logStream: quietStream() },
    );
    await trust.app.listen({ port: trustPort, host: "127.0.0.1" });

    // OUR directory: allowed to fetch from loopback, with the notes service's name pinned there.
    directory = await buildDirectoryApp(
      readDirectoryConfig({
        PROTO_TEST_HOOKS: "1",
        PROTO_FETCH_ALLOW_PRIVATE: "1",
        PROTO_FETCH_RESOLVE: `${NOTES_HOST}:${notesPort}:127.0.0.1`,
        DIRECTORY_PUBLIC_URL: "https://directory.test",
        DIRECTORY_DATABASE_URL: `sqlite:${join(temp, "directory.db")}`,
        DIRECTORY_ADMIN_TOKEN: "admin-token-for-the-notes-story-0123",
        DIRECTORY_REVALIDATE_TICK_SECONDS: "0",
        LOG_LEVEL: "warn",
      }),
      { logStream: quietStream(), fetchCa: ca.certPem },
    );
    await directory.app.listen({ port: 0, host: "127.0.0.1" });
    directoryUrl = `http://127.0.0.1:${(directory.app.server.address() as { port: number }).port}`;

    // The notes service, over HTTPS with a certificate for its name.
    const { certPem, keyPem } = await ca.issue([NOTES_HOST]);
    notes = await buildNotesService({
      publicUrl,
      database: `sqlite:${join(temp, "notes.db")}`,
      attestorUrl: trustUrl,
      proofDir,
      https: { key: keyPem, cert: certPem },
      mail: { smtpUrl: smtp.url, from: "Notes <no-reply@notes.test>" },
    });
    assert.equal(notes.serviceDid, serviceDid);
    await notes.app.listen({ port: notesPort, host: "127.0.0.1" });

    // The agent: a fresh home, a fetch that trusts the test CA and knows where notes.test is.
    fetch = testFetch(ca, { resolve: `${NOTES_HOST}:${notesPort}:127.0.0.1` });
    agent = Agent.init({ home: join(temp, "agent-home"), fetch, attestorUrl: trustUrl, directoryUrl }).agent;
    mailAgent = Agent.init({ home: join(temp, "mail-agent-home"), fetch, attestorUrl: trustUrl, directoryUrl }).agent;
  });

  after(async () => {
    await launched.browser?.close();
    await notes?.close();
    await directory?.close();
    await trust?.close();
    await smtp?.close();
    await fetch?.close();
    if (temp) rmSync(temp, { recursive: true, force: true });
  });

  test("the service's discovery document: attested_only, our attestor, attestation and key rotation", async () => {
    discovery = await discoverService(publicUrl, { fetch });
    assert.equal(discovery.did, notes.serviceDid);
    assert.equal(discovery.attestedOnly, true);
    assert.deepEqual(discovery.document.billing, {
      unclaimed_mode: "attested_only",
      accepted_attestors: ["proto-trust"],
    });
    assert.deepEqual(discovery.document.features, ["attestation", "key_rotation"]);
    assert.deepEqual(discovery.document.recipient_types, ["email", "oidc"]);
    assert.equal(discovery.document.endpoints.claim_page, `${publicUrl}/proto/claim`);
    assert.equal(typeof discovery.document.endpoints.key_rotation, "string");
  });

  test("the agent links to our attestor (confirmed as a person with an e-mail address)", async () => {
    const attestor = agent.attestor();
    const request = await attestor.linkStart({ label: "notes story agent" });
    const confirmed = await fetch(`${trustUrl}/__test/link/confirm`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ req_id: request.req_id, email: OWNER_EMAIL }),
    });
    assert.equal(confirmed.status, 200, await confirmed.clone().text());
    const polled = await attestor.pollOnce(request.req_id);
    assert.equal(polled.state, "confirmed");
    assert.equal(attestor.binding()?.state, "active");
  });

  test("without an attestation the signup is refused (401 attestation_required) and no account exists", async () => {
    // A client that signs but never attests (the SDK attests on its own for attested_only services).
    const bare = new ServiceClient(
      { ...discovery, attestedOnly: false },
      { identity: agent.identity, fetch, retryWithAttestation: false },
    );
    const me = await bare.fetch(`${discovery.document.endpoints.accounts}/me`);
    assert.equal(me.status, 401);
    assert.equal(errorCode(await json(me)), "attestation_required");
    const note = await bare.fetch("/notes", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ text: "never stored" }),
    });
    assert.equal(note.status, 401);
    assert.equal(errorCode(await json(note)), "attestation_required");
    assert.equal(await notes.kit.store.findAccountByDid(agent.did), undefined, "nothing was stored");
  });

  test("with an attestation the agent signs up: a new account, UNCLAIMED, attested by e-mail", async () => {
    client = await agent.service(publicUrl);
    const signup = await client.fetch(discovery.document.endpoints.accounts, { method: "POST" });
    // 201, not 200: the refused attempts above left no account behind.
    assert.equal(signup.status, 201);
    const account = await json(signup);
    assert.equal(account.agent_did, agent.did);
    assert.equal(account.state, "UNCLAIMED");
    const record = await notes.kit.store.findAccountByDid(agent.did);
    assert.equal(record?.attestedIssuer, "proto-trust");
    assert.equal(record?.attestedVerification, "email");
  });

  test("the agent writes a note and reads it back; a note longer than 2,000 characters is refused", async () => {
    const written = await client.fetch("/notes", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ text: NOTE }),
    });
    assert.equal(written.status, 201);
    const { note } = await json(written);
    assert.equal(note.text, NOTE);
    assert.match(note.id, /^note_/);

    const long = await client.fetch("/notes", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ text: "n".repeat(MAX_NOTE_LENGTH + 1) }),
    });
    assert.equal(long.status, 400);
    assert.equal(errorCode(await json(long)), "notes_invalid_text");

    const read = await client.fetch("/notes");
    assert.equal(read.status, 200);
    assert.deepEqual(
      (await json(read)).notes.map((n: { text: string }) => n.text),
      [NOTE],
    );
  });

  test("the agent invites its owner: the person its attestations name at our attestor", async () => {
    const { jwt } = await agent.attestor().token(notes.serviceDid);
    const payload = JSON.parse(Buffer.from(jwt.split(".")[1] ?? "", "base64url").toString("utf8"));
    subH = payload.sub_h;
    assert.equal(typeof subH, "string");
    const invitationPath = discovery.document.endpoints.owner_invitation;
    const invite = (recipient: unknown) =>
      client.fetch(invitationPath, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ recipient }),
      });

    const staged = await invite({ type: "oidc", value: { issuer: trustUrl, sub: subH } });
    assert.equal(staged.status, 202);
    const invitation = await json(staged);
    assert.equal(invitation.state, "INVITED");
    const pending = (await notes.kit.store.findAccountByDid(agent.did))?.invitation;
    assert.deepEqual(pending?.recipient, { type: "oidc", value: { issuer: "proto-trust", sub: subH } });
    assert.equal(pending?.id, invitation.invitation_id);
    // An oidc recipient proves itself by signing in, so the agent may carry the link to its human.
    claimUrl = invitation.claim_url;
    assert.ok(claimUrl.startsWith(`${publicUrl}/proto/claim?token=`), claimUrl);
  });

  test("a second agent invites its owner by e-mail address: the service mails the link, the agent never sees it", async () => {
    const attestor = mailAgent.attestor();
    const request = await attestor.linkStart({ label: "notes story mail agent" });
    const confirmed = await fetch(`${trustUrl}/__test/link/confirm`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ req_id: request.req_id, email: MAIL_OWNER }),
    });
    assert.equal(confirmed.status, 200, await confirmed.clone().text());
    assert.equal((await attestor.pollOnce(request.req_id)).state, "confirmed");
    mailClient = await mailAgent.service(publicUrl);
    const written = await mailClient.fetch("/notes", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ text: MAIL_NOTE }),
    });
    assert.equal(written.status, 201);

    const staged = await mailClient.fetch(discovery.document.endpoints.owner_invitation, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ recipient: { type: "email", value: MAIL_OWNER.toUpperCase() } }),
    });
    assert.equal(staged.status, 202);
    const invitation = await json(staged);
    assert.equal(invitation.state, "INVITED");
    assert.equal(invitation.claim_url, undefined, "the link is the proof of the mailbox: mail only");
    const mail = await smtp.nextMailTo(MAIL_OWNER);
    assert.deepEqual(mail.rcptTo, [MAIL_OWNER]);
    assert.ok(mail.text.includes(mailAgent.did), "the mail names the agent");
    mailedLink = linkIn(mail, "/proto/claim");
    assert.ok(mailedLink.startsWith(`${publicUrl}/proto/claim?token=`), mailedLink);
  });

  describe("the owner, in a real browser", { skip: launched.skip }, () => {
    let rekeyedDid = "";
    let context: BrowserContext;
    let page: Page;
    const requested: string[] = [];
    const dialogs: string[] = [];
    const cspViolations: string[] = [];
    const notesPages: { url: string; headers: Record<string, string> }[] = [];

    before(async () => {
      const browser = launched.browser as Browser;
      context = await browser.newContext({ ignoreHTTPSErrors: true });
      context.on("request", (request) => requested.push(request.url()));
      context.on("response", (response) => {
        const url = response.url();
        if (url.startsWith(publicUrl) && (response.headers()["content-type"] ?? "").startsWith("text/html")) {
          notesPages.push({ url, headers: response.headers() });
        }
      });
      context.on("console", (message) => {
        if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
      });
      page = await context.newPage();
      page.on("dialog", (dialog) => {
        dialogs.push(dialog.message());
        void dialog.dismiss();
      });
    });

    after(async () => {
      await context?.close();
    });

    test("claims the agent: claim link, sign-in at the attestor by the mailed link, claim", async () => {
      await page.goto(claimUrl);
      await page.getByRole("heading", { name: "Claim your agent" }).waitFor();
      assert.ok((await page.locator("main, body").first().textContent())?.includes(agent.did));

      // Not signed in here: the page offers the attestor, named in words, which asks the person to sign in.
      assert.equal(await page.locator("header").first().textContent(), "Notes");
      await lookAt(page, "notes-oidc-claim");
      await page.getByRole("link", { name: "Sign in with proto trust" }).click();
      await page.waitForURL((url) => url.origin === trustUrl && url.pathname === "/signin");
      await page.getByLabel("E-mail address").fill(OWNER_EMAIL);
      await page.getByRole("button", { name: "E-mail me a sign-in link" }).click();
      await page.getByRole("heading", { name: "Check your e-mail" }).waitFor();

      // The link arrives by mail; opening it shows a button, pressing it signs in and goes on to
      // the notes service, which lands the person back on the claim page.
      const link = linkIn(await smtp.nextMailTo(OWNER_EMAIL), "/signin/email/verify");
      await page.goto(link);
      await page.getByRole("button", { name: "Sign in" }).click();
      // The first sign-in to the notes service at the attestor asks for consent.
      await page.waitForURL((url) => url.href === claimUrl || url.pathname === "/oidc/authorize");
      await lookAt(page, "notes-oidc-consent");
      if (page.url() !== claimUrl) await page.getByRole("button", { name: "Allow" }).click();
      await page.waitForURL((url) => url.href === claimUrl);
      const signedIn = (await page.locator("main").textContent()) ?? "";
      assert.ok(signedIn.includes("an account at proto trust"), signedIn);
      assert.ok(!signedIn.includes(subH) && !signedIn.includes("oidc:"), "no internal key for a person");
      await lookAt(page, "notes-oidc-signed-in");
      await page.getByRole("button", { name: "Claim this agent" }).click();
      await page.getByRole("heading", { name: "Agent claimed" }).waitFor();
      claimed = true;
      await lookAt(page, "notes-oidc-claimed");
      // The claimed page leads on to the service's owner page.
      await page.getByRole("link", { name: "See your agents on Notes" }).click();
      await page.waitForURL(`${publicUrl}/owner`);

      const me = await client.fetch(`${discovery.document.endpoints.accounts}/me`);
      const account = await json(me);
      assert.equal(account.state, "CLAIMED");
      assert.deepEqual(account.owner.identity, { type: "oidc", value: { issuer: "proto-trust", sub: subH } });
    });

    test("reads the agent's note on the owner page, as text, and signs out", async () => {
      await page.goto(`${publicUrl}/owner`);
      const section = page.getByRole("region", { name: `Agent ${agent.did}` });
      await section.waitFor();
      assert.equal(await section.locator(".text").textContent(), NOTE);
      assert.equal(await page.locator("img").count(), 0, "the markup in the note stayed text");
      assert.deepEqual(dialogs, []);

      // Signing out ends the owner session: the page offers the sign-in again.
      await page.getByRole("button", { name: "Sign out" }).click();
      await page.getByRole("link", { name: /^Sign in with/ }).waitFor();
      assert.equal(
        (await context.cookies(publicUrl)).find((c) => c.name === "proto_owner"),
        undefined,
      );
    });

    test("the e-mail owner opens the mailed link, continues as the address, claims, and reads the note", async () => {
      await page.goto(mailedLink);
      await page.getByRole("heading", { name: "Claim your agent" }).waitFor();
      assert.ok((await page.locator("body").textContent())?.includes(mailAgent.did), "names the agent");
      const proceed = page.getByRole("button", { name: `Continue as ${MAIL_OWNER}` });
      await proceed.waitFor();
      await lookAt(page, "notes-email-continue");
      await proceed.click();
      await page.waitForURL((url) => url.href === mailedLink);
      const claim = page.getByRole("button", { name: "Claim this agent" });
      await claim.waitFor();
      await lookAt(page, "notes-email-signed-in");
      await claim.click();
      await page.getByRole("heading", { name: "Agent claimed" }).waitFor();
      await lookAt(page, "notes-email-claimed");

      const account = await json(await mailClient.fetch(`${discovery.document.endpoints.accounts}/me`));
      assert.equal(account.state, "CLAIMED");
      assert.deepEqual(account.owner.identity, { type: "email", value: MAIL_OWNER });

      // Signed in by the link, the owner reads that agent's note (and only that agent's).
      await page.goto(`${publicUrl}/owner`);
      await page.getByText(`You are signed in as ${MAIL_OWNER}.`).waitFor();
      const section = page.getByRole("region", { name: `Agent ${mailAgent.did}` });
      await section.waitFor();
      assert.equal(await section.locator(".text").textContent(), MAIL_NOTE);
      assert.equal(await page.getByRole("region", { name: `Agent ${agent.did}` }).count(), 0);
      await lookAt(page, "notes-email-owner");

      // The link is spent: opened again it leads to the claimed agent, no button to press.
      await page.goto(mailedLink);
      await page.getByText("already").first().waitFor();
      assert.equal(await page.getByRole("button", { name: /^Continue as/ }).count(), 0);
    });

    test("the e-mail owner re-keys the agent, then revokes its key, each confirmed (upstream §8.2, §8.4)", async () => {
      const next = AgentIdentity.generate();
      rekeyedDid = next.did;
      await page.goto(`${publicUrl}/owner`);
      const section = page.getByRole("region", { name: `Agent ${mailAgent.did}` });
      await section.getByText("Manage this agent's key").click();
      await section.getByLabel(/New agent key/).fill(next.did);
      await lookAt(page, "notes-owner-manage-key");
      await section.getByRole("button", { name: "Re-key…" }).click();
      await page.getByRole("heading", { name: "Re-key this agent?" }).waitFor();
      assert.ok((await page.locator("main").textContent())?.includes(next.did), "the confirmation names the new key");
      await lookAt(page, "notes-owner-rekey-confirm");
      await page.getByRole("button", { name: "Yes, re-key" }).click();
      await page.getByText("Agent re-keyed").waitFor();
      await lookAt(page, "notes-owner-rekeyed");

      // The old key is revoked at once, everywhere.
      const refused = await mailClient.fetch("/notes");
      assert.equal(refused.status, 401);
      assert.equal(errorCode(await json(refused)), "revoked_key");

      await page.getByRole("link", { name: "Back to your agents" }).click();
      const renamed = page.getByRole("region", { name: `Agent ${next.did}` });
      await renamed.getByText("Manage this agent's key").click();
      await renamed.getByRole("button", { name: "Revoke this key…" }).click();
      await page.getByRole("heading", { name: "Revoke this agent's key?" }).waitFor();
      await lookAt(page, "notes-owner-revoke-confirm");
      await page.getByRole("button", { name: "Yes, revoke the key" }).click();
      await page.getByText(/revoked at/).waitFor();
      await page.getByRole("link", { name: "Back to your agents" }).click();
      await page.getByText("You revoked this agent's key").waitFor();
      assert.equal(await renamed.getByRole("button", { name: "Revoke this key…" }).count(), 0);
      await lookAt(page, "notes-owner-revoked");
    });

    test("an owner whose sign-in is older than five minutes is asked to sign in again; nothing changes", async () => {
      const stale = await notes.kit.createOwnerSession({ identities: [{ type: "email", value: MAIL_OWNER }] });
      const answer = await fetch(`${publicUrl}/owner/revoke`, {
        method: "POST",
        headers: {
          "content-type": "application/x-www-form-urlencoded",
          cookie: stale.setCookie.split(";")[0] as string,
        },
        body: new URLSearchParams({ csrf: stale.session.csrf, did: rekeyedDid, confirm: "yes" }).toString(),
      });
      assert.equal(answer.status, 403);
      const text = await answer.text();
      assert.match(text, /<h1>Sign in again<\/h1>/);
      assert.match(text, /Ask your agent for a new invitation link/);
      const forged = await fetch(`${publicUrl}/owner/revoke`, {
        method: "POST",
        headers: {
          "content-type": "application/x-www-form-urlencoded",
          cookie: stale.setCookie.split(";")[0] as string,
        },
        body: new URLSearchParams({ csrf: "forged", did: rekeyedDid }).toString(),
      });
      assert.equal(forged.status, 403);
      assert.match(await forged.text(), /not sent from the notes page/);
    });

    test("every page of the notes service has a strict CSP; nothing was loaded from elsewhere", () => {
      // The claim completion's path ends with the token (upstream §7.4).
      const paths = new Set(
        notesPages.map((p) => new URL(p.url).pathname.replace(/^(\/proto\/v1\/claim\/).+$/, "$1:token")),
      );
      for (const path of ["/proto/claim", "/proto/v1/claim/:token", "/owner"]) {
        assert.ok(paths.has(path), `visited ${path} (${[...paths].join(", ")})`);
      }
      for (const { url, headers } of notesPages) {
        assert.match(headers["content-security-policy"] ?? "", /(^|;\s*)default-src 'none'(;|$)/, url);
        assert.equal(headers["x-content-type-options"], "nosniff", url);
      }
      const elsewhere = requested.filter((url) => ![publicUrl, trustUrl].includes(new URL(url).origin));
      assert.deepEqual(elsewhere, []);
      assert.deepEqual(cspViolations, []);
    });
  });

  test("after the claim, the agent's own key rotation is refused: 403 owner_binding_blocked", {
    skip: launched.skip,
  }, async () => {
    assert.ok(claimed, "the owner claimed the agent");
    const rotation = await client.fetch(discovery.document.endpoints.key_rotation ?? "", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ new_account_did: AgentIdentity.generate().did }),
    });
    assert.equal(rotation.status, 403);
    assert.equal(errorCode(await json(rotation)), "owner_binding_blocked");
  });

  test("the service lists itself in our directory (proof served by the service) and is found by search", async () => {
    const operator = new DirectoryClient({ url: directoryUrl, fetch });
    const result = await operator.register({
      discoveryUrl: `${publicUrl}/.well-known/proto`,
      title: "Notes for agents",
      description: "Agents keep short notes; their owners read them.",
      tags: ["notes", "example"],
      publish: (challenge) => {
        writeProofFile(proofDir, challenge.challenge_token);
      },
    });
    assert.equal(result.created, true);
    assert.equal(result.session.service_did, notes.serviceDid);

    const found = await fetch(`${directoryUrl}/v1/listings?search=notes`);
    assert.equal(found.status, 200);
    const { listings } = (await found.json()) as {
      listings: { service_did: string; status: string; discovery_url: string; discovery_doc: unknown }[];
    };
    const listing = listings.find((l) => l.service_did === notes.serviceDid);
    assert.ok(listing, JSON.stringify(listings));
    assert.equal(listing.status, "active");
    assert.equal(listing.discovery_url, `${publicUrl}/.well-known/proto`);
    assert.deepEqual(listing.discovery_doc, discovery.document);
  });
});
