import type { FastifyInstance, FastifyRequest } from "fastify";
import { entityTag, noneMatch } from "../platform/conditional.js";
import { ApiError, forbidden } from "../platform/errors.js";
import { addFastRoute, rateLimitHook } from "../platform/http.js";
import { SINGLE_LINE } from "../platform/input-rules.js";
import { ERROR_ENVELOPE, type OpenApiOptions } from "../platform/openapi.js";
import type { RateLimiter } from "../platform/rate-limit.js";
import type { KeyRing } from "./keys.js";
import type { MintObserver } from "./metrics.js";
import type { LinkStartInput, TrustService } from "./service.js";
import type { TrustSettings } from "./settings.js";
import { tokenFastRoute, tokenRequest } from "./token-route.js";
import {
  renderDirectory,
  WBA_DIRECTORY_CACHE_CONTROL,
  WBA_DIRECTORY_MEDIA_TYPE,
  WBA_DIRECTORY_PATH,
} from "./web-bot-auth.js";

export interface TrustRoutesOptions {
  service: TrustService;
  keys: KeyRing;
  limiter: RateLimiter;
  settings: TrustSettings;
  /** `{trust_url}`: the only origin whose pages may call the cookie-authenticated routes. */
  publicUrl: string;
  /** The signed-in human behind a request, when there is one (the session arrives with sign-in). */
  humanOf: (request: FastifyRequest) => Promise<string | undefined>;
  /** Told the verification method of every attestation minted (the metrics). */
  mints?: MintObserver;
}

