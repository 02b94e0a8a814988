/**
 * The kit as an OAuth resource server for MCP endpoints: the Protected Resource Metadata of
 * RFC 9728 and bearer access tokens (RFC 6750, header only) in the JWT profile of RFC 9068, issued
 * by the attestors the service accepts and verified offline against their key sets. The caller is
 * the same as on the signed path: an agent's token (`act`) lands in the account its signed requests
 * with an attestation use; a person's token (an MCP client acting for them) names the person the
 * kit knows from sign-in and attestations. Framework-free; `fastify.ts` mounts it (`mcpRoute`).
 */
import {
  type AuthorityGrant,
  isDidKey,
  KeySetUnavailableError,
  ProtoError,
  type Recipient,
  readGrantClaims,
  recipientKey,
} from "@proto/protocol";
import { decodeJwt, decodeProtectedHeader, type JWTPayload, errors as joseErrors, jwtVerify } from "jose";
import type { ResolvedAccount } from "./agent-auth.js";
import type { AttestorRegistry, KitAttestation, ResolvedAttestor } from "./attestors.js";
import { attestorUnavailable, KIT_SPECIFIC_ERRORS } from "./errors.js";
import { type KitResponse, mergeChallenges, toFetchResponse, toHeaders } from "./http.js";
import { type AccountResource, type OwnerAccountView, toOwnerAccountView } from "./resource.js";
import type { AccountRecord, KitStore } from "./store/types.js";

/** Where RFC 9728 §3 puts the metadata: this, then the resource's path. */
export const PROTECTED_RESOURCE_METADATA_PATH = "/.well-known/oauth-protected-resource";
/** The longest bearer token read (an attestor's tokens are well under 2 KB). */
export const MAX_BEARER_TOKEN_LENGTH = 8192;

/** RFC 6749 §3.3 scope-token: printable ASCII but space, `"` and `\`. */
const SCOPE_TOKEN = /^[\x21\x23-\x5B\x5D-\x7E]{1,128}$/;
/** RFC 6750 §2.1 `b64token`, after the scheme and its spaces. */
const BEARER = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i;
const METADATA_CACHE_SECONDS = 300;

/**
 * What a browser-based MCP client may send cross-origin: the token (which `*` in
 * `Access-Control-Allow-Headers` would not cover) and the Streamable HTTP transport's fields.
 */
const ENDPOINT_REQUEST_HEADERS = [
  "Authorization",
  "Content-Type",
  "Accept",
  "Mcp-Session-Id",
  "Mcp-Protocol-Version",
  "Mcp-Method",
  "Mcp-Name",
  "Last-Event-ID",
].join(", ");
/** What it must read back: the challenges that lead to the attestor, the session, the wait. */
const ENDPOINT_EXPOSED_HEADERS = "WWW-Authenticate, Mcp-Session-Id, Mcp-Protocol-Version, Retry-After";

export interface ProtectedResourceOptions {
  /** The endpoint's path on the public origin (`/mcp`); the resource is `{origin}{path}`, exactly. */
  path: string;
  /** Scopes every token must carry (default none); a token without one answers 403 `insufficient_scope`. */
  scopes?: string[];
  /** `scopes_supported` of the metadata (default: the kit's declared permissions, then `scopes`). */
  scopesSupported?: string[];
  /** `resource_name` of the metadata (default the kit's `serviceName`). */
  resourceName?: string;
  /** `resource_documentation`: a page for people about the resource. */
  documentation?: string;
  /**
   * Also serve the metadata at the root, `/.well-known/oauth-protected-resource` (default true):
   * clients that do not read the challenge look there. One resource per service may have it.
   */
  rootMetadata?: boolean;
  /** The rate-limit bucket of agents' accounts (default `METHOD {path}`, as `requireAgent`). */
  route?: string;
  /**
   * Name this endpoint in the discovery document's `mcp` member (default true), so that agents
   * given the service's URL find it. Only when the document names no MCP endpoint yet: the first
   * resource, or none when `discovery.mcp` was given.
   */
  advertise?: boolean;
}

