import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { linkIn, type SmtpCollector, startSmtpCollector } from "@proto/testkit/smtp";
import { createKit, type InvitationEvent, type KitStore, openKitStore } from "../src/index.js";
import { Browser, field } from "./support/browser.js";
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
import { CodeLedger, startService, type TestService } from "./support/service.js";

/**
 * The e-mail ceremony (upstream §7.2, §7.7.1, §12.3, §12.6), over HTTP as a browser sends it: the
 * kit mails the recipient of an `email` invitation a link to the claim page (SMTP to a real server
 * in this process, or the development outbox); opening it changes nothing; "Continue as <address>"
 * spends it once for an owner session holding that address; the claim form completes the claim.
 */

reportSkippedEngines();

const MAILING = { origin: "https://mail.example", did: "did:web:mail.example" };
const OUTBOX = { origin: "https://outbox.example", did: "did:web:outbox.example" };
const BROKEN = { origin: "https://broken.example", did: "did:web:broken.example" };
const PLAIN = { origin: "https://plain.example", did: "did:web:plain.example" };
const ME = "/proto/v1/accounts/me";
const INVITE = "/proto/v1/accounts/me/owner-invitation";
const CLAIM_PAGE = "/proto/claim";
const CONTINUE = "/proto/owner/email-signin";
const OUTBOX_PAGE = "/proto/owner/dev/outbox";
const TTL = 3600;
const claimPath = (token: string) => `/proto/v1/claim/${encodeURIComponent(token)}`;

/** An address in mixed case: the kit mails and matches its normalised form. */
const mixedCase = (label: string) => {
  const address = emailAddress(label);
  return { given: address.replace(/^./, (c) => c.toUpperCase()).replace("@mail.test", "@Mail.TEST"), address };
};