/** The attestor's OpenAPI document: everything but the server URL. */
export const TRUST_OPENAPI: Omit<OpenApiOptions, "publicUrl"> = {
  title: "proto trust attestor",
  description:
    "Links agents to verified people and mints short-lived attestations (spec `trust.md`). Errors use the envelope `{ error: { code, message } }`.",
  version: "0.1",
  tags: [
    { name: "keys", description: "The public key set that verifies attestations and id_tokens." },
    { name: "link", description: "An agent asks a person to link it; the person confirms in a browser." },
    { name: "tokens", description: "Attestation minting, signed by the agent (RFC 9421)." },
    { name: "bindings", description: "The person's control over linked agents." },
    {
      name: "authority",
      description:
        "Bounded authority, signed by the agent (RFC 9421): the grants its person gave it, and approval requests for more (docs/authority.md).",
    },
    {
      name: "web-bot-auth",
      description:
        "The key directory of agents whose person published their key on `/account`, for sites that check Web Bot Auth (HTTP message signatures from bots and agents).",
    },
    { name: "openid", description: "The OpenID provider that signs people in to services." },
    { name: "payment", description: "Payment verification (when configured)." },
    { name: "pages", description: "Pages for people: sign-in, link confirmation, account." },
    { name: "operations", description: "Health, readiness, and the API's index at `/`." },
  ],
  securitySchemes: {
    httpSignature: {
      type: "apiKey",
      in: "header",
      name: "Signature",
      description:
        "RFC 9421 message signature by the agent's key over @method, @target-uri and content-digest, with Signature-Input and Content-Digest.",
    },
    session: {
      type: "apiKey",
      in: "cookie",
      name: "__Host-proto_session",
      description: "The person's signed-in session (`proto_session` in development over http).",
    },
  },
  routeDocs: {
    "GET /.well-known/openid-configuration": { summary: "OpenID provider configuration", tags: ["openid"] },
    "GET /.well-known/oauth-authorization-server": {
      summary: "OAuth authorization server metadata (RFC 8414)",
      description: "The same document as the OpenID configuration, where MCP clients look for it.",
      tags: ["openid"],
    },
    "OPTIONS /oidc/token": { summary: "CORS preflight of the token endpoint", tags: ["openid"] },
    "OPTIONS /oidc/register": { summary: "CORS preflight of dynamic client registration", tags: ["openid"] },
    "POST /oidc/register": {
      summary: "Dynamic client registration (RFC 7591)",
      description:
        "JSON client metadata: `redirect_uris` (1 to 10 exact URIs: https, loopback http or a private-use scheme), optional `client_name`. Public clients only (`token_endpoint_auth_method` `none`). Answers 201 with the `client_id`; limited per address (`oauth_register`, 20 an hour). Clients that can host a metadata document should use its https URL as `client_id` instead.",
      tags: ["openid"],
    },
    "GET /oidc/authorize": {
      summary: "Start sign-in (authorization code with PKCE S256)",
      description:
        "Without a session the person signs in first. On their first sign-in to this client a consent page asks (Allow / Deny, answered by POST /oidc/consent); once allowed, the browser returns to redirect_uri with a code at once. For a `resource`, the page lists each scope asked for with the resource's description of it (its discovery document's `permissions`), and asks again whenever a scope beyond the live access's is asked for.",
      tags: ["openid"],
    },
    "POST /oidc/token": {
      summary: "Exchange a grant for tokens",
      description:
        "Form-encoded or JSON. `authorization_code` (code, code_verifier, client_id, redirect_uri, optional resource): an id_token when the scope had `openid`, and for a `resource` an RFC 9068 access token (`aud` the resource, 10 minutes) with a refresh token that rotates on each use. `refresh_token` (refresh_token, client_id, optional resource and narrower scope). `urn:ietf:params:oauth:grant-type:jwt-bearer` (assertion signed by an agent's did:key, resource, optional scope): an access token for the agent's person, `act.sub` the agent, whose scope is what was asked within the agent's grant for the resource's service (else the service's default permissions); with a grant it carries `grant_id` and `authorization_details`. A scope outside is left out; none left is `invalid_scope`. A code's scope is what the person left ticked.",
      tags: ["openid"],
    },
    "POST /oidc/consent": {
      summary: "Answer the consent page (form)",
      description:
        "Form fields `_csrf`, `decision` (`allow` or `deny`), the authorization request's own parameters, and for a `resource` one `granted.N` per scope left ticked (undeclared scopes of a service that declares permissions are never granted). Allow is remembered per (person, client) and returns to redirect_uri with a code; deny returns `error=access_denied` (with `state`). Until the person allows a client, `/oidc/authorize` shows the consent page (`prompt=none`: `consent_required`).",
      tags: ["openid"],
    },
    "GET /oidc/token": { summary: "Not allowed: the token endpoint takes POST", tags: ["openid"] },
    "POST /webhooks/payment": {
      summary: "Payment provider webhook",
      description: 'Signed with Proto-Payment-Signature: t=…,v1=HMAC-SHA256(secret, "t.body").',
      tags: ["payment"],
    },
    "POST /account/payment/start": { summary: "Start a payment verification (form)", tags: ["payment"] },
    "GET /account/payment/return": { summary: "Return from the payment provider", tags: ["payment"] },
    "POST /account/bindings/:id/services/suspend": {
      summary: "Suspend one agent for one service (form)",
      description:
        "Form fields `_csrf` and `aud` (a service the binding has minted for). From then on the agent's mint for that `aud` is 403 `service_suspended`; its other services are unaffected. Refused (403) from another origin. Answers 303 to `/account` with a notice.",
      tags: ["pages"],
    },
    "POST /account/bindings/:id/services/restore": {
      summary: "Restore a suspended service of one agent (form)",
      description:
        "Form fields `_csrf` and `aud`. The agent's mint for that `aud` works again. Refused (403) from another origin. Answers 303 to `/account` with a notice.",
      tags: ["pages"],
    },
    "GET /account/bindings/:id/revoke": {
      summary: "Ask before revoking one agent (page)",
      description: "Says what revoking does and carries the form that does it.",
      tags: ["pages"],
    },
    "POST /account/bindings/:id/revoke": {
      summary: "Revoke one agent (form)",
      description:
        "Form field `_csrf`. The binding is revoked at once. Refused (403) from another origin. Answers 303 to `/account` with the notice `Agent <label> revoked`.",
      tags: ["pages"],
    },
    "POST /account/connections/disconnect": {
      summary: "Disconnect a service that signs the person in (form)",
      description:
        "Form fields `_csrf` and `client_id`. Forgets the person's consent for that OpenID client: its next sign-in asks again. Refused (403) from another origin. Answers 303 to `/account` with a notice.",
      tags: ["pages"],
    },
    "POST /account/bindings/:id/wba/publish": {
      summary: "Publish one agent's key in the Web Bot Auth directory (form)",
      description:
        "Form field `_csrf`. From then on the agent's Ed25519 key is listed at `/.well-known/http-message-signatures-directory` (only a `did:key` agent; not after the binding lapsed). Anyone can then see that this key is linked at this attestor. Refused (403) from another origin. Answers 303 to `/account` with a notice.",
      tags: ["pages"],
    },
    "POST /account/bindings/:id/wba/unpublish": {
      summary: "Stop publishing one agent's key in the Web Bot Auth directory (form)",
      description:
        "Form field `_csrf`. The key leaves the directory at once; copies cached by sites expire within 300 seconds. Refused (403) from another origin. Answers 303 to `/account` with a notice.",
      tags: ["pages"],
    },
  },
  defaultTag: "pages",
};