/** The RFC 9728 §2 document. */
export interface ProtectedResourceMetadata {
  resource: string;
  authorization_servers: string[];
  scopes_supported?: string[];
  bearer_methods_supported: string[];
  resource_name?: string;
  resource_documentation?: string;
}

/** The verified claims of an RFC 9068 access token, as the attestor issues them. */
export interface AccessTokenClaims extends JWTPayload {
  /** The attestor's `{trust_url}`. */
  iss: string;
  /** The person's pairwise subject at this service (an attestation's `sub_h`). */
  sub: string;
  aud: string | string[];
  client_id: string;
  /** Space-separated; may be empty. */
  scope: string;
  iat: number;
  exp: number;
  jti: string;
  /** RFC 8693 §4.1: the agent acting for the person (the JWT-bearer grant). */
  act?: { sub: string };
  acr?: string;
  amr?: string[];
  auth_time?: number;
  /** An agent's grant at this service (docs/authority.md), with `scope` and `authorization_details`. */
  grant_id?: string;
  authorization_details?: Record<string, unknown>[];
}

interface BearerCallerBase {
  /** The attestor's canonical name (its attestation issuer, `proto-trust`): with `subject`, the person. */
  issuer: string;
  /** The person's pairwise subject at this service: the `sub_h` of attestations, the `sub` of sign-in. */
  subject: string;
  /** The OAuth client the token was issued to (an agent's DID for the JWT-bearer grant). */
  clientId: string;
  /** The token's scopes. */
  scopes: string[];
  token: AccessTokenClaims;
  /**
   * The accounts the person owns or whose agents were attested for them, as the kit's owner route
   * lists them. The first call records the person (as a sign-in would); the answer is kept.
   */
  accounts(): Promise<OwnerAccountView[]>;
}

/** An agent acting for its person (`act.sub`): its account, found or created as a signed request would. */
export interface BearerAgent extends BearerCallerBase {
  kind: "agent";
  agentDid: string;
  account: AccountResource;
  record: AccountRecord;
  /** True when this request created the account (implicit signup). */
  created: boolean;
  /**
   * What the person granted the agent here, as the token carries it (`grant_id`, `scope`,
   * `authorization_details`); undefined without one: the service's defaults apply, no spending.
   */
  grant: AuthorityGrant | undefined;
}

/** A person, through a client of theirs (an MCP client such as a desktop assistant). */
export interface BearerPerson extends BearerCallerBase {
  kind: "person";
  agentDid: undefined;
  account: undefined;
}

export type BearerContext = BearerAgent | BearerPerson;

/** What the bearer scheme's challenge says about a refusal (RFC 6750 §3). */
type BearerProblem = "missing" | "invalid_token" | "insufficient_scope";

/** A refusal of the protected resource: the envelope's code, and the challenge's `error`. */
export class BearerError extends ProtoError {
  readonly problem: BearerProblem;

  constructor(problem: BearerProblem, message: string) {
    const code = problem === "missing" ? "kit_token_required" : problem;
    super(code, KIT_SPECIFIC_ERRORS[code].status, message);
    this.problem = problem;
  }
}

const invalid = (message: string) => new BearerError("invalid_token", message);

/** @internal What the kit hands a protected resource. */
export interface ResourceServerDeps {
  origin: string;
  serviceDid: string;
  serviceName: string;
  /** The permissions the service declares: `scopes_supported` unless the resource names its own. */
  permissionNames?: readonly string[];
  attestors: AttestorRegistry;
  store: KitStore;
  skewSeconds: number;
  now(): number;
  resolveAgent(did: string, evidence: KitAttestation, route: string): Promise<ResolvedAccount>;
  accountResource(record: AccountRecord): AccountResource;
  canonicalIdentity(input: unknown): Recipient;
  /** The kit's envelope, with its `Proto` challenge on a 401. */
  errorResponse(error: unknown, request?: { headers: Headers }): KitResponse;
}

/** The request the resource reads: its method (the rate-limit bucket) and headers, nothing else. */
export type BearerRequest =
  | Request
  | { method: string; headers: Headers | Record<string, string | string[] | undefined> };

/**
 * The audience an attestor derives a person's subject for a resource from: the did:web of its host
 * (an IPv6 literal has none: its origin), as the attestor computes it.
 */
