import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createTestCA, type TestCA } from "@proto/testkit";
import { putGrant } from "../src/trust/authority/grants.js";
import * as store from "../src/trust/store.js";
import { Browserless, field, type PageAnswer } from "./support/browser-session.js";
import { signInByEmail } from "./support/people.js";
import { type Site, type SiteHost, startSiteHost } from "./support/sites.js";
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
 * Issue 38, the grant forms on `/account` as any client can post them: every field is checked on
 * the server, and every mistake (an amount out of bounds or of the wrong shape, a permission the
 * service does not declare, a stale form, a forged passkey answer, someone else's grant) is
 * answered with a page that says what is wrong, never a 500 and never a change. The browser side
 * is trust-grants.browser.test.ts.
 */

reportSkippedVariants();

const PERMISSIONS = {
  "notes:read": { description: "Read your notes", default: true },
  "notes:delete": { description: "Delete your notes", phishing_resistant: true },
  purchase: { description: "Pay for pinned notes", currency: "EUR" },
  tip: { description: "Tip the author", currency: "JPY" },
};

describe("grant forms refuse every mistake with a page (issue 38)", { timeout: 180_000 }, () => {
  let ca: TestCA;
  let sites: SiteHost;
  before(async () => {
    ca = await createTestCA();
    sites = await startSiteHost(ca, 3 * STORE_VARIANTS.length);
  });
  after(() => sites?.close());

  for (const variant of STORE_VARIANTS) {
    describe(`(${variant.name})`, () => {
      let h: TrustHarness;
      let notes: Site;
      let unused: Site;
      let broken: Site;
      let agent: Agent;
      let bindingId: string;
      let grantId: string;
      const email = `ada-${Math.random().toString(36).slice(2)}@mail.test`;
      let ada: Browserless;

      before(async () => {
        notes = sites.site();
        unused = sites.site();
        broken = sites.site();
        notes.serveDiscovery(notes.document({ permissions: PERMISSIONS }));
        unused.serveDiscovery(unused.document({ permissions: PERMISSIONS }));
        broken.setHandler("/.well-known/proto", (_req, res) => {
          res.writeHead(500);
          res.end();
        });
        const port = await freePort();
        const origin = `http://127.0.0.1:${port}`;
        h = await startTrustHarness(variant, {
          port,
          fetchCa: ca.certPem,
          env: {
            TRUST_PUBLIC_URL: origin,
            TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS,
            PROTO_FETCH_ALLOW_PRIVATE: "1",
            PROTO_FETCH_RESOLVE: sites.resolveEntries(),
          },
        });
        agent = newAgent();
        ({ bindingId } = await h.link(agent, email));
        for (const site of [notes, broken]) assert.equal((await h.mint(agent, site.did)).status, 200);
        const db = h.app.service.database.db;
        const binding = await store.findBinding(db, bindingId);
        assert.ok(binding);
        const grant = await db.transaction().execute((trx) =>
          putGrant(
            trx,
            {
              bindingId,
              humanId: binding.human_id,
              aud: notes.did,
              serviceUrl: `https://${notes.authority}`,
              now: Date.now(),
              method: "passkey",
            },
            {
              permissions: ["notes:read", "purchase"],
              spendLimits: [{ permission: "purchase", currency: "EUR", perTransaction: 2000 }],
              expiresAt: null,
            },
          ),
        );
        grantId = grant.id;
        ada = new Browserless(h.url);
        await signInByEmail(h, ada, email);
      });
      after(() => h?.close());

      /** The grant's page as Ada sees it: its CSRF token and version, to post its form. */
      async function form(): Promise<{ _csrf: string; version: string }> {
        const page = await ada.get(`/account/grants/${grantId}`);
        assert.equal(page.status, 200, page.text);
        return { _csrf: field(page.text, "_csrf"), version: field(page.text, "version") };
      }

      /** An HTML page of `status` that says `words`. */
      function saysPage(answer: PageAnswer, status: number, words: RegExp): void {
        assert.equal(answer.status, status, answer.text);
        assert.match(answer.headers.get("content-type") ?? "", /^text\/html/);
        assert.match(answer.text, words);
      }

      async function historyLength(): Promise<number> {
        const page = await ada.get(`/account/grants/${grantId}`);
        return [...page.text.matchAll(/<li><p><strong>(Granted|Changed|Revoked|Used up)<\/strong>/g)].length;
      }

      test("amounts, periods, dates and names are checked, each mistake named on the page", async () => {
        const base = { ...(await form()), "permit.notes:read": "1", "permit.purchase": "1", "permit.tip": "1" };
        const cases: [Record<string, string>, RegExp][] = [
          [
            { "tx.purchase": "10000000000.01" },
            /Most per transaction for “Pay for pinned notes” must be at most 10,000,000,000\.00 EUR/,
          ],
          [{ "tx.purchase": "-5" }, /must be an amount in EUR, like 20 or 20\.50/],
          [{ "tx.purchase": "1e3" }, /must be an amount in EUR, like 20 or 20\.50/],
          [{ "tx.tip": "1.5" }, /Most per transaction for “Tip the author” must be a whole number of JPY/],
          [
            { "pp.purchase": "100", "period.purchase": "year" },
            /The period for “Pay for pinned notes” must be a day, a week or a month/,
          ],
          [{ "permit.admin": "1" }, /“admin” is not a permission this service declares/],
          [{ ends: "2026-02-30" }, /The end date must be a date, like 2027-01-31/],
          [{ ends: "2099-01-01" }, /The end date must be within five years/],
        ];
        for (const [fields, words] of cases) {
          const answer = await ada.post(`/account/grants/${grantId}`, { ...base, ...fields });
          saysPage(answer, 400, words);
          assert.match(answer.text, /Nothing was saved\./, JSON.stringify(fields));
        }
        // Outside what the form is (a field it does not have, a value longer than its inputs take):
        // refused before any handler, still as a page.
        for (const fields of [{ evil: "1" }, { "tx.purchase": "9".repeat(100) }] as Record<string, string>[]) {
          const answer = await ada.post(`/account/grants/${grantId}`, { ...base, ...fields });
          assert.equal(answer.status, 400, answer.text);
          assert.match(answer.headers.get("content-type") ?? "", /^text\/html/);
        }
        // An amount at the bound is taken (lowering the limit: the session suffices).
        const lowered = await ada.post(`/account/grants/${grantId}`, { ...base, "tx.purchase": "19,5" });
        assert.equal(lowered.status, 303, lowered.text);
        const claims = (await h.mint(agent, notes.did)).json.jwt as string;
        const payload = JSON.parse(Buffer.from(claims.split(".")[1] as string, "base64url").toString("utf8"));
        assert.equal(payload.scope, "notes:read purchase tip");
        assert.deepEqual(payload.authorization_details, [
          { type: "spend_limit", permission: "purchase", currency: "EUR", per_transaction: 1950 },
        ]);
      });

      test("a widening change by session alone is shown back, never saved; a forged passkey answer is refused", async () => {
        const before = await historyLength();
        assert.ok(before >= 1, "the history lists the grant's events");
        const fields = {
          ...(await form()),
          "permit.notes:read": "1",
          "permit.purchase": "1",
          "permit.notes:delete": "1",
        };
        const asked = await ada.post(`/account/grants/${grantId}`, fields);
        saysPage(asked, 200, /Confirm with your passkey/);
        assert.match(asked.text, /Adds: Delete your notes \(notes:delete\)/);
        // Ada has no passkey: the page says how to get one, and offers no button.
        assert.match(asked.text, /You have no passkey yet/);
        assert.doesNotMatch(asked.text, /data-passkey="confirm"/);
        const forged = await ada.post(`/account/grants/${grantId}`, { ...fields, passkey: "{not json" });
        saysPage(forged, 400, /Not confirmed\.<\/strong> The browser&#39;s answer is not well formed/);
        const replayed = await ada.post(`/account/grants/${grantId}`, {
          ...fields,
          passkey: JSON.stringify({
            id: "x",
            response: { clientDataJSON: Buffer.from('{"challenge":"abc"}').toString("base64url") },
          }),
        });
        saysPage(replayed, 400, /This request expired or was already used/);
        assert.equal(await historyLength(), before, "nothing saved");
        assert.doesNotMatch(
          (await ada.get(`/account/grants/${grantId}`)).text,
          /name="permit\.notes:delete" value="1" checked/,
        );
      });

      test("a stale or incomplete form saves nothing; someone else, a signed-out browser and another site get nowhere", async () => {
        const { _csrf, version } = await form();
        const fields = { _csrf, "permit.notes:read": "1", "permit.purchase": "1", "tx.purchase": "1" };
        saysPage(await ada.post(`/account/grants/${grantId}`, fields), 400, /The form was incomplete/);
        const older = String(Number(version) - 1);
        saysPage(
          await ada.post(`/account/grants/${grantId}`, { ...fields, version: older }),
          409,
          /changed since you opened the page/,
        );

        const eve = new Browserless(h.url);
        await signInByEmail(h, eve, `eve-${Math.random().toString(36).slice(2)}@mail.test`);
        const eveCsrf = field((await eve.get("/account")).text, "_csrf");
        saysPage(await eve.get(`/account/grants/${grantId}`), 404, /Unknown permissions/);
        saysPage(await eve.post(`/account/grants/${grantId}`, { _csrf: eveCsrf, version }), 404, /Unknown permissions/);
        saysPage(await eve.post(`/account/grants/${grantId}/revoke`, { _csrf: eveCsrf }), 404, /Unknown permissions/);
        const stranger = `/account/bindings/${bindingId}/grants/new?aud=${encodeURIComponent(unused.did)}`;
        saysPage(await eve.get(stranger), 404, /Unknown agent or service/);

        const signedOut = new Browserless(h.url);
        const away = await signedOut.get(`/account/grants/${grantId}`);
        assert.equal(away.status, 303);
        assert.equal(away.location, `/signin?next=${encodeURIComponent(`/account/grants/${grantId}`)}`);
        const foreign = await ada.send("POST", `/account/grants/${grantId}/revoke`, {
          form: { _csrf },
          headers: { "sec-fetch-site": "same-site" },
        });
        saysPage(foreign, 403, /This form came from another site/);
        assert.equal((await h.mint(agent, notes.did)).status, 200, "still not revoked");
      });

      test("Set permissions: only for a service the agent used, and only while the service's list can be read", async () => {
        const unusedPage = await ada.get(
          `/account/bindings/${bindingId}/grants/new?aud=${encodeURIComponent(unused.did)}`,
        );
        saysPage(unusedPage, 404, /it has not used that service/);
        // Used without a grant, but its document answers 500: nothing to set permissions from.
        const down = await ada.get(`/account/bindings/${bindingId}/grants/new?aud=${encodeURIComponent(broken.did)}`);
        saysPage(down, 503, /could not be loaded/);
        assert.match(down.headers.get("retry-after") ?? "", /^\d+$/);
        const existing = await ada.get(
          `/account/bindings/${bindingId}/grants/new?aud=${encodeURIComponent(notes.did)}`,
        );
        assert.equal(existing.status, 303);
        assert.equal(existing.location, `/account/grants/${grantId}`);
      });
    });
  }
});
