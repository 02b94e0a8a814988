/**
 * The agent as an OAuth client of MCP servers: an `OAuthClientProvider` for the MCP TypeScript
 * SDK whose token request is the JWT-bearer grant (RFC 7523) signed with the agent's own key, at
 * an attestor the agent is linked with. The SDK runs its own discovery (the server's 401, its
 * RFC 9728 metadata, `authorization_servers`, the attestor's RFC 8414 metadata); this provider
 * checks each step's answer against the agent's bindings and supplies the grant.
 */
import { randomUUID } from "node:crypto";
import type { OAuthClientProvider, OAuthDiscoveryState } from "@modelcontextprotocol/sdk/client/auth.js";
import { InvalidClientError } from "@modelcontextprotocol/sdk/server/auth/errors.js";
import type {
  AuthorizationServerMetadata,
  OAuthClientInformationMixed,
  OAuthClientMetadata,
  OAuthTokens,
} from "@modelcontextprotocol/sdk/shared/auth.js";
import type { FetchLike } from "@modelcontextprotocol/sdk/shared/transport.js";
import { encodeBase64url } from "@proto/protocol";
import type { Agent } from "./agent.js";
import { AgentError, AttestorError, AuthError, notLinkedMessage } from "./errors.js";
import { sameBaseUrl } from "./home-layout.js";
import { type FetchFunction, networkError, oneLine } from "./http.js";
import type { BindingRecord } from "./store.js";
import { TOKEN_REFRESH_MARGIN_SECONDS } from "./token-cache.js";

/** RFC 7523 §2.1: an assertion used as an authorization grant. */
export const JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/** The assertion is sent at once; a short life keeps a leaked one useless (the attestor allows 300 s). */
export const ASSERTION_LIFETIME_SECONDS = 60;

export interface McpAuthProviderOptions {
  /**
   * Only this attestor (its URL, or the iss of a linked one). Default: any attestor the agent is
   * linked with among those the MCP server lists, in the server's order.
   */
  attestor?: string;
  /**
   * The scope to ask for. Default: the `scope` of the server's 401 challenge (seen through
   * `provider.fetch`), else its metadata's `scopes_supported`, else none.
   */
  scope?: string;
  /** The MCP server's URL, named in error messages. */
  serverUrl?: string;
  /**
   * Milliseconds since the epoch: when a cached access token is due for renewal. Default: the
   * agent's clock (which also signs the assertion, whatever this one says).
   */
  now?: () => number;
  /** A cached access token is not used in its last this many seconds (default 60). */
  marginSeconds?: number;
}

interface CachedAccessToken {
  tokens: OAuthTokens;
  /** Milliseconds since the epoch after which the token is not sent any more; undefined when no lifetime was given. */
  renewAt: number | undefined;
}

/** Codes of the attestor after which the stored binding no longer holds (as after a mint). */
const BINDING_GONE: Record<string, BindingRecord["state"]> = {
  binding_revoked: "revoked",
  binding_expired: "expired",
};

/**
 * An `OAuthClientProvider` for one MCP server (the SDK's unit of a session): pass it as
 * `authProvider`, and `provider.fetch` as `fetch`, to `StreamableHTTPClientTransport`.
 */
export class AgentMcpAuthProvider implements OAuthClientProvider {
  readonly #agent: Agent;
  readonly #options: McpAuthProviderOptions;
  readonly #fetch: FetchFunction;
  readonly #now: () => number;
  /** The agent's clock, which signs (the assertion's `iat` is read by the attestor's clock). */
  readonly #signingNow: () => number;
  /** `options.attestor` as a URL (resolved up front: an unknown iss fails before any request). */
  readonly #explicit: string | undefined;
  /** The discovery the SDK made, once checked: the attestor chosen, its metadata, the server's metadata. */
  #discovery: OAuthDiscoveryState | undefined;
  /** The attestor to use instead of the one the SDK picked, handed to the SDK's retry once. */
  #reroute: OAuthDiscoveryState | undefined;
  #token: CachedAccessToken | undefined;
  /** The `scope` of the MCP server's last 401 challenge. */
  #challengeScope: string | undefined;

  constructor(agent: Agent, options: McpAuthProviderOptions = {}) {
    this.#agent = agent;
    this.#options = options;
    const http = agent.httpOptions();
    this.#fetch = http.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.#now = options.now ?? http.now ?? Date.now;
    this.#signingNow = http.now ?? Date.now;
    this.#explicit = options.attestor === undefined ? undefined : agent.attestorUrl(options.attestor);
  }

