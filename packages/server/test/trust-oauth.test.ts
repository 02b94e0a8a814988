import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { createTestCA, DISCOVERY_PATH, type HttpsHost, startHttpsHost, type TestCA } from "@proto/testkit";
import { createLocalJWKSet, decodeJwt, decodeProtectedHeader, jwtVerify, SignJWT } from "jose";
import { findCode, purgeSpentCodes } from "../src/trust/oidc/codes.js";
import { purgeEndedGrants } from "../src/trust/oidc/grants.js";
import { Browserless, field, type PageAnswer } from "./support/browser-session.js";
import { assertOAuthError, JWT_BEARER, pkce } from "./support/oauth.js";
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

/** The resource's host, served with the client host: its discovery document declares `notes`. */
const RESOURCE_HOSTNAME = "notes.test";
/** `notes.test:{port}`, once the host listens. */
let resourceHost: string;
let RESOURCE: string;
/** What the attestor derives the person's pseudonym for RESOURCE from: the did:web of its host. */
let RESOURCE_DID: string;
/** RESOURCE's host as a pattern, for the pages that name it. */
const hostPattern = () => resourceHost.replaceAll(".", "\\.");
const OTHER_RESOURCE = "https://other.test/mcp";
const CALLBACK = "http://127.0.0.1:9/callback";
const CIMD_HOST = "client.test";

/** A `Retry-After` of whole seconds within `[1, max]`. */
function assertRetryAfterWithin(answer: PageAnswer, max: number): void {
  const seconds = Number(answer.headers.get("retry-after"));
  assert.ok(Number.isInteger(seconds) && seconds >= 1 && seconds <= max, `Retry-After ${seconds}`);
}

/** A refusal a person's browser shows: an HTML page of that status, no redirect, a Retry-After. */
function assertRefusalPage(answer: PageAnswer, status: number, maxRetryAfter: number): void {
  assert.equal(answer.status, status, answer.text);
  assert.match(answer.headers.get("content-type") ?? "", /^text\/html/);
  assert.equal(answer.location, undefined);
  assertRetryAfterWithin(answer, maxRetryAfter);
}

