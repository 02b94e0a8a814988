import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { unescapeHtml } from "@proto/testkit";
import type { OutboxMailer } from "../src/trust/mail.js";
import { Browserless, field, type PageAnswer } from "./support/browser-session.js";
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
 * Upstream rule 5 (§10.3.1): a person suspends one agent for one service from `/account`; that
 * agent's mint for that `aud` is 403 `service_suspended`, its other services and the person's
 * other agents keep minting, until the person restores it. Driven as a browser drives the pages
 * (cookie jar, forms with their CSRF token) and as an agent mints (signed `POST /v1/token`).
 */

reportSkippedVariants();

const SHOP = "did:web:shop.example";
const API = "did:web:api.example%3A8443:v1:orders";
const MAPS = "did:web:maps.example";

let counter = 0;
const address = (label: string) => `${label}-${++counter}-${Math.random().toString(36).slice(2, 8)}@mail.test`;

/** One service as the account page lists it under one agent. */
interface ListedService {
  name: string;
  aud: string;
  suspended: boolean;
  /** The form's action and its button's accessible name. */
  action: string;
  button: string;
  /** The `datetime` of the date shown (last token, or when it was suspended). */
  time: string;
  text: string;
}

/** The text of some HTML as a person reads it (tags dropped, entities decoded, spaces folded). */
const textOf = (markup: string) =>
  unescapeHtml(markup.replace(/<[^>]*>/g, " "))
    .replace(/\s+/g, " ")
    .trim();

/** The card of one agent on the account page, found by its DID. */
function cardOf(page: string, agentDid: string): string {
  const cards = page.split('<section class="card"').slice(1);
  const card = cards.find((c) => c.includes(`title="${agentDid}"`));
  assert.ok(card, `a card for ${agentDid} on the page:\n${page}`);
  return card.slice(0, card.indexOf("</section>"));
}

/** The services listed in one agent's card, in page order. */
function servicesOf(page: string, agentDid: string): ListedService[] {
  const card = cardOf(page, agentDid);
  return [...card.matchAll(/<li class="service( suspended)?">([\s\S]*?)<\/li>/g)].map((m) => {
    const item = m[2] as string;
    return {
      name: textOf(/<strong[^>]*>([\s\S]*?)<\/strong>/.exec(item)?.[1] ?? ""),
      aud: unescapeHtml(/name="aud" value="([^"]*)"/.exec(item)?.[1] ?? ""),
      suspended: m[1] !== undefined,
      action: unescapeHtml(/<form method="post" action="([^"]*)"/.exec(item)?.[1] ?? ""),
      button: textOf(/<button[^>]*>([\s\S]*?)<\/button>/.exec(item)?.[1] ?? ""),
      time: /<time datetime="([^"]*)"/.exec(item)?.[1] ?? "",
      text: textOf(item),
    };
  });
}

/** A `datetime` shown on the page lies within [from, to] (milliseconds of the attestor's clock). */
function assertWithin(datetime: string | undefined, from: number, to: number): void {
  const at = Date.parse(datetime ?? "");
  assert.ok(
    at >= from && at <= to,
    `${datetime} within ${new Date(from).toISOString()}..${new Date(to).toISOString()}`,
  );
}

/** The notice at the top of the account page, as read; "" when there is none. */
const noticeOf = (page: string) => textOf(/<p class="notice" role="status">([\s\S]*?)<\/p>/.exec(page)?.[1] ?? "");

