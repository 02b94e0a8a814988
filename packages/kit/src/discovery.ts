import {
  type DiscoveryBilling,
  type DiscoveryDocument,
  type DiscoveryEndpoints,
  type DiscoveryFeature,
  type DiscoveryLimits,
  type DiscoveryRecipientType,
  type DiscoveryValidationError,
  didWebMatchesHost,
  PROTO_VERSION,
  type SignatureAlgorithm,
  validateDiscoveryDocument,
} from "@proto/protocol";

/** Where the kit mounts its endpoints unless the document says otherwise. */
export const DEFAULT_ENDPOINTS = {
  accounts: "/proto/v1/accounts",
  owner_invitation: "/proto/v1/accounts/me/owner-invitation",
  claim_completion: "/proto/v1/claim",
  key_rotation: "/proto/v1/accounts/me/keys/rotate",
  /** Path of the claim page on the public origin (the document carries the full URI). */
  claim_page_path: "/proto/claim",
} as const;

export interface DiscoveryInput {
  service_did: string;
  proto_version?: string;
  /**
   * Endpoint paths; defaults in `DEFAULT_ENDPOINTS`. `claim_page` defaults to
   * `{publicUrl}/proto/claim`. Set `key_rotation` to `null` to leave key rotation out.
   */
  endpoints?: Partial<Omit<DiscoveryEndpoints, "key_rotation">> & { key_rotation?: string | null };
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

/** The input does not make a valid discovery document; `errors` says why. */
export class DiscoveryDocumentError extends Error {
  override readonly name = "DiscoveryDocumentError";
  readonly errors: DiscoveryValidationError[];
  constructor(errors: DiscoveryValidationError[]) {
    super(`invalid discovery document: ${errors.map((e) => e.message).join("; ")}`);
    this.errors = errors;
  }
}

/**
 * Builds the service's discovery document (`/.well-known/proto`) from a partial description,
 * filling defaults, and validates it against the protocol library's schema. Throws
 * `DiscoveryDocumentError` when the result is invalid (or a `did:web` DID names another host than
 * `publicUrl`). Never returns an invalid document.
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
    ...(publicUrl === undefined ? {} : { claim_page: `${publicUrl.origin}${DEFAULT_ENDPOINTS.claim_page_path}` }),
    ...endpointInput,
  };
  if (endpoints.key_rotation === null) delete endpoints.key_rotation;

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
  if (
    publicUrl !== undefined &&
    doc.service_did.startsWith("did:web:") &&
    !didWebMatchesHost(doc.service_did, publicUrl.host)
  ) {
    throw new DiscoveryDocumentError([
      { path: "/service_did", message: `service_did ${doc.service_did} does not name the host of ${publicUrl.origin}` },
    ]);
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