const keySet = {
  description: "The published key set.",
  type: "object",
  required: ["keys"],
  properties: {
    keys: {
      type: "array",
      items: {
        type: "object",
        required: ["kty", "crv", "kid", "x"],
        properties: {
          kty: { type: "string", const: "OKP" },
          crv: { type: "string", const: "Ed25519" },
          kid: { type: "string" },
          x: { type: "string", description: "Base64url public key." },
        },
      },
    },
  },
} as const;

const wbaDirectory = {
  description:
    "A JWK Set (RFC 7517) of the published agents' Ed25519 keys, most recently published first; empty when nobody published one.",
  content: {
    [WBA_DIRECTORY_MEDIA_TYPE]: {
      schema: {
        type: "object",
        required: ["keys"],
        properties: {
          keys: {
            type: "array",
            items: {
              type: "object",
              required: ["kty", "crv", "kid", "x", "use"],
              properties: {
                kty: { type: "string", const: "OKP" },
                crv: { type: "string", const: "Ed25519" },
                kid: {
                  type: "string",
                  description:
                    "The key's RFC 7638 JWK thumbprint (SHA-256, base64url): the `keyid` the agent signs with.",
                },
                x: { type: "string", description: "Base64url public key." },
                use: { type: "string", const: "sig" },
              },
            },
          },
        },
      },
    },
  },
} as const;

const linkStarted = {
  description: "The link request: send the person to link_url, then poll.",
  type: "object",
  required: ["req_id", "link_url", "poll_url", "expires_in"],
  properties: {
    req_id: { type: "string", description: "Prefix `lr_`." },
    link_url: { type: "string" },
    poll_url: { type: "string" },
    expires_in: { type: "integer" },
  },
} as const;

const linkPolled = {
  description: "Pending (with its phase), or confirmed with the binding.",
  type: "object",
  required: ["state"],
  properties: {
    state: { type: "string", enum: ["pending", "confirmed"] },
    phase: { type: "string", enum: ["awaiting_signin", "awaiting_confirm"] },
    binding_id: { type: "string" },
    binding_token_expires_at: { type: "integer" },
  },
} as const;

const minted = {
  description: "The attestation.",
  type: "object",
  required: ["jwt", "expires_at", "verification", "binding_expires_at"],
  properties: {
    jwt: {
      type: "string",
      description: "EdDSA JWT: iss proto-trust, aud, sub (agent DID), sub_h, iat, exp, verification.",
    },
    expires_at: { type: "integer" },
    verification: { type: "string", enum: ["email", "oauth", "payment"] },
    binding_expires_at: { type: "integer" },
  },
} as const;

const revoked = {
  description: "The binding is revoked.",
  type: "object",
  required: ["ok", "revoked_at"],
  properties: { ok: { type: "boolean", const: true }, revoked_at: { type: "string", format: "date-time" } },
} as const;

