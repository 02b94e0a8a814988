import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { createTestCA, type HttpsHost, startHttpsHost, type TestCA } from "@proto/testkit";
import { createLocalJWKSet, decodeJwt, decodeProtectedHeader, jwtVerify, SignJWT } from "jose";
import * as client from "openid-client";
import { purgeEndedGrants } from "../src/trust/oidc/grants.js";
import { Browserless, field, type PageAnswer } from "./support/browser-session.js";
import { answerConsent, signInByEmail } from "./support/people.js";
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
 * Issue 24: the attestor as the OAuth authorization server of MCP servers. Access tokens for a
 * resource (RFC 8707, RFC 9068), refresh tokens that rotate, the JWT-bearer grant of headless
 * agents, dynamic registration (RFC 7591) and client metadata documents; every answer as an OAuth
 * client sees it.
 */

reportSkippedVariants();

const JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer";
const RESOURCE = "https://notes.test:8443/mcp";
/** What the attestor derives the person's pseudonym for RESOURCE from: the did:web of its host. */
const RESOURCE_DID = "did:web:notes.test%3A8443";
const OTHER_RESOURCE = "https://other.test/mcp";
const CALLBACK = "http://127.0.0.1:9/callback";
const CIMD_HOST = "client.test";

/** An OAuth error: the status, `{error, error_description}` only, JSON, never cached. */
function assertOAuthError(answer: PageAnswer, status: number, error: string): void {
  assert.equal(answer.status, status, answer.text);
  assert.match(answer.headers.get("content-type") ?? "", /^application\/json/);
  assert.deepEqual(Object.keys(answer.json).sort(), ["error", "error_description"], answer.text);
  assert.equal(answer.json.error, error, answer.text);
  assert.equal(answer.headers.get("cache-control"), "no-store");
}

