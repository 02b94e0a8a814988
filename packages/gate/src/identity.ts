/**
 * The identity headers the gate adds to what it forwards: one family, `Proto-Gate-*`, that the
 * application reads instead of verifying anything itself. Every header of the family that arrives
 * from the client is removed before anything else, so the application sees only the gate's.
 *
 * With a secret configured the gate also signs them (`Proto-Gate-Signature`), for applications
 * that cannot listen on loopback only: HMAC-SHA256 over the method, the request-target, a timestamp
 * and every `proto-gate-*` header (see docs/gate.md, "Trusting the headers").
 */
import { createHmac } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";

export const IDENTITY_PREFIX = "proto-gate-";

export const IDENTITY_HEADERS = {
  /** Who called: `agent`, `signed-agent` (Web Bot Auth, no account), `person` (a bearer token of a person's client), `anonymous`. */
  caller: "proto-gate-caller",
  /** How: `signature`, `signature+attestation`, `web-bot-auth`, `web-bot-auth+attestation`, `bearer`, `none`. */
  via: "proto-gate-via",
  account: "proto-gate-account",
  accountState: "proto-gate-account-state",
  agentDid: "proto-gate-agent-did",
  /** The owner's pairwise subject at this service, once an owner who signed in with an attestor claimed the account. */
  ownerSubject: "proto-gate-owner-subject",
  /** The attestation's issuer (`proto-trust`), on attested requests and bearer tokens. */
  attestor: "proto-gate-attestor",
  /** The person's pairwise pseudonym at this service (the attestation's `sub_h`, a token's `sub`). */
  personSubject: "proto-gate-person-subject",
  /** The strongest verification the attestor asserts (`email`, `phone`, `passkey`, ...). */
  verification: "proto-gate-verification",
  /** Space-separated permissions the caller holds here. */
  permissions: "proto-gate-permissions",
  /** The grant the permissions come from, when the attestation or token carries one. */
  grant: "proto-gate-grant",
  /** The `Signature-Agent` of a Web Bot Auth caller. */
  signatureAgent: "proto-gate-signature-agent",
  signature: "proto-gate-signature",
} as const;

export type Identity = Partial<Record<Exclude<keyof typeof IDENTITY_HEADERS, "signature">, string>>;

/** Removes every `proto-gate-*` header the client sent. */
export function stripIdentity(headers: IncomingHttpHeaders): void {
  for (const name of Object.keys(headers)) {
    if (name.startsWith(IDENTITY_PREFIX)) delete headers[name];
  }
}

function hasControlCharacter(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const code = value.charCodeAt(i);
    if (code < 0x20 || code === 0x7f) return true;
  }
  return false;
}

/** The headers of `identity`, by their lower-case names (values checked to be single-line). */
export function identityHeaders(identity: Identity): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [key, value] of Object.entries(identity) as [keyof Identity, string | undefined][]) {
    if (value === undefined || value === "") continue;
    // Values come from verified tokens and records, but a header is no place to find out otherwise.
    if (hasControlCharacter(value)) continue;
    headers[IDENTITY_HEADERS[key]] = value;
  }
  return headers;
}

/**
 * `Proto-Gate-Signature: t=<unix seconds>, v1=<hex HMAC-SHA256>` over the lines
 * `<t>\n<METHOD>\n<request-target>\n` then `<name>:<value>\n` for each identity header, sorted by name.
 */
export function signIdentity(
  secret: string,
  method: string,
  target: string,
  headers: Record<string, string>,
  nowSeconds: number,
): string {
  const hmac = createHmac("sha256", secret);
  hmac.update(`${nowSeconds}\n${method}\n${target}\n`);
  for (const name of Object.keys(headers).sort()) hmac.update(`${name}:${headers[name]}\n`);
  return `t=${nowSeconds}, v1=${hmac.digest("hex")}`;
}