for (const variant of STORE_VARIANTS) {
  describe(`per-service suspension (${variant.name})`, { timeout: 120_000 }, () => {
    let h: TrustHarness;
    let trustUrl: string;
    let outbox: OutboxMailer;

    before(async () => {
      const port = await freePort();
      trustUrl = `http://127.0.0.1:${port}`;
      h = await startTrustHarness(variant, {
        port,
        env: { TRUST_PUBLIC_URL: trustUrl, TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS },
      });
      outbox = h.app.mailer as OutboxMailer;
    });
    after(() => h.close());

    /** A browser signed in as `email` through the e-mail sign-in pages. */
    async function signedIn(email: string): Promise<Browserless> {
      // Ten sign-in mails a minute per client address: each person in a window of their own.
      await h.alignTo(60);
      const b = new Browserless(trustUrl);
      const page = await b.get("/signin");
      const sent = await b.post("/signin/email", { _csrf: field(page.text, "_csrf"), next: "/account", email });
      assert.equal(sent.status, 200, sent.text);
      const mail = outbox.entries.findLast((m) => m.to === email);
      const link = /https?:\/\/\S+\/signin\/email\/verify\?token=\S+/.exec(mail?.text ?? "")?.[0];
      assert.ok(link, `a sign-in mail to ${email}`);
      const verify = await b.get(link);
      const done = await b.post("/signin/email/verify", {
        _csrf: field(verify.text, "_csrf"),
        token: field(verify.text, "token"),
      });
      assert.equal(done.status, 303, done.text);
      return b;
    }

    async function mintOk(agent: Agent, aud: string): Promise<void> {
      const minted = await h.mint(agent, aud);
      assert.equal(minted.status, 200, `${aud}: ${minted.text}`);
    }

    /** Presses a service's button on the account page: the form as the page has it. */
    async function press(b: Browserless, service: ListedService, page: string): Promise<PageAnswer> {
      return b.post(service.action, { _csrf: field(page, "_csrf"), aud: service.aud });
    }

    /** Presses the button, follows the redirect, and answers the account page it lands on. */
    async function pressAndLand(b: Browserless, service: ListedService, page: string): Promise<string> {
      const pressed = await press(b, service, page);
      assert.equal(pressed.status, 303, pressed.text);
      assert.ok(pressed.location?.startsWith("/account?"), pressed.location);
      const landed = await b.get(pressed.location as string);
      assert.equal(landed.status, 200, landed.text);
      return landed.text;
    }

    test("/account lists, per agent, the services it minted for, by a readable name, newest first", async () => {
      const email = address("lister");
      const { agent } = await h.link(newAgent(), email);
      const idle = (await h.link(newAgent(), email)).agent;
      const keyService = newAgent().did;
      const b = await signedIn(email);

      let page = (await b.get("/account")).text;
      assert.deepEqual(servicesOf(page, agent.did), []);
      assert.match(textOf(cardOf(page, agent.did)), /No service yet: this agent has not asked for an attestation\./);

      await mintOk(agent, SHOP);
      await h.advance(60);
      await mintOk(agent, API);
      await h.advance(60);
      const beforeMint = await h.nowMs();
      await mintOk(agent, keyService);
      const afterMint = await h.nowMs();
      page = (await b.get("/account")).text;
      const listed = servicesOf(page, agent.did);
      assert.deepEqual(
        listed.map((s) => [s.name, s.aud, s.suspended, s.button]),
        [
          [
            `${keyService.slice(0, 18)}…${keyService.slice(-6)}`,
            keyService,
            false,
            `Suspend test agent for ${listed[0]?.name}`,
          ],
          ["api.example:8443/v1/orders", API, false, "Suspend test agent for api.example:8443/v1/orders"],
          ["shop.example", SHOP, false, "Suspend test agent for shop.example"],
        ],
      );
      // The last token's time, to the minute it was minted.
      assertWithin(listed[0]?.time, beforeMint, afterMint);
      assert.match(listed[0]?.text ?? "", /Last token \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC/);
      // The whole DID is there too, under each name.
      for (const aud of [SHOP, API, keyService])
        assert.ok(cardOf(page, agent.did).includes(`<code>${aud}</code>`), aud);
      // The other agent of the same person has used nothing.
      assert.deepEqual(servicesOf(page, idle.did), []);
      assert.equal(noticeOf(page), "");
    });

    test("suspend: that pair's mint is 403 service_suspended; other services and agents keep minting; restore ends it", async () => {
      const email = address("suspender");
      const { agent } = await h.link(newAgent(), email);
      const sibling = (await h.link(newAgent(), email)).agent;
      for (const aud of [SHOP, MAPS]) {
        await mintOk(agent, aud);
        await mintOk(sibling, aud);
      }
      const b = await signedIn(email);
      let page = (await b.get("/account")).text;
      const shop = servicesOf(page, agent.did).find((s) => s.aud === SHOP);
      assert.ok(shop);
      assert.equal(shop.action, `/account/bindings/${(await bindingOf(b, agent)) ?? ""}/services/suspend`);

      const beforePress = await h.nowMs();
      page = await pressAndLand(b, shop, page);
      const afterPress = await h.nowMs();
      assert.equal(
        noticeOf(page),
        "Suspended. test agent can no longer get attestations for shop.example. Its other services are not affected. Restore it below whenever you like.",
      );
      const after = servicesOf(page, agent.did);
      const suspended = after.find((s) => s.aud === SHOP);
      assert.ok(suspended?.suspended, "shown as suspended");
      assert.match(
        suspended.text,
        /^shop\.example Suspended did:web:shop\.example Suspended \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC Restore/,
      );
      assertWithin(suspended.time, beforePress, afterPress);
      assert.equal(suspended.button, "Restore test agent for shop.example");
      assert.ok(suspended.action.endsWith("/services/restore"));
      assert.equal(after.find((s) => s.aud === MAPS)?.suspended, false);
      assert.equal(
        servicesOf(page, sibling.did).some((s) => s.suspended),
        false,
        "the sibling agent is not suspended",
      );

      // The agent: refused for that service, with a message naming it and where to restore it.
      const refused = await h.mint(agent, SHOP);
      assertError(refused, 403, "service_suspended");
      assert.ok(refused.json.error.message.includes(SHOP), refused.text);
      assert.ok(refused.json.error.message.includes(`${trustUrl}/account`), refused.text);
      // ...on every attempt, and a fresh signature changes nothing.
      await h.advance(30);
      assertError(await h.mint(agent, SHOP), 403, "service_suspended");
      // Its other service, and the sibling for the same service, keep minting.
      await mintOk(agent, MAPS);
      await mintOk(sibling, SHOP);
      // A service it never used before is not suspended either.
      await mintOk(agent, "did:web:new.example");

      // Restore: minting for the service works again, and the page says so.
      page = await pressAndLand(b, suspended, page);
      assert.equal(noticeOf(page), "Restored. test agent can get attestations for shop.example again.");
      assert.equal(servicesOf(page, agent.did).find((s) => s.aud === SHOP)?.suspended, false);
      await mintOk(agent, SHOP);
    });

    test("pressing twice changes nothing more; a reload after the other button says nothing stale", async () => {
      const email = address("twice");
      const { agent } = await h.link(newAgent(), email);
      await mintOk(agent, SHOP);
      const b = await signedIn(email);
      const page = (await b.get("/account")).text;
      const shop = servicesOf(page, agent.did)[0] as ListedService;
      const first = await press(b, shop, page);
      const suspendedPage = (await b.get(first.location as string)).text;
      const firstTime = servicesOf(suspendedPage, agent.did)[0]?.time;
      await h.advance(120);
      // The same (stale) form again: still suspended since the first press.
      const second = await press(b, shop, page);
      assert.equal(second.status, 303, second.text);
      const again = (await b.get(second.location as string)).text;
      assert.equal(servicesOf(again, agent.did)[0]?.time, firstTime);
      assertError(await h.mint(agent, SHOP), 403, "service_suspended");
      // Restored, then the old "suspended" notice URL reloaded: no notice that is no longer true.
      const restore = servicesOf(again, agent.did)[0] as ListedService;
      assert.equal((await press(b, restore, again)).status, 303);
      assert.equal(noticeOf((await b.get(first.location as string)).text), "");
      await mintOk(agent, SHOP);
    });

    test("a suspension outlives a re-link by the same person, not a revocation", async () => {
      const email = address("relinker");
      const agent = newAgent();
      await h.link(agent, email);
      await mintOk(agent, SHOP);
      await mintOk(agent, MAPS);
      const b = await signedIn(email);
      const page = (await b.get("/account")).text;
      await pressAndLand(b, servicesOf(page, agent.did).find((s) => s.aud === SHOP) as ListedService, page);

      // The agent links again (the person confirms): a new binding, the same suspension.
      const relinked = await h.link(agent, email);
      assertError(await h.mint(agent, SHOP), 403, "service_suspended");
      await mintOk(agent, MAPS);
      const listed = servicesOf((await b.get("/account")).text, agent.did);
      assert.deepEqual(
        listed.map((s) => [s.aud, s.suspended]),
        [
          [SHOP, true],
          [MAPS, false],
        ],
      );
      assert.ok(listed[0]?.action.includes(relinked.bindingId));

      // After a revocation the next link starts afresh.
      assert.equal((await h.hook("/__test/bindings/revoke", { binding_id: relinked.bindingId })).status, 200);
      await h.link(agent, email);
      await mintOk(agent, SHOP);
    });

    test("refusals: another person's binding, an unused service, a revoked binding: 404; no CSRF token, another Origin: 403", async () => {
      const email = address("owner");
      const { agent, bindingId } = await h.link(newAgent(), email);
      const stranger = await h.link(newAgent(), address("stranger"));
      await mintOk(agent, SHOP);
      await mintOk(stranger.agent, SHOP);
      const b = await signedIn(email);
      const page = (await b.get("/account")).text;
      const csrf = field(page, "_csrf");

      const notMine = await b.post(`/account/bindings/${stranger.bindingId}/services/suspend`, {
        _csrf: csrf,
        aud: SHOP,
      });
      assert.equal(notMine.status, 404, notMine.text);
      assert.match(notMine.headers.get("content-type") ?? "", /^text\/html/);
      assert.match(textOf(notMine.text), /Unknown agent or service/);
      await mintOk(stranger.agent, SHOP);

      const unused = await b.post(`/account/bindings/${bindingId}/services/suspend`, { _csrf: csrf, aud: MAPS });
      assert.equal(unused.status, 404, unused.text);
      await mintOk(agent, MAPS);

      const noToken = await b.post(`/account/bindings/${bindingId}/services/suspend`, { aud: SHOP });
      assert.equal(noToken.status, 403, noToken.text);
      assert.match(textOf(noToken.text), /This form has expired/);
      const foreign: Record<string, string>[] = [
        { origin: "https://evil.example" },
        { origin: trustUrl.replace("127.0.0.1", "localhost") },
        { origin: `${trustUrl}/` },
        // What a browser sends for a sibling subdomain's form under a no-referrer policy.
        { origin: "null", "sec-fetch-site": "same-site" },
        { origin: "null", "sec-fetch-site": "cross-site" },
        { origin: trustUrl, "sec-fetch-site": "cross-site" },
        { "sec-fetch-site": "same-site" },
      ];
      for (const headers of foreign) {
        const cross = await b.send("POST", `/account/bindings/${bindingId}/services/suspend`, {
          form: { _csrf: csrf, aud: SHOP },
          headers,
        });
        assert.equal(cross.status, 403, `${JSON.stringify(headers)}: ${cross.text}`);
        assert.match(textOf(cross.text), /This form came from another site/);
      }
      const missingAud = await b.post(`/account/bindings/${bindingId}/services/suspend`, { _csrf: csrf });
      assert.equal(missingAud.status, 400, missingAud.text);
      assert.match(missingAud.headers.get("content-type") ?? "", /^text\/html/);
      await mintOk(agent, SHOP);

      // From its own pages it works: what a browser sends under the pages' no-referrer policy,
      // or the origin itself. Signed out, it leads to sign-in and changes nothing.
      for (const [action, headers] of [
        ["suspend", { origin: "null", "sec-fetch-site": "same-origin" }],
        ["restore", { origin: trustUrl }],
        ["suspend", { origin: trustUrl, "sec-fetch-site": "same-origin" }],
      ] as const) {
        const own = await b.send("POST", `/account/bindings/${bindingId}/services/${action}`, {
          form: { _csrf: csrf, aud: SHOP },
          headers,
        });
        assert.equal(own.status, 303, `${JSON.stringify(headers)}: ${own.text}`);
      }
      assertError(await h.mint(agent, SHOP), 403, "service_suspended");
      const anonymous = new Browserless(trustUrl);
      const signin = await anonymous.get("/signin");
      const signedOut = await anonymous.post(`/account/bindings/${bindingId}/services/restore`, {
        _csrf: field(signin.text, "_csrf"),
        aud: SHOP,
      });
      assert.equal(signedOut.status, 303, signedOut.text);
      assert.equal(signedOut.location, "/signin?next=%2Faccount");
      assertError(await h.mint(agent, SHOP), 403, "service_suspended");

      // A revoked binding is gone from the page and cannot be restored.
      assert.equal((await h.hook("/__test/bindings/revoke", { binding_id: bindingId })).status, 200);
      const revoked = await b.post(`/account/bindings/${bindingId}/services/restore`, { _csrf: csrf, aud: SHOP });
      assert.equal(revoked.status, 404, revoked.text);
    });

    test("revoked, lapsed and unverified come before suspended; a suspended mint does not count against the binding", async () => {
      const email = address("order");
      const { agent, bindingId } = await h.link(newAgent(), email);
      await mintOk(agent, SHOP);
      const b = await signedIn(email);
      const page = (await b.get("/account")).text;
      await pressAndLand(b, servicesOf(page, agent.did)[0] as ListedService, page);
      const lapsesBefore = /<dt>Lapses<\/dt><dd><time datetime="([^"]*)"/.exec((await b.get("/account")).text)?.[1];
      await h.advance(3600);
      assertError(await h.mint(agent, SHOP), 403, "service_suspended");
      const lapsesAfter = /<dt>Lapses<\/dt><dd><time datetime="([^"]*)"/.exec((await b.get("/account")).text)?.[1];
      assert.equal(lapsesAfter, lapsesBefore, "a refused mint does not re-arm the inactivity window");

      assert.equal((await h.hook("/__test/humans/clear-verifications", { email })).status, 200);
      assertError(await h.mint(agent, SHOP), 403, "verification_required");
      assert.equal((await h.hook("/__test/bindings/expire", { binding_id: bindingId })).status, 200);
      assertError(await h.mint(agent, SHOP), 410, "binding_expired");
      assert.equal((await h.hook("/__test/bindings/revoke", { binding_id: bindingId })).status, 200);
      assertError(await h.mint(agent, SHOP), 403, "binding_revoked");
    });

    test("the last use is kept to within ten minutes; many services: suspended ones first, then the 50 newest", async () => {
      const email = address("busy");
      const { agent } = await h.link(newAgent(), email);
      await mintOk(agent, SHOP);
      const firstMint = await h.nowMs();
      const b = await signedIn(email);
      let page = (await b.get("/account")).text;
      await pressAndLand(b, servicesOf(page, agent.did)[0] as ListedService, page);

      const auds = Array.from({ length: 55 }, (_, i) => `did:web:s${String(i).padStart(2, "0")}.example`);
      for (const aud of auds) await mintOk(agent, aud);
      await h.advance(11 * 60);
      const beforeAgain = await h.nowMs();
      await mintOk(agent, "did:web:s00.example");
      const afterAgain = await h.nowMs();
      page = (await b.get("/account")).text;
      const listed = servicesOf(page, agent.did);
      assert.equal(listed.length, 50);
      // The suspended service first though it is the oldest, then the one used again just now.
      assert.deepEqual(
        listed.slice(0, 2).map((s) => [s.aud, s.suspended]),
        [
          [SHOP, true],
          ["did:web:s00.example", false],
        ],
      );
      assertWithin(listed[1]?.time, beforeAgain, afterAgain);
      assert.ok(Date.parse(listed[0]?.time ?? "") >= firstMint);
      assert.match(
        textOf(cardOf(page, agent.did)),
        /Showing 50 of 56 services: suspended ones first, then the most recently used\./,
      );
    });

    test("a did:web path segment with markup is shown as text", async () => {
      const email = address("markup");
      const { agent } = await h.link(newAgent(), email);
      const hostile = "did:web:evil.example:%3Cscript%3Ealert%281%29%3C%2Fscript%3E";
      await mintOk(agent, hostile);
      const b = await signedIn(email);
      const page = (await b.get("/account")).text;
      assert.equal(servicesOf(page, agent.did)[0]?.name, "evil.example/<script>alert(1)</script>");
      assert.ok(page.includes("evil.example/&lt;script&gt;alert(1)&lt;/script&gt;"));
      assert.deepEqual(
        page.match(/<script[^>]*>/g),
        [
          '<script src="/assets/site.js" defer>',
          '<script src="/assets/webauthn.js" defer>',
          '<script src="/assets/passkeys.js" defer>',
        ],
        "only the page's own script elements",
      );
    });

    /** The binding id of an agent, read off its revoke form on the account page. */
    async function bindingOf(b: Browserless, agent: Agent): Promise<string | undefined> {
      const card = cardOf((await b.get("/account")).text, agent.did);
      return /action="\/account\/bindings\/([^/]+)\/revoke"/.exec(card)?.[1];
    }
  });
}