describe("OAuth for MCP at the attestor", () => {
  let ca: TestCA;
  let cimd: HttpsHost;
  /** The metadata documents the client host serves, by path. */
  const documents = new Map<string, unknown>();
  before(async () => {
    ca = await createTestCA();
    cimd = await startHttpsHost({ ca, hostnames: [CIMD_HOST] });
    for (const path of ["/good.json", "/mismatch.json", "/cached.json", "/large.json"]) {
      cimd.route(path, (_req, res) => {
        res.writeHead(200, { "content-type": "application/json", "cache-control": "max-age=600" });
        res.end(JSON.stringify(documents.get(path)));
      });
    }
    cimd.route("/moved.json", (_req, res) => {
      res.writeHead(302, { location: "/good.json" });
      res.end();
    });
  });
  after(async () => {
    await cimd?.close();
  });

  for (const variant of STORE_VARIANTS) {
    describe(`(${variant.name})`, { timeout: 120_000 }, () => {
      let h: TrustHarness;
      let trustUrl: string;
      let tokenUrl: string;
      let jwks: ReturnType<typeof createLocalJWKSet>;

      before(async () => {
        const port = await freePort();
        trustUrl = `http://127.0.0.1:${port}`;
        tokenUrl = `${trustUrl}/oidc/token`;
        h = await startTrustHarness(variant, {
          port,
          fetchCa: ca.certPem,
          env: {
            TRUST_PUBLIC_URL: trustUrl,
            TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS,
            PROTO_FETCH_ALLOW_PRIVATE: "1",
            PROTO_FETCH_RESOLVE: `${CIMD_HOST}:${cimd.port}:127.0.0.1`,
          },
        });
        jwks = createLocalJWKSet((await h.request("GET", "/.well-known/jwks.json")).json);
      });
      after(() => h?.close());

      const cimdUrl = (path: string) => `https://${CIMD_HOST}:${cimd.port}${path}`;

      /** An assertion signed by the agent, dated by the attestor's clock. */
      async function assertion(agent: Agent, claims: Record<string, unknown> = {}, lifetime = 120): Promise<string> {
        const now = Math.floor((await h.nowMs()) / 1000);
        return new SignJWT({
          iss: agent.did,
          sub: agent.did,
          aud: tokenUrl,
          iat: now,
          exp: now + lifetime,
          jti: randomUUID(),
          ...claims,
        })
          .setProtectedHeader({ alg: "EdDSA" })
          .sign(agent.privateKey);
      }

      function tokenRequest(form: Record<string, string>): Promise<PageAnswer> {
        return new Browserless(trustUrl).send("POST", "/oidc/token", { form });
      }

      /** Verifies an access token as a resource server would, answering its claims. */
      async function verifyAccessToken(token: string, resource = RESOURCE) {
        const { payload, protectedHeader } = await jwtVerify(token, jwks, {
          issuer: trustUrl,
          audience: resource,
          typ: "at+jwt",
          algorithms: ["EdDSA"],
          currentDate: new Date(await h.nowMs()),
        });
        assert.equal(protectedHeader.typ, "at+jwt");
        return payload;
      }

      describe("the JWT-bearer grant of a headless agent", () => {
        test("a linked agent gets an access token for the resource: at+jwt, aud the resource, sub its person's pseudonym, act the agent, no refresh token", async () => {
          const { agent } = await h.link();
          const answer = await tokenRequest({
            grant_type: JWT_BEARER,
            assertion: await assertion(agent),
            resource: RESOURCE,
            scope: "notes",
          });
          assert.equal(answer.status, 200, answer.text);
          assert.equal(answer.headers.get("cache-control"), "no-store");
          assert.equal(answer.json.token_type, "Bearer");
          assert.equal(answer.json.scope, "notes");
          assert.equal(answer.json.refresh_token, undefined, "no refresh token for this grant");
          assert.ok(answer.json.expires_in > 0 && answer.json.expires_in <= 900, String(answer.json.expires_in));
          const claims = await verifyAccessToken(answer.json.access_token);
          assert.equal(claims.aud, RESOURCE);
          assert.deepEqual(claims.act, { sub: agent.did });
          assert.equal(claims.client_id, agent.did);
          assert.equal(claims.scope, "notes");
          assert.ok((claims.exp as number) - (claims.iat as number) <= 900);
          // The same pseudonym as an attestation for the service the resource belongs to.
          const minted = await h.mint(agent, RESOURCE_DID);
          assert.equal(minted.status, 200, minted.text);
          assert.equal(claims.sub, decodeJwt(minted.json.jwt).sub_h);
        });

        test("an assertion is used once: its jti replayed is invalid_grant", async () => {
          const { agent } = await h.link();
          const signed = await assertion(agent);
          const form = { grant_type: JWT_BEARER, assertion: signed, resource: RESOURCE };
          assert.equal((await tokenRequest(form)).status, 200);
          assertOAuthError(await tokenRequest(form), 400, "invalid_grant");
        });

        test("a wrong audience, a lifetime over 300 s, an expired assertion, another key, an unlinked agent: each invalid_grant", async () => {
          const { agent } = await h.link();
          const cases: [string, string][] = [
            ["audience", await assertion(agent, { aud: "https://elsewhere.test/token" })],
            ["lifetime", await assertion(agent, {}, 301)],
            ["unlinked", await assertion(newAgent())],
          ];
          // Signed by another key while naming this agent.
          const impostor = newAgent();
          const now = Math.floor((await h.nowMs()) / 1000);
          cases.push([
            "key",
            await new SignJWT({ jti: randomUUID() })
              .setProtectedHeader({ alg: "EdDSA" })
              .setIssuer(agent.did)
              .setSubject(agent.did)
              .setAudience(tokenUrl)
              .setIssuedAt(now)
              .setExpirationTime(now + 60)
              .sign(impostor.privateKey),
          ]);
          const expiring = await assertion(agent, {}, 60);
          for (const [what, signed] of cases) {
            const answer = await tokenRequest({ grant_type: JWT_BEARER, assertion: signed, resource: RESOURCE });
            assertOAuthError(answer, 400, "invalid_grant");
            assert.ok(answer.json.error_description.length > 0, what);
          }
          await h.advance(60 + 61);
          assertOAuthError(
            await tokenRequest({ grant_type: JWT_BEARER, assertion: expiring, resource: RESOURCE }),
            400,
            "invalid_grant",
          );
        });

        test("a revoked binding, and a binding suspended for the resource's service, are refused like mints; other services still work", async () => {
          const suspended = await h.link();
          // A service is suspended for an agent once the agent has used it.
          assert.equal((await h.mint(suspended.agent, RESOURCE_DID)).status, 200);
          const hook = await h.hook("/__test/bindings/suspend", { binding_id: suspended.bindingId, aud: RESOURCE_DID });
          assert.equal(hook.status, 200, hook.text);
          const refused = await tokenRequest({
            grant_type: JWT_BEARER,
            assertion: await assertion(suspended.agent),
            resource: RESOURCE,
          });
          assertOAuthError(refused, 400, "invalid_grant");
          assert.match(refused.json.error_description, /suspended/);
          const other = await tokenRequest({
            grant_type: JWT_BEARER,
            assertion: await assertion(suspended.agent),
            resource: OTHER_RESOURCE,
          });
          assert.equal(other.status, 200, other.text);

          const revoked = await h.link();
          assert.equal((await h.hook("/__test/bindings/revoke", { binding_id: revoked.bindingId })).status, 200);
          const answer = await tokenRequest({
            grant_type: JWT_BEARER,
            assertion: await assertion(revoked.agent),
            resource: RESOURCE,
          });
          assertOAuthError(answer, 400, "invalid_grant");
          assert.match(answer.json.error_description, /revoked/);
        });

        test("without a resource, with two, or with one that is not an https URI: invalid_target", async () => {
          const { agent } = await h.link();
          for (const resource of [undefined, "ftp://notes.test/mcp", "https://notes.test/mcp#x", "not a uri"]) {
            const form: Record<string, string> = { grant_type: JWT_BEARER, assertion: await assertion(agent) };
            if (resource !== undefined) form.resource = resource;
            assertOAuthError(await tokenRequest(form), 400, "invalid_target");
          }
          const repeated = new URLSearchParams({ grant_type: JWT_BEARER, assertion: await assertion(agent) });
          repeated.append("resource", RESOURCE);
          repeated.append("resource", OTHER_RESOURCE);
          const answer = await fetch(tokenUrl, {
            method: "POST",
            headers: { "content-type": "application/x-www-form-urlencoded" },
            body: repeated.toString(),
          });
          assert.equal(answer.status, 400);
          assert.equal(((await answer.json()) as { error: string }).error, "invalid_request");
        });
      });

      describe("a person, through an MCP client", () => {
        let person: Browserless;
        let email: string;
        let clientId: string;
        before(async () => {
          person = new Browserless(trustUrl);
          email = `mcp-${randomUUID()}@mail.test`;
          await signInByEmail(h, person, email);
          const registered = await new Browserless(trustUrl).send("POST", "/oidc/register", {
            json: { client_name: "Desk Assistant", redirect_uris: [CALLBACK] },
          });
          assert.equal(registered.status, 201, registered.text);
          clientId = registered.json.client_id;
        });

        async function pkce() {
          const verifier = client.randomPKCECodeVerifier();
          return { verifier, challenge: await client.calculatePKCECodeChallenge(verifier) };
        }

        /** The code at the token endpoint, as the client that asked for it. */
        function redeem(code: string, verifier: string, resource?: string): Promise<PageAnswer> {
          return tokenRequest({
            grant_type: "authorization_code",
            code,
            code_verifier: verifier,
            client_id: clientId,
            redirect_uri: CALLBACK,
            ...(resource === undefined ? {} : { resource }),
          });
        }

        /** Authorizes `clientId` for RESOURCE as the person: the consent page (answered) when it shows. */
        async function authorize(
          challenge: string,
          extra: Record<string, string> = {},
          decision: "allow" | "deny" = "allow",
        ): Promise<{ redirect: URL; consent: PageAnswer | undefined }> {
          const query = new URLSearchParams({
            client_id: clientId,
            redirect_uri: CALLBACK,
            response_type: "code",
            scope: "notes",
            code_challenge: challenge,
            code_challenge_method: "S256",
            state: "st",
            resource: RESOURCE,
            ...extra,
          });
          let answer = await person.get(`/oidc/authorize?${query}`);
          let consent: PageAnswer | undefined;
          if (answer.status === 200) {
            consent = answer;
            answer = await answerConsent(person, answer, decision);
          }
          assert.equal(answer.status, 302, answer.text);
          return { redirect: new URL(answer.location ?? ""), consent };
        }

        test("registration: 201 with a client_id; a bad redirect URI is invalid_redirect_uri; a confidential client is invalid_client_metadata", async () => {
          const anon = new Browserless(trustUrl);
          const bad = await anon.send("POST", "/oidc/register", { json: { redirect_uris: ["http://evil.test/cb"] } });
          assertOAuthError(bad, 400, "invalid_redirect_uri");
          const secret = await anon.send("POST", "/oidc/register", {
            json: { redirect_uris: [CALLBACK], token_endpoint_auth_method: "client_secret_basic" },
          });
          assertOAuthError(secret, 400, "invalid_client_metadata");
          const none = await anon.send("POST", "/oidc/register", { json: {} });
          assertOAuthError(none, 400, "invalid_redirect_uri");
        });

        test("the consent page names the client as it named itself, the resource and the redirect host, and warns of a localhost-only redirect", async () => {
          const p = await pkce();
          const { redirect, consent } = await authorize(p.challenge, {}, "deny");
          assert.ok(consent, "a first access asks");
          assert.match(consent.text, /Let Desk Assistant use notes\.test:8443 as you\?/);
          assert.match(consent.text, /named itself/);
          assert.match(consent.text, /this computer/);
          assert.match(consent.text, /127\.0\.0\.1:9/);
          assert.equal(redirect.searchParams.get("error"), "access_denied");
          assert.equal(redirect.searchParams.get("iss"), trustUrl, "RFC 9207 on errors too");
        });

        test("code, access token, refresh rotation: a reused refresh token revokes the whole family", async () => {
          const p = await pkce();
          const { redirect } = await authorize(p.challenge);
          assert.equal(redirect.searchParams.get("iss"), trustUrl);
          assert.equal(redirect.searchParams.get("state"), "st");
          const code = redirect.searchParams.get("code");
          assert.ok(code);
          const tokens = await redeem(code, p.verifier, RESOURCE);
          assert.equal(tokens.status, 200, tokens.text);
          assert.equal(tokens.headers.get("cache-control"), "no-store");
          assert.equal(tokens.json.id_token, undefined, "no openid scope, no id_token");
          const claims = await verifyAccessToken(tokens.json.access_token);
          assert.equal(claims.client_id, clientId);
          assert.equal(claims.scope, "notes");
          assert.equal(claims.act, undefined);
          assert.deepEqual(claims.amr, ["email"]);

          // The agent of the same person gets the same subject for the same resource.
          const { agent } = await h.link(newAgent(), email);
          const agentToken = await tokenRequest({
            grant_type: JWT_BEARER,
            assertion: await assertion(agent),
            resource: RESOURCE,
          });
          assert.equal((await verifyAccessToken(agentToken.json.access_token)).sub, claims.sub);

          const first = tokens.json.refresh_token as string;
          const refreshed = await tokenRequest({
            grant_type: "refresh_token",
            refresh_token: first,
            client_id: clientId,
          });
          assert.equal(refreshed.status, 200, refreshed.text);
          assert.notEqual(refreshed.json.refresh_token, first, "rotated");
          assert.equal((await verifyAccessToken(refreshed.json.access_token)).sub, claims.sub);
          const second = refreshed.json.refresh_token as string;
          // A wider scope than granted is refused and burns nothing.
          assertOAuthError(
            await tokenRequest({
              grant_type: "refresh_token",
              refresh_token: second,
              client_id: clientId,
              scope: "admin",
            }),
            400,
            "invalid_scope",
          );
          const narrower = await tokenRequest({
            grant_type: "refresh_token",
            refresh_token: second,
            client_id: clientId,
            scope: "notes",
          });
          assert.equal(narrower.status, 200, narrower.text);
        });

        test("a reused refresh token: invalid_grant, and the token that replaced it stops working too", async () => {
          const p = await pkce();
          const { redirect } = await authorize(p.challenge);
          const tokens = await redeem(redirect.searchParams.get("code") ?? "", p.verifier);
          assert.equal(tokens.status, 200, tokens.text);
          const first = tokens.json.refresh_token as string;
          const rotated = await tokenRequest({
            grant_type: "refresh_token",
            refresh_token: first,
            client_id: clientId,
          });
          assert.equal(rotated.status, 200, rotated.text);
          assertOAuthError(
            await tokenRequest({ grant_type: "refresh_token", refresh_token: first, client_id: clientId }),
            400,
            "invalid_grant",
          );
          assertOAuthError(
            await tokenRequest({
              grant_type: "refresh_token",
              refresh_token: rotated.json.refresh_token,
              client_id: clientId,
            }),
            400,
            "invalid_grant",
          );
        });

        test("a resource at the token request other than the code's: invalid_target", async () => {
          const p = await pkce();
          const { redirect } = await authorize(p.challenge);
          assertOAuthError(
            await redeem(redirect.searchParams.get("code") ?? "", p.verifier, OTHER_RESOURCE),
            400,
            "invalid_target",
          );
        });

        test("a redirect URI one character off is an error page, never a redirect", async () => {
          const p = await pkce();
          const answer = await person.get(
            `/oidc/authorize?${new URLSearchParams({
              client_id: clientId,
              redirect_uri: `${CALLBACK}/`,
              response_type: "code",
              scope: "notes",
              code_challenge: p.challenge,
              code_challenge_method: "S256",
              resource: RESOURCE,
            })}`,
          );
          assert.equal(answer.status, 400, answer.text);
          assert.equal(answer.location, undefined);
          assert.match(answer.text, /Invalid redirect/);
        });

        test("the account page lists the access the person gave, and revoking it stops its refresh token", async () => {
          const p = await pkce();
          const { redirect } = await authorize(p.challenge);
          const tokens = await redeem(redirect.searchParams.get("code") ?? "", p.verifier);
          assert.equal(tokens.status, 200, tokens.text);
          const account = await person.get("/account");
          assert.equal(account.status, 200);
          assert.match(account.text, /Desk Assistant/);
          assert.match(account.text, /notes\.test:8443/);
          const forms = [
            ...account.text.matchAll(/<form method="post" action="\/account\/access\/revoke">([\s\S]*?)<\/form>/g),
          ];
          assert.ok(forms.length > 0, "a revoke button per access");
          for (const [, inner] of forms) {
            const revoked = await person.send("POST", "/account/access/revoke", {
              form: { _csrf: field(inner ?? "", "_csrf"), grant_id: field(inner ?? "", "grant_id") },
            });
            assert.equal(revoked.status, 303, revoked.text);
            // Back on the account page, a notice says what ended.
            assert.match(revoked.location ?? "", /^\/account\?done=access-revoked&grant=/);
            const told = await person.get(revoked.location ?? "");
            assert.match(
              told.text,
              /role="status"><strong>Desk Assistant no longer has access to notes\.test:8443\.<\/strong>/,
            );
          }
          const after = await person.get("/account");
          assert.doesNotMatch(after.text, /action="\/account\/access\/revoke"/);
          assert.doesNotMatch(after.text, /no longer has access/, "the notice follows the button, not the page");
          // Someone else's grant id, or a repeated one, says nothing.
          const forged = await person.get("/account?done=access-revoked&grant=nope&grant=again");
          assert.doesNotMatch(forged.text, /no longer has access/);
          assertOAuthError(
            await tokenRequest({
              grant_type: "refresh_token",
              refresh_token: tokens.json.refresh_token,
              client_id: clientId,
            }),
            400,
            "invalid_grant",
          );
          // A week after, the ended grant and its tokens are forgotten; the token stays refused.
          await h.advance(8 * 86400);
          await purgeEndedGrants(h.app.service.database.db, await h.nowMs());
          const forgotten = await tokenRequest({
            grant_type: "refresh_token",
            refresh_token: tokens.json.refresh_token,
            client_id: clientId,
          });
          assertOAuthError(forgotten, 400, "invalid_grant");
          assert.match(forgotten.json.error_description, /not known/);
        });
      });

      describe("client metadata documents", () => {
        test("an https client_id is fetched: its name on the consent page, its exact redirect URIs", async () => {
          const url = cimdUrl("/good.json");
          documents.set("/good.json", { client_id: url, client_name: "Notebook Client", redirect_uris: [CALLBACK] });
          const person = new Browserless(trustUrl);
          await signInByEmail(h, person, `cimd-${randomUUID()}@mail.test`);
          const answer = await person.get(
            `/oidc/authorize?${new URLSearchParams({
              client_id: url,
              redirect_uri: CALLBACK,
              response_type: "code",
              scope: "notes",
              code_challenge: "a".repeat(43),
              code_challenge_method: "S256",
              resource: RESOURCE,
            })}`,
          );
          assert.equal(answer.status, 200, answer.text);
          assert.match(answer.text, /Let Notebook Client use notes\.test:8443 as you\?/);
        });

        test("a document whose client_id is not its own URL is refused: an error page, no redirect", async () => {
          const url = cimdUrl("/mismatch.json");
          documents.set("/mismatch.json", {
            client_id: cimdUrl("/good.json"),
            client_name: "Impostor",
            redirect_uris: [CALLBACK],
          });
          const answer = await new Browserless(trustUrl).get(
            `/oidc/authorize?${new URLSearchParams({
              client_id: url,
              redirect_uri: CALLBACK,
              response_type: "code",
              scope: "notes",
              code_challenge: "a".repeat(43),
              code_challenge_method: "S256",
              resource: RESOURCE,
            })}`,
          );
          assert.equal(answer.status, 400, answer.text);
          assert.equal(answer.location, undefined);
          assert.match(answer.text, /client_id other than its own URL/);
        });

        /** The authorization page for the client a metadata document at `path` describes. */
        async function authorizeAs(person: Browserless, path: string): Promise<PageAnswer> {
          return person.get(
            `/oidc/authorize?${new URLSearchParams({
              client_id: cimdUrl(path),
              redirect_uri: CALLBACK,
              response_type: "code",
              scope: "notes",
              code_challenge: "a".repeat(43),
              code_challenge_method: "S256",
              resource: RESOURCE,
            })}`,
          );
        }

        test("a document is kept for its max-age (600 s): a change is read only after it, with one fetch", async () => {
          const url = cimdUrl("/cached.json");
          documents.set("/cached.json", { client_id: url, client_name: "Old Name", redirect_uris: [CALLBACK] });
          const person = new Browserless(trustUrl);
          await signInByEmail(h, person, `cimd-cache-${randomUUID()}@mail.test`);
          const fetches = () => cimd.requests.filter((r) => r.path === "/cached.json").length;
          const before = fetches();
          assert.match((await authorizeAs(person, "/cached.json")).text, /Let Old Name use/);
          documents.set("/cached.json", { client_id: url, client_name: "New Name", redirect_uris: [CALLBACK] });
          await h.advance(599);
          assert.match((await authorizeAs(person, "/cached.json")).text, /Let Old Name use/);
          assert.equal(fetches(), before + 1, "read from the cache within max-age");
          await h.advance(2);
          assert.match((await authorizeAs(person, "/cached.json")).text, /Let New Name use/);
          assert.equal(fetches(), before + 2);
        });

        test("a document over 5 KB, one that redirects, one that is not there: an error page, no redirect", async () => {
          const url = cimdUrl("/large.json");
          documents.set("/large.json", {
            client_id: url,
            client_name: "Large",
            redirect_uris: [CALLBACK],
            padding: "x".repeat(6 * 1024),
          });
          const anon = new Browserless(trustUrl);
          for (const path of ["/large.json", "/moved.json", "/missing.json"]) {
            const answer = await authorizeAs(anon, path);
            assert.equal(answer.status, 400, `${path}: ${answer.text}`);
            assert.equal(answer.location, undefined, path);
            assert.match(answer.text, /metadata document/, path);
            assert.doesNotMatch(answer.text, /Let .* use/, path);
          }
        });
      });

      test("registration is limited per address: past 20 an hour, 429 slow_down with Retry-After", async () => {
        await h.alignTo(3600);
        const anon = new Browserless(trustUrl);
        const answers: PageAnswer[] = [];
        for (let i = 0; i < 21; i++) {
          answers.push(await anon.send("POST", "/oidc/register", { json: { redirect_uris: [CALLBACK] } }));
        }
        assert.deepEqual(
          answers.slice(0, 20).map((a) => a.status),
          Array(20).fill(201),
        );
        const refused = answers[20] as PageAnswer;
        assertOAuthError(refused, 429, "slow_down");
        const retryAfter = Number(refused.headers.get("retry-after"));
        assert.ok(retryAfter > 0 && retryAfter <= 3600, String(retryAfter));
      });

      test("the metadata and the JWKS agree: access tokens and id_tokens verify with the published keys", async () => {
        const metadata = await h.request("GET", "/.well-known/oauth-authorization-server");
        assert.equal(metadata.json.issuer, trustUrl);
        assert.equal(metadata.json.jwks_uri, `${trustUrl}/.well-known/jwks.json`);
        const { agent } = await h.link();
        const answer = await tokenRequest({
          grant_type: JWT_BEARER,
          assertion: await assertion(agent),
          resource: RESOURCE,
        });
        assert.equal(decodeProtectedHeader(answer.json.access_token).alg, "EdDSA");
        await verifyAccessToken(answer.json.access_token);
      });
    });
  }
});
