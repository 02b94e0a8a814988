/**
 * Access tokens never exceed the grant (docs/authority.md, "OAuth access tokens"): the JWT-bearer
 * grant, an agent asking for its person, carries only what the person granted for the resource.
 */
import { randomUUID } from "node:crypto";
import { didWebHost } from "@proto/protocol";
import { decodeJwt, SignJWT } from "jose";
import { isObject } from "../checks.js";
import type { HttpResponse } from "../http.js";
import { check, type Probe, type ProbeContext, ProbeSkip, pass } from "../probe.js";
import { redacted } from "../redact.js";
import { grantsOfLinkedAgent } from "./authority.js";
import { fetchOpenId } from "./discovery.js";
import type { AgentKey } from "./keys.js";
import { linkedAgent } from "./signed.js";

export const JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/** A scope no service grants: the attestor must leave it out of every token. */
export const NOT_GRANTED = "conformance:not-granted";
/** The assertion's life: a minute, well inside the 300 seconds an attestor accepts. */
const ASSERTION_SECONDS = 60;

/** RFC 7523 §2.1: `iss` = `sub` = the agent's did:key, `aud` the token endpoint, a fresh `jti`. */
function assertion(context: ProbeContext, agent: AgentKey, tokenEndpoint: string): Promise<string> {
  const iat = context.nowSeconds();
  return new SignJWT({ jti: randomUUID() })
    .setProtectedHeader({ alg: "EdDSA", typ: "JWT" })
    .setIssuer(agent.did)
    .setSubject(agent.did)
    .setAudience(tokenEndpoint)
    .setIssuedAt(iat)
    .setExpirationTime(iat + ASSERTION_SECONDS)
    .sign(agent.privateKey);
}

/** The token endpoint, when the attestor offers the JWT-bearer grant; a skip saying why not otherwise. */
async function jwtBearerEndpoint(context: ProbeContext): Promise<string> {
  const response = await fetchOpenId(context);
  const metadata = isObject(response.json) ? response.json : {};
  if (response.status !== 200 || typeof metadata.token_endpoint !== "string") {
    throw new ProbeSkip(`no token endpoint in the OpenID configuration (it answered ${response.status})`);
  }
  const grants = metadata.grant_types_supported;
  if (!Array.isArray(grants) || !grants.includes(JWT_BEARER_GRANT)) {
    throw new ProbeSkip("the attestor does not offer the jwt-bearer grant (grant_types_supported)");
  }
  return metadata.token_endpoint;
}

/**
 * The scopes the agent's live grant for `aud` holds, asked beside the one never granted: then the
 * attestor answers a token (what it keeps) rather than only `invalid_scope`, and both are checked.
 */
async function heldScopes(context: ProbeContext, aud: string): Promise<string[]> {
  const response = await grantsOfLinkedAgent(context);
  const grants = isObject(response.json) && Array.isArray(response.json.grants) ? response.json.grants : [];
  const now = context.nowSeconds() * 1000;
  const live = grants.find(
    (g) =>
      isObject(g) &&
      g.aud === aud &&
      g.revoked_at === null &&
      (g.expires_at === null || Date.parse(String(g.expires_at)) > now) &&
      typeof g.scope === "string",
  );
  return isObject(live)
    ? String(live.scope)
        .split(" ")
        .filter((name) => name !== "" && name !== NOT_GRANTED)
    : [];
}

const scopeNames = (value: unknown): string[] => (typeof value === "string" ? value.split(" ") : []);

function oauthError(response: HttpResponse): string {
  const body = isObject(response.json) ? response.json : {};
  return [body.error, body.error_description].filter((part) => typeof part === "string").join(": ");
}

export const scopeWithinGrant: Probe = {
  id: "attestor.oauth.scope-within-grant",
  description: `a JWT-bearer token request asking ${NOT_GRANTED} is invalid_scope or answers a token without it`,
  section: "authority.md §The claims a token carries (OAuth access tokens, JWT-bearer grant)",
  async run(context) {
    const agent = linkedAgent(context);
    const { aud } = context.options;
    if (aud === undefined) throw new ProbeSkip("needs --aud DID (a did:web: the resource is its https origin)");
    const host = didWebHost(aud);
    if (host === undefined)
      throw new ProbeSkip(`--aud ${aud} is not a did:web: no resource (an https origin) derives from it`);
    const tokenEndpoint = await jwtBearerEndpoint(context);
    const asked = [...(await heldScopes(context, aud)), NOT_GRANTED];
    const form = new URLSearchParams({
      grant_type: JWT_BEARER_GRANT,
      assertion: await assertion(context, agent, tokenEndpoint),
      resource: `https://${host}`,
      scope: asked.join(" "),
    });
    const response = redacted(
      await context.http.post(tokenEndpoint, form.toString(), { "content-type": "application/x-www-form-urlencoded" }),
    );
    const x = response.exchange;
    const body = isObject(response.json) ? response.json : {};
    if (response.status === 400 && body.error === "invalid_scope") return pass();
    if (response.status === 503) {
      throw new ProbeSkip(`the attestor cannot answer for the resource now (503 ${oauthError(response)})`);
    }
    check(
      response.status === 200,
      `asking ${asked.join(" ")}: expected 400 invalid_scope or 200 with a token without ${NOT_GRANTED}, got ${response.status} ${oauthError(response)}`.trimEnd(),
      x,
    );
    check(typeof body.access_token === "string", "the token response has no access_token", x);
    check(
      !scopeNames(body.scope).includes(NOT_GRANTED),
      `the token response grants ${NOT_GRANTED}, which no service grants: scope "${String(body.scope)}"`,
      x,
    );
    let claims: Record<string, unknown> | undefined;
    try {
      claims = decodeJwt(body.access_token);
    } catch {
      // An opaque token says nothing more than the response's scope.
    }
    check(
      !scopeNames(claims?.scope).includes(NOT_GRANTED),
      `the access token carries ${NOT_GRANTED}, which no service grants: scope "${String(claims?.scope)}"`,
      x,
    );
    return pass();
  },
};