  /**
   * The transport's `fetch`: the agent's own (so a test CA or a proxy applies to the MCP server
   * too), with a failure to connect as a one-line `NetworkError`, the server's 401 challenge
   * remembered for its scope, and the attestor's refusals of the token request as
   * `AttestorError`s with their status, `Retry-After` and proto code (`binding_revoked`, ...)
   * rather than the SDK's generic OAuth errors.
   */
  readonly fetch: FetchLike = async (input, init) => {
    const url = typeof input === "string" ? input : input.href;
    let response: Response;
    try {
      response = await this.#fetch(input, init);
    } catch (error) {
      if (init?.signal?.aborted) throw error;
      throw networkError(error, url);
    }
    if (response.status === 401) {
      const scope = /\bscope="([^"]*)"/.exec(response.headers.get("www-authenticate") ?? "")?.[1];
      if (scope !== undefined && scope !== "") this.#challengeScope = scope;
    }
    const endpoint = this.#discovery?.authorizationServerMetadata?.token_endpoint;
    if (!response.ok && endpoint !== undefined && init?.method === "POST" && sameUrl(url, endpoint)) {
      throw await this.#tokenError(response, endpoint);
    }
    return response;
  };

  /** A headless agent never sends a person to a browser: no redirect, the SDK's non-interactive path. */
  get redirectUrl(): undefined {
    return undefined;
  }

  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: `proto agent ${this.#agent.did}`,
      redirect_uris: [],
      grant_types: [JWT_BEARER_GRANT],
      token_endpoint_auth_method: "none",
      ...(this.#options.scope === undefined ? {} : { scope: this.#options.scope }),
    };
  }

  /**
   * The agent is known to its attestor by its key, not by a registration: its DID stands as the
   * client_id (what the attestor puts in the access token), stamped with the attestor chosen so
   * the SDK presents it nowhere else, and so never registers a client.
   */
  clientInformation(): OAuthClientInformationMixed {
    const attestor = this.#discovery?.authorizationServerUrl;
    return { client_id: this.#agent.did, ...(attestor === undefined ? {} : { issuer: attestor }) };
  }

  /** The access token while it has more than the margin left; then none, and the server's 401 gets a new one. */
  tokens(): OAuthTokens | undefined {
    const cached = this.#token;
    if (cached === undefined) return undefined;
    if (cached.renewAt !== undefined && this.#now() >= cached.renewAt) return undefined;
    return cached.tokens;
  }

  saveTokens(tokens: OAuthTokens): void {
    const lifetime = tokens.expires_in === undefined ? undefined : tokens.expires_in * 1000;
    const margin = (this.#options.marginSeconds ?? TOKEN_REFRESH_MARGIN_SECONDS) * 1000;
    // A token shorter-lived than twice the margin is still used for half its life, never not at all.
    const usable = lifetime === undefined ? undefined : Math.max(lifetime - margin, lifetime / 2);
    this.#token = { tokens, renewAt: usable === undefined ? undefined : this.#now() + usable };
  }

  redirectToAuthorization(): void {
    throw new AuthError("interactive_flow", "an agent gets its MCP tokens with its own key, never in a browser");
  }

  saveCodeVerifier(): void {
    throw new AuthError("interactive_flow", "an agent gets its MCP tokens with its own key, never in a browser");
  }

  codeVerifier(): string {
    throw new AuthError("interactive_flow", "an agent gets its MCP tokens with its own key, never in a browser");
  }

  /**
   * What the SDK resumes from: the checked discovery, so a renewal after expiry goes straight to
   * the token request, or once the attestor this agent is linked with when the SDK picked another.
   */
  discoveryState(): OAuthDiscoveryState | undefined {
    const reroute = this.#reroute;
    this.#reroute = undefined;
    return reroute ?? this.#discovery;
  }

  /**
   * The SDK's discovery, checked before anything is signed: the attestor must be one the MCP
   * server lists and this agent is linked with, and its metadata must name itself and the
   * JWT-bearer grant. When the SDK took the server's first attestor and the agent is linked with
   * another it lists, that one is kept and the SDK is told the client is unknown where it looked
   * (`invalid_client`), which makes it retry once from `discoveryState()`.
   */
  saveDiscoveryState(state: OAuthDiscoveryState): void {
    const listed = state.resourceMetadata?.authorization_servers ?? [];
    if (state.resourceMetadata === undefined || listed.length === 0) {
      throw new AgentError(
        "incompatible",
        "not_protected_by_attestor",
        `${this.#serverName()} asks for a token but names no authorization server (no OAuth protected resource metadata, RFC 9728, listing one), so no attestor of this agent can vouch for it`,
      );
    }
    const candidates = this.#candidates(listed);
    const best = candidates[0];
    if (best === undefined) throw this.#notAccepted(listed);
    if (best.binding.state !== "active") throw bindingGone(best.binding);
    if (!sameBaseUrl(best.listed, state.authorizationServerUrl)) {
      this.#reroute = {
        authorizationServerUrl: best.listed,
        resourceMetadata: state.resourceMetadata,
        ...(state.resourceMetadataUrl === undefined ? {} : { resourceMetadataUrl: state.resourceMetadataUrl }),
      };
      throw new InvalidClientError(
        `this agent is not linked with ${state.authorizationServerUrl}; it is with ${best.listed}, which the MCP server lists too`,
      );
    }
    checkAttestorMetadata(best.listed, state.authorizationServerMetadata);
    this.#discovery = state;
  }

  invalidateCredentials(scope: "all" | "client" | "tokens" | "verifier" | "discovery"): void {
    if (scope === "all" || scope === "tokens") this.#token = undefined;
    if (scope === "all" || scope === "discovery") this.#discovery = undefined;
  }

  /**
   * The grant: an assertion signed with the agent's key, `iss` = `sub` = its DID, `aud` the
   * attestor's token endpoint, a fresh `jti`, a minute to live; and the scope.
   */
  prepareTokenRequest(): URLSearchParams {
    const metadata = this.#discovery?.authorizationServerMetadata;
    if (metadata === undefined) {
      // saveDiscoveryState() runs before every token request: without it nothing is signed.
      throw new AuthError("no_attestor", "no attestor was chosen for this MCP server; nothing is signed");
    }
    const params = new URLSearchParams({
      grant_type: JWT_BEARER_GRANT,
      assertion: signAssertion(this.#agent, metadata.token_endpoint, this.#signingNow()),
    });
    const scope =
      this.#options.scope ??
      this.#challengeScope ??
      this.#discovery?.resourceMetadata?.scopes_supported?.join(" ") ??
      undefined;
    if (scope !== undefined && scope !== "") params.set("scope", scope);
    return params;
  }

  /**
   * Called with the URL the token request goes to: it must be the endpoint the assertion names.
   * Nothing is added: the signed assertion is the agent's authentication (no client secret). A
   * property, not a method: the SDK calls it detached from the provider.
   */
  readonly addClientAuthentication = (_headers: Headers, _params: URLSearchParams, url: string | URL): void => {
    const endpoint = this.#discovery?.authorizationServerMetadata?.token_endpoint;
    if (endpoint === undefined || !sameUrl(String(url), endpoint)) {
      throw new AuthError("token_endpoint_mismatch", `the token request would go to ${String(url)}, not ${endpoint}`);
    }
  };

  /**
   * The agent's usable bindings among the attestors the server lists, in the server's order,
   * active ones first (a lapse recorded here may be stale: using the binding at the attestor,
   * by MCP too, re-arms it, so only the attestor's own refusals count).
   */
  #candidates(listed: readonly string[]): { listed: string; binding: BindingRecord }[] {
    const explicit = this.#explicit;
    const bindings = this.#agent
      .bindings()
      .filter((b) => explicit === undefined || sameBaseUrl(b.attestor_url, explicit));
    const found = listed.flatMap((url) => {
      const binding = bindings.find((b) => sameBaseUrl(b.attestor_url, url));
      return binding === undefined ? [] : [{ listed: url, binding }];
    });
    return [...found.filter((c) => c.binding.state === "active"), ...found.filter((c) => c.binding.state !== "active")];
  }

  #notAccepted(listed: readonly string[]): AuthError {
    const server = this.#serverName();
    const theirs = listed.join(", ");
    const explicit = this.#explicit;
    if (explicit !== undefined) {
      const linked = this.#agent.bindings().some((b) => sameBaseUrl(b.attestor_url, explicit));
      return new AuthError(
        linked ? "attestor_not_accepted" : "not_linked",
        linked
          ? `${server} accepts tokens from ${theirs}, not from ${explicit}`
          : `this agent is not linked with ${explicit}: run \`proto trust link --attestor ${explicit}\``,
      );
    }
    const mine = this.#agent.bindings().map((b) => b.attestor_url);
    if (mine.length === 0) {
      return new AuthError(
        "not_linked",
        `this agent is linked with no attestor; ${server} accepts tokens from ${theirs}: run \`proto trust link --attestor ${listed[0]}\``,
      );
    }
    return new AuthError(
      "attestor_not_accepted",
      `${server} accepts tokens from ${theirs}; this agent's attestors: ${mine.join(", ")}. Link one it accepts with \`proto trust link --attestor URL\``,
    );
  }

  #serverName(): string {
    return this.#options.serverUrl === undefined ? "the MCP server" : `the MCP server ${this.#options.serverUrl}`;
  }

  /** The attestor's OAuth error answer as an `AttestorError`, the binding's state recorded when it is gone. */
  async #tokenError(response: Response, endpoint: string): Promise<AttestorError> {
    let body: { error?: unknown; error_description?: unknown } = {};
    try {
      body = (await response.json()) as typeof body;
    } catch {
      // Not JSON: the status says what there is to say.
    }
    const attestor = this.#discovery?.authorizationServerUrl ?? new URL(endpoint).origin;
    const error = typeof body.error === "string" ? body.error : `http_${response.status}`;
    const description = typeof body.error_description === "string" ? oneLine(body.error_description) : "";
    const retryAfter = Number(response.headers.get("retry-after") ?? Number.NaN);
    // The attestor words an agent's refusal as "<proto code>: <message>" inside invalid_grant.
    const inner = error === "invalid_grant" ? /^([a-z][a-z_]*): (.+)$/.exec(description) : null;
    let code = inner?.[1] ?? error;
    let message = inner?.[2] ?? (description || `the attestor answered HTTP ${response.status}`);
    if (code === "unauthorized") {
      code = "not_linked";
      message = notLinkedMessage(attestor);
    } else if (error === "slow_down") {
      code = "rate_limited";
      message = `${attestor} is limiting token requests: ${message}`;
    } else {
      message = `${attestor} refused the token: ${message}`;
    }
    const gone = BINDING_GONE[code];
    if (gone !== undefined) {
      const record = this.#agent.store.getBinding(attestor, this.#agent.did);
      if (record !== undefined) {
        this.#agent.store.saveBinding({ ...record, state: gone, updated_at: new Date(this.#now()).toISOString() });
      }
    }
    return new AttestorError({
      status: response.status,
      code,
      message,
      url: endpoint,
      retryAfter: Number.isFinite(retryAfter) ? retryAfter : undefined,
    });
  }
}

