import { createHash, timingSafeEqual } from "node:crypto";
import type { AuthorityGrant, NonceStore } from "@proto/protocol";
import { SignJWT } from "jose";
import type { Clock } from "../../platform/clock.js";
import { ApiError } from "../../platform/errors.js";
import { addressRateLimitKey, type RateLimiter } from "../../platform/rate-limit.js";
import { randomToken } from "../../platform/tokens.js";
import { DeclarationProblem, defaultPermissions, type ServiceDeclarations } from "../authority/service-declarations.js";
import type { KeyRing } from "../keys.js";
import type { TrustService } from "../service.js";
import type { TrustSettings } from "../settings.js";
import { type AccessTokenClaims, signAccessToken } from "./access-token.js";
import { FetchRefused } from "./bounded-fetches.js";
import { ClientProblem, type ClientRegistry, type OAuthClient } from "./client-registry.js";
import { type CodeRow, findCode, redeemCode, revokeRedeemed } from "./codes.js";
import { rotateRefreshToken } from "./grants.js";
import { AssertionError, verifyAgentAssertion } from "./jwt-bearer.js";
import { JWT_BEARER_GRANT, OAUTH_PATHS, PHISHING_RESISTANT } from "./metadata.js";
import { OAuthError } from "./oauth-error.js";
import { parseResource, resourceAudience } from "./resource.js";
import { grantedOf, resourceDeclaration } from "./resource-permissions.js";
import { parseScope, withinScope } from "./scope.js";

export const ID_TOKEN_TTL_SECONDS = 300;
const PKCE_VERIFIER = /^[A-Za-z0-9\-._~]{43,128}$/;

/**
 * How the person signed in, as the id_token's `amr` (RFC 8176 where it has a value: a passkey is
 * a hardware-bound key used after user verification) and `acr` when that is phishing-resistant.
 */
export function authenticationClaims(method: string | null): { amr?: string[]; acr?: string } {
  if (method === "passkey") return { amr: ["hwk", "user"], acr: PHISHING_RESISTANT };
  if (method === null) return {};
  return { amr: [method] };
}

export type TokenRequest = Partial<Record<string, unknown>>;

export interface TokenEndpointDeps {
  service: TrustService;
  keys: KeyRing;
  clock: Clock;
  publicUrl: string;
  production: boolean;
  clients: ClientRegistry;
  /** Services' declared permissions: a resource's defaults, for an agent without a grant. */
  declarations: ServiceDeclarations;
  /** Where JWT-bearer assertions' `jti`s are remembered (the replay store of signed requests). */
  jtis: NonceStore;
  limiter: RateLimiter;
  settings: TrustSettings;
}

function s256(verifier: string): string {
  return createHash("sha256").update(verifier, "ascii").digest("base64url");
}

/** `POST /oidc/token`: one function per grant type, each answering the token response. */
export class TokenEndpoint {
  readonly #deps: TokenEndpointDeps;

  constructor(deps: TokenEndpointDeps) {
    this.#deps = deps;
  }

  async exchange(body: TokenRequest, clientIp: string): Promise<Record<string, unknown>> {
    const grantType = field(body, "grant_type");
    if (grantType === "authorization_code") return this.#authorizationCode(body, clientIp);
    if (grantType === "refresh_token") return this.#refresh(body, clientIp);
    if (grantType === JWT_BEARER_GRANT) return this.#jwtBearer(body, clientIp);
    throw new OAuthError(
      "unsupported_grant_type",
      "grant_type must be authorization_code, refresh_token or jwt-bearer",
    );
  }

