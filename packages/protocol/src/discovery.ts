/**
 * The discovery document (`https://{host}/.well-known/proto`): the normative JSON schema the
 * directory validates against, the stricter rule an agent applies before talking to a service, and
 * how an endpoint value (a path, or an absolute URL) becomes the URL a request goes to.
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

/**
 * Each endpoint value is a path on the service host or an absolute URL (upstream §4.3). A path
 * resolves against the discovery document's origin; an absolute URL stands as given.
 */
export interface DiscoveryEndpoints {
  accounts: string;
  owner_invitation: string;
  claim_page: string;
  claim_completion: string;
  key_rotation?: string;
  /** Owner re-key (upstream §8.2): owner session only. */
  key_rekey?: string;
  /** Owner revocation (upstream §8.4): owner session only. */
  key_revocation?: string;
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

/**
 * Where the service's MCP server answers (our extension: upstream agents ignore it). Each value is
 * a path on the service host or an absolute https URL, resolved as an endpoint is
 * (`resolveEndpoint`); requests to it carry an OAuth access token, not a signature.
 */
export interface DiscoveryMcp {
  /** The MCP endpoint (Streamable HTTP). */
  url: string;
  /** Its RFC 9728 protected resource metadata. */
  resource_metadata?: string;
  [unknownKey: string]: unknown;
}

/**
 * One permission a service declares (our extension, docs/authority.md). Unknown members are kept
 * and ignored, so later fields do not break older readers.
 */
export interface DiscoveryPermission {
  /** One line for people (1-200 characters): what the permission lets an agent do. */
  description: string;
  /** Granted at sign-up (absent: false). */
  default?: boolean;
  /** Approving it needs a phishing-resistant ceremony, a passkey (absent: false). */
  phishing_resistant?: boolean;
  /** Only on a spending permission: the ISO 4217 code its amounts are in, in minor units. */
  currency?: string;
  [unknownKey: string]: unknown;
}

/** Permission name (`notes:read`) to its declaration; at most MAX_PERMISSIONS. */
export type DiscoveryPermissions = Record<string, DiscoveryPermission>;

/** The most permissions a document declares. */
export const MAX_PERMISSIONS = 64;
/** The longest permission name. */
export const MAX_PERMISSION_NAME_LENGTH = 64;
/**
 * A permission name: lowercase colon-separated segments. Every such name is also an RFC 6749 scope
 * token (no space, quote or backslash), so it can stand in `scope` as it is.
 */
export const PERMISSION_NAME = /^[a-z][a-z0-9_.-]*(:[a-z][a-z0-9_.-]*)*$/;

/** Whether `name` may name a permission (pattern and length). */
export function isPermissionName(name: string): boolean {
  return name.length <= MAX_PERMISSION_NAME_LENGTH && PERMISSION_NAME.test(name);
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
  /** The MCP endpoint, when the service has one. */
  mcp?: DiscoveryMcp;
  x402?: DiscoveryX402;
  /** The permissions an agent may be granted here, by name. */
  permissions?: DiscoveryPermissions;
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
let ajv: Ajv2020 | undefined;

/** Compiling costs milliseconds, so it happens once, on first use, not at import. */
function validator(): ValidateFunction<DiscoveryDocument> {
  if (compiled === undefined) {
    // allErrors so a publisher sees every problem at once; the schema's size bounds and the
    // fetcher's body cap keep the extra work linear and small.
    // verbose for `parentSchema`, which tells the endpoint alternatives apart (ALTERNATIVES).
    ajv = new Ajv2020({ allErrors: true, strict: true, verbose: true });
    // Under NodeNext the CommonJS default import is `module.exports`; the plugin sits on `.default`.
    addFormats.default(ajv, ["uri"]);
    compiled = ajv.compile<DiscoveryDocument>(DISCOVERY_SCHEMA);
  }
  return compiled;
}

/** The schema's `permissions` member alone, compiled once from the same schema. */
function permissionsValidator(): ValidateFunction<DiscoveryPermissions> {
  validator();
  const validate = ajv?.getSchema<DiscoveryPermissions>(`${DISCOVERY_SCHEMA_ID}#/$defs/permissions`);
  if (validate === undefined) throw new Error("discovery schema has no $defs/permissions");
  return validate;
}

/**
 * A hostile document can carry thousands of bad entries; a publisher fixing it needs the first few,
 * and wording every one would cost more than the validation itself.
 */
export const MAX_REPORTED_ERRORS = 20;

/**
 * Validates a parsed discovery document against the normative schema, plus the one rule the schema
 * cannot spell: an absolute endpoint URL must be one a URL parser accepts (a port above 65535 or
 * an IPv4 address such as 1.2.3.999 passes any regular expression). Never throws. An invalid
 * document reports its first MAX_REPORTED_ERRORS problems.
 */
export function validateDiscoveryDocument(doc: unknown): DiscoveryValidationResult {
  const validate = validator();
  if (validate(doc)) {
    const errors = unparsableEndpoints(doc);
    return errors.length === 0 ? { valid: true, document: doc } : { valid: false, errors };
  }
  return { valid: false, errors: readableErrors(validate.errors ?? []) };
}

export type DiscoveryPermissionsValidationResult =
  | { valid: true; permissions: DiscoveryPermissions }
  | { valid: false; errors: DiscoveryValidationError[] };

/**
 * Validates a `permissions` member on its own (what a service configures before its document is
 * built), by the same schema rules and in the same words as validateDiscoveryDocument: error paths
 * start at `/permissions`. Never throws.
 */
export function validateDiscoveryPermissions(value: unknown): DiscoveryPermissionsValidationResult {
  const validate = permissionsValidator();
  if (validate(value)) return { valid: true, permissions: value };
  const errors = (validate.errors ?? []).map((error) => ({
    ...error,
    instancePath: `/permissions${error.instancePath}`,
  }));
  return { valid: false, errors: readableErrors(errors) };
}

function readableErrors(all: ErrorObject[]): DiscoveryValidationError[] {
  // A member of the wrong type is told just that, not also that no alternative matched.
  const wrongType = new Set(all.filter((error) => error.keyword === "type").map((error) => error.instancePath));
  return (
    all
      .filter((error) => !ALTERNATIVES.has(error.parentSchema))
      // A bad member name is told once, by its `propertyNames` error, not once per failed rule.
      .filter((error) => (error as { propertyName?: string }).propertyName === undefined)
      .filter((error) => error.keyword !== "anyOf" || !wrongType.has(error.instancePath))
      .slice(0, MAX_REPORTED_ERRORS)
      .map(toValidationError)
  );
}

const ENDPOINT_KEYS = [
  "accounts",
  "owner_invitation",
  "claim_page",
  "claim_completion",
  "key_rotation",
  "key_rekey",
  "key_revocation",
] as const;

const MCP_KEYS = ["url", "resource_metadata"] as const;

function unparsableEndpoints(doc: DiscoveryDocument): DiscoveryValidationError[] {
  const errors: DiscoveryValidationError[] = [];
  const check = (value: unknown, path: string) => {
    if (typeof value === "string" && !value.startsWith("/") && !canParse(value)) {
      errors.push({ path, message: `${fieldName(path)}: must be a valid URL` });
    }
  };
  for (const key of ENDPOINT_KEYS) check(doc.endpoints[key], `/endpoints/${key}`);
  for (const key of MCP_KEYS) check(doc.mcp?.[key], `/mcp/${key}`);
  return errors;
}

function canParse(value: string): boolean {
  try {
    new URL(value);
    return true;
  } catch {
    return false;
  }
}

const DEFS = DISCOVERY_SCHEMA.$defs as Record<string, Readonly<Record<string, unknown>>>;
const defOf = (name: string) => DEFS[name] as Readonly<Record<string, unknown>>;

/**
 * An endpoint is a path or a URL (`anyOf`), and each alternative fails in its own words ("must
 * match pattern ..." twice). The publisher is told once what the member may be, by the `anyOf`.
 * Errors are told apart by the schema object that failed (Ajv's `verbose` `parentSchema`): Ajv
 * compiles a `$ref` with a `$ref` inside as a function of its own, so `schemaPath` alone does not
 * say which definition an `anyOf` error belongs to.
 */
const ALTERNATIVES = new Set<unknown>([
  defOf("servicePath"),
  defOf("httpsUrl"),
  ...(defOf("claimPage").anyOf as unknown[]),
]);
const PATH_OR_HTTPS =
  'must be a path on the service host (one leading "/") or an absolute https URL (no user name or password, no fragment, no spaces or control characters)';
const ENDPOINT_MESSAGES = new Map<unknown, string>([
  [defOf("signedEndpoint"), PATH_OR_HTTPS],
  [defOf("serviceUrl"), PATH_OR_HTTPS],
  [defOf("claimPage"), 'must be a full URI or a path on the service host (one leading "/")'],
]);

// Messages for constraints whose generic wording ("must match pattern ...") would not help a publisher.
const SCHEMA_PATH_MESSAGES: Record<string, string> = {
  "#/properties/service_did/pattern": "must be a did:web or did:key DID",
  "#/$defs/permission/properties/description/pattern":
    "must be one line of text, not blank (no line break or control character)",
  "#/$defs/permission/properties/currency/pattern": "must be an ISO 4217 currency code (three capital letters, EUR)",
};

const PERMISSION_NAME_RULE = `lowercase segments separated by colons, like notes:read, at most ${MAX_PERMISSION_NAME_LENGTH} characters`;

function toValidationError(error: ErrorObject): DiscoveryValidationError {
  if (error.keyword === "propertyNames" && error.parentSchema === defOf("permissions")) {
    const name = String((error.params as { propertyName: string }).propertyName);
    return {
      path: `${error.instancePath}/${escapePointerToken(name)}`,
      message: `${fieldName(error.instancePath)}: ${quote(name)} is not a permission name (${PERMISSION_NAME_RULE})`,
    };
  }
  if (error.keyword === "required") {
    const missing = String((error.params as { missingProperty: string }).missingProperty);
    const path = `${error.instancePath}/${escapePointerToken(missing)}`;
    return { path, message: `missing required field ${fieldName(path)}` };
  }
  return { path: error.instancePath, message: `${fieldName(error.instancePath)}: ${describe(error)}` };
}

function describe(error: ErrorObject): string {
  const special =
    SCHEMA_PATH_MESSAGES[error.schemaPath] ??
    (error.keyword === "anyOf" ? ENDPOINT_MESSAGES.get(error.parentSchema) : undefined);
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

/** The endpoints an agent signs its requests to. `claim_page` is a page for people, never signed. */
export const SIGNED_ENDPOINTS = ["accounts", "owner_invitation", "claim_completion", "key_rotation"] as const;
export type SignedEndpoint = (typeof SIGNED_ENDPOINTS)[number];

/** An endpoint value that is neither a path on the service host nor an absolute URL. */
export class InvalidEndpointError extends Error {
  override readonly name = "InvalidEndpointError";
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const UNSAFE_ENDPOINT_CHARACTER = /[\u0000-\u001f\u007f\\]/;

/**
 * The URL an endpoint value of a discovery document names. A path (one leading "/") resolves
 * against the origin of the discovery document, never against its path; an absolute URL stands as
 * given, whatever host it names: that is the URL a request goes to and the `@target-uri` an agent
 * signs. `discovery` is the discovery URL, or its origin, or any URL on that origin.
 *
 * Throws InvalidEndpointError for anything else: a relative value without a leading "/", "//host",
 * a backslash or a control character (a URL parser reads "/\x" and "/<TAB>/x" as another host),
 * user info, or text no URL parser accepts. The signed endpoints of a document that passed
 * validateDiscoveryDocument always resolve (its claim page may not, when it carries user info).
 */
export function resolveEndpoint(discovery: string | URL, value: string): URL {
  const origin = new URL(discovery).origin;
  if (typeof value !== "string" || value.length === 0) {
    throw new InvalidEndpointError("an endpoint must be a non-empty string");
  }
  if (UNSAFE_ENDPOINT_CHARACTER.test(value)) {
    throw new InvalidEndpointError(`endpoint ${quote(value)} has a backslash or a control character`);
  }
  if (value.startsWith("/")) {
    if (value.startsWith("//")) {
      throw new InvalidEndpointError(`endpoint ${quote(value)} names a host: use an absolute URL`);
    }
    return new URL(value, origin);
  }
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidEndpointError(
      `endpoint ${quote(value)} is neither a path on the service host nor an absolute URL`,
    );
  }
  if (url.username !== "" || url.password !== "") {
    throw new InvalidEndpointError(`endpoint ${quote(value)} carries a user name or password`);
  }
  return url;
}

/** Enough of a value to recognise it; a hostile one can be long. */
function quote(value: string): string {
  return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value);
}
