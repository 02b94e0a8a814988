import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, beforeEach, describe, test } from "node:test";
import { readGrantClaims } from "@proto/protocol";
import { createTestCA, type TestCA, unescapeHtml } from "@proto/testkit";
import { Browserless, type PageAnswer } from "./support/browser-session.js";
import { agentAssertion, assertOAuthError, grantTo, JWT_BEARER, pkce, verifyAccessToken } from "./support/oauth.js";
import { answerConsent, consentBoxes, signInByEmail, visibleText } from "./support/people.js";
import { type Site, type SiteHost, startSiteHost } from "./support/sites.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";
import { freePort, RELAXED_RATE_LIMITS, startTrustHarness, type TrustHarness } from "./support/trust.js";

/**
 * Issue 38: OAuth access tokens carry only scopes the person granted (docs/authority.md). An agent
 * (JWT-bearer) gets the scopes it asks for within its grant for the resource's service, else
 * within the service's default permissions, as its discovery document declares them over HTTPS;
 * a person (code flow) sees each scope in the service's words and the code carries only what they
 * left ticked, never a permission that needs a passkey unless they signed in with one; a spending
 * permission is said to spend nothing until a limit is set. Every answer as an OAuth client sees it.
 */

reportSkippedVariants();

const CALLBACK = "http://127.0.0.1:9/callback";

/** What the notes service declares: two defaults, one needing a passkey, one spending. */
const NOTES_PERMISSIONS = {
  "notes:read": { description: "Read your notes", default: true },
  "notes:write": { description: "Write and edit your notes", default: true },
  "notes:delete": { description: "Delete your notes", phishing_resistant: true },
  purchase: { description: "Pay for pinned notes", currency: "EUR" },
};
const PURCHASE_LIMIT = {
  permission: "purchase",
  currency: "EUR",
  perTransaction: 2000,
  perPeriod: 10000,
  period: "month" as const,
};
/** Third-party words that would be markup if a page spliced them in. */
const HOSTILE_DESCRIPTION = `Read <img src=x onerror="alert(1)"> your "notes" & more`;

