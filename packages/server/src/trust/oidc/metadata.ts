/**
 * The provider's metadata: one document served as the OpenID configuration and as the RFC 8414
 * authorization server metadata (MCP clients read the latter), so the two never disagree.
 */

/** The `acr` of a session whose person signed in with a passkey (upstream proposal 0001). */
export const PHISHING_RESISTANT = "phishing-resistant";

/** RFC 7523 §2.1: an assertion used as an authorization grant. */
export const JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer";

export const OAUTH_PATHS = {
  authorization: "/oidc/authorize",
  token: "/oidc/token",
  registration: "/oidc/register",
  consent: "/oidc/consent",
} as const;

export function providerMetadata(trustUrl: string) {
  return {
    issuer: trustUrl,
    authorization_endpoint: `${trustUrl}${OAUTH_PATHS.authorization}`,
    token_endpoint: `${trustUrl}${OAUTH_PATHS.token}`,
    registration_endpoint: `${trustUrl}${OAUTH_PATHS.registration}`,
    jwks_uri: `${trustUrl}/.well-known/jwks.json`,
    scopes_supported: ["openid"],
    response_types_supported: ["code"],
    response_modes_supported: ["query"],
    grant_types_supported: ["authorization_code", "refresh_token", JWT_BEARER_GRANT],
    subject_types_supported: ["pairwise"],
    id_token_signing_alg_values_supported: ["EdDSA"],
    code_challenge_methods_supported: ["S256"],
    token_endpoint_auth_methods_supported: ["none"],
    // The list trust.md fixes; id_tokens also carry acr and amr (acr_values_supported names the acr).
    claims_supported: ["iss", "sub", "aud", "exp", "iat", "nonce"],
    acr_values_supported: [PHISHING_RESISTANT],
    client_id_metadata_document_supported: true,
    authorization_response_iss_parameter_supported: true,
  };
}
