/**
 * The discovery document (`https://{host}/.well-known/proto`): the normative JSON schema the
 * directory validates against, and the stricter rule an agent applies before talking to a service.
 */
import { readFileSync } from "node:fs";
import { Ajv2020, type ErrorObject, type ValidateFunction } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

/** The protocol version this library speaks. */
export const PROTO_VERSION = "0.1";

// `schema/` is a sibling of both `src/` and `dist/`, so one relative URL serves both layouts.
const SCHEMA_URL = new URL("../schema/discovery.schema.json", import.meta.url);

/** The normative discovery schema (JSON Schema 2020-12), as parsed from `schema/discovery.schema.json`. */
export const DISCOVERY_SCHEMA: Readonly<Record<string, unknown>> = deepFreeze(
  JSON.parse(readFileSync(SCHEMA_URL, "utf8")) as Record<string, unknown>,
);

// Frozen because it is shared: a caller editing it would silently change what everyone validates.
function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null) {
    for (const member of Object.values(value)) deepFreeze(member);
    Object.freeze(value);
  }
  return value;
}

export const DISCOVERY_SCHEMA_ID = DISCOVERY_SCHEMA.$id as string;

export type SignatureAlgorithm = "ed25519" | "ecdsa-p256-sha256";
export type DiscoveryFeature = "attestation" | "key_rotation" | "attested_session";
export type DiscoveryRecipientType = "email" | "phone" | "oidc" | "did";
export type UnclaimedMode = "free" | "attested_only" | "denied";

export interface DiscoveryEndpoints {
  accounts: string;
  owner_invitation: string;
  claim_page: string;
  claim_completion: string;
  key_rotation?: string;
  [unknownKey: string]: unknown;
}

export interface DiscoveryLimits {
  unclaimed_rate_limit_per_hour: number;
  unclaimed_ttl_seconds?: number;
  [unknownKey: string]: unknown;
}

export interface DiscoveryBilling {
  unclaimed_mode: UnclaimedMode;
  accepted_attestors?: string[];
  [unknownKey: string]: unknown;
}

export interface DiscoveryX402 {
  facilitator: unknown;
  networks: unknown;
  assets: unknown;
  payment_endpoint: unknown;
  [unknownKey: string]: unknown;
}

export interface DiscoveryDocument {
  proto_version: string;
  service_did: string;
  endpoints: DiscoveryEndpoints;
  signature_algorithms: SignatureAlgorithm[];
  features?: DiscoveryFeature[];
  recipient_types?: DiscoveryRecipientType[];
  limits?: DiscoveryLimits;
  billing?: DiscoveryBilling;
  x402?: DiscoveryX402;
  /** Forward compatibility: unknown members are kept and ignored. */
  [unknownKey: string]: unknown;
}

export interface DiscoveryValidationError {
  /** JSON pointer of the offending member, e.g. `/endpoints/claim_page`; `""` is the document itself. */
  path: string;
  /** Readable, e.g. `endpoints.claim_page: must be a full URI`. */
  message: string;
}

export type DiscoveryValidationResult =
  | { valid: true; document: DiscoveryDocument }
  | { valid: false; errors: DiscoveryValidationError[] };

let compiled: ValidateFunction<DiscoveryDocument> | undefined;

/** Compiling costs milliseconds, so it happens once, on first use, not at import. */
function validator(): ValidateFunction<DiscoveryDocument> {
  if (compiled === undefined) {
    // allErrors so a publisher sees every problem at once; the schema's size bounds and the
    // fetcher's body cap keep the extra work linear and small.
    const ajv = new Ajv2020({ allErrors: true, strict: true });
    // Under NodeNext the CommonJS default import is `module.exports`; the plugin sits on `.default`.
    addFormats.default(ajv, ["uri"]);
    compiled = ajv.compile<DiscoveryDocument>(DISCOVERY_SCHEMA);
  }
  return compiled;
}

/**
 * A hostile document can carry thousands of bad entries; a publisher fixing it needs the first few,
 * and wording every one would cost more than the validation itself.
 */
export const MAX_REPORTED_ERRORS = 20;

/**
 * Validates a parsed discovery document against the normative schema. Never throws. An invalid
 * document reports its first MAX_REPORTED_ERRORS problems.
 */
export function validateDiscoveryDocument(doc: unknown): DiscoveryValidationResult {
  const validate = validator();
  if (validate(doc)) return { valid: true, document: doc };
  const errors = (validate.errors ?? []).slice(0, MAX_REPORTED_ERRORS).map(toValidationError);
  return { valid: false, errors };
}

