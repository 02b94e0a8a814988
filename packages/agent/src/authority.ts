/**
 * Bounded authority on the agent's side (docs/authority.md, "The agent's side"): what a token
 * grants, and the typed refusal of a service that wants more than the person granted.
 */
import {
  AUTHORITY_ERRORS,
  type AuthorityErrorCode,
  type AuthorityGrant,
  findProtoChallenge,
  isPermissionName,
  MAX_PERMISSIONS,
  readGrantClaims,
  SPEND_PERIODS,
  type SpendPeriod,
} from "@proto/protocol";
import { claimsOf } from "./accepted.js";
import { AgentError, ServerError, type ServerErrorInit } from "./errors.js";
import { errorFromResponse, type HttpResponse, normaliseBaseUrl } from "./http.js";

/** What an attestation says, read without verifying it (the agent explains its own tokens). */
export interface TokenExplanation {
  /** The service's DID. */
  aud: string | undefined;
  /** The attestor's issuer name. */
  iss: string | undefined;
  /** Unix seconds. */
  exp: number | undefined;
  /** How the person proved who they are (`email`, `passkey`...). */
  verification: string | undefined;
  /**
   * The grant the token carries. Undefined when it carries none: the service applies its default
   * permissions and allows no spending.
   */
  grant: AuthorityGrant | undefined;
}

/** Far above any attestation the attestor mints; a bound on what is decoded. */
const MAX_TOKEN_LENGTH = 16 * 1024;

/**
 * Decodes an attestation: audience, issuer, expiry, verification and the grant it carries
 * (`readGrantClaims`). No signature check: this reads the agent's own token to tell a person what
 * it allows. Throws `AgentError` `invalid_token` when it is not a JWT, `invalid_attestation` when
 * its grant claims are malformed (a service would refuse it so).
 */
export function explainToken(jwt: string): TokenExplanation {
  const claims = jwt.length <= MAX_TOKEN_LENGTH ? claimsOf(jwt) : undefined;
  if (claims === undefined) throw new AgentError("usage", "invalid_token", "this is not an attestation (a JWT)");
  let grant: AuthorityGrant | undefined;
  try {
    grant = readGrantClaims(claims);
  } catch (error) {
    throw new AgentError(
      "server",
      "invalid_attestation",
      `the token's grant claims are malformed (${(error as Error).message}): services refuse it`,
    );
  }
  const text = (value: unknown) => (typeof value === "string" ? value : undefined);
  return {
    aud: text(claims.aud),
    iss: text(claims.iss),
    exp: typeof claims.exp === "number" ? claims.exp : undefined,
    verification: text(claims.verification),
    grant,
  };
}

/** What a spend refusal says may still be spent (`error.details` of `spend_limit_exceeded`). */
export interface SpendShortfall {
  permission: string;
  currency: string;
  /** Which limit refused the spend. */
  limit: "per_transaction" | "per_period";
  /** What may still be spent in one transaction now, in minor units of `currency`. */
  remaining: number;
  period?: SpendPeriod;
}

export interface AuthorityRefusal {
  /** The permissions the request lacks (`insufficient_permission`). */
  missing: string[];
  /** The limit that refused a spend (`spend_limit_exceeded`). */
  spend?: SpendShortfall | undefined;
  /** `{trust_url}` of the attestor the service says can widen the grant. */
  attestor?: string | undefined;
  /** The service's DID: the grant's audience. */
  audience?: string | undefined;
}

/**
 * A service refused a signed request because the person has not granted enough: 403
 * `insufficient_permission` (what is `missing`) or `spend_limit_exceeded` (the `spend` limit and
 * what remains). The agent asks the person through `attestor` (`AttestorClient.requestApproval`).
 */
export class AuthorityError extends ServerError {
  override name = "AuthorityError";
  override readonly code: AuthorityErrorCode;
  readonly missing: string[];
  readonly spend: SpendShortfall | undefined;
  readonly attestor: string | undefined;
  readonly audience: string | undefined;

  constructor(init: ServerErrorInit & { code: AuthorityErrorCode }, refusal: AuthorityRefusal) {
    super(init);
    this.code = init.code;
    this.missing = refusal.missing;
    this.spend = refusal.spend;
    this.attestor = refusal.attestor;
    this.audience = refusal.audience;
  }
}

const isAuthorityCode = (code: unknown): code is AuthorityErrorCode =>
  typeof code === "string" && Object.hasOwn(AUTHORITY_ERRORS, code);

/**
 * The typed refusal in a service's answer: a 403 whose `Proto` challenge or error envelope says
 * `insufficient_permission` or `spend_limit_exceeded`; undefined for any other answer. What is
 * missing and the attestor come from the challenge's `permissions` and `attestor` when it has
 * them, else from `error.details`; values not of the contract's shape are left out.
 */
export function authorityRefusal(response: HttpResponse): AuthorityError | undefined {
  if (response.status !== 403) return undefined;
  const challenge = findProtoChallenge(response.headers.get("www-authenticate"));
  let found: AuthorityError | undefined;
  errorFromResponse(response, (init) => {
    const code = isAuthorityCode(challenge?.error) ? challenge.error : init.code;
    if (!isAuthorityCode(code)) return new ServerError(init);
    const details = init.details ?? {};
    const missing = permissionList(challenge?.permissions) ?? permissionList(details.missing) ?? [];
    const attestor = attestorUrl(challenge?.attestor) ?? attestorUrl(details.attestor);
    const audience = typeof details.audience === "string" ? details.audience : challenge?.realm;
    found = new AuthorityError(
      { ...init, code, message: init.code === code ? init.message : AUTHORITY_ERRORS[code].message },
      { missing, spend: code === "spend_limit_exceeded" ? shortfall(details) : undefined, attestor, audience },
    );
    return found;
  });
  return found;
}

function permissionList(value: unknown): string[] | undefined {
  if (!Array.isArray(value) || value.length === 0 || value.length > MAX_PERMISSIONS) return undefined;
  const names = value.filter((name): name is string => typeof name === "string" && isPermissionName(name));
  return names.length === value.length ? [...new Set(names)] : undefined;
}

/** An attestor URL a service named, when it is one the agent would talk to (`normaliseBaseUrl`'s rule). */
function attestorUrl(value: unknown): string | undefined {
  if (typeof value !== "string" || value.length > 2048) return undefined;
  try {
    return normaliseBaseUrl(value, "attestor");
  } catch {
    return undefined;
  }
}

function shortfall(details: Record<string, unknown>): SpendShortfall | undefined {
  const { permission, currency, limit, remaining, period } = details;
  if (typeof permission !== "string" || !isPermissionName(permission)) return undefined;
  if (typeof currency !== "string" || !/^[A-Z]{3}$/.test(currency)) return undefined;
  if (limit !== "per_transaction" && limit !== "per_period") return undefined;
  if (typeof remaining !== "number" || !Number.isSafeInteger(remaining) || remaining < 0) return undefined;
  const known = SPEND_PERIODS.find((each) => each === period);
  return { permission, currency, limit, remaining, ...(known === undefined ? {} : { period: known }) };
}
