import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { hasRawControlCharacter, hostileRedirects, unescapeHtml } from "@proto/testkit";
import { decodeJwt, decodeProtectedHeader } from "jose";
import * as client from "openid-client";
import type { OutboxMailer } from "../src/trust/mail.js";
import { Browserless, field, type PageAnswer } from "./support/browser-session.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";
import {
  assertError,
  assertRetryAfter,
  freePort,
  newAgent,
  RELAXED_RATE_LIMITS,
  startTrustHarness,
  type TrustHarness,
} from "./support/trust.js";

/**
 * Issue 5: the attestor as an OpenID provider, driven by a real relying-party library
 * (openid-client), and the sign-in, session and revocation rules a browser relies on, driven with
 * fetch and a cookie jar.
 */

reportSkippedVariants();

const SERVICE_DID = "did:web:rp.example";
const REDIRECT_URI = "http://127.0.0.1:9/oidc/callback";
const OTHER_CLIENT = "did:web:other-rp.example";
const OTHER_REDIRECT = "https://other-rp.example/callback";
const CODE_TTL = 120;

let counter = 0;
const address = (label: string) => `${label}-${++counter}-${Math.random().toString(36).slice(2, 8)}@mail.test`;

const sessionCookieSet = (answer: PageAnswer) =>
  answer.setCookies.some((c) => c.startsWith("proto_session=") && !c.startsWith("proto_session=;"));