describe("OAuth for MCP at the attestor", () => {
  let ca: TestCA;
  let cimd: HttpsHost;
  /** The metadata documents the client host serves, by path. */
  const documents = new Map<string, unknown>();
  before(async () => {
    ca = await createTestCA();
    cimd = await startHttpsHost({ ca, hostnames: [CIMD_HOST, RESOURCE_HOSTNAME] });
    resourceHost = `${RESOURCE_HOSTNAME}:${cimd.port}`;
    RESOURCE = `https://${resourceHost}/mcp`;
    RESOURCE_DID = `did:web:${RESOURCE_HOSTNAME}%3A${cimd.port}`;
    // Issue 38: a token's scopes are the resource's declared permissions (here `notes`, a default).
    cimd.route(DISCOVERY_PATH, {
      headers: { "cache-control": "max-age=600" },
      body: {
        proto_version: "0.1",
        service_did: RESOURCE_DID,
        permissions: { notes: { description: "Read and write your notes", default: true } },
      },
    });
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
            PROTO_FETCH_RESOLVE: cimd.resolveEntries(),
            // Tests speak from other client addresses through X-Forwarded-For.
            TRUSTED_PROXIES: "127.0.0.1",
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
          assert.match(consent.text, new RegExp(`Let Desk Assistant use ${hostPattern()} as you\\?`));
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

        test("a code presented again is refused, and the refresh token of its first redemption is refused from then on", async () => {
          const p = await pkce();
          const { redirect } = await authorize(p.challenge);
          const code = redirect.searchParams.get("code") ?? "";
          const tokens = await redeem(code, p.verifier, RESOURCE);
          assert.equal(tokens.status, 200, tokens.text);
          assertOAuthError(await redeem(code, p.verifier, RESOURCE), 400, "invalid_grant");
          const refreshed = await tokenRequest({
            grant_type: "refresh_token",
            refresh_token: tokens.json.refresh_token,
            client_id: clientId,
          });
          assertOAuthError(refreshed, 400, "invalid_grant");
          assert.match(refreshed.json.error_description, /revoked/);
        });

        test("two concurrent redemptions of one code: one token response, one invalid_grant, and the grant ends", async () => {
          const p = await pkce();
          const { redirect } = await authorize(p.challenge);
          const code = redirect.searchParams.get("code") ?? "";
          const answers = await Promise.all([redeem(code, p.verifier), redeem(code, p.verifier)]);
          const ok = answers.filter((a) => a.status === 200);
          assert.equal(ok.length, 1, answers.map((a) => a.text).join("\n"));
          assertOAuthError(answers.find((a) => a.status !== 200) as PageAnswer, 400, "invalid_grant");
          assertOAuthError(
            await tokenRequest({
              grant_type: "refresh_token",
              refresh_token: ok[0]?.json.refresh_token,
              client_id: clientId,
            }),
            400,
            "invalid_grant",
          );
        });

        test("spent codes are forgotten once they can change nothing: unused ones after expiry, used ones once their grant ended; a used code kept for a live grant still revokes it when replayed", async () => {
          const db = h.app.service.database.db;
          const unusedPkce = await pkce();
          const unused = (await authorize(unusedPkce.challenge)).redirect.searchParams.get("code") ?? "";
          const usedPkce = await pkce();
          const used = (await authorize(usedPkce.challenge)).redirect.searchParams.get("code") ?? "";
          const tokens = await redeem(used, usedPkce.verifier);
          assert.equal(tokens.status, 200, tokens.text);
          // Past the codes' 120 s and the purge's margin of an hour.
          await h.advance(2 * 3600);
          await purgeSpentCodes(db, await h.nowMs());
          assert.equal(await findCode(db, unused), undefined, "an expired unused code is forgotten");
          assert.ok(await findCode(db, used), "a used code is kept while its grant is live");
          const replayed = await redeem(used, usedPkce.verifier);
          assertOAuthError(replayed, 400, "invalid_grant");
          assert.match(replayed.json.error_description, /already used/);
          const refreshed = await tokenRequest({
            grant_type: "refresh_token",
            refresh_token: tokens.json.refresh_token,
            client_id: clientId,
          });
          assertOAuthError(refreshed, 400, "invalid_grant");
          assert.match(refreshed.json.error_description, /revoked/);
          // Its grant ended, a replay has nothing left to revoke: the next purge forgets the code.
          await purgeSpentCodes(db, await h.nowMs());
          assert.equal(await findCode(db, used), undefined, "a used code whose grant ended is forgotten");
          assertOAuthError(await redeem(used, usedPkce.verifier), 400, "invalid_grant");
        });

        test("a token request with the wrong code_verifier, redirect_uri or client_id does not use the code up: the right one after it succeeds", async () => {
          const other = await new Browserless(trustUrl).send("POST", "/oidc/register", {
            json: { client_name: "Other Client", redirect_uris: [CALLBACK] },
          });
          assert.equal(other.status, 201, other.text);
          const p = await pkce();
          const { redirect } = await authorize(p.challenge);
          const code = redirect.searchParams.get("code") ?? "";
          const right = {
            grant_type: "authorization_code",
            code,
            code_verifier: p.verifier,
            client_id: clientId,
            redirect_uri: CALLBACK,
          };
          for (const wrong of [
            { code_verifier: (await pkce()).verifier },
            { redirect_uri: `${CALLBACK}/other` },
            { client_id: other.json.client_id as string },
          ]) {
            assertOAuthError(await tokenRequest({ ...right, ...wrong }), 400, "invalid_grant");
          }
          const tokens = await tokenRequest(right);
          assert.equal(tokens.status, 200, tokens.text);
          const refreshed = await tokenRequest({
            grant_type: "refresh_token",
            refresh_token: tokens.json.refresh_token,
            client_id: clientId,
          });
          assert.equal(refreshed.status, 200, "the wrong requests ended nothing");
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
          assert.match(account.text, new RegExp(hostPattern()));
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
              new RegExp(`role="status"><strong>Desk Assistant no longer has access to ${hostPattern()}\\.</strong>`),
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
          assert.match(answer.text, new RegExp(`Let Notebook Client use ${hostPattern()} as you\\?`));
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

      /** A redemption of a code nobody was given, by the client `clientId` names. */
      const strayRedemption = (clientId: string) => ({
        grant_type: "authorization_code",
        code: "a-code-nobody-was-given",
        code_verifier: "v".repeat(43),
        client_id: clientId,
        redirect_uri: CALLBACK,
      });
      const authorizePath = (clientId: string, challenge = "a".repeat(43)) =>
        `/oidc/authorize?${new URLSearchParams({
          client_id: clientId,
          redirect_uri: CALLBACK,
          response_type: "code",
          scope: "notes",
          code_challenge: challenge,
          code_challenge_method: "S256",
          resource: RESOURCE,
        })}`;

      describe("what naming a client_id URL can make the attestor fetch", () => {
        const fetchesOf = (path: string) => cimd.requests.filter((r) => r.path === path).length;
        const from = (address: string) => new Browserless(trustUrl, { "x-forwarded-for": address });

        const redeemAs = (path: string, address: string) =>
          from(address).send("POST", "/oidc/token", { form: strayRedemption(cimdUrl(path)) });
        const authorizeAt = (b: Browserless, path: string, challenge?: string) =>
          b.get(authorizePath(cimdUrl(path), challenge));

        test("20 concurrent token requests naming a client whose host never answers make one fetch between them; each is invalid_client", async () => {
          const path = `/silent-${randomUUID()}.json`;
          cimd.misbehave(path, "hang");
          const answers = await Promise.all(
            Array.from({ length: 20 }, (_, i) => redeemAs(path, `198.51.100.${i + 1}`)),
          );
          for (const answer of answers) assertOAuthError(answer, 401, "invalid_client");
          assert.equal(fetchesOf(path), 1);
        });

        test("a document that could not be fetched is not fetched again for 60 s: the same refusal meanwhile, one fetch after", async () => {
          const path = `/gone-${randomUUID()}.json`;
          cimd.route(path, { status: 404 });
          const anon = from("198.51.100.100");
          const first = await authorizeAt(anon, path);
          assert.equal(first.status, 400, first.text);
          assert.match(first.text, /metadata document could not be fetched/);
          assert.equal(fetchesOf(path), 1);
          await h.advance(58);
          const again = await authorizeAt(from("198.51.100.101"), path);
          assert.equal(again.status, 400, again.text);
          assert.match(again.text, /metadata document could not be fetched/);
          assertOAuthError(await redeemAs(path, "198.51.100.102"), 401, "invalid_client");
          assert.equal(fetchesOf(path), 1, "answered from memory");
          await h.advance(3);
          assert.equal((await authorizeAt(anon, path)).status, 400);
          assert.equal(fetchesOf(path), 2, "fetched again after the 60 s");
        });

        test("one address naming new client_id URLs gets 429 with Retry-After past 20 a minute (a page, and slow_down at the token endpoint); a person elsewhere meanwhile signs in through a first-time client", async () => {
          const person = new Browserless(trustUrl);
          await signInByEmail(h, person, `cimd-fresh-${randomUUID()}@mail.test`);
          const prefix = `/many-${randomUUID()}`;
          const caller = from("203.0.113.66");
          const answers: PageAnswer[] = [];
          for (let i = 0; i < 40; i++) answers.push(await authorizeAt(caller, `${prefix}-${i}.json`));
          assert.deepEqual(
            answers.map((a) => a.status),
            [...Array(20).fill(400), ...Array(20).fill(429)],
          );
          for (const refused of answers.slice(20)) assertRefusalPage(refused, 429, 60);
          assert.match(answers[20]?.text ?? "", /Too many attempts/);
          assert.equal(cimd.requests.filter((r) => r.path.startsWith(prefix)).length, 20, "one fetch each, 20 in all");
          const token = await redeemAs(`${prefix}-token.json`, "203.0.113.66");
          assertOAuthError(token, 429, "slow_down");
          assertRetryAfterWithin(token, 60);
          assert.equal(fetchesOf(`${prefix}-token.json`), 0);

          // Meanwhile a person at another address uses a client nobody used before, start to end.
          const path = `/fresh-${randomUUID()}.json`;
          cimd.route(path, {
            headers: { "cache-control": "max-age=600" },
            body: { client_id: cimdUrl(path), client_name: "Fresh Client", redirect_uris: [CALLBACK] },
          });
          const p = await pkce();
          const consent = await authorizeAt(person, path, p.challenge);
          assert.match(consent.text, new RegExp(`Let Fresh Client use ${hostPattern()} as you\\?`));
          const back = await answerConsent(person, consent, "allow");
          assert.equal(back.status, 302, back.text);
          const tokens = await tokenRequest({
            grant_type: "authorization_code",
            code: new URL(back.location ?? "").searchParams.get("code") ?? "",
            code_verifier: p.verifier,
            client_id: cimdUrl(path),
            redirect_uri: CALLBACK,
          });
          assert.equal(tokens.status, 200, tokens.text);
          assert.equal((await verifyAccessToken(tokens.json.access_token)).client_id, cimdUrl(path));
          assert.equal(typeof tokens.json.refresh_token, "string");
          assert.equal(fetchesOf(path), 1);
        });

        test("the authorization endpoint is limited per address: past 120 a minute, a 429 page with Retry-After; other addresses go on", async () => {
          await h.alignTo(60);
          const caller = from("203.0.113.120");
          const query = `/oidc/authorize?${new URLSearchParams({ client_id: "nobody", redirect_uri: CALLBACK })}`;
          const statuses: number[] = [];
          for (let i = 0; i < 120; i++) statuses.push((await caller.get(query)).status);
          assert.deepEqual(statuses, Array(120).fill(400));
          const refused = await caller.get(query);
          assertRefusalPage(refused, 429, 60);
          assert.equal((await from("203.0.113.121").get(query)).status, 400);
        });
      });

      describe("with one fetch slot (TRUST_OAUTH_CLIENT_FETCH_CONCURRENCY=1)", () => {
        let one: TrustHarness;
        before(async () => {
          one = await startTrustHarness(variant, {
            fetchCa: ca.certPem,
            env: {
              TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS,
              TRUST_OAUTH_CLIENT_FETCH_CONCURRENCY: "1",
              PROTO_FETCH_ALLOW_PRIVATE: "1",
              PROTO_FETCH_RESOLVE: `${CIMD_HOST}:${cimd.port}:127.0.0.1`,
            },
          });
        });
        after(() => one?.close());

        test("while it is out, a request that needs another fetch is 503 with Retry-After: temporarily_unavailable at the token endpoint, a page at the authorization endpoint", async () => {
          const held = `/held-${randomUUID()}.json`;
          const waiting = cimdUrl(`/waiting-${randomUUID()}.json`);
          let arrived = () => {};
          const arrival = new Promise<void>((resolve) => {
            arrived = resolve;
          });
          let release = () => {};
          const released = new Promise<void>((resolve) => {
            release = resolve;
          });
          cimd.route(held, async (_req, res) => {
            arrived();
            await released;
            res.writeHead(404).end();
          });
          const b = new Browserless(one.url);
          const first = b.send("POST", "/oidc/token", { form: strayRedemption(cimdUrl(held)) });
          await arrival;
          const busy = await b.send("POST", "/oidc/token", { form: strayRedemption(waiting) });
          assertOAuthError(busy, 503, "temporarily_unavailable");
          assert.equal(busy.headers.get("retry-after"), "3");
          const page = await b.get(authorizePath(waiting));
          assertRefusalPage(page, 503, 3);
          assert.match(page.text, /Temporarily unavailable/);
          release();
          assertOAuthError(await first, 401, "invalid_client");
          // The slot is free again: the other document is fetched (and is not there).
          assertOAuthError(
            await b.send("POST", "/oidc/token", { form: strayRedemption(waiting) }),
            401,
            "invalid_client",
          );
          assert.equal(cimd.requests.filter((r) => waiting.endsWith(r.path)).length, 1);
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
