import {
  type DiscoveryBilling,
  type DiscoveryDocument,
  type DiscoveryEndpoints,
  type DiscoveryFeature,
  type DiscoveryLimits,
  type DiscoveryRecipientType,
  type DiscoveryValidationError,
  didWebMismatch,
  InvalidEndpointError,
  PROTO_VERSION,
  resolveEndpoint,
  SIGNED_ENDPOINTS,
  type SignatureAlgorithm,
  validateDiscoveryDocument,
} from "@proto/protocol";
import { KitConfigError } from "./config-error.js";

/** Where the kit mounts its endpoints unless the document says otherwise. */
export const DEFAULT_ENDPOINTS = {
  accounts: "/proto/v1/accounts",
  owner_invitation: "/proto/v1/accounts/me/owner-invitation",
  claim_completion: "/proto/v1/claim",
  key_rotation: "/proto/v1/accounts/me/keys/rotate",
  key_rekey: "/proto/v1/accounts/keys/rekey",
  key_revocation: "/proto/v1/accounts/keys/revoke",
  /** Path of the claim page on the public origin (the document carries the full URI). */
  claim_page_path: "/proto/claim",
} as const;

export interface DiscoveryInput {
  service_did: string;
  proto_version?: string;
  /**
   * Endpoint paths; defaults in `DEFAULT_ENDPOINTS`. An absolute URL on `publicUrl`'s origin is
   * accepted and written as its path; a signed endpoint on another origin is refused (the kit
   * answers on its own origin only). `claim_page` defaults to `{publicUrl}/proto/claim`; a path is
   * written as a full URI on `publicUrl`, and any other host is fine. Set `key_rotation`,
   * `key_rekey` or `key_revocation` to `null` to leave that operation out.
   */
  endpoints?: Partial<Omit<DiscoveryEndpoints, "key_rotation" | "key_rekey" | "key_revocation">> & {
    key_rotation?: string | null;
    key_rekey?: string | null;
    key_revocation?: string | null;
  };
  signature_algorithms?: SignatureAlgorithm[];
  /** Default: `attestation` when attestors are accepted, `key_rotation` when the endpoint exists. */
  features?: DiscoveryFeature[];
  /** Omitted: e-mail only. */
  recipient_types?: DiscoveryRecipientType[];
  limits?: DiscoveryLimits;
  /** Default `{ unclaimed_mode: "attested_only" }` (the spec's default posture). */
  billing?: DiscoveryBilling;
  /** Any other member (x402, forward-compatible fields) is copied as is. */
  [other: string]: unknown;
}

export interface BuildDiscoveryOptions {
  /** The service's public origin (`https://api.example.com`): the default claim page lives there. */
  publicUrl?: string;
  /** Attestor issuer names to list in `billing.accepted_attestors` when the input has none. */
  acceptedAttestors?: string[];
}

/** The input does not make a valid discovery document; `errors` says why. Its option is `discovery`. */
export class DiscoveryDocumentError extends KitConfigError {
  override readonly name = "DiscoveryDocumentError";
  readonly errors: DiscoveryValidationError[];
  constructor(errors: DiscoveryValidationError[]) {
    super("discovery", `invalid discovery document: ${errors.map((e) => e.message).join("; ")}`);
    this.errors = errors;
  }
}

/**
 * Builds the service's discovery document (`/.well-known/proto`) from a partial description,
 * filling defaults, and validates it against the protocol library's schema. With `publicUrl`, the
 * signed endpoints are written as paths (an absolute URL on that origin becomes its path) and the
 * claim page as a full URI. Throws `DiscoveryDocumentError` when the result is invalid, when a
 * `did:web` DID names another host than `publicUrl`, or when a signed endpoint lies on another
 * origin. Never returns an invalid document.
 */
