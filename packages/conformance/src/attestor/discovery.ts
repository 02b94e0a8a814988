/** The key set and OpenID configuration probes (trust.md §GET /.well-known/*). */
import { cacheDirectives, expectCacheControl, expectStatus, isObject, jsonObject } from "../checks.js";
import type { HttpResponse } from "../http.js";
import { check, type Probe, type ProbeContext, pass } from "../probe.js";

const JWKS_SECTION = "trust.md §GET /.well-known/jwks.json";
const OIDC_SECTION = "trust.md §GET /.well-known/openid-configuration";

/** Private or symmetric JWK members: none may appear in a public key set. */
const PRIVATE_MEMBERS = ["d", "p", "q", "dp", "dq", "qi", "k", "oth"];

export const fetchKeySet = (context: ProbeContext): Promise<HttpResponse> =>
  context.memo("jwks", () => context.http.get(`${context.baseUrl}/.well-known/jwks.json`));

export const fetchOpenId = (context: ProbeContext): Promise<HttpResponse> =>
  context.memo("openid", () => context.http.get(`${context.baseUrl}/.well-known/openid-configuration`));

export const jwksShape: Probe = {
  id: "attestor.jwks.shape",
  description: "the key set is 200 JSON { keys } of Ed25519 public keys with a kid",
  section: JWKS_SECTION,
  async run(context) {
    const response = await fetchKeySet(context);
    expectStatus(response, 200, "GET /.well-known/jwks.json");
    const body = jsonObject(response, "the key set");
    check(
      Array.isArray(body.keys) && body.keys.length > 0,
      "the key set has no non-empty keys array",
      response.exchange,
    );
    for (const [i, key] of body.keys.entries()) {
      check(isObject(key), `keys[${i}] is not an object`, response.exchange);
      check(key.kty === "OKP" && key.crv === "Ed25519", `keys[${i}] is not kty OKP, crv Ed25519`, response.exchange);
      check(typeof key.kid === "string" && key.kid.length > 0, `keys[${i}] has no kid`, response.exchange);
      check(
        typeof key.x === "string" && /^[A-Za-z0-9_-]{43}$/.test(key.x),
        `keys[${i}].x is not a base64url 32-byte key`,
        response.exchange,
      );
      const leaked = PRIVATE_MEMBERS.filter((name) => name in key);
      check(leaked.length === 0, `keys[${i}] carries private members: ${leaked.join(", ")}`, response.exchange);
    }
    return pass();
  },
};

export const jwksCache: Probe = {
  id: "attestor.jwks.cache",
  description: "the key set is cached: public, max-age=300, stale-while-revalidate=900",
  section: JWKS_SECTION,
  async run(context) {
    const response = await fetchKeySet(context);
    expectStatus(response, 200, "GET /.well-known/jwks.json");
    expectCacheControl(
      response,
      { public: "", "max-age": "300", "stale-while-revalidate": "900" },
      "GET /.well-known/jwks.json",
    );
    return pass();
  },
};

/** Members with one fixed value (the issuer and endpoints are derived from the URL probed). */
const FIXED_LISTS: Record<string, string[]> = {
  scopes_supported: ["openid"],
  response_types_supported: ["code"],
  grant_types_supported: ["authorization_code"],
  subject_types_supported: ["pairwise"],
  id_token_signing_alg_values_supported: ["EdDSA"],
  code_challenge_methods_supported: ["S256"],
  token_endpoint_auth_methods_supported: ["none"],
  claims_supported: ["iss", "sub", "aud", "exp", "iat", "nonce"],
};

export const openIdValues: Probe = {
  id: "attestor.openid.values",
  description: "the OpenID configuration has every member and value of the contract's table",
  section: OIDC_SECTION,
  async run(context) {
    const response = await fetchOpenId(context);
    expectStatus(response, 200, "GET /.well-known/openid-configuration");
    const body = jsonObject(response, "the OpenID configuration");
    const base = context.baseUrl;
    const urls: Record<string, string> = {
      issuer: base,
      authorization_endpoint: `${base}/oidc/authorize`,
      token_endpoint: `${base}/oidc/token`,
      jwks_uri: `${base}/.well-known/jwks.json`,
    };
    for (const [member, value] of Object.entries(urls)) {
      check(
        body[member] === value,
        `${member} must be ${value}, got ${JSON.stringify(body[member])}`,
        response.exchange,
      );
    }
    // Lists are checked for membership: a deployment may support more than the contract requires.
    for (const [member, values] of Object.entries(FIXED_LISTS)) {
      const got = body[member];
      check(Array.isArray(got), `${member} must be a list, got ${JSON.stringify(got)}`, response.exchange);
      const missing = values.filter((value) => !got.includes(value));
      check(missing.length === 0, `${member} lacks ${missing.join(", ")}`, response.exchange);
    }
    return pass();
  },
};

export const openIdCache: Probe = {
  id: "attestor.openid.cache",
  description: "the OpenID configuration is cached 300 seconds",
  section: OIDC_SECTION,
  async run(context) {
    const response = await fetchOpenId(context);
    expectStatus(response, 200, "GET /.well-known/openid-configuration");
    const maxAge = cacheDirectives(response.headers["cache-control"]).get("max-age");
    check(
      maxAge === "300",
      `Cache-Control must have max-age=300 (got ${response.headers["cache-control"] ?? "no Cache-Control"})`,
      response.exchange,
    );
    return pass();
  },
};
