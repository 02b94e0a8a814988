/**
 * Which attestations a service takes (upstream rule 10): a token goes to a service only when the
 * service's `billing.accepted_attestors` lists the token's `iss`. A service that lists none is
 * not restricted.
 */
import type { Attestation } from "./attestor.js";
import { AuthError } from "./errors.js";

/** Where a service's attestation comes from: one attestor, or the agent's attestors, chosen per service. */
export interface AttestationSource {
  /**
   * An attestation for the service `aud` whose iss `accepted` lists (`undefined`: any). Fails
   * before minting when the iss is known not to fit, and never returns a token that does not fit.
   */
  attestationFor(
    aud: string,
    accepted: readonly string[] | undefined,
    options?: { fresh?: boolean; signal?: AbortSignal },
  ): Promise<Attestation>;
}

/** What a service says it accepts, from its discovery document (`undefined` when it says nothing). */
export function acceptedAttestors(billing: { accepted_attestors?: unknown } | undefined): string[] | undefined {
  const list = billing?.accepted_attestors;
  return Array.isArray(list) ? list.filter((entry): entry is string => typeof entry === "string") : undefined;
}

/** The claims of a JWT, read without verifying it (the agent only reads its own tokens). */
export function claimsOf(jwt: string): Record<string, unknown> | undefined {
  const parts = jwt.split(".");
  if (parts.length !== 3 || parts[1] === undefined) return undefined;
  try {
    const claims: unknown = JSON.parse(Buffer.from(parts[1], "base64url").toString("utf8"));
    return typeof claims === "object" && claims !== null && !Array.isArray(claims)
      ? (claims as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

/** The `iss` claim of a JWT, read without verifying it (the agent only routes its own tokens). */
export function issuerOf(jwt: string): string | undefined {
  const iss = claimsOf(jwt)?.iss;
  return typeof iss === "string" ? iss : undefined;
}

export function accepts(accepted: readonly string[] | undefined, iss: string | undefined): boolean {
  return accepted === undefined || (iss !== undefined && accepted.includes(iss));
}

const listOf = (items: readonly string[]) => (items.length === 0 ? "none" : items.join(", "));

/** How an attestor shows in messages: `proto-trust (https://trust.example)`. */
export function describeAttestor(attestor: { attestor_url: string; iss?: string | undefined }): string {
  return attestor.iss === undefined
    ? `${attestor.attestor_url} (iss not learned yet)`
    : `${attestor.iss} (${attestor.attestor_url})`;
}

/** No attestor of the agent fits the service: raised before any mint, naming both lists. */
export function notAccepted(
  aud: string,
  accepted: readonly string[],
  attestors: readonly { attestor_url: string; iss?: string | undefined }[],
): AuthError {
  return new AuthError(
    "attestor_not_accepted",
    `${aud} accepts attestations from ${listOf(accepted)}; this agent's attestors: ${listOf(
      attestors.map(describeAttestor),
    )}. Link one it accepts with \`proto trust link --attestor URL\``,
  );
}

/** The minted token's iss does not fit the service: the token is not sent. */
export function tokenNotAccepted(
  aud: string,
  accepted: readonly string[],
  attestorUrl: string,
  iss: string | undefined,
): AuthError {
  return new AuthError(
    "attestor_not_accepted",
    `${attestorUrl} issued a token with iss ${iss ?? "(none)"}, and ${aud} accepts attestations from ${listOf(
      accepted,
    )} only: the token was not sent`,
  );
}