export function resourceSubjectAudience(resource: string): string {
  const url = new URL(resource);
  if (url.hostname.startsWith("[")) return url.origin;
  return `did:web:${url.host.replace(":", "%3A")}`;
}

function checkScopes(name: string, scopes: readonly string[]): string[] {
  for (const scope of scopes) {
    if (!SCOPE_TOKEN.test(scope)) throw new Error(`${name}: ${JSON.stringify(scope)} is not a scope token`);
  }
  return [...new Set(scopes)];
}

function isHttpUrl(value: string): boolean {
  return URL.canParse(value) && /^https?:$/.test(new URL(value).protocol);
}

/** A quoted-string of RFC 6750 §3: `error_description` may not hold `"` or `\`, nor leave ASCII. */
function quoted(value: string): string {
  return `"${value.replace(/[^\x20\x21\x23-\x5B\x5D-\x7E]/g, "'")}"`;
}

/** jose's refusal in words a client can act on. */
function refusal(error: unknown): string {
  if (error instanceof joseErrors.JWTExpired) return "the access token expired";
  if (error instanceof joseErrors.JWTClaimValidationFailed) {
    if (error.claim === "aud") return "the access token is for another resource";
    if (error.claim === "typ") return "not an access token (typ must be at+jwt)";
    return `the access token's ${error.claim} is not acceptable`;
  }
  if (error instanceof joseErrors.JWKSNoMatchingKey)
    return "the access token is signed with a key its issuer does not publish";
  if (error instanceof joseErrors.JWSSignatureVerificationFailed) return "the access token's signature does not verify";
  return "the access token does not verify";
}

/**
 * The grant an agent's access token carries, read as an attestation's is: its `scope` is the
 * grant's permissions. Undefined without `grant_id` (the token's scope then says only what the
 * client asked for). Malformed grant claims make the token invalid.
 */
function tokenGrant(claims: AccessTokenClaims): AuthorityGrant | undefined {
  const { grant_id: grantId, authorization_details: details, scope } = claims;
  try {
    return readGrantClaims({
      grant_id: grantId,
      authorization_details: details,
      scope: grantId === undefined ? undefined : scope,
    });
  } catch (error) {
    throw invalid(`the access token's grant: ${(error as Error).message}`);
  }
}

/**
 * One protected resource (an MCP endpoint): its metadata, its bearer check, its refusals. Made by
 * `kit.protectedResource(options)`; `mcpRoute` (Fastify) or `handleMetadata` + `authenticate` +
 * `errorToResponse` (Fetch API) mount it.
 */
export class ProtectedResource {
  /** The resource's URL: what clients name as RFC 8707 `resource`, and every token's `aud`. */
  readonly resource: string;
  readonly path: string;
  /** The path-specific metadata URL, named in every challenge. */
  readonly metadataUrl: string;
  /** Where the metadata is served: the path-specific location, and the root unless turned off. */
  readonly metadataPaths: readonly string[];
  /** Scopes every token must carry. */
  readonly scopes: readonly string[];
  readonly #deps: ResourceServerDeps;
  readonly #metadata: ProtectedResourceMetadata;
  readonly #servers: Map<string, ResolvedAttestor>;
  readonly #route: string | undefined;