const linkStartBody = {
  type: "object",
  required: ["agent_did", "agent_pubkey_b64"],
  properties: {
    agent_did: { type: "string", minLength: 1, maxLength: 2048, pattern: SINGLE_LINE },
    agent_pubkey_b64: { type: "string", minLength: 1, maxLength: 128, pattern: SINGLE_LINE },
    agent_label: { type: "string", maxLength: 80, pattern: SINGLE_LINE },
    callback_url: { type: "string", minLength: 1, maxLength: 2048, pattern: SINGLE_LINE },
  },
} as const;

const linkPollBody = {
  type: "object",
  required: ["req_id", "sig_b64"],
  properties: {
    req_id: { type: "string", minLength: 1, maxLength: 128, pattern: SINGLE_LINE },
    sig_b64: { type: "string", minLength: 1, maxLength: 256, pattern: SINGLE_LINE },
  },
} as const;

export const JWKS_CACHE_CONTROL = "public, max-age=300, stale-while-revalidate=900";

/** The attestor's agent-facing API of spec `trust.md`. */
export async function trustRoutes(app: FastifyInstance, options: TrustRoutesOptions): Promise<void> {
  const { service, keys, limiter, settings } = options;
  const limits = settings.rateLimits;
  const publicOrigin = new URL(options.publicUrl).origin;

  const jwksSchema = {
    summary: "The public key set",
    description: "A new kid is published at least 900 seconds before it first signs.",
    tags: ["keys"],
    response: { 200: keySet, "4xx": ERROR_ENVELOPE },
  };
  app.get(
    "/.well-known/jwks.json",
    { schema: jwksSchema, onRequest: rateLimitHook(limiter, limits.read) },
    async (_request, reply) => {
      await keys.fresh();
      return reply
        .header("cache-control", JWKS_CACHE_CONTROL)
        .header("access-control-allow-origin", "*")
        .send({ keys: keys.publicKeys() });
    },
  );

  // The Web Bot Auth key directory. The draft RECOMMENDS a response signature by every listed key
  // (tag "http-message-signatures-directory"); the attestor holds no agent's private key, so the
  // directory goes unsigned (see web-bot-auth.ts and docs/operations.md).
  let truncationLoggedAt = Number.NEGATIVE_INFINITY;
  app.get(
    WBA_DIRECTORY_PATH,
    {
      schema: {
        summary: "The Web Bot Auth key directory",
        description: `The Ed25519 keys of agents whose person published them on \`/account\` (off by default), while their binding is neither revoked nor lapsed and the person has a verification method in force. Agents send \`Signature-Agent: sig1="{trust_url}${WBA_DIRECTORY_PATH}"\` and sign with \`keyid\` = the listed \`kid\`. At most \`TRUST_WBA_DIRECTORY_MAX_KEYS\` keys (default 1000), the most recently published. \`Content-Type: ${WBA_DIRECTORY_MEDIA_TYPE}\`, \`Cache-Control: ${WBA_DIRECTORY_CACHE_CONTROL}\`, an \`ETag\` (304 on \`If-None-Match\`). The response is not signed: the attestor does not hold the agents' private keys.`,
        tags: ["web-bot-auth"],
        response: { 200: wbaDirectory, 304: { description: "Not modified (`If-None-Match`)." }, "4xx": ERROR_ENVELOPE },
      },
      onRequest: rateLimitHook(limiter, limits.read),
    },
    async (request, reply) => {
      const { keys, truncated } = await service.wbaDirectory();
      if (truncated && Date.now() - truncationLoggedAt > 3600_000) {
        truncationLoggedAt = Date.now();
        request.log.warn(
          { max: settings.wbaDirectoryMaxKeys },
          "more agent keys are published than TRUST_WBA_DIRECTORY_MAX_KEYS: the directory leaves out the oldest",
        );
      }
      const body = renderDirectory(keys);
      const etag = entityTag(body);
      reply
        .header("cache-control", WBA_DIRECTORY_CACHE_CONTROL)
        .header("access-control-allow-origin", "*")
        .header("access-control-expose-headers", "ETag")
        .header("etag", etag);
      if (noneMatch(request.headers["if-none-match"], etag)) return reply.code(304).send();
      // Bytes, not a string: Fastify would append "; charset=utf-8" to a JSON media type.
      return reply.type(WBA_DIRECTORY_MEDIA_TYPE).send(Buffer.from(body, "utf8"));
    },
  );

  app.post<{ Body: LinkStartInput }>(
    "/v1/link/start",
    {
      schema: {
        summary: "Open a link request",
        tags: ["link"],
        body: linkStartBody,
        response: { 200: linkStarted, "4xx": ERROR_ENVELOPE },
      },
      onRequest: rateLimitHook(limiter, limits.linkStart),
    },
    async (request) => service.linkStart(request.body),
  );

  app.post<{ Body: { req_id: string; sig_b64: string } }>(
    "/v1/link/poll",
    {
      schema: {
        summary: "Poll a link request",
        description:
          "sig_b64 is the agent key's Ed25519 signature over the UTF-8 bytes of req_id. 410 once expired or retrieved.",
        tags: ["link"],
        body: linkPollBody,
        response: { 200: linkPolled, "4xx": ERROR_ENVELOPE },
      },
      onRequest: rateLimitHook(limiter, limits.linkPoll),
    },
    async (request) => service.linkPoll(request.body.req_id, request.body.sig_b64),
  );

  // The token request is verified over its exact body bytes, so this route keeps them raw.
  await app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser("*", { parseAs: "buffer" }, (_request, body, done) => done(null, body));
    // The body is documented, not declared: a body schema would validate the raw bytes.
    const tokenSchema = {
      summary: "Mint an attestation",
      description:
        'Signed by the agent\'s key (RFC 9421) for `{trust_url}/v1/token`, covering @method, @target-uri and content-digest, with created, expires and nonce. Body: `{"aud": "<service DID>"}`.\n\nErrors: 400 `invalid_request` (body or `aud`); 401 `invalid_signature`, `expired_signature`, `replayed_nonce`, `unauthorized` (no binding for this DID); 403 `binding_revoked`, `verification_required`, `service_suspended` (the person suspended this agent for this `aud` on `/account`; other services still mint; final until they restore it), `grant_revoked` (the person revoked this agent\'s grant for this `aud`; final until they approve again); 410 `binding_expired`; 429 `rate_limited` with `Retry-After`.',
      tags: ["tokens"],
      security: [{ httpSignature: [] }],
      response: { 200: minted, "4xx": ERROR_ENVELOPE },
    };
    // The address's rate limit is counted by the mint, with the nonce (one Redis round trip).
    scope.post("/v1/token", { schema: tokenSchema }, async (request) => {
      const body = Buffer.isBuffer(request.body) ? request.body : null;
      const result = await service.mint(tokenRequest(request.headers, body), request.ip);
      options.mints?.minted(result.verification);
      return result;
    });
  });
  // Nearly every mint is answered here, ahead of the router (token-route.ts); the route above
  // answers the others with the same bytes.
  addFastRoute(app, tokenFastRoute(service, options.mints));

  app.delete<{ Params: { id: string } }>(
    "/v1/bindings/:id",
    // A bucket of its own: an agent polling from the same address must not lock its human out.
    {
      schema: {
        summary: "Revoke a binding",
        description:
          "The person's signed-in session only; an agent cannot call it. A request with an Origin other than the attestor's is 403 forbidden.",
        tags: ["bindings"],
        security: [{ session: [] }],
        response: { 200: revoked, "4xx": ERROR_ENVELOPE },
      },
      onRequest: rateLimitHook(limiter, { ...limits.read, name: "trust.revoke" }),
    },
    async (request) => {
      // SameSite=Lax keeps the cookie off cross-site requests, not off another origin of the same
      // site (a sibling subdomain); the Origin a browser sends tells them apart.
      const origin = request.headers.origin;
      if (origin !== undefined && origin !== publicOrigin) {
        throw forbidden("revoking a binding is only possible from the attestor's own pages");
      }
      const humanId = await options.humanOf(request);
      if (humanId === undefined) {
        throw new ApiError(401, "unauthorized", "revoking a binding needs the person's signed-in session");
      }
      return service.revokeBinding(request.params.id, humanId);
    },
  );
}
