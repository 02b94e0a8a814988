import { DEFAULT_SKEW_SECONDS, didKeyToPublicKey, isDidKey, type NonceStore } from "@proto/protocol";
import { decodeJwt, decodeProtectedHeader, errors, jwtVerify } from "jose";

/** An assertion may live at most this long (`exp - iat`), like a signed request (trust.md). */
export const MAX_ASSERTION_LIFETIME_SECONDS = 300;
export const MAX_ASSERTION_LENGTH = 4096;

export class AssertionError extends Error {}

/**
 * Checks an RFC 7523 assertion an agent signed with its own key, profiled like MCP's workload
 * identity federation: `iss` = `sub` = the agent's did:key (whose key verifies it, EdDSA only),
 * `aud` the token endpoint (or the issuer), `exp - iat` at most 5 minutes, a `jti` used once.
 * Answers the agent's DID; throws AssertionError with what is wrong.
 */
export async function verifyAgentAssertion(
  assertion: string,
  options: { audiences: string[]; nowMs: number; jtis: NonceStore },
): Promise<string> {
  if (assertion.length > MAX_ASSERTION_LENGTH) throw new AssertionError("the assertion is too long");
  let iss: unknown;
  try {
    iss = decodeJwt(assertion).iss;
    if (decodeProtectedHeader(assertion).alg !== "EdDSA") throw new AssertionError("the assertion must be EdDSA");
  } catch (error) {
    if (error instanceof AssertionError) throw error;
    throw new AssertionError("the assertion is not a JWT");
  }
  if (typeof iss !== "string" || !isDidKey(iss)) throw new AssertionError("iss must be the agent's did:key");
  const now = Math.floor(options.nowMs / 1000);
  let payload: Awaited<ReturnType<typeof jwtVerify>>["payload"];
  try {
    ({ payload } = await jwtVerify(assertion, didKeyToPublicKey(iss), {
      algorithms: ["EdDSA"],
      issuer: iss,
      subject: iss,
      audience: options.audiences,
      requiredClaims: ["exp", "iat", "jti"],
      currentDate: new Date(options.nowMs),
      clockTolerance: DEFAULT_SKEW_SECONDS,
    }));
  } catch (error) {
    if (error instanceof errors.JWTExpired) throw new AssertionError("the assertion expired");
    if (error instanceof errors.JWTClaimValidationFailed) {
      throw new AssertionError(`the assertion's ${error.claim} is not acceptable`);
    }
    throw new AssertionError("the assertion's signature does not verify with its issuer's key");
  }
  const { exp, iat, jti } = payload as { exp: number; iat: number; jti: unknown };
  if (exp - iat > MAX_ASSERTION_LIFETIME_SECONDS)
    throw new AssertionError("the assertion may live 300 seconds at most");
  if (iat > now + DEFAULT_SKEW_SECONDS) throw new AssertionError("the assertion was issued in the future");
  if (typeof jti !== "string" || jti.length === 0 || jti.length > 256)
    throw new AssertionError("jti must be a short string");
  // Kept until the assertion could no longer be accepted anyway.
  const ttl = Math.max(1, exp + DEFAULT_SKEW_SECONDS - now);
  if (!(await options.jtis.seen(`jwt-bearer:${iss}`, jti, ttl, iat))) {
    throw new AssertionError("the assertion was already used (jti)");
  }
  return iss;
}