  constructor(deps: ResourceServerDeps, options: ProtectedResourceOptions) {
    this.#deps = deps;
    const url = new URL(options.path, deps.origin);
    // Parsed back to itself: no query, fragment, dot segment or character a client would encode.
    if (!options.path.startsWith("/") || url.origin !== deps.origin || url.pathname !== options.path) {
      throw new Error(`protectedResource: path must be a plain path on ${deps.origin} (/mcp), not ${options.path}`);
    }
    this.path = options.path;
    this.resource = `${deps.origin}${options.path}`;
    // The attestor derives the token's subject from the resource's host and the attestation's
    // sub_h from the service DID: only when they agree is the bearer's person the signed path's.
    const audience = resourceSubjectAudience(this.resource);
    if (audience !== deps.serviceDid) {
      throw new Error(
        `protectedResource: the service DID must be ${audience} (the did:web of the resource's host), not ${deps.serviceDid}: attestors derive an access token's subject from the host, and the person behind it would not be the one of attestations and sign-in`,
      );
    }
    this.#servers = new Map();
    for (const name of deps.attestors.names) {
      const attestor = deps.attestors.get(name);
      if (attestor?.url !== undefined) this.#servers.set(attestor.url, attestor);
    }
    if (this.#servers.size === 0) {
      throw new Error("protectedResource: no accepted attestor has a url (its {trust_url}, the authorization server)");
    }
    this.scopes = checkScopes("scopes", options.scopes ?? []);
    // Declared permissions are the scopes a client may ask for here; required scopes stay listed.
    const declared = deps.permissionNames ?? [];
    const supported = checkScopes(
      "scopesSupported",
      options.scopesSupported ?? (declared.length > 0 ? [...declared, ...this.scopes] : this.scopes),
    );
    const suffix = options.path === "/" ? "" : options.path;
    const specific = `${PROTECTED_RESOURCE_METADATA_PATH}${suffix}`;
    this.metadataUrl = `${deps.origin}${specific}`;
    this.metadataPaths =
      options.rootMetadata === false || specific === PROTECTED_RESOURCE_METADATA_PATH
        ? [specific]
        : [specific, PROTECTED_RESOURCE_METADATA_PATH];
    if (options.documentation !== undefined && !isHttpUrl(options.documentation)) {
      throw new Error("protectedResource: documentation must be an http(s) URL");
    }
    this.#metadata = {
      resource: this.resource,
      authorization_servers: [...this.#servers.keys()],
      ...(supported.length > 0 ? { scopes_supported: supported } : {}),
      bearer_methods_supported: ["header"],
      resource_name: options.resourceName ?? deps.serviceName,
      ...(options.documentation === undefined ? {} : { resource_documentation: options.documentation }),
    };
    this.#route = options.route;
  }

