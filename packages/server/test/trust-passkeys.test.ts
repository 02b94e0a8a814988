import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";
import type { OutboxMailer } from "../src/trust/mail.js";
import { Browserless, field } from "./support/browser-session.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";
import { RELAXED_RATE_LIMITS, startTrustHarness, type TrustHarness } from "./support/trust.js";

/**
 * Issue 18, the passkey endpoints as a hostile or broken client meets them (the ceremonies
 * themselves run in a real browser in trust-passkeys.browser.test.ts): cookies fit for https,
 * every bad answer a 4xx in JSON, nothing without a CSRF token, a session or the browser's own
 * ceremony, and a bound on ceremonies started.
 */

reportSkippedVariants();

const SHOP = "did:web:shop.example";
const CALLBACK = "https://shop.example/callback";

for (const variant of STORE_VARIANTS) {
  describe(`passkey endpoints (${variant.name})`, () => {
    let h: TrustHarness;
    before(async () => {
      // The harness's public URL is https://trust.test: secure cookies, RP ID trust.test.
      h = await startTrustHarness(variant, {
        env: {
          TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS,
          TRUST_OIDC_CLIENTS: JSON.stringify([{ client_id: SHOP, service_did: SHOP, redirect_uris: [CALLBACK] }]),
        },
      });
    });
    after(() => h?.close());

    async function signinPage(b: Browserless): Promise<string> {
      const page = await b.get("/signin");
      assert.equal(page.status, 200);
      return field(page.text, "_csrf");
    }

    test("sign-in options: a challenge for this RP with user verification, bound to a __Host- cookie", async () => {
      const b = new Browserless(h.url);
      const csrf = await signinPage(b);
      const answer = await b.send("POST", "/signin/passkey/options", { json: { _csrf: csrf } });
      assert.equal(answer.status, 200, answer.text);
      assert.equal(answer.headers.get("cache-control"), "no-store");
      assert.equal(answer.json.rpId, "trust.test");
      assert.equal(answer.json.userVerification, "required");
      assert.match(String(answer.json.challenge), /^[A-Za-z0-9_-]{43}$/);
      const cookie = answer.setCookies.find((c) => c.startsWith("__Host-proto_webauthn="));
      assert.ok(cookie, answer.setCookies.join("\n"));
      // Browsers refuse a __Host- cookie unless it is Secure, has Path=/ and no Domain.
      assert.match(cookie, /; Path=\/(;|$)/);
      assert.match(cookie, /; Secure(;|$)/);
      assert.match(cookie, /; HttpOnly(;|$)/);
      assert.match(cookie, /; SameSite=Strict(;|$)/i);
      assert.doesNotMatch(cookie, /Domain=/i);
    });

    test("an answer that is not one, or from a browser without the ceremony, is a 400 in JSON", async () => {
      const b = new Browserless(h.url);
      const csrf = await signinPage(b);
      const noCeremony = await b.send("POST", "/signin/passkey", { json: { _csrf: csrf, response: {} } });
      assert.equal(noCeremony.status, 400, noCeremony.text);
      assert.equal(noCeremony.json.error, "challenge");
      await b.send("POST", "/signin/passkey/options", { json: { _csrf: csrf } });
      for (const response of [
        {},
        { id: "x", response: { clientDataJSON: "not base64 json" } },
        { id: "x", response: { clientDataJSON: Buffer.from('{"challenge":"made-up"}').toString("base64url") } },
        { id: "x".repeat(5000), response: { clientDataJSON: Buffer.from("[1,2]").toString("base64url") } },
      ]) {
        const refused = await b.send("POST", "/signin/passkey", { json: { _csrf: csrf, response } });
        assert.equal(refused.status, 400, refused.text);
        assert.equal(refused.json.error, "challenge", refused.text);
        assert.equal(typeof refused.json.message, "string");
      }
      // Not an object at all: refused by the schema, not by a crash.
      const text = await b.send("POST", "/signin/passkey", { json: { _csrf: csrf, response: "hello" } });
      assert.equal(text.status, 400);
    });

    test("nothing without the CSRF token; adding a passkey needs a session", async () => {
      const b = new Browserless(h.url);
      const csrf = await signinPage(b);
      const forged = await b.send("POST", "/signin/passkey/options", { json: {} });
      assert.equal(forged.status, 403);
      const signedOut = await b.send("POST", "/account/passkeys/options", { json: { _csrf: csrf } });
      assert.equal(signedOut.status, 401, signedOut.text);
      assert.equal(signedOut.json.error, "signed_out");
      const register = await b.send("POST", "/account/passkeys", { json: { _csrf: csrf, name: "x", response: {} } });
      assert.equal(register.status, 401, register.text);
      const remove = await b.send("POST", "/account/passkeys/remove", { form: { _csrf: csrf, id: "x" } });
      assert.equal(remove.status, 303);
      assert.equal(remove.location, "/signin?next=%2Faccount");
    });

    test("acr_values=phishing-resistant: an e-mail session is asked for its passkey, or refused with prompt=none", async () => {
      const b = new Browserless(h.url);
      const email = `mail-${Math.random().toString(36).slice(2)}@mail.test`;
      const csrf = await signinPage(b);
      assert.equal((await b.post("/signin/email", { _csrf: csrf, next: "/account", email })).status, 200);
      const mail = (h.app.mailer as OutboxMailer).entries.find((m) => m.to === email);
      const token = decodeURIComponent(/\/signin\/email\/verify\?token=(\S+)/.exec(mail?.text ?? "")?.[1] ?? "");
      const verify = await b.get(`/signin/email/verify?token=${encodeURIComponent(token)}`);
      const signedIn = await b.post("/signin/email/verify", { _csrf: field(verify.text, "_csrf"), token });
      assert.equal(signedIn.status, 303);
      const query = (extra: Record<string, string>) =>
        new URLSearchParams({
          client_id: SHOP,
          redirect_uri: CALLBACK,
          response_type: "code",
          scope: "openid",
          code_challenge: createHash("sha256").update(randomBytes(32).toString("base64url")).digest("base64url"),
          code_challenge_method: "S256",
          state: "s-1",
          ...extra,
        });

      const silent = await b.get(`/oidc/authorize?${query({ acr_values: "phishing-resistant", prompt: "none" })}`);
      assert.equal(silent.status, 302, silent.text);
      const back = new URL(silent.location ?? "");
      assert.equal(`${back.origin}${back.pathname}`, CALLBACK);
      assert.equal(back.searchParams.get("error"), "interaction_required");
      assert.equal(back.searchParams.get("state"), "s-1");
      assert.equal(back.searchParams.get("code"), null);

      const asked = await b.get(`/oidc/authorize?${query({ acr_values: "phishing-resistant", max_age: "600" })}`);
      assert.equal(asked.status, 303, asked.text);
      const signin = new URL(asked.location ?? "", "https://trust.test");
      assert.equal(signin.pathname, "/signin");
      assert.equal(signin.searchParams.get("passkey"), "required");
      assert.match(signin.searchParams.get("next") ?? "", /^\/oidc\/authorize\?.*acr_values=phishing-resistant/);
      // Still signed in (by e-mail): being asked for a passkey signs nobody out.
      assert.equal((await b.get("/account")).status, 200);
      const page = await b.get(signin.pathname + signin.search);
      assert.match(page.text, /To go on, sign in with a passkey/);
    });

    test("ceremonies are bounded per client address: 429 with Retry-After", async () => {
      const b = new Browserless(h.url);
      const csrf = await signinPage(b);
      let last = await b.send("POST", "/signin/passkey/options", { json: { _csrf: csrf } });
      for (let i = 0; i < 40 && last.status === 200; i++) {
        last = await b.send("POST", "/signin/passkey/options", { json: { _csrf: csrf } });
      }
      assert.equal(last.status, 429, last.text);
      assert.equal(last.json.error, "rate_limited");
      assert.match(last.headers.get("retry-after") ?? "", /^\d+$/);
    });
  });
}