// Messages for constraints whose generic wording ("must match pattern ...") would not help a publisher.
const SCHEMA_PATH_MESSAGES: Record<string, string> = {
  "#/$defs/servicePath/pattern": 'must be a path on the service host, starting with a single "/"',
  "#/properties/service_did/pattern": "must be a did:web or did:key DID",
};

function toValidationError(error: ErrorObject): DiscoveryValidationError {
  if (error.keyword === "required") {
    const missing = String((error.params as { missingProperty: string }).missingProperty);
    const path = `${error.instancePath}/${escapePointerToken(missing)}`;
    return { path, message: `missing required field ${fieldName(path)}` };
  }
  return { path: error.instancePath, message: `${fieldName(error.instancePath)}: ${describe(error)}` };
}

function describe(error: ErrorObject): string {
  const special = SCHEMA_PATH_MESSAGES[error.schemaPath];
  if (special !== undefined) return special;
  const params = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case "type":
      return `must be ${withArticle(String(params.type))}`;
    case "format":
      return params.format === "uri" ? "must be a full URI" : `must be a valid ${String(params.format)}`;
    case "enum":
      return `must be one of ${(params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(", ")}`;
    case "minItems":
      return params.limit === 1 ? "must not be empty" : `must have at least ${String(params.limit)} entries`;
    case "maxItems":
      return `must have at most ${String(params.limit)} entries`;
    case "maxLength":
      return `must be at most ${String(params.limit)} characters long`;
    case "maxProperties":
      return `must have at most ${String(params.limit)} members`;
    case "minimum":
    case "maximum":
      return `must be ${String(params.comparison)} ${String(params.limit)}`;
    default:
      return error.message ?? "is invalid";
  }
}

function withArticle(type: string): string {
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`;
}

function escapePointerToken(token: string): string {
  return token.replaceAll("~", "~0").replaceAll("/", "~1");
}

/** `/endpoints/claim_page` -> `endpoints.claim_page`, `/features/1` -> `features[1]`. */
function fieldName(pointer: string): string {
  if (pointer === "") return "document";
  let name = "";
  for (const raw of pointer.slice(1).split("/")) {
    const token = raw.replaceAll("~1", "/").replaceAll("~0", "~");
    name += /^(0|[1-9][0-9]*)$/.test(token) ? `[${token}]` : name === "" ? token : `.${token}`;
  }
  return name;
}

export type AgentCompatibility =
  | { compatible: true; document: DiscoveryDocument }
  | { compatible: false; reasons: string[] };

/**
 * What an agent checks before using a service: the schema, plus the v0.1 client rules the
 * directory deliberately does not enforce (it lists services of every version): `proto_version`
 * is exactly "0.1", and `ed25519` is among `signature_algorithms` (the one algorithm every
 * v0.1 agent can sign with).
 */
export function checkAgentCompatibility(doc: unknown): AgentCompatibility {
  const result = validateDiscoveryDocument(doc);
  const reasons = result.valid ? [] : result.errors.map((e) => e.message);
  reasons.push(...clientRuleViolations(doc));
  if (result.valid && reasons.length === 0) return { compatible: true, document: result.document };
  return { compatible: false, reasons };
}

// Runs on the raw value too, so a document that also fails the schema still names these problems.
function clientRuleViolations(doc: unknown): string[] {
  if (typeof doc !== "object" || doc === null) return [];
  const { proto_version: version, signature_algorithms: algorithms } = doc as Record<string, unknown>;
  const reasons: string[] = [];
  if (typeof version === "string" && version !== PROTO_VERSION) {
    reasons.push(`proto_version is not "${PROTO_VERSION}" (found ${JSON.stringify(version.slice(0, 64))})`);
  }
  if (Array.isArray(algorithms) && !algorithms.includes("ed25519")) {
    reasons.push("service does not advertise ed25519");
  }
  return reasons;
}

export class DiscoveryIncompatibleError extends Error {
  override readonly name = "DiscoveryIncompatibleError";
  constructor(readonly reasons: string[]) {
    super(`discovery document is not usable by a v${PROTO_VERSION} agent: ${reasons.join("; ")}`);
  }
}

/** Returns the typed document, or throws a DiscoveryIncompatibleError listing every reason. */
export function assertAgentCompatible(doc: unknown): DiscoveryDocument {
  const result = checkAgentCompatibility(doc);
  if (!result.compatible) throw new DiscoveryIncompatibleError(result.reasons);
  return result.document;
}