  /** The client the request names; a metadata document is fetched on behalf of `clientIp`. */
  async #client(body: TokenRequest, clientIp: string): Promise<OAuthClient> {
    const clientId = field(body, "client_id");
    let client: OAuthClient | undefined;
    try {
      client = await this.#deps.clients.find(clientId, clientIp);
    } catch (error) {
      if (error instanceof FetchRefused) throw refusedFetch(error);
      if (!(error instanceof ClientProblem)) throw error;
      client = undefined;
    }
    if (client === undefined) throw new OAuthError("invalid_client", "unknown client", 401);
    return client;
  }

  async #authorizationCode(body: TokenRequest, clientIp: string): Promise<Record<string, unknown>> {
    const clientId = field(body, "client_id");
    const code = field(body, "code");
    // Every code here was issued with a S256 challenge, so a request without its verifier is
    // malformed (invalid_request, RFC 6749 5.2) and, checked before redemption, burns no code.
    const verifier = field(body, "code_verifier");
    const redirectUri = field(body, "redirect_uri");
    const asked = optionalResource(body, this.#deps.production);
    const client = await this.#client(body, clientIp);
    const db = this.#deps.service.database.db;
    const now = this.#deps.clock.now();
    const row = await findCode(db, code);
    if (row === undefined) throw new OAuthError("invalid_grant", "the code is invalid, expired or used");
    // Everything that proves the request is the code's own client is checked before the code is
    // touched: whoever merely saw a code can neither use it up nor end the access it gave.
    if (row.client_id !== clientId || row.redirect_uri !== redirectUri) {
      throw new OAuthError("invalid_grant", "the code was issued to another client or redirect_uri");
    }
    const expected = Buffer.from(row.code_challenge);
    const actual = Buffer.from(PKCE_VERIFIER.test(verifier) ? s256(verifier) : "");
    if (expected.length !== actual.length || !timingSafeEqual(expected, actual)) {
      throw new OAuthError("invalid_grant", "code_verifier does not match the code_challenge");
    }
    if (row.used_at !== null) return this.#replayed(row, now);
    if (row.expires_at <= now) throw new OAuthError("invalid_grant", "the code is invalid, expired or used");
    // RFC 8707 §2.2: the token request may name the resource again, and then only the same one.
    if (asked !== undefined && asked !== row.resource) {
      throw new OAuthError("invalid_target", "resource differs from the one the code was issued for");
    }
    const scope = row.scope ?? "openid";
    const grant =
      row.resource === null
        ? undefined
        : {
            humanId: row.human_id,
            clientId,
            clientName: client.client_name,
            resource: row.resource,
            scope,
            authMethod: row.auth_method,
          };
    const redeemed = await redeemCode(db, row, grant, now);
    if (redeemed === undefined) return this.#replayed(row, now);
    const response: Record<string, unknown> = {};
    if (scope.split(" ").includes("openid")) {
      response.id_token = await this.#idToken(client, row.human_id, row.nonce, row.auth_method, now);
    }
    if (row.resource === null) {
      // The id_token flow of before resource indicators: a bearer access token is included because
      // OAuth clients require one, and it grants nothing here (no userinfo or API behind it).
      return { access_token: randomToken("", 32), ...response, token_type: "Bearer", expires_in: ID_TOKEN_TTL_SECONDS };
    }
    await this.#deps.clients.touch(client);
    const access = await this.#accessToken(row.human_id, row.resource, clientId, scope, row.auth_method, now);
    return {
      access_token: access.token,
      token_type: "Bearer",
      expires_in: access.expiresIn,
      refresh_token: redeemed.refreshToken,
      ...withScope(scope),
      ...response,
    };
  }

  /** A code used before, presented again by its own client: refused, and the access it gave ends. */
  async #replayed(row: CodeRow, now: number): Promise<never> {
    await revokeRedeemed(this.#deps.service.database.db, row, now);
    throw new OAuthError("invalid_grant", "the code was already used: the access it gave is revoked");
  }

  async #refresh(body: TokenRequest, clientIp: string): Promise<Record<string, unknown>> {
    const token = field(body, "refresh_token");
    const clientId = field(body, "client_id");
    const asked = optionalResource(body, this.#deps.production);
    const askedScope = body.scope === undefined ? undefined : parseScope(body.scope);
    if (askedScope === undefined && body.scope !== undefined)
      throw new OAuthError("invalid_scope", "scope is malformed");
    await this.#client(body, clientIp);
    const now = this.#deps.clock.now();
    const rotation = await rotateRefreshToken(this.#deps.service.database.db, token, clientId, now, (grant) => {
      if (asked !== undefined && asked !== grant.resource) {
        return { ok: false, error: "invalid_target", reason: "resource differs from the one the grant is for" };
      }
      // RFC 6749 §6: a narrower scope may be asked for, never a wider one.
      if (askedScope !== undefined && !withinScope(askedScope, grant.scope.split(" "))) {
        return { ok: false, error: "invalid_scope", reason: "the scope asked for is wider than the one granted" };
      }
      return undefined;
    });
    if (!rotation.ok) throw new OAuthError(rotation.error, rotation.reason);
    const { grant } = rotation;
    const granted = grant.scope.split(" ");
    const scope = (askedScope ?? granted).join(" ");
    const access = await this.#accessToken(grant.humanId, grant.resource, clientId, scope, grant.authMethod, now);
    return {
      access_token: access.token,
      token_type: "Bearer",
      expires_in: access.expiresIn,
      refresh_token: rotation.refreshToken,
      ...withScope(scope),
    };
  }

  async #jwtBearer(body: TokenRequest, clientIp: string): Promise<Record<string, unknown>> {
    const assertion = field(body, "assertion");
    const resource = optionalResource(body, this.#deps.production);
    if (resource === undefined)
      throw new OAuthError("invalid_target", "resource is required: the token is for one resource");
    const scope = body.scope === undefined ? [] : parseScope(body.scope);
    if (scope === undefined) throw new OAuthError("invalid_scope", "scope is malformed");
    const { limiter, settings, clock, publicUrl } = this.#deps;
    // The agent's address counts as it does for `/v1/token`, whose other limits apply too.
    const decision = await limiter.hit(settings.rateLimits.token, addressRateLimitKey(clientIp));
    if (!decision.allowed) {
      throw new OAuthError("slow_down", "too many token requests from this address", 429, {
        "retry-after": String(decision.retryAfterSeconds),
      });
    }
    let agentDid: string;
    try {
      agentDid = await verifyAgentAssertion(assertion, {
        audiences: [`${publicUrl}${OAUTH_PATHS.token}`, publicUrl],
        nowMs: clock.now(),
        jtis: this.#deps.jtis,
      });
    } catch (error) {
      if (error instanceof AssertionError) throw new OAuthError("invalid_grant", error.message);
      throw error;
    }
    let humanId: string;
    let grant: AuthorityGrant | undefined;
    try {
      ({ humanId, grant } = await this.#deps.service.authorizeAgent(agentDid, resourceAudience(resource)));
    } catch (error) {
      if (!(error instanceof ApiError) || error.status >= 500) throw error;
      if (error.status === 429) {
        throw new OAuthError("slow_down", error.message, 429, {
          "retry-after": String(error.retryAfterSeconds ?? 60),
        });
      }
      throw new OAuthError("invalid_grant", `${error.code}: ${error.message}`);
    }
    const granted = scope.length === 0 ? [] : await this.#agentScope(scope, grant, resource, clientIp);
    const access = await this.#accessToken(humanId, resource, agentDid, granted.join(" "), null, clock.now(), {
      actor: agentDid,
      grant,
    });
    return {
      access_token: access.token,
      token_type: "Bearer",
      expires_in: access.expiresIn,
      ...withScope(granted.join(" ")),
    };
  }

  /**
   * The scopes an agent asked for that its person granted for the resource: its grant's
   * permissions, else the service's default permissions (docs/authority.md). The others are left
   * out; when none remains, or the service's permissions cannot be read, nothing is confirmed.
   */
  async #agentScope(
    asked: string[],
    grant: AuthorityGrant | undefined,
    resource: string,
    clientIp: string,
  ): Promise<string[]> {
    let granted: string[];
    if (grant !== undefined) {
      granted = grant.permissions;
    } else {
      try {
        granted = defaultPermissions(await resourceDeclaration(this.#deps.declarations, resource, clientIp));
      } catch (error) {
        if (error instanceof FetchRefused) throw refusedFetch(error);
        if (!(error instanceof DeclarationProblem)) throw error;
        throw new OAuthError(
          "invalid_scope",
          `no scope can be granted: the resource's permissions could not be read (${error.message})`,
        );
      }
    }
    const kept = grantedOf(asked, granted);
    if (kept.length === 0) {
      throw new OAuthError(
        "invalid_scope",
        grant === undefined
          ? "none of the scopes asked for is among the resource's default permissions; ask the person to approve more"
          : "none of the scopes asked for is granted by the person for this resource",
      );
    }
    return kept;
  }

  #accessToken(
    humanId: string,
    resource: string,
    clientId: string,
    scope: string,
    authMethod: string | null,
    now: number,
    agent?: { actor: string; grant: AuthorityGrant | undefined },
  ) {
    const claims: AccessTokenClaims = {
      resource,
      sub: this.#deps.service.pseudonym(humanId, resourceAudience(resource)),
      clientId,
      scope,
      ...authenticationClaims(authMethod),
      ...(agent === undefined ? {} : { actor: agent.actor }),
      ...(agent?.grant === undefined ? {} : { grant: agent.grant }),
    };
    return signAccessToken(this.#deps.keys, this.#deps.publicUrl, now, claims);
  }

  async #idToken(client: OAuthClient, humanId: string, nonce: string | null, authMethod: string | null, now: number) {
    const { keys, service, publicUrl } = this.#deps;
    await keys.fresh();
    const key = keys.signingKey();
    const iat = Math.floor(now / 1000);
    // An operator-registered relying party gets its service DID as audience (what it signs agents
    // in as); any other client its client_id, as OpenID Connect has it.
    const audience = client.service_did ?? client.client_id;
    const claims: Record<string, unknown> = {
      iss: publicUrl,
      aud: audience,
      sub: service.pseudonym(humanId, audience),
      iat,
      exp: iat + ID_TOKEN_TTL_SECONDS,
    };
    if (nonce !== null) claims.nonce = nonce;
    Object.assign(claims, authenticationClaims(authMethod));
    return new SignJWT(claims).setProtectedHeader({ alg: "EdDSA", typ: "JWT", kid: key.kid }).sign(key.privateKey);
  }
}

/** A fetch refused by its bounds, as OAuth says so: retry later, and when. */
function refusedFetch(error: FetchRefused): OAuthError {
  return new OAuthError(error.status === 429 ? "slow_down" : "temporarily_unavailable", error.message, error.status, {
    "retry-after": String(error.retryAfterSeconds),
  });
}

/** A token response's `scope` (RFC 6749 §5.1), left out when nothing was granted by name. */
function withScope(scope: string): { scope?: string } {
  return scope === "" ? {} : { scope };
}

function field(body: TokenRequest, name: string): string {
  const value = body[name];
  if (typeof value !== "string" || value.length === 0 || value.length > 4096) {
    throw new OAuthError("invalid_request", `${name} is required`);
  }
  return value;
}

/** The request's `resource`, when it names one; more than one is refused (one audience a token). */
function optionalResource(body: TokenRequest, production: boolean): string | undefined {
  const value = body.resource;
  if (value === undefined) return undefined;
  if (Array.isArray(value)) throw new OAuthError("invalid_target", "name one resource per request");
  const resource = parseResource(value, production);
  if (resource === undefined) {
    throw new OAuthError("invalid_target", "resource must be an absolute https URI without a fragment");
  }
  return resource;
}
