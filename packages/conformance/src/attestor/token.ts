/** Mint probes (trust.md §POST /v1/token; decisions.md §Trust attestor 1 for signature failures). */
import { createLocalJWKSet, decodeJwt, decodeProtectedHeader, type JWK, jwtVerify } from "jose";
import { expectError, expectStatus, isObject, jsonObject } from "../checks.js";
import type { HttpResponse } from "../http.js";
import { check, type Probe, type ProbeContext, ProbeFailure, ProbeSkip, pass } from "../probe.js";
import { redacted } from "../redact.js";
import { fetchKeySet } from "./discovery.js";
import { type AgentKey, newAgentKey } from "./keys.js";
import { expectUnsignedRefused, linkedAgent, type SignedAgentRequest, send, signedAgentRequest } from "./signed.js";

const SECTION = "trust.md §POST /v1/token";
/** An audience for requests that must be refused before any mint; nothing is minted for it. */
export const PROBE_AUD = "did:web:conformance.invalid";

/** A signed mint for `aud`: `{trust_url}/v1/token` is the URL signed. */
const signedMint = (context: ProbeContext, agent: AgentKey, aud: string): SignedAgentRequest =>
  signedAgentRequest(context, agent, "POST", "/v1/token", JSON.stringify({ aud }));

export const unsigned: Probe = {
  id: "attestor.token.unsigned",
  description: "an unsigned mint is 401 (unauthorized or invalid_signature)",
  section: `${SECTION}, §Errors`,
  async run(context) {
    const response = await context.http.post(`${context.baseUrl}/v1/token`, { aud: PROBE_AUD });
    expectUnsignedRefused(response, "unsigned POST /v1/token");
    return pass();
  },
};

/** One signed mint by a key made for the run (never linked), and the same request sent again. */
const unlinkedPair = (context: ProbeContext) =>
  context.memo("unlinked-mint", async () => {
    const request = signedMint(context, newAgentKey(), PROBE_AUD);
    const first = await send(context, request);
    const replay = await send(context, request);
    return { first, replay };
  });

export const unlinked: Probe = {
  id: "attestor.token.unlinked",
  description: "a well-signed mint by a key with no binding is 401 unauthorized",
  section: "decisions.md §Trust attestor 1; trust.md §Errors",
  async run(context) {
    const { first } = await unlinkedPair(context);
    expectError(first, 401, "unauthorized", "signed POST /v1/token by an unlinked key");
    return pass();
  },
};

export const replay: Probe = {
  id: "attestor.token.replay",
  description: "the same signed mint sent twice (same nonce) is refused 401 replayed_nonce",
  section: "decisions.md §Trust attestor 1; trust.md §Reserved codes",
  async run(context) {
    const { replay } = await unlinkedPair(context);
    expectError(replay, 401, "replayed_nonce", "the replayed POST /v1/token");
    return pass();
  },
};

interface Minted {
  agent: AgentKey;
  aud: string;
  response: HttpResponse;
  body: Record<string, unknown>;
  jwt: string;
}

/** One mint with the operator's linked key, shared by the mint probes. */
export const mintOnce = (context: ProbeContext): Promise<Minted> =>
  context.memo("mint", async () => {
    const { agentKeyPem, aud } = context.options;
    if (agentKeyPem === undefined || aud === undefined) {
      throw new ProbeSkip("needs --agent-key FILE (a linked agent's Ed25519 key) and --aud DID");
    }
    const agent = linkedAgent(context);
    // Reports end up in CI logs: a failure shows the token's header and claims, never a usable token.
    const response = redacted(await send(context, signedMint(context, agent, aud)));
    expectStatus(response, 200, "POST /v1/token by the linked agent");
    const parsed = jsonObject(response, "the mint");
    check(typeof parsed.jwt === "string", "the mint has no jwt string", response.exchange);
    return { agent, aud, response, body: parsed, jwt: parsed.jwt };
  });

export const mintResponse: Probe = {
  id: "attestor.token.mint",
  description: "a mint by the linked agent is 200 with jwt, expires_at, verification, binding_expires_at",
  section: SECTION,
  async run(context) {
    const { response, body } = await mintOnce(context);
    check(Number.isInteger(body.expires_at), "expires_at must be an integer", response.exchange);
    check(
      typeof body.verification === "string" && ["email", "oauth", "payment"].includes(body.verification),
      "verification must be email, oauth or payment",
      response.exchange,
    );
    check(Number.isInteger(body.binding_expires_at), "binding_expires_at must be an integer", response.exchange);
    const claims = decodeJwt(body.jwt as string);
    check(body.expires_at === claims.exp, "expires_at must equal the JWT's exp", response.exchange);
    check(body.verification === claims.verification, "verification must equal the JWT's claim", response.exchange);
    return pass();
  },
};

export const jwtVerifies: Probe = {
  id: "attestor.token.jwt",
  description: "the minted JWT verifies against the key set with EdDSA (typ JWT, a published kid)",
  section: `${SECTION}; trust.md §Attestation JWT`,
  async run(context) {
    const { response, jwt } = await mintOnce(context);
    const header = decodeProtectedHeader(jwt);
    check(
      header.alg === "EdDSA" && header.typ === "JWT",
      "the JWT header must be alg EdDSA, typ JWT",
      response.exchange,
    );
    const keySet = await fetchKeySet(context);
    expectStatus(keySet, 200, "GET /.well-known/jwks.json");
    const set = jsonObject(keySet, "the key set");
    check(Array.isArray(set.keys), "the key set has no keys array", keySet.exchange);
    // Only the public members: a key set that leaks `d` is the shape probe's failure, not this one's.
    const keys = set.keys.filter(isObject).map(({ kty, crv, kid, x }) => ({ kty, crv, kid, x }) as JWK);
    try {
      await jwtVerify(jwt, createLocalJWKSet({ keys }), { algorithms: ["EdDSA"] });
    } catch (error) {
      throw new ProbeFailure(
        `the JWT does not verify against the key set: ${error instanceof Error ? error.message : String(error)}`,
        response.exchange,
      );
    }
    return pass();
  },
};

export const jwtClaims: Probe = {
  id: "attestor.token.claims",
  description: "the JWT has iss proto-trust, aud, sub (agent DID), sub_h, verification, exp - iat <= 900",
  section: "trust.md §Attestation JWT",
  async run(context) {
    const { response, jwt, agent, aud } = await mintOnce(context);
    const claims = decodeJwt(jwt);
    const x = response.exchange;
    check(claims.iss === "proto-trust", `iss must be proto-trust, got ${JSON.stringify(claims.iss)}`, x);
    check(claims.aud === aud, `aud must be ${aud}, got ${JSON.stringify(claims.aud)}`, x);
    check(claims.sub === agent.did, `sub must be the agent DID ${agent.did}, got ${JSON.stringify(claims.sub)}`, x);
    check(
      typeof claims.sub_h === "string" && /^[A-Za-z0-9_-]+$/.test(claims.sub_h),
      "sub_h must be a base64url string",
      x,
    );
    check(
      typeof claims.verification === "string" && ["email", "oauth", "payment"].includes(claims.verification),
      "verification must be email, oauth or payment",
      x,
    );
    check(Number.isInteger(claims.iat) && Number.isInteger(claims.exp), "iat and exp must be integers", x);
    const lifetime = (claims.exp as number) - (claims.iat as number);
    check(lifetime > 0 && lifetime <= 900, `exp - iat must be within (0, 900], got ${lifetime}`, x);
    return pass();
  },
};