describe("the scopes OAuth access tokens carry", () => {
  let ca: TestCA;
  let sites: SiteHost;
  /** Declares NOTES_PERMISSIONS. */
  let notes: Site;
  /** Serves no discovery document (404). */
  let silent: Site;
  /** Serves a document that names another service. */
  let impostor: Site;
  /** Declares no permission at all. */
  let plain: Site;
  /** Declares a permission whose description is hostile markup. */
  let hostile: Site;
  const resourceOf = (site: Site) => `https://${site.authority}/mcp`;

  before(async () => {
    ca = await createTestCA();
    sites = await startSiteHost(ca, 5);
    notes = sites.site();
    notes.serveDiscovery(notes.document({ permissions: NOTES_PERMISSIONS }));
    silent = sites.site();
    impostor = sites.site();
    impostor.serveDiscovery(impostor.document({ service_did: notes.did, permissions: NOTES_PERMISSIONS }));
    plain = sites.site();
    plain.serveDiscovery(plain.document());
    hostile = sites.site();
    hostile.serveDiscovery(
      hostile.document({ permissions: { "notes:read": { description: HOSTILE_DESCRIPTION, default: true } } }),
    );
  });
  after(() => sites?.close());

  for (const variant of STORE_VARIANTS) {
    describe(`(${variant.name})`, { timeout: 120_000 }, () => {
      let h: TrustHarness;
      let trustUrl: string;

      before(async () => {
        const port = await freePort();
        trustUrl = `http://127.0.0.1:${port}`;
        h = await startTrustHarness(variant, {
          port,
          fetchCa: ca.certPem,
          env: {
            TRUST_PUBLIC_URL: trustUrl,
            TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS,
            PROTO_FETCH_ALLOW_PRIVATE: "1",
            PROTO_FETCH_RESOLVE: sites.resolveEntries(),
          },
        });
      });
      after(() => h?.close());

      function tokenRequest(form: Record<string, string>): Promise<PageAnswer> {
        return new Browserless(trustUrl).send("POST", "/oidc/token", { form });
      }

      describe("an agent's token (JWT-bearer)", () => {
        /** A token request of a newly linked agent for `site`'s resource, asking `scope`. */
        async function agentToken(
          scope: string | undefined,
          site = notes,
          linked?: Awaited<ReturnType<TrustHarness["link"]>>,
        ) {
          const { agent } = linked ?? (await h.link());
          return tokenRequest({
            grant_type: JWT_BEARER,
            assertion: await agentAssertion(h, agent),
            resource: resourceOf(site),
            ...(scope === undefined ? {} : { scope }),
          });
        }

        test("asking `admin delete:all` without a grant: invalid_scope, no token", async () => {
          const answer = await agentToken("admin delete:all");
          assertOAuthError(answer, 400, "invalid_scope");
          assert.match(answer.json.error_description, /default permissions/);
        });

        test("asking a default permission and `admin`: a token for the default alone, in the response and the token", async () => {
          const answer = await agentToken("notes:read admin");
          assert.equal(answer.status, 200, answer.text);
          assert.equal(answer.json.scope, "notes:read");
          const claims = await verifyAccessToken(h, answer.json.access_token, resourceOf(notes));
          assert.equal(claims.scope, "notes:read");
          assert.equal(claims.grant_id, undefined, "no grant, no grant claims");
          assert.equal(claims.authorization_details, undefined);
        });

        test("asking nothing by name: a token without scope, and the service's document is not needed", async () => {
          const answer = await agentToken(undefined, silent);
          assert.equal(answer.status, 200, answer.text);
          assert.equal(answer.json.scope, undefined);
          assert.equal((await verifyAccessToken(h, answer.json.access_token, resourceOf(silent))).scope, undefined);
        });

        test("with a grant: the granted scopes asked for (not the defaults), with grant_id and authorization_details as an attestation carries them", async () => {
          const linked = await h.link();
          const granted = await grantTo(
            h,
            linked.bindingId,
            { aud: notes.did, url: `https://${notes.authority}` },
            { permissions: ["notes:read", "notes:delete", "purchase"], spendLimits: [PURCHASE_LIMIT], expiresAt: null },
          );
          const answer = await agentToken("notes:delete purchase notes:write admin", notes, linked);
          assert.equal(answer.status, 200, answer.text);
          assert.equal(answer.json.scope, "notes:delete purchase");
          const claims = await verifyAccessToken(h, answer.json.access_token, resourceOf(notes));
          assert.equal(claims.scope, "notes:delete purchase");
          assert.equal(claims.grant_id, granted.id);
          assert.deepEqual(claims.authorization_details, [
            {
              type: "spend_limit",
              permission: "purchase",
              currency: "EUR",
              per_transaction: 2000,
              per_period: 10000,
              period: "month",
            },
          ]);
          // A service reads the token's grant as it reads an attestation's.
          assert.deepEqual(readGrantClaims(claims), {
            id: granted.id,
            permissions: ["notes:delete", "purchase"],
            spendLimits: [PURCHASE_LIMIT],
          });
          // The grant is what the person allowed: a default outside it is not added.
          const defaultOnly = await agentToken("notes:write", notes, linked);
          assertOAuthError(defaultOnly, 400, "invalid_scope");
          assert.match(defaultOnly.json.error_description, /granted by the person/);
        });

        test("a grant that expired counts as none: the defaults again, no grant claims", async () => {
          const linked = await h.link();
          await grantTo(
            h,
            linked.bindingId,
            { aud: notes.did, url: `https://${notes.authority}` },
            { permissions: ["notes:delete"], spendLimits: [], expiresAt: (await h.nowMs()) + 3_600_000 },
          );
          const live = await agentToken("notes:read notes:delete", notes, linked);
          assert.equal(live.json.scope, "notes:delete", live.text);
          await h.advance(3601);
          const expired = await agentToken("notes:read notes:delete", notes, linked);
          assert.equal(expired.status, 200, expired.text);
          assert.equal(expired.json.scope, "notes:read");
          const claims = await verifyAccessToken(h, expired.json.access_token, resourceOf(notes));
          assert.equal(claims.grant_id, undefined);
        });

        test("the service's permissions cannot be read (no document, another service's, none declared): asked scopes are invalid_scope", async () => {
          for (const site of [silent, impostor]) {
            const answer = await agentToken("notes:read", site);
            assertOAuthError(answer, 400, "invalid_scope");
            assert.match(answer.json.error_description, /the resource's permissions could not be read/, site.hostname);
          }
          // Read, but declaring nothing: there is no default to grant.
          assertOAuthError(await agentToken("notes:read", plain), 400, "invalid_scope");
        });
      });

      describe("a person's consent (code flow)", () => {
        let person: Browserless;
        let clientId: string;
        before(async () => {
          person = new Browserless(trustUrl);
          await signInByEmail(h, person, `scopes-${randomUUID()}@mail.test`);
        });
        // A client of its own per test: what one test allowed does not skip another's question.
        beforeEach(async () => {
          const registered = await new Browserless(trustUrl).send("POST", "/oidc/register", {
            json: { client_name: "Desk Assistant", redirect_uris: [CALLBACK] },
          });
          assert.equal(registered.status, 201, registered.text);
          clientId = registered.json.client_id;
        });

        /** The authorization request for `site`'s resource asking `scope`, as the person's browser sends it. */
        function authorize(scope: string, challenge: string, site = notes, extra: Record<string, string> = {}) {
          return person.get(
            `/oidc/authorize?${new URLSearchParams({
              client_id: clientId,
              redirect_uri: CALLBACK,
              response_type: "code",
              scope,
              code_challenge: challenge,
              code_challenge_method: "S256",
              state: "st",
              resource: resourceOf(site),
              ...extra,
            })}`,
          );
        }

        /** The tokens for the code an answer redirected with. */
        async function redeem(answer: PageAnswer, verifier: string) {
          assert.equal(answer.status, 302, answer.text);
          const code = new URL(answer.location ?? "").searchParams.get("code");
          assert.ok(code, answer.location);
          const tokens = await tokenRequest({
            grant_type: "authorization_code",
            code,
            code_verifier: verifier,
            client_id: clientId,
            redirect_uri: CALLBACK,
          });
          assert.equal(tokens.status, 200, tokens.text);
          return tokens;
        }

        test("the page names each scope in the service's words, openid as who you are; an undeclared one is unticked and cannot be allowed", async () => {
          const p = await pkce();
          const page = await authorize("openid notes:read notes:write admin", p.challenge);
          assert.equal(page.status, 200, page.text);
          assert.deepEqual(consentBoxes(page), [
            { scope: "openid", checked: true, disabled: false },
            { scope: "notes:read", checked: true, disabled: false },
            { scope: "notes:write", checked: true, disabled: false },
            { scope: "admin", checked: false, disabled: true },
          ]);
          assert.match(page.text, /Confirm to Desk Assistant who you are, by an identifier made for it alone/);
          assert.match(page.text, /<bdi>Read your notes<\/bdi><\/span><code>notes:read<\/code>/);
          assert.match(page.text, /<bdi>Write and edit your notes<\/bdi><\/span><code>notes:write<\/code>/);
          assert.match(
            page.text,
            /Not described by the service, so it cannot be allowed\.<\/span><\/span><code>admin<\/code>/,
          );
          // As the page is posted: what is ticked, and nothing the service does not declare.
          const tokens = await redeem(await answerConsent(person, page, "allow"), p.verifier);
          assert.equal(tokens.json.scope, "openid notes:read notes:write");
          assert.equal(typeof tokens.json.id_token, "string");
          const claims = await verifyAccessToken(h, tokens.json.access_token, resourceOf(notes));
          assert.equal(claims.scope, "openid notes:read notes:write");
        });

        test("a permission that needs a passkey, after an e-mail sign-in: shown disabled with how to allow it; a forged form ticking it does not get it", async () => {
          const p = await pkce();
          const page = await authorize("notes:read notes:delete", p.challenge);
          assert.equal(page.status, 200, page.text);
          assert.deepEqual(consentBoxes(page), [
            { scope: "notes:read", checked: true, disabled: false },
            { scope: "notes:delete", checked: false, disabled: true },
          ]);
          const text = visibleText(page);
          assert.match(text, /Delete your notes notes:delete needs a passkey: sign in with a passkey to allow it/);
          // The link signs in with a passkey and comes back to this very request.
          const signIn = /<a href="([^"]+)">sign in with a passkey<\/a>/.exec(page.text)?.[1];
          assert.ok(signIn, page.text);
          const target = new URL(unescapeHtml(signIn), trustUrl);
          assert.equal(target.pathname, "/signin");
          assert.equal(target.searchParams.get("passkey"), "required");
          const back = new URL(target.searchParams.get("next") ?? "", trustUrl);
          assert.equal(back.pathname, "/oidc/authorize");
          assert.equal(back.searchParams.get("scope"), "notes:read notes:delete");
          assert.equal(back.searchParams.get("code_challenge"), p.challenge);
          const asked = await person.get(target.pathname + target.search);
          assert.equal(asked.status, 200, asked.text);
          assert.match(visibleText(asked), /To go on, sign in with a passkey/);

          // A form that ticks it anyway (forged, or the box enabled by hand) gets what else was ticked.
          const forged = await answerConsent(person, page, "allow", { granted: ["notes:read", "notes:delete"] });
          const tokens = await redeem(forged, p.verifier);
          assert.equal(tokens.json.scope, "notes:read");
          assert.equal((await verifyAccessToken(h, tokens.json.access_token, resourceOf(notes))).scope, "notes:read");
          // Only that: nothing is left for a passkey-protected permission alone.
          const alone = await pkce();
          const onlyDelete = await authorize("notes:delete", alone.challenge);
          assert.match(visibleText(onlyDelete), /What is asked here needs a passkey to allow\./);
          const none = await redeem(
            await answerConsent(person, onlyDelete, "allow", { granted: ["notes:delete"] }),
            alone.verifier,
          );
          assert.equal(none.json.scope, undefined);
        });

        test("a spending permission: ticked, and said to spend nothing until a limit is set; the token carries it without limits", async () => {
          const p = await pkce();
          const page = await authorize("notes:read purchase", p.challenge);
          assert.deepEqual(consentBoxes(page), [
            { scope: "notes:read", checked: true, disabled: false },
            { scope: "purchase", checked: true, disabled: false },
          ]);
          const text = visibleText(page);
          assert.match(
            text,
            /Pay for pinned notes purchase spends in EUR · no spending until you set a limit on your account/,
          );
          assert.doesNotMatch(text, /Read your notes notes:read spends/);
          const tokens = await redeem(await answerConsent(person, page, "allow"), p.verifier);
          const claims = await verifyAccessToken(h, tokens.json.access_token, resourceOf(notes));
          assert.equal(claims.scope, "notes:read purchase");
          // No limit, so no spending: docs/authority.md.
          assert.equal(claims.authorization_details, undefined);
        });

        test("an unticked scope is left out of the code and the token; a forged form naming `admin` or a scope not asked gets neither", async () => {
          const p = await pkce();
          const page = await authorize("notes:read notes:write admin", p.challenge);
          const back = await answerConsent(person, page, "allow", { granted: ["notes:read", "admin", "purchase"] });
          const tokens = await redeem(back, p.verifier);
          assert.equal(tokens.json.scope, "notes:read");
          assert.equal((await verifyAccessToken(h, tokens.json.access_token, resourceOf(notes))).scope, "notes:read");
          // The refresh still narrows only: what was unticked cannot come back that way.
          assertOAuthError(
            await tokenRequest({
              grant_type: "refresh_token",
              refresh_token: tokens.json.refresh_token,
              client_id: clientId,
              scope: "notes:read notes:write",
            }),
            400,
            "invalid_scope",
          );
        });

        test("a live access skips consent only within what it granted: asking for more shows the page again (prompt=none: consent_required)", async () => {
          const first = await pkce();
          const page = await authorize("notes:read notes:write", first.challenge, notes, { state: "first" });
          await redeem(await answerConsent(person, page, "allow", { granted: ["notes:read"] }), first.verifier);

          const within = await pkce();
          const straight = await authorize("notes:read", within.challenge);
          assert.equal(straight.status, 302, "within the grant: no question");
          const tokens = await redeem(straight, within.verifier);
          assert.equal(tokens.json.scope, "notes:read");

          const wider = await pkce();
          const asked = await authorize("notes:read notes:write", wider.challenge);
          assert.equal(asked.status, 200, "wider than the grant: the person is asked again");
          assert.deepEqual(
            consentBoxes(asked).map((box) => box.scope),
            ["notes:read", "notes:write"],
          );
          const silentAsk = await authorize("notes:read notes:write", wider.challenge, notes, { prompt: "none" });
          assert.equal(silentAsk.status, 302);
          assert.equal(new URL(silentAsk.location ?? "").searchParams.get("error"), "consent_required");
        });

        test("a service whose permissions cannot be read: every scope 'not described', unticked; the person may still tick one", async () => {
          const p = await pkce();
          const page = await authorize("notes admin", p.challenge, silent);
          assert.deepEqual(consentBoxes(page), [
            { scope: "notes", checked: false, disabled: false },
            { scope: "admin", checked: false, disabled: false },
          ]);
          assert.match(page.text, /Not described by the service\. Tick it only if you know what it allows\./);
          const untouched = await redeem(await answerConsent(person, page, "allow"), p.verifier);
          assert.equal(untouched.json.scope, undefined, "nothing ticked, nothing granted");
          assert.equal((await verifyAccessToken(h, untouched.json.access_token, resourceOf(silent))).scope, undefined);

          const again = await pkce();
          const ticked = await answerConsent(person, await authorize("notes admin", again.challenge, silent), "allow", {
            granted: ["notes"],
          });
          assert.equal((await redeem(ticked, again.verifier)).json.scope, "notes");
        });

        test("the service's words are text: markup in a description is shown escaped, never run", async () => {
          const p = await pkce();
          const page = await authorize("notes:read", p.challenge, hostile);
          assert.equal(page.status, 200, page.text);
          assert.ok(!page.text.includes("<img"), "no markup of the service's on the page");
          assert.ok(
            page.text.includes(
              "<bdi>Read &lt;img src=x onerror=&quot;alert(1)&quot;&gt; your &quot;notes&quot; &amp; more</bdi>",
            ),
          );
        });
      });
    });
  }
});
