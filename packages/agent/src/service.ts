/**
 * Talking to a proto service: its discovery document, then signed (and, for `attested_only`
 * services, attested) requests through a `fetch`-compatible function.
 */
import {
  ATTESTATION_HEADER,
  checkAgentCompatibility,
  type DiscoveryDocument,
  didWebMismatch,
  findProtoChallenge,
  InvalidEndpointError,
  parseErrorEnvelope,
  resolveEndpoint,
  SIGNED_ENDPOINTS,
  validateDiscoveryDocument,
  wireMethod,
} from "@proto/protocol";
import { type AttestationSource, acceptedAttestors } from "./accepted.js";
import { type AuthorityError, authorityRefusal } from "./authority.js";
import { AuthError, DiscoveryError, ServerError, type ServerErrorInit, UsageError } from "./errors.js";
import {
  DISCOVERY_MAX_BYTES,
  errorFromResponse,
  HttpClient,
  type HttpOptions,
  type HttpResponse,
  isOk,
} from "./http.js";
import type { AgentIdentity, WebBotAuthSigning } from "./identity.js";

export const DISCOVERY_PATH = "/.well-known/proto";

export interface ServiceDiscovery {
  /** `https://host[:port]` of the service. */
  origin: string;
  /** `{origin}/.well-known/proto`. */
  discoveryUrl: string;
  /** The validated document. */
  document: DiscoveryDocument;
  /** `document.service_did`: the audience of attestations for this service. */
  did: string;
  /** `billing.unclaimed_mode` is `attested_only`: requests carry `Proto-Attestation`. */
  attestedOnly: boolean;
  /**
   * Every endpoint of the document as an absolute URL: paths resolved against `origin`, absolute
   * URLs as given (they may name another host). Members that are not URLs are left out.
   */
  endpoints: ResolvedEndpoints;
  /**
   * The service's MCP endpoint, when its document names one (`mcp`, docs/discovery-mcp.md), as
   * absolute URLs: a path resolved against `origin`. Requests to it carry an access token.
   */
  mcp?: { url: string; resourceMetadata?: string };
}

export interface ResolvedEndpoints {
  accounts: string;
  owner_invitation: string;
  claim_page?: string;
  claim_completion: string;
  key_rotation?: string;
  /** Endpoints this version does not know (forward compatibility), resolved the same way. */
  [name: string]: string | undefined;
}

const serviceError = (init: ServerErrorInit) => new ServerError(init);

/** The service origin of a URL: any URL on the host, or its discovery URL. HTTPS only. */
export function serviceOrigin(url: string | URL): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new UsageError("invalid_url", `${JSON.stringify(String(url))} is not an absolute URL`);
  }
  if (parsed.protocol !== "https:") {
    throw new UsageError(
      "insecure_url",
      `services are reached over https:// only, got ${parsed.protocol}//${parsed.host}`,
    );
  }
  if (parsed.username !== "" || parsed.password !== "") {
    throw new UsageError("invalid_url", "service URLs must not carry credentials");
  }
  return parsed.origin;
}

/**
 * Fetches `https://{host}/.well-known/proto` (no redirects, 64 KiB cap) and checks it with the
 * protocol library: the schema (`discovery_invalid`), then the v0.1 agent rules, `proto_version`
 * "0.1" and `ed25519` (`discovery_incompatible`), then that a `did:web` DID names this host
 * (`discovery_did_mismatch`), so attestations minted for it never go to another host.
 */