  /** The RFC 9728 document. */
  metadata(): ProtectedResourceMetadata {
    return structuredClone(this.#metadata);
  }

  /**
   * The answer to a request for the metadata (GET, HEAD, and the CORS preflight browsers send
   * before a GET with MCP's headers), or undefined when `pathname` is not one of `metadataPaths`.
   */
  metadataResponse(method: string, pathname: string): KitResponse | undefined {
    if (!this.metadataPaths.includes(pathname)) return undefined;
    const cors = { "access-control-allow-origin": "*" };
    const verb = method.toUpperCase();
    if (verb === "OPTIONS") {
      return {
        status: 204,
        headers: {
          ...cors,
          "access-control-allow-methods": "GET, HEAD, OPTIONS",
          "access-control-allow-headers": "*",
          "access-control-max-age": "86400",
        },
        body: undefined,
      };
    }
    if (verb !== "GET" && verb !== "HEAD") return undefined;
    return {
      status: 200,
      headers: {
        "content-type": "application/json; charset=utf-8",
        "cache-control": `public, max-age=${METADATA_CACHE_SECONDS}`,
        ...cors,
      },
      body: verb === "HEAD" ? undefined : JSON.stringify(this.#metadata),
    };
  }

  /**
   * Cross-origin access for the endpoint itself, for MCP clients that run in a browser: any origin,
   * since the credential is a bearer token a page cannot send without holding it (no cookie rides
   * along). Put these on every answer of the endpoint, refusals included.
   */
  corsHeaders(): Record<string, string> {
    return { "access-control-allow-origin": "*", "access-control-expose-headers": ENDPOINT_EXPOSED_HEADERS };
  }

  /** The answer to a browser's CORS preflight (`OPTIONS`) for the endpoint, for `methods`. */
  preflightResponse(methods: readonly string[]): KitResponse {
    return {
      status: 204,
      headers: {
        "access-control-allow-origin": "*",
        "access-control-allow-methods": [...new Set([...methods, "OPTIONS"])].join(", "),
        "access-control-allow-headers": ENDPOINT_REQUEST_HEADERS,
        "access-control-max-age": "600",
      },
      body: undefined,
    };
  }

  /** `metadataResponse` for the Fetch API: a `Response`, or undefined for any other request. */
  handleMetadata(request: Request): Response | undefined {
    const answer = this.metadataResponse(request.method, new URL(request.url).pathname);
    return answer === undefined ? undefined : toFetchResponse(answer);
  }

  /**
   * Verifies `Authorization: Bearer <access token>` (never a token in the query or the body) and
   * resolves the caller. Throws a `BearerError` (or, for an agent's account, the signed path's
   * `ProtoError`s: `unknown_account`, `account_expired`, `rate_limit_exceeded`); answer it with
   * `errorResponse` / `errorToResponse`.
   */
  async authenticate(request: BearerRequest): Promise<BearerContext> {
    const headers = request instanceof Request ? request.headers : toHeaders(request.headers);
    const claims = await this.#verify(headers.get("authorization"));
    const attestor = this.#servers.get(claims.iss.replace(/\/$/, "")) as ResolvedAttestor;
    const scopes = claims.scope.split(" ").filter((scope) => scope.length > 0);
    const missing = this.scopes.filter((scope) => !scopes.includes(scope));
    if (missing.length > 0) {
      throw new BearerError("insufficient_scope", `this resource needs the scope ${this.scopes.join(" ")}`);
    }
    const base = {
      issuer: attestor.name,
      subject: claims.sub,
      clientId: claims.client_id,
      scopes,
      token: claims,
      accounts: this.#accountsOf(attestor.name, claims.sub),
    };
    const agentDid = claims.act?.sub;
    if (agentDid === undefined) return { ...base, kind: "person", agentDid: undefined, account: undefined };
    const grant = tokenGrant(claims);
    // A revoked key is refused here as on the signed path, and before any signup.
    if (await this.#deps.store.isRevoked(agentDid)) throw invalid("the agent's key was revoked at this service");
    const evidence: KitAttestation = {
      issuer: claims.iss,
      audience: this.resource,
      agentDid,
      issuedAt: claims.iat,
      expiresAt: claims.exp,
      verification: undefined,
      subH: claims.sub,
      kid: undefined,
      grant,
      canonicalIssuer: attestor.name,
    };
    const route = this.#route ?? `${request.method.toUpperCase()} ${this.path}`;
    const { record, account, created } = await this.#deps.resolveAgent(agentDid, evidence, route);
    return { ...base, kind: "agent", agentDid, account, record, created, grant };
  }

  /**
   * The refusal in the kit's envelope, with the `Bearer` challenge of RFC 6750 §3 and RFC 9728 §5.1
   * on a 401 and on `insufficient_scope` (403), followed by the kit's `Proto` challenge on a 401.
   * Pass the request: the `Proto` challenge names the error only when it tried the protocol.
   */
  errorResponse(error: unknown, request?: { headers: Headers }): KitResponse {
    const response = this.#deps.errorResponse(error, request);
    const problem = error instanceof BearerError ? error.problem : undefined;
    if (response.status !== 401 && problem !== "insufficient_scope") return response;
    const params: string[] = [];
    if (problem === "invalid_token" || problem === "insufficient_scope") {
      params.push(`error=${quoted(problem)}`);
      params.push(`error_description=${quoted((error as BearerError).message)}`);
    }
    if (this.scopes.length > 0) params.push(`scope=${quoted(this.scopes.join(" "))}`);
    params.push(`resource_metadata=${quoted(this.metadataUrl)}`);
    const bearer = `Bearer ${params.join(", ")}`;
    return {
      ...response,
      headers: {
        ...response.headers,
        "www-authenticate": mergeChallenges([bearer], response.headers["www-authenticate"] ?? []),
      },
    };
  }

  /** `errorResponse` as a Fetch `Response`. */
  errorToResponse(error: unknown, request?: { headers: Headers }): Response {
    return toFetchResponse(this.errorResponse(error, request));
  }

  /** The token of the `Authorization` field, verified: signature, `typ`, issuer, audience, lifetime. */
  async #verify(authorization: string | null): Promise<AccessTokenClaims> {
    if (authorization === null)
      throw new BearerError("missing", "this resource needs an access token (Authorization: Bearer)");
    const scheme = /^\s*([!#$%&'*+.^_`|~0-9A-Za-z-]+)/.exec(authorization)?.[1];
    // Another scheme is no bearer token at all (RFC 6750 §3.1: then no error code).
    if (scheme?.toLowerCase() !== "bearer") {
      throw new BearerError("missing", "this resource takes an OAuth access token: Authorization: Bearer <token>");
    }
    if (authorization.length > MAX_BEARER_TOKEN_LENGTH + 16) throw invalid("the access token is too long");
    const token = BEARER.exec(authorization)?.[1];
    if (token === undefined) throw invalid("the Authorization field is not one bearer token");
    let issuer: unknown;
    try {
      const header = decodeProtectedHeader(token);
      // Checked here for a useful message (jose checks it again after the signature).
      if (header.typ?.toLowerCase().replace(/^application\//, "") !== "at+jwt") {
        throw invalid(
          "not an access token (typ must be at+jwt); an attestation goes in Proto-Attestation with a signed request",
        );
      }
      if (header.alg !== "EdDSA") throw invalid("the access token must be signed with EdDSA");
      issuer = decodeJwt(token).iss;
    } catch (error) {
      if (error instanceof BearerError) throw error;
      throw invalid("the access token is not a JWT");
    }
    const attestor = typeof issuer === "string" ? this.#servers.get(issuer.replace(/\/$/, "")) : undefined;
    if (
      attestor === undefined ||
      typeof issuer !== "string" ||
      (issuer !== attestor.url && issuer !== `${attestor.url}/`)
    ) {
      throw invalid("the access token's issuer is not an authorization server of this resource");
    }
    const now = this.#deps.now();
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, attestor.keys, {
        algorithms: ["EdDSA"],
        typ: "at+jwt",
        issuer,
        audience: this.resource,
        currentDate: new Date(now),
        clockTolerance: this.#deps.skewSeconds,
        requiredClaims: ["iss", "sub", "aud", "exp", "iat", "jti", "client_id"],
      }));
    } catch (error) {
      // Without the issuer's keys nothing is known about the token: the caller is not at fault.
      if (error instanceof KeySetUnavailableError) throw attestorUnavailable(error);
      throw invalid(refusal(error));
    }
    return this.#checkClaims(payload, now);
  }

  /** What jose does not check: the types of RFC 9068's claims, `iat` not ahead, `act` an agent. */
  #checkClaims(payload: JWTPayload, now: number): AccessTokenClaims {
    const { sub, iat, jti, client_id: clientId, scope, act } = payload;
    if (typeof sub !== "string" || sub.length === 0 || sub.length > 255)
      throw invalid("sub must be a string of 1 to 255 characters");
    if (typeof clientId !== "string" || clientId.length === 0) throw invalid("client_id must be a string");
    if (typeof jti !== "string" || jti.length === 0) throw invalid("jti must be a string");
    if (typeof iat !== "number" || iat > Math.floor(now / 1000) + this.#deps.skewSeconds) {
      throw invalid("the access token was issued in the future");
    }
    if (scope !== undefined && typeof scope !== "string") throw invalid("scope must be a string");
    if (act !== undefined) {
      const actor = typeof act === "object" && act !== null ? (act as { sub?: unknown }).sub : undefined;
      if (typeof actor !== "string" || !isDidKey(actor)) throw invalid("act.sub must be the agent's did:key");
    }
    return { ...payload, scope: scope ?? "" } as AccessTokenClaims;
  }

  /** The person's accounts, computed once per request on demand. */
  #accountsOf(issuer: string, subject: string): () => Promise<OwnerAccountView[]> {
    let answer: Promise<OwnerAccountView[]> | undefined;
    return () => {
      answer ??= (async () => {
        const { store } = this.#deps;
        const person = await store.upsertPerson(issuer, subject, this.#deps.now());
        // An account claimed by signing in with this attestor names the person by this identity.
        const key = recipientKey(this.#deps.canonicalIdentity({ type: "oidc", value: { issuer, sub: subject } }));
        const records = await store.listAccountsForPerson(person.id, [key]);
        return records.map((record) => {
          const owned =
            record.claimedAt !== undefined && (record.ownerPersonId === person.id || record.ownerKey === key);
          return toOwnerAccountView(record, this.#deps.accountResource(record), owned ? "owner" : "attested");
        });
      })();
      return answer;
    };
  }
}
