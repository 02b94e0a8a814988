import type { JSONWebKeySet, JWTPayload } from "jose";
import { type AuthorityGrant, readGrantClaims } from "./authority.js";
import { isBase64url } from "./base64url.js";
import { type ProtoError, protoError } from "./errors.js";
import { verifyEdDsaJwt } from "./jwt.js";
import { type KeyLookup, KeySetUnavailableError, RemoteKeySet, staticKeySet } from "./key-set.js";

export const ATTESTATION_ISSUER = "proto-trust";
export const ATTESTATION_HEADER = "proto-attestation";
export const MAX_ATTESTATION_LIFETIME_SECONDS = 900;
export const VERIFICATION_METHODS = ["email", "oauth", "payment"] as const;
export type VerificationMethod = (typeof VERIFICATION_METHODS)[number];
/** A pseudonym is an HMAC-SHA256 in base64url: 43 characters; 22 (128 bits) is the floor. */
const MIN_SUB_H_LENGTH = 22;
const MAX_JWT_LENGTH = 8192;
const REQUIRED_CLAIMS = ["iss", "aud", "sub", "iat", "exp"] as const;

export interface AttestationVerifierOptions {
  /** The attestor key set: a URL, a `RemoteKeySet`, a key set in memory, or a jose key lookup. */
  keySet: string | URL | RemoteKeySet | JSONWebKeySet | KeyLookup;
  /** Accepted `iss` values (default `["proto-trust"]`). */
  issuers?: readonly string[];
  /** Tolerance for an `iat` slightly in the future, in seconds (default 60). */
  skewSeconds?: number;
  /** A service's own lower bound on `iat` (Unix seconds), to bound the effect of revocation. */
  minIssuedAt?: number | (() => number);
  /** Milliseconds since the epoch; an injectable clock. */
  now?: () => number;
}

export interface AttestationExpectations {
  /** The verifying service's DID: `aud` must equal it. */
  audience: string;
  /** The DID that signed the request: `sub` must equal it. */
  agentDid: string;
}

export interface VerifiedAttestation {
  issuer: string;
  audience: string;
  agentDid: string;
  issuedAt: number;
  expiresAt: number;
  /** The strongest verification the human has, when the attestor asserts one we know. */
  verification: VerificationMethod | undefined;
  /** The pairwise pseudonym of the human (present whenever `verification` is). */
  subH: string | undefined;
  kid: string | undefined;
  /**
   * What the person granted the agent at this service (`grant_id`, `scope`,
   * `authorization_details`), or undefined when the token carries no grant: the service's default
   * permissions apply, and no spending (docs/authority.md).
   */
  grant: AuthorityGrant | undefined;
}

export interface AttestationVerifier {
  /**
   * Verifies a `Proto-Attestation` JWT; throws a `ProtoError` `invalid_attestation`, or
   * `KeySetUnavailableError` when the issuer's key set cannot be fetched.
   */
  verify(jwt: string, expected: AttestationExpectations): Promise<VerifiedAttestation>;
}

function invalid(message: string, cause?: unknown): ProtoError {
  return protoError("invalid_attestation", { message, cause });
}

function toLookup(keySet: AttestationVerifierOptions["keySet"]): KeyLookup {
  if (typeof keySet === "function") return keySet;
  if (keySet instanceof RemoteKeySet) return keySet.getKey;
  if (typeof keySet === "string" || keySet instanceof URL) return new RemoteKeySet(keySet).getKey;
  return staticKeySet(keySet);
}

function checkClaims(payload: JWTPayload, expected: AttestationExpectations): void {
  if (typeof payload.aud !== "string" || payload.aud !== expected.audience) {
    throw invalid("attestation was issued for another audience");
  }
  if (typeof payload.sub !== "string" || payload.sub !== expected.agentDid) {
    throw invalid("attestation subject is not the signing agent");
  }
  if (!Number.isInteger(payload.iat) || !Number.isInteger(payload.exp)) {
    throw invalid("attestation must carry integer iat and exp");
  }
  const lifetime = (payload.exp as number) - (payload.iat as number);
  if (lifetime < 0 || lifetime > MAX_ATTESTATION_LIFETIME_SECONDS) {
    throw invalid(`attestation lifetime exceeds ${MAX_ATTESTATION_LIFETIME_SECONDS} seconds`);
  }
  const subH = payload.sub_h;
  if (payload.verification !== undefined && subH === undefined) {
    throw invalid("attestation asserts a verification without sub_h");
  }
  if (subH !== undefined && (typeof subH !== "string" || !isBase64url(subH, MIN_SUB_H_LENGTH))) {
    throw invalid(`sub_h must be base64url of at least ${MIN_SUB_H_LENGTH} characters`);
  }
}

/** Attestation verification under the verifier rules of spec `trust.md`. */
export function createAttestationVerifier(options: AttestationVerifierOptions): AttestationVerifier {
  const lookup = toLookup(options.keySet);
  const issuers = [...(options.issuers ?? [ATTESTATION_ISSUER])];
  const skew = options.skewSeconds ?? 60;
  const now = options.now ?? Date.now;

  return {
    async verify(jwt, expected) {
      if (typeof jwt !== "string" || jwt.length === 0 || jwt.length > MAX_JWT_LENGTH) {
        throw invalid("attestation is missing or too long");
      }
      const nowMs = now();
      let payload: JWTPayload;
      let kid: string | undefined;
      try {
        const result = await verifyEdDsaJwt(jwt, lookup, {
          issuers,
          requiredClaims: REQUIRED_CLAIMS,
          nowSeconds: Math.floor(nowMs / 1000),
        });
        payload = result.payload;
        kid = result.header.kid;
      } catch (error) {
        // The issuer's keys could not be had: nothing is known about this attestation.
        if (error instanceof KeySetUnavailableError) throw error;
        throw invalid(`attestation rejected: ${error instanceof Error ? error.message : "invalid token"}`, error);
      }
      checkClaims(payload, expected);
      const iat = payload.iat as number;
      if (iat > Math.floor(nowMs / 1000) + skew) throw invalid("attestation is issued in the future");
      const floor = typeof options.minIssuedAt === "function" ? options.minIssuedAt() : options.minIssuedAt;
      if (floor !== undefined && iat < floor) throw invalid("attestation was issued before the accepted bound");
      const verification = VERIFICATION_METHODS.find((m) => m === payload.verification);
      let grant: AuthorityGrant | undefined;
      try {
        grant = readGrantClaims(payload);
      } catch (error) {
        throw invalid(`attestation grant: ${(error as Error).message}`, error);
      }
      return {
        issuer: payload.iss as string,
        audience: payload.aud as string,
        agentDid: payload.sub as string,
        issuedAt: iat,
        expiresAt: payload.exp as number,
        verification,
        subH: typeof payload.sub_h === "string" ? payload.sub_h : undefined,
        kid,
        grant,
      };
    },
  };
}
