import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { unescapeHtml } from "@proto/testkit";
import { decodeJwt } from "jose";
import { grantHistory, putGrant } from "../src/trust/authority/grants.js";
import type { OutboxMailer } from "../src/trust/mail.js";
import { Browserless, field, type PageAnswer } from "./support/browser-session.js";
import { type DeclaringService, startDeclaringService } from "./support/declaring-service.js";
import { signInByEmail } from "./support/people.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";
import {
  type Agent,
  assertError,
  assertRetryAfter,
  freePort,
  newAgent,
  RELAXED_RATE_LIMITS,
  startTrustHarness,
  type TrustHarness,
} from "./support/trust.js";

/**
 * Approvals (docs/authority.md, "Approvals: asking the person"): an agent asks its person for
 * more at a service that declares its permissions (served over HTTPS), the person is told by mail
 * and answers on the approval page, and the agent polls. Approving widens the grant and the next
 * token carries it; declining and expiry change nothing. Passkey ceremonies are in
 * trust-approvals.browser.test.ts.
 */

reportSkippedVariants();

const REASON = "Save the summary you asked me for";
/** The grant a person gave earlier: reading, and spending up to 20.00 EUR a purchase, 100.00 EUR a month. */
const EARLIER_LIMIT = {
  type: "spend_limit",
  permission: "purchase",
  currency: "EUR",
  per_transaction: 2000,
  per_period: 10000,
  period: "month",
};

/** The did:web of an origin (`https://broken.test:1234` is `did:web:broken.test%3A1234`). */
const didOf = (origin: string) => `did:web:${new URL(origin).host.replace(":", "%3A")}`;

/** A page's text as a person reads it: no tags, entities decoded, spaces collapsed. */
function visibleText(page: PageAnswer): string {
  return unescapeHtml(page.text.replace(/<(script|style)[\s\S]*?<\/\1>/g, " ").replace(/<[^>]+>/g, " "))
    .replace(/\s+/g, " ")
    .replace(/ ([.,;?!])/g, "$1")
    .trim();
}