/** The provider for one MCP server. */
export function createMcpAuthProvider(agent: Agent, options: McpAuthProviderOptions = {}): AgentMcpAuthProvider {
  return new AgentMcpAuthProvider(agent, options);
}

/** A compact JWS (EdDSA) by the agent's key: the RFC 7523 assertion the attestor verifies against its did:key. */
function signAssertion(agent: Agent, audience: string, nowMs: number): string {
  const iat = Math.floor(nowMs / 1000);
  const part = (value: unknown) => encodeBase64url(new TextEncoder().encode(JSON.stringify(value)));
  const claims = {
    iss: agent.did,
    sub: agent.did,
    aud: audience,
    iat,
    exp: iat + ASSERTION_LIFETIME_SECONDS,
    jti: randomUUID(),
  };
  const input = `${part({ alg: "EdDSA", typ: "JWT" })}.${part(claims)}`;
  return `${input}.${encodeBase64url(agent.identity.signBytes(input))}`;
}

/**
 * RFC 8414 §3.3: the metadata names the attestor it was fetched from (a document served
 * elsewhere cannot stand in for it), offers the JWT-bearer grant, and keeps its token endpoint on
 * the attestor's origin, where the assertion's audience points.
 */
function checkAttestorMetadata(attestor: string, metadata: AuthorizationServerMetadata | undefined): void {
  const incompatible = (why: string) => new AgentError("incompatible", "attestor_incompatible", `${attestor} ${why}`);
  if (metadata === undefined) throw incompatible("serves no OAuth authorization server metadata (RFC 8414)");
  if (!sameBaseUrl(metadata.issuer, attestor)) {
    throw incompatible(`serves authorization server metadata for another issuer (${metadata.issuer})`);
  }
  if (!metadata.grant_types_supported?.includes(JWT_BEARER_GRANT)) {
    throw incompatible("does not offer the JWT-bearer grant agents get MCP tokens with");
  }
  if (new URL(metadata.token_endpoint).origin !== new URL(attestor).origin) {
    throw incompatible(`names a token endpoint on another origin (${metadata.token_endpoint})`);
  }
}

function bindingGone(binding: BindingRecord): AuthError {
  return binding.state === "revoked"
    ? new AuthError("binding_revoked", `the person revoked this agent's link at ${binding.attestor_url}`)
    : new AuthError("binding_expired", `this agent's link at ${binding.attestor_url} lapsed unused`);
}

function sameUrl(a: string, b: string): boolean {
  try {
    return new URL(a).href === new URL(b).href;
  } catch {
    return a === b;
  }
}