export async function discoverService(
  url: string | URL,
  options: HttpOptions & { signal?: AbortSignal } = {},
): Promise<ServiceDiscovery> {
  const origin = serviceOrigin(url);
  const discoveryUrl = `${origin}${DISCOVERY_PATH}`;
  const http = new HttpClient(options);
  const response = await http.request(discoveryUrl, {
    method: "GET",
    headers: { accept: "application/json" },
    maxResponseBytes: Math.min(DISCOVERY_MAX_BYTES, http.maxResponseBytes),
    signal: options.signal,
  });
  if (response.status >= 500) throw errorFromResponse(response, serviceError);
  if (!isOk(response.status)) {
    throw new DiscoveryError("discovery_fetch_failed", discoveryUrl, [`answered HTTP ${response.status}`]);
  }
  let doc: unknown;
  try {
    doc = JSON.parse(new TextDecoder().decode(response.body));
  } catch {
    throw new DiscoveryError("discovery_invalid", discoveryUrl, ["the discovery document is not JSON"]);
  }
  const result = checkAgentCompatibility(doc);
  if (!result.compatible) {
    const code = validateDiscoveryDocument(doc).valid ? "discovery_incompatible" : "discovery_invalid";
    throw new DiscoveryError(code, discoveryUrl, result.reasons);
  }
  const document = result.document;
  const mismatch = document.service_did.startsWith("did:web:")
    ? didWebMismatch(document.service_did, new URL(origin).host)
    : undefined;
  if (mismatch !== undefined)
    throw new DiscoveryError("discovery_did_mismatch", discoveryUrl, [`service_did ${mismatch}`]);
  return {
    origin,
    discoveryUrl,
    document,
    did: document.service_did,
    attestedOnly: document.billing?.unclaimed_mode === "attested_only",
    endpoints: resolveEndpoints(document, origin, discoveryUrl),
    ...resolveMcp(document, origin, discoveryUrl),
  };
}

/** `mcp` resolved; the schema holds only values that resolve, so a failure is an invalid document. */
function resolveMcp(document: DiscoveryDocument, origin: string, discoveryUrl: string): Pick<ServiceDiscovery, "mcp"> {
  if (document.mcp === undefined) return {};
  const resolve = (member: string, value: string) => {
    try {
      return resolveEndpoint(origin, value).href;
    } catch (error) {
      if (!(error instanceof InvalidEndpointError)) throw error;
      throw new DiscoveryError("discovery_invalid", discoveryUrl, [`mcp.${member}: ${error.message}`]);
    }
  };
  const metadata = document.mcp.resource_metadata;
  return {
    mcp: {
      url: resolve("url", document.mcp.url),
      ...(metadata === undefined ? {} : { resourceMetadata: resolve("resource_metadata", metadata) }),
    },
  };
}

/**
 * A valid document's signed endpoints always resolve (the schema holds only values that do); the
 * claim page and endpoints of later versions are for people or unknown, so one that does not
 * resolve is left out rather than failing the service.
 */
function resolveEndpoints(document: DiscoveryDocument, origin: string, discoveryUrl: string): ResolvedEndpoints {
  const resolved: Record<string, string> = {};
  for (const [name, value] of Object.entries(document.endpoints)) {
    if (typeof value !== "string") continue;
    try {
      resolved[name] = resolveEndpoint(origin, value).href;
    } catch (error) {
      if (!(error instanceof InvalidEndpointError)) throw error;
      if ((SIGNED_ENDPOINTS as readonly string[]).includes(name)) {
        throw new DiscoveryError("discovery_invalid", discoveryUrl, [`endpoints.${name}: ${error.message}`]);
      }
    }
  }
  return resolved as ResolvedEndpoints;
}

export interface ServiceClientOptions extends HttpOptions {
  identity: AgentIdentity;
  /**
   * Mints the attestations `attested_only` services need (one `AttestorClient`, or the agent's
   * `Attestors`, which pick the one the service accepts); without it such services are refused.
   */
  attestor?: AttestationSource;
  /** Milliseconds since the epoch, for signatures. */
  now?: () => number;
  /**
   * When a request went out without an attestation and the service answers 401
   * `attestation_required`, mint one and send the request once more (default true; needs `attestor`).
   */
  retryWithAttestation?: boolean;
  /** Sign with Web Bot Auth too, naming this key directory in `Signature-Agent`. */
  webBotAuth?: WebBotAuthSigning;
}

/** The answer to a signed request, read whole, and whether it carried an attestation. */
export interface ServiceResponse {
  response: HttpResponse;
  attested: boolean;
  /**
   * Set when the service refused because the person has not granted enough (403
   * `insufficient_permission` or `spend_limit_exceeded`): what is missing and whom to ask.
   */
  refusal?: AuthorityError;
}