describe("OpenID provider and sign-in", () => {
  for (const variant of STORE_VARIANTS) {
    describe(`(${variant.name})`, { timeout: 120_000 }, () => {
      let h: TrustHarness;
      let trustUrl: string;
      let outbox: OutboxMailer;

      before(async () => {
        const port = await freePort();
        trustUrl = `http://127.0.0.1:${port}`;
        h = await startTrustHarness(variant, {
          port,
          env: {
            TRUST_PUBLIC_URL: trustUrl,
            TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS,
            TRUST_OIDC_CLIENTS: JSON.stringify([
              { client_id: SERVICE_DID, service_did: SERVICE_DID, redirect_uris: [REDIRECT_URI] },
              { client_id: OTHER_CLIENT, service_did: OTHER_CLIENT, redirect_uris: [OTHER_REDIRECT] },
            ]),
          },
        });
        outbox = h.app.mailer as OutboxMailer;
        assert.ok(Array.isArray(outbox.entries), "without SMTP_URL the attestor keeps mail in its outbox");
      });
      after(() => h.close());

      /** The newest sign-in link mailed to `email`. */
      function magicLink(email: string): string {
        const mail = outbox.entries.find((m) => m.to === email);
        assert.ok(mail, `a mail to ${email}`);
        assert.equal(mail.subject, "Your sign-in link");
        const link = /https?:\/\/\S+\/signin\/email\/verify\?token=\S+/.exec(mail.text)?.[0];
        assert.ok(link, mail.text);
        assert.equal(new URL(link).origin, trustUrl);
        return link;
      }

      /** Asks for a sign-in mail from the sign-in page (as the form does), answering the link. */
      async function requestLink(b: Browserless, email: string, signinPath = "/signin", align = true): Promise<string> {
        // The sign-in form allows 10 mails a minute per address of the client: start a fresh window.
        if (align) await h.alignTo(60);
        const page = await b.get(signinPath);
        assert.equal(page.status, 200, page.text);
        const sent = await b.send("POST", "/signin/email", {
          form: { _csrf: field(page.text, "_csrf"), next: field(page.text, "next"), email },
        });
        assert.equal(sent.status, 200, sent.text);
        return magicLink(email);
      }

      /** Opens the link (a page with a button) and presses the button; answers the redirect. */
      async function useLink(b: Browserless, link: string): Promise<PageAnswer> {
        const page = await b.get(link);
        assert.equal(page.status, 200, page.text);
        assert.equal(sessionCookieSet(page), false, "opening the link signs nobody in");
        return b.send("POST", "/signin/email/verify", {
          form: { _csrf: field(page.text, "_csrf"), token: field(page.text, "token") },
        });
      }

      async function signIn(b: Browserless, email: string, signinPath = "/signin", align = true): Promise<PageAnswer> {
        const done = await useLink(b, await requestLink(b, email, signinPath, align));
        assert.equal(done.status, 303, done.text);
        assert.ok(sessionCookieSet(done), "a session cookie after sign-in");
        return done;
      }

      /** A relying party configured by discovery, its clock set to the attestor's (tests move it). */
      async function relyingParty(record?: Response[]): Promise<client.Configuration> {
        const offset = (await h.request("POST", "/__test/clock", { body: {} })).json.offset_seconds as number;
        return client.discovery(
          new URL(trustUrl),
          SERVICE_DID,
          { id_token_signed_response_alg: "EdDSA", [client.clockSkew]: offset },
          client.None(),
          {
            execute: [client.allowInsecureRequests, client.enableNonRepudiationChecks],
            [client.customFetch]: async (url, options) => {
              const response = await fetch(url, options as RequestInit);
              record?.push(response.clone());
              return response;
            },
          },
        );
      }

      interface Pkce {
        verifier: string;
        challenge: string;
      }
      async function pkce(): Promise<Pkce> {
        const verifier = client.randomPKCECodeVerifier();
        return { verifier, challenge: await client.calculatePKCECodeChallenge(verifier) };
      }

      /** Presses Allow or Deny on the consent page `page`, posting its form as a browser does. */
      async function answerConsent(b: Browserless, page: PageAnswer, decision: "allow" | "deny"): Promise<PageAnswer> {
        assert.equal(page.status, 200, page.text);
        assert.match(page.text, /<form method="post" action="\/oidc\/consent">/);
        const form: Record<string, string> = { decision };
        for (const m of page.text.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)) {
          form[m[1] as string] = unescapeHtml(m[2] as string);
        }
        return b.send("POST", "/oidc/consent", { form });
      }

      /** `/oidc/authorize` with a session: answers the code the redirect carries. */
      async function authorize(b: Browserless, p: Pkce, extra: Record<string, string> = {}): Promise<string> {
        const query = new URLSearchParams({
          client_id: SERVICE_DID,
          redirect_uri: REDIRECT_URI,
          response_type: "code",
          scope: "openid",
          code_challenge: p.challenge,
          code_challenge_method: "S256",
          state: "st-1",
          ...extra,
        });
        let answer = await b.get(`/oidc/authorize?${query}`);
        // A person's first sign-in to this client asks first (the consent tests look at the page).
        if (answer.status === 200) answer = await answerConsent(b, answer, "allow");
        assert.equal(answer.status, 302, answer.text);
        const target = new URL(answer.location ?? "");
        assert.equal(`${target.origin}${target.pathname}`, REDIRECT_URI);
        const code = target.searchParams.get("code");
        assert.ok(code, answer.location);
        return code;
      }

      const tokenForm = (code: string, verifier: string): Record<string, string> => ({
        grant_type: "authorization_code",
        code,
        code_verifier: verifier,
        client_id: SERVICE_DID,
        redirect_uri: REDIRECT_URI,
      });

      /** An OAuth error: the status, `{error, error_description}` only, JSON, never cached. */
      function assertOAuthError(answer: PageAnswer, status: number, error: string): void {
        assert.equal(answer.status, status, answer.text);
        assert.match(answer.headers.get("content-type") ?? "", /^application\/json/);
        assert.deepEqual(Object.keys(answer.json).sort(), ["error", "error_description"], answer.text);
        assert.equal(answer.json.error, error, answer.text);
        assert.equal(typeof answer.json.error_description, "string");
        assert.equal(answer.headers.get("cache-control"), "no-store");
      }

      /** An error page, and no redirect anywhere. */
      function assertErrorPage(answer: PageAnswer): void {
        assert.equal(answer.status, 400, answer.text);
        assert.equal(answer.location, undefined);
        assert.equal(answer.headers.get("location"), null);
        assert.match(answer.headers.get("content-type") ?? "", /^text\/html/);
        assert.match(answer.headers.get("content-security-policy") ?? "", /default-src 'none'/);
        assert.doesNotMatch(answer.text, /code=/);
      }

      let alice: Browserless;
      let aliceEmail: string;
      before(async () => {
        alice = new Browserless(trustUrl);
        aliceEmail = address("alice");
        await signIn(alice, aliceEmail);
      });

      test("discovery: every fixed member, cached 300 seconds; the RFC 8414 document is the same", async () => {
        const answer = await new Browserless(trustUrl).get("/.well-known/openid-configuration");
        assert.equal(answer.status, 200);
        assert.match(answer.headers.get("content-type") ?? "", /^application\/json/);
        assert.match(answer.headers.get("cache-control") ?? "", /(^|[ ,])max-age=300($|[ ,])/);
        assert.deepEqual(answer.json, {
          issuer: trustUrl,
          authorization_endpoint: `${trustUrl}/oidc/authorize`,
          token_endpoint: `${trustUrl}/oidc/token`,
          registration_endpoint: `${trustUrl}/oidc/register`,
          jwks_uri: `${trustUrl}/.well-known/jwks.json`,
          scopes_supported: ["openid"],
          response_types_supported: ["code"],
          response_modes_supported: ["query"],
          grant_types_supported: ["authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:jwt-bearer"],
          subject_types_supported: ["pairwise"],
          id_token_signing_alg_values_supported: ["EdDSA"],
          code_challenge_methods_supported: ["S256"],
          token_endpoint_auth_methods_supported: ["none"],
          claims_supported: ["iss", "sub", "aud", "exp", "iat", "nonce"],
          acr_values_supported: ["phishing-resistant"],
          client_id_metadata_document_supported: true,
          authorization_response_iss_parameter_supported: true,
        });
        const oauth = await new Browserless(trustUrl).get("/.well-known/oauth-authorization-server");
        assert.equal(oauth.status, 200);
        assert.equal(oauth.headers.get("access-control-allow-origin"), "*");
        assert.deepEqual(oauth.json, answer.json, "one document under both names");
      });

      test("the whole flow with openid-client: sign-in first, then authorize resumes; sub equals the attestation's sub_h", async () => {
        const b = new Browserless(trustUrl);
        const email = address("flow");
        const recorded: Response[] = [];
        // A fresh rate-limit window now, so the clock does not move between discovery and the grant.
        await h.alignTo(60);
        const rp = await relyingParty(recorded);
        assert.equal(rp.serverMetadata().issuer, trustUrl);
        const p = await pkce();
        const state = client.randomState();
        const nonce = client.randomNonce();
        const authUrl = client.buildAuthorizationUrl(rp, {
          redirect_uri: REDIRECT_URI,
          scope: "openid",
          code_challenge: p.challenge,
          code_challenge_method: "S256",
          state,
          nonce,
        });
        assert.equal(`${authUrl.origin}${authUrl.pathname}`, `${trustUrl}/oidc/authorize`);

        // No session: the person is sent to sign in, and the request resumes afterwards.
        const first = await b.get(authUrl.href);
        assert.equal(first.status, 303, first.text);
        const signinPath = first.location ?? "";
        assert.ok(signinPath.startsWith("/signin?next="), signinPath);
        const resumeAt = new URL(signinPath, trustUrl).searchParams.get("next") ?? "";
        assert.ok(resumeAt.startsWith("/oidc/authorize?"), resumeAt);
        const signedIn = await signIn(b, email, signinPath, false);
        assert.equal(signedIn.location, resumeAt);
        // The first sign-in to this service asks what it may receive; Allow goes on to the service.
        const asked = await b.get(signedIn.location ?? "");
        assert.match(asked.text, /Sign in to rp\.example\?/);
        const resumed = await answerConsent(b, asked, "allow");
        assert.equal(resumed.status, 302, resumed.text);
        assert.equal(resumed.headers.get("cache-control"), "no-store");
        const callbackUrl = new URL(resumed.location ?? "");
        assert.equal(`${callbackUrl.origin}${callbackUrl.pathname}`, REDIRECT_URI);
        assert.equal(callbackUrl.searchParams.get("state"), state);

        const tokens = await client.authorizationCodeGrant(rp, callbackUrl, {
          pkceCodeVerifier: p.verifier,
          expectedState: state,
          expectedNonce: nonce,
          idTokenExpected: true,
        });
        const claims = tokens.claims();
        assert.ok(claims);
        assert.equal(claims.iss, trustUrl);
        assert.equal(claims.aud, SERVICE_DID);
        assert.equal(claims.nonce, nonce);
        assert.equal(typeof claims.iat, "number");
        assert.equal(claims.exp, claims.iat + 300);

        // The raw token response: Bearer, 300 seconds, not cached.
        const tokenResponse = recorded.find((r) => r.url === `${trustUrl}/oidc/token`);
        assert.ok(tokenResponse, "the token endpoint was called");
        assert.equal(tokenResponse.status, 200);
        assert.equal(tokenResponse.headers.get("cache-control"), "no-store");
        const raw = (await tokenResponse.json()) as Record<string, unknown>;
        assert.equal(raw.token_type, "Bearer");
        assert.equal(raw.expires_in, 300);
        assert.equal(raw.id_token, tokens.id_token);
        const header = decodeProtectedHeader(tokens.id_token as string);
        assert.equal(header.alg, "EdDSA");
        // openid-client checked the signature against the key set it fetched from jwks_uri.
        assert.ok(recorded.some((r) => r.url === `${trustUrl}/.well-known/jwks.json` && r.status === 200));
        const jwks = (await h.request("GET", "/.well-known/jwks.json")).json.keys as { kid: string }[];
        assert.ok(
          jwks.some((k) => k.kid === header.kid),
          "signed by a key of the key set",
        );

        // The same person's agent, minting for the same service, carries the same pseudonym.
        const { agent } = await h.link(newAgent(), email);
        const minted = await h.mint(agent, SERVICE_DID);
        assert.equal(minted.status, 200, minted.text);
        assert.equal(decodeJwt(minted.json.jwt).sub_h, claims.sub);
        // Another person gets another subject.
        const other = await h.link(newAgent(), aliceEmail);
        const otherMint = await h.mint(other.agent, SERVICE_DID);
        assert.notEqual(decodeJwt(otherMint.json.jwt).sub_h, claims.sub);
      });

      test("with a session, authorize answers at once; state is echoed and the id_token carries no nonce when none was sent", async () => {
        const p = await pkce();
        const code = await authorize(alice, p, { state: "opaque state/with?chars" });
        const answer = await new Browserless(trustUrl).send("POST", "/oidc/token", {
          json: tokenForm(code, p.verifier),
        });
        assert.equal(answer.status, 200, answer.text);
        const claims = decodeJwt(answer.json.id_token);
        assert.equal(claims.nonce, undefined);
        assert.equal(claims.aud, SERVICE_DID);
      });

      test("consent: the first sign-in asks; Deny is access_denied at the client; Allow is remembered; disconnect asks again", async () => {
        const b = new Browserless(trustUrl);
        const email = address("consent");
        await signIn(b, email);
        const p = await pkce();
        const query = new URLSearchParams({
          client_id: SERVICE_DID,
          redirect_uri: REDIRECT_URI,
          response_type: "code",
          scope: "openid",
          code_challenge: p.challenge,
          code_challenge_method: "S256",
          state: "st <&> 1",
          nonce: "n-1",
        });
        const authorizeUrl = `/oidc/authorize?${query}`;
        // prompt=none cannot ask: the client hears consent_required.
        const silent = await b.get(`${authorizeUrl}&prompt=none`);
        assert.equal(silent.status, 302, silent.text);
        const silentBack = new URL(silent.location ?? "");
        assert.equal(silentBack.searchParams.get("error"), "consent_required");
        assert.equal(silentBack.searchParams.get("state"), "st <&> 1");

        const asked = await b.get(authorizeUrl);
        assert.equal(asked.status, 200, asked.text);
        assert.match(asked.headers.get("content-type") ?? "", /^text\/html/);
        assert.equal(asked.headers.get("cache-control"), "no-store");
        assert.match(asked.text, /<h1>Sign in to rp\.example\?<\/h1>/);
        assert.match(asked.text, /An identifier made for this service alone/);
        assert.match(asked.text, /Your e-mail address, or how you are verified/);
        assert.match(asked.text, /You return to<\/dt><dd><code title="[^"]+">127\.0\.0\.1:9<\/code>/);
        assert.ok(!asked.text.includes(email), "the page does not suggest the address is shared");

        // Deny: back to the registered redirect URI with access_denied and the state, no code.
        const denied = await answerConsent(b, asked, "deny");
        assert.equal(denied.status, 302, denied.text);
        const deniedBack = new URL(denied.location ?? "");
        assert.equal(`${deniedBack.origin}${deniedBack.pathname}`, REDIRECT_URI);
        assert.equal(deniedBack.searchParams.get("error"), "access_denied");
        assert.equal(deniedBack.searchParams.get("state"), "st <&> 1");
        assert.equal(deniedBack.searchParams.get("code"), null);
        // A Deny is not remembered: the next sign-in asks again, and nothing is listed.
        assert.equal((await b.get(authorizeUrl)).status, 200);
        assert.doesNotMatch((await b.get("/account")).text, /Disconnect/);

        // Allow: a code, which redeems to an id_token for this person.
        const allowed = await answerConsent(b, await b.get(authorizeUrl), "allow");
        assert.equal(allowed.status, 302, allowed.text);
        const code = new URL(allowed.location ?? "").searchParams.get("code");
        assert.ok(code, allowed.location);
        const tokens = await new Browserless(trustUrl).send("POST", "/oidc/token", {
          form: tokenForm(code, p.verifier),
        });
        assert.equal(tokens.status, 200, tokens.text);
        assert.equal(decodeJwt(tokens.json.id_token).nonce, "n-1");

        // Remembered: the next authorization (and prompt=none) goes straight back with a code.
        for (const target of [authorizeUrl, `${authorizeUrl}&prompt=none`]) {
          const again = await b.get(target);
          assert.equal(again.status, 302, again.text);
          assert.ok(new URL(again.location ?? "").searchParams.get("code"), again.location);
        }
        // prompt=consent asks even so.
        assert.equal((await b.get(`${authorizeUrl}&prompt=consent`)).status, 200);
        // Remembered per client: the other client still asks.
        const other = await b.get(
          `/oidc/authorize?${new URLSearchParams({ ...Object.fromEntries(query), client_id: OTHER_CLIENT, redirect_uri: OTHER_REDIRECT })}`,
        );
        assert.equal(other.status, 200, other.text);
        assert.match(other.text, /Sign in to other-rp\.example\?/);

        // The account page lists the service; disconnecting it makes the next sign-in ask again.
        const account = await b.get("/account");
        assert.match(account.text, /<h2>Connected services<\/h2>/);
        assert.match(account.text, /<strong title="did:web:rp\.example">rp\.example<\/strong>/);
        const disconnected = await b.send("POST", "/account/connections/disconnect", {
          form: { _csrf: field(account.text, "_csrf"), client_id: SERVICE_DID },
        });
        assert.equal(disconnected.status, 303, disconnected.text);
        const after = await b.get(disconnected.location ?? "");
        assert.match(after.text, /rp\.example is disconnected\./);
        assert.doesNotMatch(after.text, /<strong title="did:web:rp\.example">/);
        assert.equal((await b.get(authorizeUrl)).status, 200, "asked again after disconnecting");
        // Disconnecting what is not connected is a page saying so.
        const again = await b.send("POST", "/account/connections/disconnect", {
          form: { _csrf: field(after.text, "_csrf"), client_id: SERVICE_DID },
        });
        assert.equal(again.status, 404, again.text);
        assert.match(again.headers.get("content-type") ?? "", /^text\/html/);
      });

      test("consent form: no CSRF token, a tampered redirect_uri or an unknown decision are pages; signed out goes to sign-in", async () => {
        const b = new Browserless(trustUrl);
        await signIn(b, address("consent-form"));
        const p = await pkce();
        const params = {
          client_id: SERVICE_DID,
          redirect_uri: REDIRECT_URI,
          response_type: "code",
          scope: "openid",
          code_challenge: p.challenge,
          code_challenge_method: "S256",
          state: "s",
        };
        const page = await b.get(`/oidc/authorize?${new URLSearchParams(params)}`);
        const csrf = field(page.text, "_csrf");
        for (const [what, form, status] of [
          ["no CSRF token", { ...params, decision: "allow" }, 403],
          ["a forged CSRF token", { ...params, decision: "allow", _csrf: "forged" }, 403],
          [
            "an unregistered redirect_uri",
            { ...params, decision: "deny", _csrf: csrf, redirect_uri: "https://evil.example/cb" },
            400,
          ],
          ["an unknown decision", { ...params, decision: "maybe", _csrf: csrf }, 400],
        ] as const) {
          const answer = await b.send("POST", "/oidc/consent", { form });
          assert.equal(answer.status, status, `${what}: ${answer.text}`);
          assert.match(answer.headers.get("content-type") ?? "", /^text\/html/, what);
          assert.equal(answer.location, undefined, `${what}: no redirect`);
        }
        assert.equal((await b.get(`/oidc/authorize?${new URLSearchParams(params)}`)).status, 200, "nothing remembered");
        const signedOut = new Browserless(trustUrl);
        await signedOut.get("/signin");
        const out = await signedOut.send("POST", "/oidc/consent", {
          form: { ...params, decision: "allow", _csrf: field((await signedOut.get("/signin")).text, "_csrf") },
        });
        assert.equal(out.status, 303, out.text);
        assert.ok(out.location?.startsWith("/signin?next=%2Foidc%2Fauthorize%3F"), out.location);
      });

      test("token requests: form and JSON bodies both work", async () => {
        const rp = new Browserless(trustUrl);
        const p1 = await pkce();
        const form = await rp.send("POST", "/oidc/token", { form: tokenForm(await authorize(alice, p1), p1.verifier) });
        assert.equal(form.status, 200, form.text);
        assert.equal(form.json.token_type, "Bearer");
        assert.equal(form.headers.get("cache-control"), "no-store");
        const p2 = await pkce();
        const json = await rp.send("POST", "/oidc/token", { json: tokenForm(await authorize(alice, p2), p2.verifier) });
        assert.equal(json.status, 200, json.text);
        assert.equal(json.json.token_type, "Bearer");
        assert.equal(json.json.expires_in, 300);
        assert.equal(decodeJwt(form.json.id_token).sub, decodeJwt(json.json.id_token).sub);
      });

      test("PKCE: a wrong code_verifier is invalid_grant", async () => {
        const rp = new Browserless(trustUrl);
        const p = await pkce();
        const wrong = await rp.send("POST", "/oidc/token", {
          form: tokenForm(await authorize(alice, p), (await pkce()).verifier),
        });
        assertOAuthError(wrong, 400, "invalid_grant");
        // Through the library: it reports the provider's error.
        const rpLib = await relyingParty();
        const code = await authorize(alice, p, { state: "s" });
        await assert.rejects(
          client.authorizationCodeGrant(
            rpLib,
            new URL(`${REDIRECT_URI}?code=${encodeURIComponent(code)}&state=s&iss=${encodeURIComponent(trustUrl)}`),
            {
              pkceCodeVerifier: client.randomPKCECodeVerifier(),
              expectedState: "s",
            },
          ),
          (error: Error & { error?: string }) => error.error === "invalid_grant",
        );
      });

      test("codes are single use: a reused code, and two concurrent redemptions (one id_token, one invalid_grant)", async () => {
        const rp = new Browserless(trustUrl);
        const p = await pkce();
        const code = await authorize(alice, p);
        assert.equal((await rp.send("POST", "/oidc/token", { form: tokenForm(code, p.verifier) })).status, 200);
        assertOAuthError(
          await rp.send("POST", "/oidc/token", { form: tokenForm(code, p.verifier) }),
          400,
          "invalid_grant",
        );

        const raced = await authorize(alice, p);
        const answers = await Promise.all([
          rp.send("POST", "/oidc/token", { form: tokenForm(raced, p.verifier) }),
          rp.send("POST", "/oidc/token", { json: tokenForm(raced, p.verifier) }),
        ]);
        const ok = answers.filter((a) => a.status === 200);
        const refused = answers.filter((a) => a.status !== 200);
        assert.equal(ok.length, 1, answers.map((a) => a.text).join("\n"));
        assert.equal(typeof ok[0]?.json.id_token, "string");
        assert.equal(refused.length, 1);
        assertOAuthError(refused[0] as PageAnswer, 400, "invalid_grant");
      });

      test("a code older than about 120 seconds is invalid_grant", async () => {
        const p = await pkce();
        const fresh = await authorize(alice, p);
        await h.advance(CODE_TTL - 10);
        const inTime = await new Browserless(trustUrl).send("POST", "/oidc/token", {
          form: tokenForm(fresh, p.verifier),
        });
        assert.equal(inTime.status, 200, inTime.text);
        const code = await authorize(alice, p);
        await h.advance(CODE_TTL + 1);
        assertOAuthError(
          await new Browserless(trustUrl).send("POST", "/oidc/token", { form: tokenForm(code, p.verifier) }),
          400,
          "invalid_grant",
        );
      });

      test("a code is bound to its client and redirect_uri", async () => {
        const rp = new Browserless(trustUrl);
        const p = await pkce();
        assertOAuthError(
          await rp.send("POST", "/oidc/token", {
            form: { ...tokenForm(await authorize(alice, p), p.verifier), redirect_uri: `${REDIRECT_URI}/other` },
          }),
          400,
          "invalid_grant",
        );
        assertOAuthError(
          await rp.send("POST", "/oidc/token", {
            form: { ...tokenForm(await authorize(alice, p), p.verifier), client_id: OTHER_CLIENT },
          }),
          400,
          "invalid_grant",
        );
        const unknown = await rp.send("POST", "/oidc/token", {
          form: { ...tokenForm(await authorize(alice, p), p.verifier), client_id: "did:web:nobody.example" },
        });
        assert.equal(unknown.json.error, "invalid_client", unknown.text);
        assert.deepEqual(Object.keys(unknown.json).sort(), ["error", "error_description"]);
      });

      test("authorize: an unknown client or an unregistered redirect_uri is an error page, never a redirect", async () => {
        const p = await pkce();
        const base = {
          client_id: SERVICE_DID,
          redirect_uri: REDIRECT_URI,
          response_type: "code",
          scope: "openid",
          code_challenge: p.challenge,
          code_challenge_method: "S256",
          state: "s",
        };
        for (const [what, params] of [
          ["unknown client", { ...base, client_id: "did:web:evil.example" }],
          ["no client", { ...base, client_id: "" }],
          ["unregistered redirect_uri", { ...base, redirect_uri: "https://evil.example/callback" }],
          ["redirect_uri differing in one byte", { ...base, redirect_uri: `${REDIRECT_URI}/` }],
          ["another client's redirect_uri", { ...base, redirect_uri: OTHER_REDIRECT }],
          ["no redirect_uri", { ...base, redirect_uri: "" }],
        ] as const) {
          const query = new URLSearchParams(params);
          for (const who of [alice, new Browserless(trustUrl)]) {
            const answer = await who.get(`/oidc/authorize?${query}`);
            try {
              assertErrorPage(answer);
            } catch (error) {
              throw new Error(`${what}: ${(error as Error).message}`);
            }
          }
        }
      });

      test("authorize: plain PKCE, a missing challenge, a wrong response_type or scope go back to the client with an error", async () => {
        const p = await pkce();
        const base = {
          client_id: SERVICE_DID,
          redirect_uri: REDIRECT_URI,
          response_type: "code",
          scope: "openid",
          code_challenge: p.challenge,
          code_challenge_method: "S256",
          state: "keep-me",
        };
        for (const [params, error] of [
          [{ ...base, code_challenge_method: "plain", code_challenge: p.verifier }, "invalid_request"],
          [{ ...base, code_challenge_method: "" }, "invalid_request"],
          [{ ...base, code_challenge: "" }, "invalid_request"],
          [{ ...base, response_type: "token" }, "unsupported_response_type"],
          // Without openid it is a request for an access token, which must name its resource (RFC 8707).
          [{ ...base, scope: "profile" }, "invalid_target"],
        ] as const) {
          const answer = await alice.get(`/oidc/authorize?${new URLSearchParams(params)}`);
          assert.equal(answer.status, 302, answer.text);
          const target = new URL(answer.location ?? "");
          assert.equal(`${target.origin}${target.pathname}`, REDIRECT_URI);
          assert.equal(target.searchParams.get("error"), error, answer.location);
          assert.equal(target.searchParams.get("state"), "keep-me");
          assert.equal(target.searchParams.get("code"), null);
          assert.equal(target.searchParams.get("iss"), trustUrl, "RFC 9207: errors name the issuer too");
        }
      });

      test("token endpoint: unsupported grant_type, missing fields and unreadable bodies are OAuth errors, not the envelope", async () => {
        const rp = new Browserless(trustUrl);
        const p = await pkce();
        const code = await authorize(alice, p);
        assertOAuthError(
          await rp.send("POST", "/oidc/token", { form: { ...tokenForm(code, p.verifier), grant_type: "password" } }),
          400,
          "unsupported_grant_type",
        );
        assertOAuthError(
          await rp.send("POST", "/oidc/token", { form: { ...tokenForm(code, p.verifier), grant_type: "" } }),
          400,
          "invalid_request",
        );
        const { code: _code, ...noCode } = tokenForm(code, p.verifier);
        assertOAuthError(await rp.send("POST", "/oidc/token", { form: noCode }), 400, "invalid_request");
        const { code_verifier: _verifier, ...noVerifier } = tokenForm(code, p.verifier);
        for (const form of [noVerifier, { ...noVerifier, code_verifier: "" }]) {
          const missing = await rp.send("POST", "/oidc/token", { form });
          assertOAuthError(missing, 400, "invalid_request");
          assert.match(missing.json.error_description, /code_verifier/);
        }
        assertOAuthError(
          await rp.send("POST", "/oidc/token", { headers: { "content-type": "application/json" }, form: undefined }),
          400,
          "invalid_request",
        );
        const broken = await fetch(`${trustUrl}/oidc/token`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: "{not json",
        });
        assert.equal(broken.status, 400);
        assert.deepEqual(Object.keys((await broken.json()) as object).sort(), ["error", "error_description"]);
        // The code was never redeemed by those failures.
        assert.equal((await rp.send("POST", "/oidc/token", { form: tokenForm(code, p.verifier) })).status, 200);
      });

      test("CSRF: a form POST without its token is refused with 403", async () => {
        const b = new Browserless(trustUrl);
        await b.get("/signin");
        const email = address("csrf");
        const noToken = await b.send("POST", "/signin/email", { form: { email, next: "/account" } });
        assert.equal(noToken.status, 403, noToken.text);
        assert.match(noToken.headers.get("content-type") ?? "", /^text\/html/);
        assert.equal(
          outbox.entries.find((m) => m.to === email),
          undefined,
        );
        const forged = await b.send("POST", "/signin/email", { form: { email, _csrf: "forged" } });
        assert.equal(forged.status, 403);
        // Signed in, sign-out and revoke forms need the token too.
        assert.equal((await alice.send("POST", "/signout", { form: {} })).status, 403);
        assert.equal((await alice.get("/account")).status, 200, "the session survived the refused sign-out");
      });

      test("an expired magic link (16 minutes) answers 410 and signs nobody in", async () => {
        const b = new Browserless(trustUrl);
        const link = await requestLink(b, address("late"));
        const signinPage = await b.get("/signin");
        await h.advance(16 * 60);
        const opened = await b.get(link);
        assert.equal(opened.status, 410, opened.text);
        assert.match(opened.text, /no longer works/);
        const posted = await b.send("POST", "/signin/email/verify", {
          form: { _csrf: field(signinPage.text, "_csrf"), token: new URL(link).searchParams.get("token") ?? "" },
        });
        assert.equal(posted.status, 410, posted.text);
        assert.equal(sessionCookieSet(posted), false);
        assert.equal(b.cookie("proto_session"), undefined);
        assert.equal((await b.get("/account")).status, 303);
      });

      test("a magic link works once: the second use starts no second session", async () => {
        const b = new Browserless(trustUrl);
        const link = await requestLink(b, address("once"));
        const page = await b.get(link);
        const form = { _csrf: field(page.text, "_csrf"), token: field(page.text, "token") };
        const first = await b.send("POST", "/signin/email/verify", { form });
        assert.equal(first.status, 303);
        const session = b.cookie("proto_session");
        assert.ok(session);
        // The same form again: its CSRF token lapsed with the sign-in.
        const resubmitted = await b.send("POST", "/signin/email/verify", { form });
        assert.equal(resubmitted.status, 403, resubmitted.text);
        // With a current form token, the link itself is spent.
        const fresh = await b.get("/signin");
        const second = await b.send("POST", "/signin/email/verify", {
          form: { ...form, _csrf: field(fresh.text, "_csrf") },
        });
        assert.equal(second.status, 410, second.text);
        assert.equal(sessionCookieSet(second), false);
        assert.equal(b.cookie("proto_session"), session);
        // Someone else holding the link gets nothing either.
        const thief = new Browserless(trustUrl);
        const thiefPage = await thief.get("/signin");
        const stolen = await thief.send("POST", "/signin/email/verify", {
          form: { _csrf: field(thiefPage.text, "_csrf"), token: form.token },
        });
        assert.equal(stolen.status, 410);
        assert.equal(thief.cookie("proto_session"), undefined);
        assert.equal((await b.get(link)).status, 410);
      });

      test("session fixation: a planted session cookie is replaced at sign-in and is not valid", async () => {
        // An invented id.
        const b = new Browserless(trustUrl);
        b.cookies.set("proto_session", "planted-by-someone-else");
        await signIn(b, address("fixed"));
        assert.notEqual(b.cookie("proto_session"), "planted-by-someone-else");
        const planted = new Browserless(trustUrl);
        planted.cookies.set("proto_session", "planted-by-someone-else");
        assert.equal((await planted.get("/account")).status, 303);

        // A real session of the attacker's, planted in the victim's browser.
        const attacker = new Browserless(trustUrl);
        await signIn(attacker, address("attacker"));
        const attackerSession = attacker.cookie("proto_session") as string;
        const victim = new Browserless(trustUrl);
        victim.cookies.set("proto_session", attackerSession);
        const victimEmail = address("victim");
        await signIn(victim, victimEmail);
        assert.notEqual(victim.cookie("proto_session"), attackerSession);
        const victimAccount = await victim.get("/account");
        assert.equal(victimAccount.status, 200);
        assert.ok(victimAccount.text.includes(victimEmail));
        // The planted id does not ride along into the victim's account, and is no longer valid.
        const replay = await attacker.get("/account");
        assert.equal(replay.status, 303);
        assert.equal(replay.location, "/signin?next=%2Faccount");
      });

      test("a hostile next, in the link or posted with the form, lands on the account page after sign-in", async () => {
        for (const { name, value } of hostileRedirects(trustUrl)) {
          const b = new Browserless(trustUrl);
          const email = address("hostile-next");
          let page = await b.get(`/signin?${new URLSearchParams({ next: value })}`);
          if (hasRawControlCharacter(value)) {
            // A control character in a query string is refused before any redirect logic.
            assert.equal(page.status, 400, `${name}: ${page.text}`);
            assert.equal(page.location, undefined, name);
            page = await b.get("/signin");
          }
          assert.equal(page.status, 200, `${name}: ${page.text}`);
          assert.equal(field(page.text, "next"), "/account", name);
          // Posted as it came, not as the page wrote it: held to the same rule.
          await h.alignTo(60);
          const sent = await b.send("POST", "/signin/email", {
            form: { _csrf: field(page.text, "_csrf"), next: value, email },
          });
          if (hasRawControlCharacter(value) && sent.status === 400) {
            // Refused as a whole before any redirect logic (no field may hold a NUL; forms are
            // held to the query's rules): nothing is mailed, nothing redirects.
            assert.equal(sent.location, undefined, name);
            continue;
          }
          assert.equal(sent.status, 200, `${name}: ${sent.text}`);
          const done = await useLink(b, magicLink(email));
          assert.equal(done.status, 303, `${name}: ${done.text}`);
          assert.equal(done.location, "/account", name);
        }
        // A path of the attestor's own still leads there.
        const b = new Browserless(trustUrl);
        const done = await signIn(b, address("own-next"), `/signin?next=${encodeURIComponent("/link?req=lr_abc")}`);
        assert.equal(done.location, "/link?req=lr_abc");
      });

      test("signing in rotates the CSRF secret: a form token from before is refused after", async () => {
        const b = new Browserless(trustUrl);
        const early = await b.get("/signin");
        const earlyToken = field(early.text, "_csrf");
        const earlySecret = b.cookie("proto_csrf");
        assert.ok(earlySecret, "the sign-in page set a CSRF secret");
        await signIn(b, address("rotated"));
        const stale = await b.send("POST", "/signout", { form: { _csrf: earlyToken } });
        assert.equal(stale.status, 403, stale.text);
        assert.match(stale.text, /This form has expired/);
        const account = await b.get("/account");
        assert.equal(account.status, 200, "the refused sign-out left the session");
        assert.notEqual(b.cookie("proto_csrf"), earlySecret);
        assert.equal((await b.send("POST", "/signout", { form: { _csrf: earlyToken } })).status, 403);
        const out = await b.send("POST", "/signout", { form: { _csrf: field(account.text, "_csrf") } });
        assert.equal(out.status, 303, out.text);
      });

      test("sign-out ends the session", async () => {
        const b = new Browserless(trustUrl);
        await signIn(b, address("leaving"));
        const session = b.cookie("proto_session") as string;
        const account = await b.get("/account");
        assert.equal(account.status, 200);
        const out = await b.send("POST", "/signout", { form: { _csrf: field(account.text, "_csrf") } });
        assert.equal(out.status, 303);
        assert.equal(out.location, "/signin");
        assert.equal(b.cookie("proto_session"), undefined, "the cookie is cleared");
        const replay = new Browserless(trustUrl);
        replay.cookies.set("proto_session", session);
        assert.equal((await replay.get("/account")).status, 303);
        assert.equal((await replay.send("DELETE", "/v1/bindings/bnd_whatever")).status, 401);
        const p = await pkce();
        const authorizeAgain = await replay.get(
          `/oidc/authorize?${new URLSearchParams({ client_id: SERVICE_DID, redirect_uri: REDIRECT_URI, response_type: "code", scope: "openid", code_challenge: p.challenge, code_challenge_method: "S256" })}`,
        );
        assert.equal(authorizeAgain.status, 303);
        assert.ok(authorizeAgain.location?.startsWith("/signin?next="));
      });

      test("DELETE /v1/bindings/{id}: the person's own with the session cookie; another's is 404; without a cookie 401", async () => {
        const email = address("owner");
        const owner = new Browserless(trustUrl);
        await signIn(owner, email);
        const mine = await h.link(newAgent(), email);
        const theirs = await h.link(newAgent(), address("stranger"));

        const anonymous = await h.request("DELETE", `/v1/bindings/${mine.bindingId}`);
        assertError(anonymous, 401, "unauthorized");
        const foreign = await owner.send("DELETE", `/v1/bindings/${theirs.bindingId}`);
        assert.equal(foreign.status, 404, foreign.text);
        assert.equal(foreign.json.error.code, "not_found");
        assert.equal((await h.mint(theirs.agent, SERVICE_DID)).status, 200, "the other binding is untouched");

        const revoked = await owner.send("DELETE", `/v1/bindings/${mine.bindingId}`);
        assert.equal(revoked.status, 200, revoked.text);
        assert.deepEqual(Object.keys(revoked.json).sort(), ["ok", "revoked_at"]);
        assert.equal(revoked.json.ok, true);
        assert.match(revoked.json.revoked_at, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/);
        assert.equal(new Date(revoked.json.revoked_at).toISOString(), revoked.json.revoked_at);
        assertError(await h.mint(mine.agent, SERVICE_DID), 403, "binding_revoked");
        // The account page no longer lists it.
        const account = await owner.get("/account");
        assert.doesNotMatch(account.text, new RegExp(mine.agent.did.slice(-6)));
      });

      test("DELETE /v1/bindings/{id} with another Origin is 403 forbidden and revokes nothing", async () => {
        const email = address("cross-site");
        const owner = new Browserless(trustUrl);
        await signIn(owner, email);
        const mine = await h.link(newAgent(), email);
        const own = new URL(trustUrl);
        for (const origin of [
          "https://evil.example",
          "null",
          `https://${own.host}`,
          `http://localhost:${own.port}`,
          `http://${own.hostname}:1`,
          `${trustUrl}/`,
        ]) {
          const refused = await owner.send("DELETE", `/v1/bindings/${mine.bindingId}`, { headers: { origin } });
          assertError(refused, 403, "forbidden");
        }
        assert.equal((await h.mint(mine.agent, SERVICE_DID)).status, 200, "the binding is untouched");
        const revoked = await owner.send("DELETE", `/v1/bindings/${mine.bindingId}`, { headers: { origin: trustUrl } });
        assert.equal(revoked.status, 200, revoked.text);
        assertError(await h.mint(mine.agent, SERVICE_DID), 403, "binding_revoked");
      });

      test("the answer page is the same for a known and an unknown address", async () => {
        const known = address("known");
        await h.link(newAgent(), known);
        const unknown = address("unknown");
        const answers: PageAnswer[] = [];
        for (const email of [known, unknown]) {
          await h.alignTo(60);
          const b = new Browserless(trustUrl);
          const page = await b.get("/signin");
          answers.push(
            await b.send("POST", "/signin/email", {
              form: { _csrf: field(page.text, "_csrf"), next: "/account", email },
            }),
          );
        }
        const [a, b] = answers as [PageAnswer, PageAnswer];
        assert.equal(a.status, 200);
        assert.equal(b.status, 200);
        assert.equal(a.text.replaceAll(known, "ADDRESS"), b.text.replaceAll(unknown, "ADDRESS"));
        assert.ok(
          outbox.entries.some((m) => m.to === unknown),
          "the unknown address gets a link as well",
        );
      });

      test("per-address limit: the sixth sign-in mail within an hour is 429 with Retry-After", async () => {
        const email = address("eager");
        await h.alignTo(3600);
        const b = new Browserless(trustUrl);
        const page = await b.get("/signin");
        const form = { _csrf: field(page.text, "_csrf"), next: "/account", email };
        for (let i = 0; i < 5; i++) {
          const sent = await b.send("POST", "/signin/email", { form });
          assert.equal(sent.status, 200, `mail ${i + 1}: ${sent.text}`);
        }
        const limited = await b.send("POST", "/signin/email", { form });
        assert.equal(limited.status, 429, limited.text);
        assertRetryAfter(limited, 1, 3600);
        // The same address in other letter case is the same address.
        const shouted = await b.send("POST", "/signin/email", { form: { ...form, email: email.toUpperCase() } });
        assert.equal(shouted.status, 429);
        // Another address is not affected.
        const other = await b.send("POST", "/signin/email", { form: { ...form, email: address("calm") } });
        assert.equal(other.status, 200, other.text);
      });
    });
  }
});