describe("approvals at the attestor", () => {
  let svc: DeclaringService;
  before(async () => {
    svc = await startDeclaringService();
  });
  after(() => svc?.close());

  for (const variant of STORE_VARIANTS) {
    describe(`(${variant.name})`, { timeout: 180_000 }, () => {
      let h: TrustHarness;

      before(async () => {
        const port = await freePort();
        h = await startTrustHarness(variant, {
          port,
          fetchCa: svc.trustOptions.fetchCa,
          env: {
            ...svc.trustOptions.env,
            TRUST_PUBLIC_URL: `http://127.0.0.1:${port}`,
            TRUST_RATE_LIMITS: `${RELAXED_RATE_LIMITS},approval_poll=100000/60,approval_person=15/3600`,
          },
        });
      });
      after(() => h?.close());

      /** An agent linked to a new person (or to `email`'s). */
      async function linked(email = `p-${Math.random().toString(36).slice(2)}@mail.test`) {
        const { agent, bindingId } = await h.link(newAgent(), email);
        return { agent, bindingId, email };
      }

      function ask(agent: Agent, body: Record<string, unknown>) {
        return h.signed(agent, "POST", "/v1/approvals", {
          aud: svc.aud,
          service_url: svc.url,
          reason: REASON,
          ...body,
        });
      }

      const poll = (agent: Agent, id: string) => h.signed(agent, "GET", `/v1/approvals/${id}`);

      async function asked(agent: Agent, body: Record<string, unknown>): Promise<string> {
        const answer = await ask(agent, body);
        assert.equal(answer.status, 201, answer.text);
        return answer.json.approval_id as string;
      }

      async function claims(agent: Agent) {
        const minted = await h.mint(agent, svc.aud);
        assert.equal(minted.status, 200, minted.text);
        return decodeJwt(minted.json.jwt as string);
      }

      async function signedIn(email: string): Promise<Browserless> {
        const b = new Browserless(h.url);
        await signInByEmail(h, b, email);
        return b;
      }

      /** Presses a button of the approval page (its form, with the page's CSRF token). */
      async function press(b: Browserless, id: string, button: "approve" | "decline"): Promise<PageAnswer> {
        const page = await b.get(`/approvals/${id}`);
        assert.equal(page.status, 200, page.text);
        return b.post(`/approvals/${id}/${button}`, { _csrf: field(page.text, "_csrf") });
      }

      /** The person's grant for the service as it was before: reading, and spending within EARLIER_LIMIT. */
      async function earlierGrant(bindingId: string) {
        const db = h.app.service.database.db;
        const { human_id: humanId } = await db
          .selectFrom("trust_bindings")
          .select("human_id")
          .where("id", "=", bindingId)
          .executeTakeFirstOrThrow();
        const now = await h.nowMs();
        return db.transaction().execute((trx) =>
          putGrant(
            trx,
            { bindingId, humanId, aud: svc.aud, serviceUrl: svc.url, now, method: "passkey" },
            {
              permissions: ["notes:read", "purchase"],
              spendLimits: [
                { permission: "purchase", currency: "EUR", perTransaction: 2000, perPeriod: 10000, period: "month" },
              ],
              expiresAt: null,
            },
          ),
        );
      }

      test("an agent asks: 201 with the approval page, the person is mailed, the agent polls pending", async () => {
        const { agent, email, bindingId } = await linked();
        const before = await h.nowMs();
        const answer = await ask(agent, { permissions: ["notes:write"] });
        assert.equal(answer.status, 201, answer.text);
        assert.deepEqual(Object.keys(answer.json).sort(), [
          "approval_id",
          "approval_url",
          "expires_at",
          "interval",
          "status",
        ]);
        const id = answer.json.approval_id as string;
        assert.match(id, /^apr_[A-Za-z0-9_-]+$/);
        assert.equal(answer.json.approval_url, `${h.publicUrl}/approvals/${id}`);
        assert.equal(answer.json.status, "pending");
        assert.equal(answer.json.interval, 3);
        const lifetime = Date.parse(answer.json.expires_at as string) - before;
        assert.ok(lifetime > 595_000 && lifetime <= 601_000, `lives ${lifetime} ms`);

        const mail = (h.app.mailer as OutboxMailer).entries.find((m) => m.to === email);
        assert.ok(mail, "the person is mailed");
        assert.equal(mail.subject, `Your agent “test agent” asks for more at ${new URL(svc.url).host}`);
        assert.match(mail.text, /^- notes:write: Write and edit your notes$/m);
        assert.ok(
          mail.text.includes(`Your agent says: “${REASON}”\n(These are your agent's words, not proto trust's.)`),
        );
        assert.ok(mail.text.includes(`\n${h.publicUrl}/approvals/${id}\n`), mail.text);
        assert.ok(!mail.text.includes(bindingId) && !mail.text.includes("token"), "nothing secret in the mail");

        const polled = await poll(agent, id);
        assert.equal(polled.status, 200, polled.text);
        assert.deepEqual(polled.json, { approval_id: id, status: "pending", expires_at: answer.json.expires_at });
      });

      test("service_url defaults to https and the did:web's host", async () => {
        const { agent } = await linked();
        const answer = await h.signed(agent, "POST", "/v1/approvals", {
          aud: svc.aud,
          permissions: ["notes:write"],
          reason: REASON,
        });
        assert.equal(answer.status, 201, answer.text);
      });

      test("a request that is not well formed, or asks for what the service does not declare, is 400 invalid_request", async () => {
        const { agent } = await linked();
        const cases: [string, Record<string, unknown>, RegExp][] = [
          ["no aud", { aud: undefined }, /aud must be/],
          ["aud not a DID", { aud: "notes.test" }, /aud must be/],
          ["service_url with a path", { service_url: `${svc.url}/api` }, /service_url must be the service's origin/],
          ["service_url not a URL", { service_url: "notes" }, /service_url must be/],
          ["nothing asked", { permissions: [] }, /at least one permission or spend limit/],
          ["a name that is no permission name", { permissions: ["Notes Read"] }, /permission names/],
          ["permissions not a list", { permissions: "notes:write" }, /permissions must be an array/],
          ["no reason", { permissions: ["notes:write"], reason: undefined }, /reason must be one line/],
          ["an empty reason", { permissions: ["notes:write"], reason: "" }, /reason must be one line/],
          ["a blank reason", { permissions: ["notes:write"], reason: "   " }, /reason must be one line/],
          ["a reason of 201 characters", { permissions: ["notes:write"], reason: "x".repeat(201) }, /1 to 200/],
          ["a reason of two lines", { permissions: ["notes:write"], reason: "a\nb" }, /line breaks/],
          ["a reason with a line separator", { permissions: ["notes:write"], reason: "a\u2028b" }, /line breaks/],
          ["a reason with a control character", { permissions: ["notes:write"], reason: "a\u0007b" }, /control/],
          [
            "a period limit without its period",
            { spend_limits: [{ permission: "purchase", currency: "EUR", per_period: 100 }] },
            /per_period and period go together/,
          ],
          [
            "a negative amount",
            { spend_limits: [{ permission: "purchase", currency: "EUR", per_transaction: -1 }] },
            /per_transaction must be an integer/,
          ],
          [
            "two limits for one permission",
            {
              spend_limits: [
                { permission: "purchase", currency: "EUR", per_transaction: 100 },
                { permission: "purchase", currency: "EUR", per_transaction: 200 },
              ],
            },
            /two limits for purchase/,
          ],
          [
            "a permission the service does not declare",
            { permissions: ["notes:purge"] },
            /declares no permission notes:purge/,
          ],
          [
            "a limit on a permission that does not spend",
            { spend_limits: [{ permission: "notes:write", currency: "EUR", per_transaction: 100 }] },
            /notes:write is not a spending permission/,
          ],
          [
            "a limit in another currency",
            { spend_limits: [{ permission: "purchase", currency: "USD", per_transaction: 100 }] },
            /purchase spends in EUR, not USD/,
          ],
          [
            "a service_url on another host than the did:web's",
            { permissions: ["notes:write"], service_url: svc.elsewhereUrl },
            /service_url must be on notes\.test:\d+, the host did:web:notes\.test%3A\d+ names/,
          ],
          [
            "a service whose document names another service",
            { permissions: ["notes:write"], aud: didOf(svc.elsewhereUrl), service_url: undefined },
            /calls itself did:web:notes\.test%3A\d+, not did:web:elsewhere\.test%3A\d+/,
          ],
        ];
        for (const [name, body, message] of cases) {
          const answer = await ask(agent, body);
          assert.equal(answer.status, 400, `${name}: ${answer.text}`);
          assertError(answer, 400, "invalid_request");
          assert.match(answer.json.error.message, message, name);
        }
        const notJson = await h.signed(agent, "POST", "/v1/approvals", "not an object");
        assertError(notJson, 400, "invalid_request");
      });

      test("a service whose document cannot be read: 400 invalid_request naming it (the agent's mistake, not an outage)", async () => {
        const { agent } = await linked();
        const answer = await h.signed(agent, "POST", "/v1/approvals", {
          aud: didOf(svc.brokenUrl),
          permissions: ["notes:write"],
          reason: REASON,
        });
        assertError(answer, 400, "invalid_request");
        assert.match(answer.json.error.message, /discovery document/);
        assert.equal(answer.json.error.details.service_url, new URL(svc.brokenUrl).origin);
      });

      test("unsigned, unlinked and revoked agents are refused", async () => {
        assertError(await h.request("POST", "/v1/approvals", { body: { aud: svc.aud } }), 401, "invalid_signature");
        assertError(await ask(newAgent(), { permissions: ["notes:write"] }), 401, "unauthorized");
        const { agent, bindingId } = await linked();
        const id = await asked(agent, { permissions: ["notes:write"] });
        await h.hook("/__test/bindings/revoke", { binding_id: bindingId });
        assertError(await ask(agent, { permissions: ["notes:write"] }), 403, "binding_revoked");
        assertError(await poll(agent, id), 403, "binding_revoked");
      });

      test("only the agent that asked reads its request: another agent's, or an unknown one, is 404", async () => {
        const { agent } = await linked();
        const id = await asked(agent, { permissions: ["notes:write"] });
        const { agent: other } = await linked();
        assertError(await poll(other, id), 404, "not_found");
        assertError(await poll(agent, "apr_unknown"), 404, "not_found");
        assertError(await poll(agent, "not-an-id"), 404, "not_found");
      });

      test("approved in the session: the grant widens, the agent reads it, the next token carries it", async () => {
        const { agent, bindingId, email } = await linked();
        const earlier = await earlierGrant(bindingId);
        const b = await signedIn(email);
        // More permissions and a lower limit: nothing here needs a passkey.
        const id = await asked(agent, {
          permissions: ["notes:write"],
          spend_limits: [
            { permission: "purchase", currency: "EUR", per_transaction: 50, per_period: 1000, period: "month" },
          ],
        });

        const account = await b.get("/account");
        assert.match(visibleText(account), /Waiting for your answer test agent asks for more at notes\.test:\d+/);
        assert.match(account.text, new RegExp(`<a href="/approvals/${id}">`));

        const page = await b.get(`/approvals/${id}`);
        assert.equal(page.status, 200, page.text);
        const text = visibleText(page);
        assert.match(text, /Allow your agent more at notes\.test:\d+\?/);
        assert.match(text, /Agent test agent did:key:/);
        assert.ok(text.includes(`Your agent says: “${REASON}” These are your agent's words, not proto trust's.`), text);
        assert.match(text, /What changes if you approve Write and edit your notes notes:write/);
        assert.match(
          text,
          /Spending: Pay for pinned notes purchase Now: up to 20\.00 EUR per transaction and 100\.00 EUR per month After: up to 0\.50 EUR per transaction and 10\.00 EUR per month/,
        );
        assert.match(text, /Your agent keeps what it may do there already: Read your notes; Pay for pinned notes\./);
        assert.doesNotMatch(text, /passkey/i);

        const approved = await press(b, id, "approve");
        assert.equal(approved.status, 303, approved.text);
        assert.equal(approved.location, `/approvals/${id}`);
        const shown = visibleText(await b.get(`/approvals/${id}`));
        assert.match(shown, /Approved \d{4}-\d\d-\d\d \d\d:\d\d UTC\. Your agent's next token/);
        assert.doesNotMatch(shown, /Approve |Decline/);
        assert.doesNotMatch(visibleText(await b.get("/account")), /Waiting for your answer/);

        const newLimit = { ...EARLIER_LIMIT, per_transaction: 50, per_period: 1000 };
        const polled = await poll(agent, id);
        assert.equal(polled.status, 200, polled.text);
        assert.deepEqual(polled.json.grant, {
          grant_id: earlier.id,
          scope: "notes:read purchase notes:write",
          authorization_details: [newLimit],
        });
        assert.equal(polled.json.status, "approved");
        const token = await claims(agent);
        assert.equal(token.grant_id, earlier.id);
        assert.equal(token.scope, "notes:read purchase notes:write");
        assert.deepEqual(token.authorization_details, [newLimit]);
        const [event] = await grantHistory(h.app.service.database.db, earlier.id);
        assert.equal(event?.method, "session");
        assert.equal(event?.approvalId, id);

        // Answered once: pressing again changes nothing.
        const again = await b.post(`/approvals/${id}/decline`, {
          _csrf: field((await b.get("/account")).text, "_csrf"),
        });
        assert.equal(again.status, 303);
        assert.equal((await poll(agent, id)).json.status, "approved");
      });

      test("a first approval makes the grant from the service's defaults and what was asked", async () => {
        const { agent, email } = await linked();
        const b = await signedIn(email);
        assert.equal((await claims(agent)).grant_id, undefined);
        const id = await asked(agent, { permissions: ["notes:write"] });
        assert.match(
          visibleText(await b.get(`/approvals/${id}`)),
          /Your agent keeps what it may do there already: Read your notes\./,
        );
        assert.equal((await press(b, id, "approve")).status, 303);
        const token = await claims(agent);
        assert.match(String(token.grant_id), /^grt_/);
        assert.equal(token.scope, "notes:read notes:write");
        assert.equal(token.authorization_details, undefined);
        const listed = await h.signed(agent, "GET", "/v1/grants");
        assert.equal(listed.json.grants[0].grant_id, token.grant_id);
      });

      test("declined: the agent reads declined, the grant and the next token are unchanged", async () => {
        const { agent, bindingId, email } = await linked();
        const earlier = await earlierGrant(bindingId);
        const b = await signedIn(email);
        const id = await asked(agent, { permissions: ["notes:write"] });
        const declined = await press(b, id, "decline");
        assert.equal(declined.status, 303, declined.text);
        const shown = visibleText(await b.get(`/approvals/${id}`));
        assert.match(shown, /Declined \d{4}-\d\d-\d\d \d\d:\d\d UTC\. Nothing changed\./);
        assert.match(shown, /What it asked for Write and edit your notes notes:write/);
        const polled = await poll(agent, id);
        assert.deepEqual(Object.keys(polled.json).sort(), ["approval_id", "expires_at", "status"]);
        assert.equal(polled.json.status, "declined");
        const token = await claims(agent);
        assert.equal(token.grant_id, earlier.id);
        assert.equal(token.scope, "notes:read purchase");
        assert.deepEqual(token.authorization_details, [EARLIER_LIMIT]);
        // A late Approve (the page of before, a second tab) finds it answered.
        const late = await b.post(`/approvals/${id}/approve`, {
          _csrf: field((await b.get("/account")).text, "_csrf"),
        });
        assert.equal(late.status, 303);
        assert.equal((await poll(agent, id)).json.status, "declined");
      });

      test("unanswered for 10 minutes: expired, no buttons, nothing changes", async () => {
        const { agent, bindingId, email } = await linked();
        const earlier = await earlierGrant(bindingId);
        const b = await signedIn(email);
        const id = await asked(agent, { permissions: ["notes:write"] });
        const open = await b.get(`/approvals/${id}`);
        const csrf = field(open.text, "_csrf");
        await h.advance(601);
        assert.equal((await poll(agent, id)).json.status, "expired");
        const shown = visibleText(await b.get(`/approvals/${id}`));
        assert.match(
          shown,
          /Expired \d{4}-\d\d-\d\d \d\d:\d\d UTC without an answer\. Nothing changed; your agent can ask again\./,
        );
        assert.doesNotMatch(shown, /Approve|Decline/);
        assert.doesNotMatch(visibleText(await b.get("/account")), /Waiting for your answer/);
        // The page opened before it expired: its Approve is too late.
        assert.equal((await b.post(`/approvals/${id}/approve`, { _csrf: csrf })).status, 303);
        assert.equal((await poll(agent, id)).json.status, "expired");
        const token = await claims(agent);
        assert.equal(token.grant_id, earlier.id);
        assert.equal(token.scope, "notes:read purchase");
      });

      test("what needs a passkey is not approved by a session: the page says so, a forged Approve is refused", async () => {
        const { agent, email } = await linked();
        const b = await signedIn(email);
        const id = await asked(agent, {
          permissions: ["notes:delete"],
          spend_limits: [{ permission: "purchase", currency: "EUR", per_transaction: 50 }],
        });
        const page = await b.get(`/approvals/${id}`);
        const text = visibleText(page);
        assert.match(text, /Delete your notes Needs a passkey notes:delete/);
        assert.match(
          text,
          /Spending: Pay for pinned notes purchase Now: no spending After: up to 0\.50 EUR per transaction/,
        );
        assert.match(
          text,
          /Approving needs your passkey: it gives a permission the service protects with a passkey, and it allows spending\./,
        );
        assert.match(
          text,
          /You have no passkey yet\. Add one on your account page, then come back to this request to approve it\./,
        );
        assert.doesNotMatch(page.text, /action="\/approvals\/[^"]+\/approve"/);
        const forged = await b.post(`/approvals/${id}/approve`, { _csrf: field(page.text, "_csrf") });
        assert.equal(forged.status, 403);
        assert.match(visibleText(forged), /Not approved\. Approving this needs your passkey\./);
        const bogus = await b.post(`/approvals/${id}/approve`, { _csrf: field(page.text, "_csrf"), passkey: "{}" });
        assert.equal(bogus.status, 400);
        assert.equal((await poll(agent, id)).json.status, "pending");
        assert.equal((await claims(agent)).grant_id, undefined);
      });

      test("only the agent's person sees the page; signed out, it is sign-in first and then back", async () => {
        const { agent } = await linked();
        const id = await asked(agent, { permissions: ["notes:write"] });
        const stranger = await signedIn(`stranger-${Math.random().toString(36).slice(2)}@mail.test`);
        const seen = await stranger.get(`/approvals/${id}`);
        assert.equal(seen.status, 404);
        assert.match(seen.headers.get("content-type") ?? "", /^text\/html/);
        assert.doesNotMatch(seen.text, new RegExp(REASON));
        const csrf = field((await stranger.get("/account")).text, "_csrf");
        const forged = await stranger.post(`/approvals/${id}/approve`, { _csrf: csrf });
        assert.equal(forged.status, 404);
        assert.equal((await poll(agent, id)).json.status, "pending");
        const signedOut = await new Browserless(h.url).get(`/approvals/${id}`);
        assert.equal(signedOut.status, 303);
        assert.equal(signedOut.location, `/signin?next=${encodeURIComponent(`/approvals/${id}`)}`);
        // The sign-in page says why, naming the service only (not the agent's words).
        const signin = await new Browserless(h.url).get(signedOut.location as string);
        assert.match(
          signin.text,
          /One of your agents asks for more at <strong>[^<]+<\/strong>\. Sign in to see the request/,
        );
        assert.doesNotMatch(signin.text, new RegExp(REASON));
      });

      test("10 requests a minute per agent, and a budget per person across their agents: 429 with Retry-After", async () => {
        const { agent, email } = await linked();
        // One second into an hour: no window of either limit ends during the test.
        await h.alignTo(3600);
        for (let i = 0; i < 10; i++) await asked(agent, { permissions: ["notes:write"] });
        const perAgent = await ask(agent, { permissions: ["notes:write"] });
        assertError(perAgent, 429, "rate_limited");
        assert.match(perAgent.json.error.message, /this agent/);
        assertRetryAfter(perAgent, 1, 60);
        // Another agent of the same person: the person's budget (15 an hour here) has 5 left.
        const { agent: second } = await linked(email);
        for (let i = 0; i < 5; i++) await asked(second, { permissions: ["notes:write"] });
        const perPerson = await ask(second, { permissions: ["notes:write"] });
        assertError(perPerson, 429, "rate_limited");
        assert.match(perPerson.json.error.message, /this person/);
        assertRetryAfter(perPerson, 60, 3600);
      });
    });
  }
});