export interface SendOptions {
  /** Attest the request even when the service does not require it (a grant travels in the token). */
  attest?: boolean;
  /** Mint a new token rather than take the cached one (after an approval widened the grant). */
  fresh?: boolean;
}

/** Statuses whose Response must have no body. */
const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);

export class ServiceClient {
  readonly discovery: ServiceDiscovery;
  readonly identity: AgentIdentity;
  readonly attestor: AttestationSource | undefined;
  readonly #http: HttpClient;
  readonly #now: () => number;
  readonly #retry: boolean;
  readonly #webBotAuth: WebBotAuthSigning | undefined;
  /** Where this client sends signatures and attestations. */
  readonly #origins: ReadonlySet<string>;

  /**
   * A `fetch` for this service: signs every request (RFC 9421, through `@proto/protocol`), adds
   * `Proto-Attestation` for `attested_only` services, never follows redirects, and refuses URLs
   * outside the service's origins (the discovery origin and the origins of its signed endpoints).
   * Relative URLs resolve against the discovery origin. The response body is read whole (capped)
   * before it is returned.
   */
  readonly fetch: (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

  constructor(discovery: ServiceDiscovery, options: ServiceClientOptions) {
    this.discovery = discovery;
    this.identity = options.identity;
    this.attestor = options.attestor;
    this.#http = new HttpClient(options);
    this.#now = options.now ?? Date.now;
    this.#retry = options.retryWithAttestation ?? true;
    this.#webBotAuth = options.webBotAuth;
    // The document names where the service answers; the claim page is for people and never
    // widens where signatures and attestations go.
    this.#origins = new Set([
      discovery.origin,
      ...SIGNED_ENDPOINTS.flatMap((name) => {
        const url = discovery.endpoints[name];
        return url === undefined ? [] : [new URL(url).origin];
      }),
    ]);
    this.fetch = async (input, init) => {
      const { response } = await this.send(input, init);
      const body = NULL_BODY_STATUSES.has(response.status) ? null : response.body;
      return new Response(body, {
        status: response.status,
        statusText: response.statusText,
        headers: response.headers,
      });
    };
  }

  /** Discovers the service at `url` and returns a client for it. */
  static async connect(
    url: string | URL,
    options: ServiceClientOptions & { signal?: AbortSignal },
  ): Promise<ServiceClient> {
    return new ServiceClient(await discoverService(url, options), options);
  }

  get did(): string {
    return this.discovery.did;
  }

  get origin(): string {
    return this.discovery.origin;
  }

  /** The origins this client signs requests for: the discovery origin first, then any other a signed endpoint names. */
  get origins(): string[] {
    return [...this.#origins];
  }

  /**
   * The URL of an endpoint the discovery document names (`accounts`, `owner_invitation`, ...),
   * resolved: a path against the discovery origin, an absolute URL as given. `suffix` (`"/me"`, a
   * claim token as `"/{token}"`) is appended to its path, after any trailing "/". Throws a
   * UsageError `unknown_endpoint` when the document has no such endpoint.
   */
  endpoint(name: string, suffix = ""): string {
    const resolved = Object.hasOwn(this.discovery.endpoints, name) ? this.discovery.endpoints[name] : undefined;
    if (resolved === undefined) {
      const known = Object.keys(this.discovery.endpoints).join(", ");
      throw new UsageError(
        "unknown_endpoint",
        `${this.origin} advertises no endpoint ${JSON.stringify(name)} (it has: ${known})`,
      );
    }
    if (suffix === "") return resolved;
    if (!suffix.startsWith("/") || /[?#]/.test(suffix)) {
      throw new UsageError(
        "invalid_argument",
        `an endpoint suffix is a path starting with "/", got ${JSON.stringify(suffix)}`,
      );
    }
    const url = new URL(resolved);
    url.pathname = `${url.pathname.replace(/\/+$/, "")}${suffix}`;
    return url.href;
  }

  /**
   * The service's MCP endpoint, as its discovery document names it (`mcp.url`, resolved): what
   * `connectMcp` takes. Throws a UsageError `no_mcp_endpoint` when the document names none.
   */
  mcpEndpoint(): string {
    const url = this.discovery.mcp?.url;
    if (url === undefined) throw noMcpEndpoint(this.discovery.discoveryUrl);
    return url;
  }

  /**
   * The signed exchange behind `fetch`, with the whole response, whether it was attested, and the
   * service's refusal for want of authority (`refusal`), typed.
   */
  async send(input: string | URL | Request, init?: RequestInit, options: SendOptions = {}): Promise<ServiceResponse> {
    const target = typeof input === "string" ? new URL(input, `${this.origin}/`) : input;
    const request = new Request(target instanceof URL ? target.href : target, init);
    const url = new URL(request.url);
    url.hash = "";
    if (!this.#origins.has(url.origin)) {
      throw new UsageError(
        "foreign_origin",
        `this client signs requests for ${this.origins.join(", ")} only (the service and its endpoints), not ${url.origin}`,
      );
    }
    const bytes = request.body === null ? undefined : new Uint8Array(await request.arrayBuffer());
    const body = bytes !== undefined && bytes.length > 0 ? bytes : undefined;

    // Each exchange signs anew: a retry carries a fresh nonce and `created`.
    const exchange = async (attest: boolean, fresh = false): Promise<HttpResponse> => {
      const headers = new Headers(request.headers);
      const signing = { method: request.method, url: url.href, body };
      const signed =
        this.#webBotAuth === undefined
          ? this.identity.signRequest(signing, { now: this.#now }).headers
          : this.identity.signWebBotAuth(signing, this.#webBotAuth, { now: this.#now });
      for (const [name, value] of Object.entries(signed)) headers.set(name, value);
      if (attest) {
        // Only a token whose iss the service lists in billing.accepted_attestors is ever sent.
        const accepted = acceptedAttestors(this.discovery.document.billing);
        const token = await this.#attestor().attestationFor(this.did, accepted, { fresh, signal: request.signal });
        headers.set(ATTESTATION_HEADER, token.jwt);
      }
      // What was signed goes out: fetch upper-cases only some methods (`patch` stays as given).
      return this.#http.request(url.href, {
        method: wireMethod(request.method),
        headers,
        body,
        signal: request.signal,
      });
    };

    const attested = this.discovery.attestedOnly || options.attest === true;
    const response = await exchange(attested, options.fresh === true);
    // One mint and one retry when the service wants an attestation: the request went without one,
    // or the service's attested session (upstream §10.7) lapsed despite the cached token. Refusals
    // of the mint itself (binding_revoked, binding_expired, service_suspended) are final.
    if (this.#retry && this.attestor !== undefined && response.status === 401) {
      if (refusalCode(response) === "attestation_required") {
        return answered(await exchange(true, attested), true);
      }
    }
    return answered(response, attested);
  }

  #attestor(): AttestationSource {
    if (this.attestor === undefined) {
      throw new AuthError(
        "attestation_unavailable",
        `${this.origin} requires an attestation (attested_only) and no attestor is configured: run \`proto trust link\``,
      );
    }
    return this.attestor;
  }
}

function answered(response: HttpResponse, attested: boolean): ServiceResponse {
  const refusal = authorityRefusal(response);
  return refusal === undefined ? { response, attested } : { response, attested, refusal };
}

export function noMcpEndpoint(discoveryUrl: string): UsageError {
  return new UsageError(
    "no_mcp_endpoint",
    `${discoveryUrl} names no MCP endpoint (its mcp.url): give the MCP server's own URL`,
  );
}

/**
 * Why a service refused: the `Proto` challenge's `error` when the service sent one (upstream §5.7,
 * found among any other schemes' challenges), else the error envelope's code.
 */
function refusalCode(response: HttpResponse): string | undefined {
  return findProtoChallenge(response.headers.get("www-authenticate"))?.error ?? envelopeCode(response);
}

function envelopeCode(response: HttpResponse): string | undefined {
  try {
    return parseErrorEnvelope(JSON.parse(new TextDecoder().decode(response.body)))?.error.code;
  } catch {
    return undefined;
  }
}
