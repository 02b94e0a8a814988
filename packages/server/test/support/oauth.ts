/**
 * The attestor's OAuth answers as a client sees them, and the grants its agents hold: shared by
 * the suites of the authorization server (issue 24) and of the scopes it grants (issue 38).
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { createLocalJWKSet, jwtVerify, SignJWT } from "jose";
import * as client from "openid-client";
import { putGrant } from "../../src/trust/authority/grants.js";
import type { PageAnswer } from "./browser-session.js";
import type { Agent, TrustHarness } from "./trust.js";

export const JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/** An OAuth error: the status, `{error, error_description}` only, JSON, never cached. */
export function assertOAuthError(answer: PageAnswer, status: number, error: string): void {
  assert.equal(answer.status, status, answer.text);
  assert.match(answer.headers.get("content-type") ?? "", /^application\/json/);
  assert.deepEqual(Object.keys(answer.json).sort(), ["error", "error_description"], answer.text);
  assert.equal(answer.json.error, error, answer.text);
  assert.equal(answer.headers.get("cache-control"), "no-store");
}

export async function pkce() {
  const verifier = client.randomPKCECodeVerifier();
  return { verifier, challenge: await client.calculatePKCECodeChallenge(verifier) };
}

/** An RFC 7523 assertion signed by `agent` for the attestor's token endpoint, dated by its clock. */
export async function agentAssertion(h: TrustHarness, agent: Agent, lifetime = 120): Promise<string> {
  const now = Math.floor((await h.nowMs()) / 1000);
  return new SignJWT({
    iss: agent.did,
    sub: agent.did,
    aud: `${h.publicUrl}/oidc/token`,
    iat: now,
    exp: now + lifetime,
    jti: randomUUID(),
  })
    .setProtectedHeader({ alg: "EdDSA" })
    .sign(agent.privateKey);
}

/** Verifies an access token as the resource server `resource` would, answering its claims. */
export async function verifyAccessToken(h: TrustHarness, token: string, resource: string) {
  const jwks = createLocalJWKSet((await h.request("GET", "/.well-known/jwks.json")).json);
  const { payload } = await jwtVerify(token, jwks, {
    issuer: h.publicUrl,
    audience: resource,
    typ: "at+jwt",
    algorithms: ["EdDSA"],
    currentDate: new Date(await h.nowMs()),
  });
  return payload;
}

/**
 * Sets the grant of a binding for a service as the person's approval would (docs/authority.md),
 * in one transaction on the attestor's database.
 */
export async function grantTo(
  h: TrustHarness,
  bindingId: string,
  service: { aud: string; url: string },
  content: Parameters<typeof putGrant>[2],
) {
  const db = h.app.service.database.db;
  const binding = await db
    .selectFrom("trust_bindings")
    .select("human_id")
    .where("id", "=", bindingId)
    .executeTakeFirstOrThrow();
  const now = await h.nowMs();
  return db
    .transaction()
    .execute((trx) =>
      putGrant(
        trx,
        { bindingId, humanId: binding.human_id, aud: service.aud, serviceUrl: service.url, now, method: "session" },
        content,
      ),
    );
}