export function buildDiscoveryDocument(input: DiscoveryInput, options: BuildDiscoveryOptions = {}): DiscoveryDocument {
  if (typeof input !== "object" || input === null) {
    throw new DiscoveryDocumentError([{ path: "", message: "the input must be an object" }]);
  }
  const { endpoints: endpointInput, ...rest } = input;
  const publicUrl = options.publicUrl === undefined ? undefined : new URL(options.publicUrl);
  const endpoints: Record<string, unknown> = {
    accounts: DEFAULT_ENDPOINTS.accounts,
    owner_invitation: DEFAULT_ENDPOINTS.owner_invitation,
    claim_completion: DEFAULT_ENDPOINTS.claim_completion,
    key_rotation: DEFAULT_ENDPOINTS.key_rotation,
    key_rekey: DEFAULT_ENDPOINTS.key_rekey,
    key_revocation: DEFAULT_ENDPOINTS.key_revocation,
    ...(publicUrl === undefined ? {} : { claim_page: `${publicUrl.origin}${DEFAULT_ENDPOINTS.claim_page_path}` }),
    ...endpointInput,
  };
  for (const optional of ["key_rotation", "key_rekey", "key_revocation"]) {
    if (endpoints[optional] === null) delete endpoints[optional];
  }

  const billing: Record<string, unknown> = { unclaimed_mode: "attested_only", ...input.billing };
  if (billing.accepted_attestors === undefined && options.acceptedAttestors !== undefined) {
    billing.accepted_attestors = [...options.acceptedAttestors];
  }
  const accepted = Array.isArray(billing.accepted_attestors) ? billing.accepted_attestors : [];
  const features =
    input.features ??
    ([
      ...(accepted.length > 0 ? ["attestation"] : []),
      ...(typeof endpoints.key_rotation === "string" ? ["key_rotation"] : []),
    ] as DiscoveryFeature[]);

  const document: Record<string, unknown> = {
    ...rest,
    proto_version: input.proto_version ?? PROTO_VERSION,
    service_did: input.service_did,
    endpoints,
    signature_algorithms: input.signature_algorithms ?? ["ed25519"],
    billing,
  };
  if (features.length > 0) document.features = features;
  else delete document.features;

  const result = validateDiscoveryDocument(document);
  if (!result.valid) throw new DiscoveryDocumentError(result.errors);
  const doc = result.document;
  if (publicUrl !== undefined) ownEndpoints(doc, publicUrl.origin);
  // `did:web:localhost:18103` names host `localhost` (path `18103`): the message gives the DID that fits.
  const mismatch =
    publicUrl !== undefined && doc.service_did.startsWith("did:web:")
      ? didWebMismatch(doc.service_did, publicUrl.host, `the host of ${publicUrl.origin}`)
      : undefined;
  if (mismatch !== undefined) {
    throw new DiscoveryDocumentError([{ path: "/service_did", message: `service_did ${mismatch}` }]);
  }
  if (doc.features?.includes("key_rotation") && doc.endpoints.key_rotation === undefined) {
    throw new DiscoveryDocumentError([
      { path: "/features", message: "features lists key_rotation but endpoints.key_rotation is missing" },
    ]);
  }
  return doc;
}

/** Validates a complete document (what the kit serves); throws `DiscoveryDocumentError`. */
export function assertDiscoveryDocument(doc: unknown): DiscoveryDocument {
  const result = validateDiscoveryDocument(doc);
  if (!result.valid) throw new DiscoveryDocumentError(result.errors);
  return result.document;
}

/**
 * The path the kit mounts an endpoint at: a path by itself (normalised as a URL parser would,
 * `/a/../b` is `/b`), an absolute URL on the kit's own origin by its path; the query is not part of
 * a route. Throws `DiscoveryDocumentError` for a URL on another origin: the kit answers on its own
 * origin only, and an agent would send that endpoint's signed requests elsewhere. `name` names the
 * member in the error (`accounts`, ...).
 */
export function endpointPath(kitOrigin: string, value: string, name = "endpoint"): string {
  return ownUrl(new URL(kitOrigin).origin, value, name).pathname;
}

function ownUrl(origin: string, value: string, name: string): URL {
  const member = `endpoints.${name}`;
  let url: URL;
  try {
    url = resolveEndpoint(origin, value);
  } catch (error) {
    if (!(error instanceof InvalidEndpointError)) throw error;
    throw new DiscoveryDocumentError([{ path: `/endpoints/${name}`, message: `${member}: ${error.message}` }]);
  }
  if (url.origin !== origin) {
    throw new DiscoveryDocumentError([
      {
        path: `/endpoints/${name}`,
        message: `${member} (${url.href}) is on another origin than the service (${origin}): the kit answers its endpoints on its own origin only`,
      },
    ]);
  }
  return url;
}

/**
 * Our builders emit paths: a signed endpoint given as an absolute URL on the service's origin is
 * written as its path (and query), one on another origin is refused; a claim page given as a path
 * becomes a full URI on that origin, since the claim URLs the kit hands out are built from it.
 */
function ownEndpoints(doc: DiscoveryDocument, origin: string): void {
  const endpoints = doc.endpoints as Record<string, unknown>;
  // The owner endpoints answer on the kit's origin too (the owner session cookie lives there).
  for (const name of [...SIGNED_ENDPOINTS, "key_rekey", "key_revocation"]) {
    const value = endpoints[name];
    if (typeof value !== "string") continue;
    const url = ownUrl(origin, value, name);
    // A path of "//x" would read as a host: such a URL stays absolute.
    if (!value.startsWith("/") && !url.pathname.startsWith("//")) endpoints[name] = `${url.pathname}${url.search}`;
  }
  if (typeof endpoints.claim_page === "string" && endpoints.claim_page.startsWith("/")) {
    endpoints.claim_page = resolveEndpoint(origin, endpoints.claim_page).href;
  }
}
