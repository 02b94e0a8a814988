import { randomUUID } from "node:crypto";
import { type AuthorityGrant, grantClaims } from "@proto/protocol";
import { SignJWT } from "jose";
import type { KeyRing } from "../keys.js";

/** RFC 9068 access tokens live this long (the bound is 15 minutes). */
export const ACCESS_TOKEN_TTL_SECONDS = 600;

export interface AccessTokenClaims {
  /** The resource (RFC 8707) the token is for: its `aud`. */
  resource: string;
  /** The person's pairwise pseudonym for the resource. */
  sub: string;
  clientId: string;
  scope: string;
  /** The agent acting for the person (JWT-bearer grant): RFC 8693 §4.1 `act`. */
  actor?: string;
  /**
   * The agent's grant for the resource's service, whose `grant_id` and `authorization_details`
   * the token carries as an attestation does; its `scope` stays the one above (what was asked of it).
   */
  grant?: AuthorityGrant;
  acr?: string;
  amr?: string[];
  /** When the person authenticated, in seconds. */
  authTime?: number;
}

/** Signs an RFC 9068 JWT access token (`typ: at+jwt`) with the attestor's current key. */
export async function signAccessToken(
  keys: KeyRing,
  issuer: string,
  nowMs: number,
  claims: AccessTokenClaims,
): Promise<{ token: string; expiresIn: number }> {
  await keys.fresh();
  const key = keys.signingKey();
  const iat = Math.floor(nowMs / 1000);
  const payload: Record<string, unknown> = {
    iss: issuer,
    aud: claims.resource,
    sub: claims.sub,
    client_id: claims.clientId,
    iat,
    exp: iat + ACCESS_TOKEN_TTL_SECONDS,
    jti: randomUUID(),
  };
  // RFC 9068 §2.2.3: the scope claim says what was granted; a grant of no scope has none.
  if (claims.scope !== "") payload.scope = claims.scope;
  if (claims.authTime !== undefined) payload.auth_time = claims.authTime;
  if (claims.acr !== undefined) payload.acr = claims.acr;
  if (claims.amr !== undefined) payload.amr = claims.amr;
  if (claims.actor !== undefined) payload.act = { sub: claims.actor };
  if (claims.grant !== undefined) {
    const { grant_id, authorization_details } = grantClaims(claims.grant);
    payload.grant_id = grant_id;
    if (authorization_details !== undefined) payload.authorization_details = authorization_details;
  }
  const token = await new SignJWT(payload)
    .setProtectedHeader({ alg: "EdDSA", typ: "at+jwt", kid: key.kid })
    .sign(key.privateKey);
  return { token, expiresIn: ACCESS_TOKEN_TTL_SECONDS };
}