for (const engine of ENGINES) {
  describe(`the e-mail ceremony (${engine})`, { timeout: 120_000 }, () => {
    let database: TestDatabase;
    let store: KitStore;
    let smtp: SmtpCollector;
    let mailing: TestService;
    let outbox: TestService;
    let broken: TestService;
    let plain: TestService;
    let services: Map<string, TestService["app"]>;
    const clock = new TestClock();
    const ledger = new CodeLedger();
    const events: InvitationEvent[] = [];
    const reported: string[] = [];

    before(async () => {
      database = await createTestDatabase(engine);
      store = await openKitStore(database.url);
      smtp = await startSmtpCollector();
      const common = {
        store,
        now: clock.now,
        invitationTtlSeconds: TTL,
        onInvitation: (event: InvitationEvent) => {
          events.push(event);
        },
        onError: (error: unknown) => {
          reported.push(String((error as Error).message));
        },
      };
      const discovery = (did: string) => ({
        service_did: did,
        billing: { unclaimed_mode: "free" as const },
        recipient_types: ["email" as const, "oidc" as const],
      });
      mailing = await startService(
        {
          ...common,
          publicUrl: MAILING.origin,
          discovery: discovery(MAILING.did),
          mail: { smtpUrl: smtp.url, from: "Mail example <no-reply@mail.example>" },
        },
        clock,
      );
      outbox = await startService(
        {
          ...common,
          publicUrl: OUTBOX.origin,
          discovery: discovery(OUTBOX.did),
          mail: { developmentOutbox: true, perRecipientPerHour: 3 },
        },
        clock,
      );
      // Nobody listens on this port: every mail fails to connect.
      broken = await startService(
        {
          ...common,
          publicUrl: BROKEN.origin,
          discovery: discovery(BROKEN.did),
          mail: { smtpUrl: `smtp://127.0.0.1:${await freePort()}`, from: "no-reply@broken.example" },
        },
        clock,
      );
      // Delivers links itself (onInvitation): no mail, no outbox.
      plain = await startService({ ...common, publicUrl: PLAIN.origin, discovery: discovery(PLAIN.did) }, clock);
      services = new Map([
        [MAILING.origin, mailing.app],
        [OUTBOX.origin, outbox.app],
        [BROKEN.origin, broken.app],
        [PLAIN.origin, plain.app],
      ]);
    });

    after(async () => {
      for (const service of [mailing, outbox, broken, plain]) await service?.close();
      await smtp?.close();
      await store?.close();
      await database?.drop();
    });

    const browser = () => new Browser(services);

    /** A new agent (the services are `free`: it signs up on its first request) inviting `recipient`. */
    async function invite(service: TestService, recipient: string, agent = newAgent()) {
      const answer = await service.signed(agent, "POST", INVITE, { body: { email: recipient } });
      return { agent, answer };
    }

    /** The link of the newest invitation mail to `address`, and its token. */
    async function mailedLink(address: string, origin = MAILING.origin) {
      const mail = await smtp.nextMailTo(address);
      const link = linkIn(mail, CLAIM_PAGE);
      assert.equal(new URL(link).origin, origin);
      return { mail, link, token: new URL(link).searchParams.get("token") ?? "" };
    }

    /** Presses "Continue as <address>" on the claim page the browser shows. */
    async function pressContinue(b: Browser, page: { text: string }, origin = MAILING.origin) {
      return b.send("POST", `${origin}${CONTINUE}`, {
        form: { token: field(page.text, "token") },
        headers: { origin },
      });
    }

    const invitationOf = async (agent: { did: string }) => (await store.findAccountByDid(agent.did))?.invitation;

    test("an e-mail invitation is mailed: to the address, a link to the claim page, the agent, the expiry, and that ignoring it is safe", async () => {
      const { given, address } = mixedCase("alice");
      const { agent, answer } = await invite(mailing, given);
      assert.equal(answer.status, 202, answer.text);
      assert.deepEqual(
        Object.keys(answer.json).sort(),
        ["expires_at", "invitation_id", "state"],
        "no link for the agent",
      );
      const { mail, link, token } = await mailedLink(address);
      assert.deepEqual(mail.rcptTo, [address], "sent to the normalised address");
      assert.match(mail.headers.get("from") ?? "", /no-reply@mail\.example/);
      assert.equal(mail.headers.get("subject"), "An agent asks you to be its owner on mail.example");
      assert.equal(link, `${MAILING.origin}${CLAIM_PAGE}?token=${token}`);
      const event = events.find((e) => e.account.agent_did === agent.did);
      assert.equal(event?.mailed, true, "onInvitation hears that the kit mailed it");
      assert.equal(event?.token, token, "the mailed link is the invitation's");
      const expires = new Date(Date.parse(answer.json.expires_at));
      const when = `${expires.getUTCDate()} ${expires.toLocaleString("en", { month: "long", timeZone: "UTC" })} ${expires.getUTCFullYear()}`;
      for (const part of [mail.text, mail.html ?? ""]) {
        assert.ok(part.includes(agent.did), "names the agent");
        assert.ok(part.includes(when), `says when the link expires (${when})`);
        assert.match(part, /ignore this mail: nothing happens/);
        assert.ok(part.includes(link), "carries the link");
      }
      assert.equal(mail.text.split(token).length, 2, "the token appears once, in the link");
    });

    test("opening the link changes nothing; Continue as <address> signs in, once; the claim form claims", async () => {
      const { given, address } = mixedCase("bea");
      const { agent } = await invite(mailing, given);
      const { link, token } = await mailedLink(address);
      const b = browser();
      // Mail scanners fetch links: a GET, however often, spends nothing and sets no cookie.
      for (let i = 0; i < 2; i++) {
        const page = await b.get(link);
        assert.equal(page.status, 200, page.text);
        assert.equal(page.headers.get("set-cookie"), null);
        assert.ok(page.text.includes(agent.did), "shows which agent asks");
        assert.ok(page.text.includes(`Continue as ${address}`), page.text);
        assert.ok(page.text.includes(`action="${CONTINUE}"`));
        assert.match(page.text, /AAL1/, "states the assurance level of an e-mail link (upstream §12.3)");
        assert.ok(!page.text.includes("Claim this agent"), "no claim before the address is proven");
      }
      assert.equal((await invitationOf(agent))?.signedInAt, undefined);
      const page = await b.get(link);

      // The button only from this service's own page: no Origin, or another one, is refused.
      const bare = await b.send("POST", `${MAILING.origin}${CONTINUE}`, { form: { token } });
      assert.equal(bare.status, 403, bare.text);
      assert.match(bare.text, /data-code="kit_csrf"/);
      const foreign = await b.send("POST", `${MAILING.origin}${CONTINUE}`, {
        form: { token },
        headers: { origin: "https://evil.example" },
      });
      assert.equal(foreign.status, 403);
      assert.equal((await invitationOf(agent))?.signedInAt, undefined, "refused posts spend nothing");

      const signedIn = await pressContinue(b, page);
      assert.equal(signedIn.status, 303, signedIn.text);
      assert.equal(signedIn.location, link, "back to the claim page");
      assert.ok(b.cookie(MAILING.origin, "proto_owner"), "an owner session");
      assert.ok((await invitationOf(agent))?.signedInAt !== undefined, "the link is spent");

      const claimPage = await b.get(link);
      assert.equal(claimPage.status, 200);
      assert.ok(claimPage.text.includes(`You are signed in as <strong>${address}</strong>`), claimPage.text);
      const claimed = await b.send("POST", `${MAILING.origin}${claimPath(token)}`, {
        form: { csrf: field(claimPage.text, "csrf") },
      });
      assert.equal(claimed.status, 200, claimed.text);
      assert.match(claimed.text, /Agent claimed/);
      const me = await mailing.signed(agent, "GET", ME);
      assert.equal(me.json.state, "CLAIMED");
      assert.deepEqual(me.json.owner.identity, { type: "email", value: address });
    });

    test("the link works once: a second use is refused with a page that says so", async () => {
      const { address } = mixedCase("cem");
      const { agent } = await invite(mailing, address);
      const { link } = await mailedLink(address);
      const first = browser();
      const second = browser();
      const firstPage = await first.get(link);
      const stalePage = await second.get(link); // opened before the link was spent
      assert.equal((await pressContinue(first, firstPage)).status, 303);

      const refused = await pressContinue(second, stalePage);
      assert.equal(refused.status, 410, refused.text);
      assert.match(refused.text, /data-code="kit_link_used"/);
      assert.match(refused.text, /already used to sign in, and it works only once/);
      assert.equal(second.cookie(MAILING.origin, "proto_owner"), undefined, "no session");
      // The page now says so instead of offering the button.
      const reopened = await second.get(link);
      assert.equal(reopened.status, 200);
      assert.match(reopened.text, /This link was already used to sign in/);
      assert.ok(!reopened.text.includes("Continue as"));
      // A second press in the browser that spent it (a stale copy of the page) just goes on.
      const again = await pressContinue(first, firstPage);
      assert.equal(again.status, 303);
      assert.equal(again.location, link);
      assert.equal((await invitationOf(agent))?.status, "pending", "nothing claimed yet");

      // Pressed in several browsers at the same moment: exactly one gets the session.
      const raced = mixedCase("cem-race").address;
      await invite(mailing, raced);
      const racedLink = (await mailedLink(raced)).link;
      const browsers = [browser(), browser(), browser(), browser()];
      const pages = await Promise.all(browsers.map((b) => b.get(racedLink)));
      const presses = await Promise.all(browsers.map((b, i) => pressContinue(b, pages[i] as { text: string })));
      assert.deepEqual(presses.map((p) => p.status).sort(), [303, 410, 410, 410]);
    });

    test("the button's route answers people with pages: a form too large or not a form is refused as a page", async () => {
      const b = browser();
      const huge = await b.send("POST", `${MAILING.origin}${CONTINUE}`, {
        form: { token: "x".repeat(70_000) },
        headers: { origin: MAILING.origin },
      });
      assert.equal(huge.status, 413, huge.text);
      assert.match(huge.headers.get("content-type") ?? "", /^text\/html/);
      assert.match(huge.text, /data-code="payload_too_large"/);
      const json = await b.send("POST", `${MAILING.origin}${CONTINUE}`, {
        json: { token: "clm_x" },
        headers: { origin: MAILING.origin },
      });
      assert.equal(json.status, 400);
      assert.match(json.text, /data-code="malformed_request"/);
      // The same through the Fetch-API handler.
      const fetched = await mailing.kit.handle(
        new Request(`${MAILING.origin}${CONTINUE}`, {
          method: "POST",
          headers: { origin: MAILING.origin, "content-type": "application/x-www-form-urlencoded" },
          body: `token=${"x".repeat(70_000)}`,
        }),
      );
      assert.equal(fetched?.status, 413);
      assert.match(fetched?.headers.get("content-type") ?? "", /^text\/html/);
    });

    test("a replaced or expired invitation's link answers 410 invitation_expired, on the page and on the button", async () => {
      const { address } = mixedCase("dan");
      const { agent } = await invite(mailing, address);
      const first = await mailedLink(address);
      const b = browser();
      const stalePage = await b.get(first.link);
      await invite(mailing, address, agent);
      const second = await mailedLink(address);
      assert.notEqual(second.token, first.token);

      const replaced = await b.get(first.link);
      assert.equal(replaced.status, 410);
      assert.match(replaced.text, /data-code="invitation_expired"/);
      assert.match(replaced.text, /replaced by a newer one/);
      const pressed = await pressContinue(b, stalePage);
      assert.equal(pressed.status, 410);
      assert.match(pressed.text, /data-code="invitation_expired"/);
      ledger.expect(await mailing.request("POST", claimPath(first.token)), 410, "invitation_expired");

      // The newer link past the invitation's TTL.
      const newer = await b.get(second.link);
      assert.equal(newer.status, 200);
      clock.advance(TTL + 1);
      const expired = await b.get(second.link);
      assert.equal(expired.status, 410);
      assert.match(expired.text, /data-code="invitation_expired"/);
      assert.equal((await pressContinue(b, newer)).status, 410);
      assert.equal((await invitationOf(agent))?.signedInAt, undefined);
    });

    test("someone signed in as another address cannot claim (403), however they got their session", async () => {
      const { address: alice } = mixedCase("eve-target");
      const { address: eve } = mixedCase("eve");
      const { agent } = await invite(mailing, alice);
      const target = await mailedLink(alice);
      // Eve proves her own address with the link of an invitation to her.
      await invite(mailing, eve);
      const own = await mailedLink(eve);
      const b = browser();
      assert.equal((await pressContinue(b, await b.get(own.link))).status, 303);

      // On Alice's claim page Eve is offered the e-mail link's button, never the claim form.
      const page = await b.get(target.link);
      assert.ok(page.text.includes(`Continue as ${alice}`));
      assert.ok(!page.text.includes("Claim this agent"));
      const cookie = `proto_owner=${b.cookie(MAILING.origin, "proto_owner")}`;
      ledger.expect(
        await mailing.request("POST", claimPath(target.token), { headers: { cookie } }),
        403,
        "owner_authentication_required",
      );
      // A session the service opened itself for another address, as fresh as can be: the same.
      const other = await mailing.kit.createOwnerSession({
        identities: [{ type: "email", value: `not-${alice}` }],
        authenticatedAt: clock.now(),
      });
      ledger.expect(
        await mailing.request("POST", claimPath(target.token), {
          headers: { cookie: other.setCookie.split(";")[0] as string },
        }),
        403,
        "owner_authentication_required",
      );
      assert.equal((await mailing.signed(agent, "GET", ME)).json.state, "INVITED", "still pending");
    });

    test("the development outbox: only where enabled; it shows the mail with its link", async () => {
      for (const service of [mailing, plain]) {
        const absent = await service.request("GET", OUTBOX_PAGE);
        assert.equal(absent.status, 404, `${service.origin}: ${absent.text}`);
        assert.equal(service.kit.outbox, undefined);
      }
      const { address } = mixedCase("olga");
      const { agent, answer } = await invite(outbox, address);
      assert.equal(answer.status, 202, answer.text);
      const page = await outbox.request("GET", OUTBOX_PAGE);
      assert.equal(page.status, 200);
      assert.match(page.headers.get("content-security-policy") ?? "", /default-src 'none'/);
      assert.ok(page.text.includes(address));
      assert.ok(page.text.includes(agent.did));
      const href = /href="(https:\/\/outbox\.example\/proto\/claim\?token=[^"]+)"/.exec(page.text)?.[1];
      assert.ok(href, page.text);
      assert.equal(outbox.kit.outbox?.[0]?.to, address);
      // The link in the outbox is the invitation's.
      const b = browser();
      const claimPage = await b.get(href);
      assert.equal(claimPage.status, 200);
      assert.equal((await pressContinue(b, claimPage, OUTBOX.origin)).status, 303);

      // A service that delivers links itself hears of every invitation, with mailed: false.
      const delivered = await invite(plain, mixedCase("pia").address);
      assert.equal(delivered.answer.status, 202);
      const event = events.find((e) => e.account.agent_did === delivered.agent.did);
      assert.equal(event?.mailed, false);
      assert.ok(event?.claimUrl.startsWith(`${PLAIN.origin}${CLAIM_PAGE}?token=`));
    });

    test("createKit refuses a configuration that cannot reach the person, or would mail unsafely", async () => {
      const base = {
        publicUrl: "https://a.example",
        discovery: { service_did: "did:web:a.example", billing: { unclaimed_mode: "free" as const } },
        store,
      };
      await assert.rejects(createKit(base), /recipient type email needs a way to reach the person/);
      const previous = process.env.NODE_ENV;
      process.env.NODE_ENV = "production";
      try {
        await assert.rejects(
          createKit({ ...base, mail: { developmentOutbox: true } }),
          /refused when NODE_ENV is production/,
        );
      } finally {
        if (previous === undefined) delete process.env.NODE_ENV;
        else process.env.NODE_ENV = previous;
      }
      await assert.rejects(
        createKit({ ...base, mail: { developmentOutbox: true, smtpUrl: "smtp://127.0.0.1:25", from: "a@a.example" } }),
        /exactly one of/,
      );
      await assert.rejects(createKit({ ...base, mail: { smtpUrl: "smtp://127.0.0.1:25" } }), /mail.from is required/);
      await assert.rejects(
        createKit({ ...base, publicUrl: "http://a.example", mail: { developmentOutbox: true } }),
        /must be https/,
      );
      await assert.rejects(
        createKit({
          ...base,
          discovery: { ...base.discovery, endpoints: { claim_page: "https://pages.example/claim" } },
          mail: { developmentOutbox: true },
        }),
        /claim_page on another origin/,
      );
      // Services that take no e-mail recipients need neither.
      const oidcOnly = await createKit({
        ...base,
        discovery: { ...base.discovery, recipient_types: ["oidc"] },
      });
      await oidcOnly.close();
    });

    test("a mail that cannot be sent: 503 kit_mail_unavailable with Retry-After, nothing staged, the previous invitation intact", async () => {
      const agent = newAgent();
      const oidc = await broken.signed(agent, "POST", INVITE, {
        body: { recipient: { type: "oidc", value: { issuer: "https://idp.example", sub: "42" } } },
      });
      assert.equal(oidc.status, 202, "an oidc invitation needs no mail");
      const before = await invitationOf(agent);
      reported.length = 0;
      const failed = await broken.signed(agent, "POST", INVITE, { body: { email: mixedCase("fay").address } });
      assert.equal(failed.status, 503, failed.text);
      assert.deepEqual(Object.keys(failed.json.error).sort(), ["code", "message"]);
      assert.equal(failed.json.error.code, "kit_mail_unavailable");
      assert.equal(failed.headers.get("retry-after"), "60");
      const after = await invitationOf(agent);
      assert.equal(after?.id, before?.id, "the oidc invitation is still the pending one");
      assert.equal(after?.recipient.type, "oidc");
      assert.equal((await broken.signed(agent, "GET", ME)).json.state, "INVITED");
      // The operator hears why, and nothing of the link.
      assert.equal(reported.length, 1);
      assert.match(reported[0] ?? "", /invitation mail was not sent/);
      assert.ok(!(reported[0] ?? "").includes("clm_") && !(reported[0] ?? "").includes("token"), reported[0]);
    });

    test("too many invitation mails to one address within the hour: 429 rate_limit_exceeded", async () => {
      clock.alignTo(3600);
      const { address } = mixedCase("gus");
      for (let i = 0; i < 3; i++) assert.equal((await invite(outbox, address)).answer.status, 202);
      const refused = await invite(outbox, address.toUpperCase());
      ledger.expect(refused.answer, 429, "rate_limit_exceeded");
      assert.ok(Number(refused.answer.headers.get("retry-after")) >= 1);
      assert.equal(await invitationOf(refused.agent), undefined, "nothing staged");
      assert.equal((await invite(outbox, mixedCase("hal").address)).answer.status, 202, "another address");
      clock.advance(Number(refused.answer.headers.get("retry-after")));
      assert.equal((await invite(outbox, address)).answer.status, 202, "the next hour");
    });
  });
}
