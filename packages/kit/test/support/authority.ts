/**
 * What the bounded-authority suites share: a service that declares permissions (one of them a
 * spending one), the kit's options for it on a suite's clock and attestor key, and agents' signed
 * requests over real HTTP to wherever the service listens, signed for its public URL.
 */
import { signRequest } from "@proto/protocol";
import type { KitOptions } from "../../src/index.js";
import { type Answer, answer } from "./attestor.js";
import type { Agent, TestClock } from "./env.js";
import type { GrantAttestor } from "./grants.js";

export const ORIGIN = "https://notes.example";
export const SERVICE_DID = "did:web:notes.example";

export const PERMISSIONS = {
  "notes:read": { description: "Read your notes", default: true },
  "notes:delete": { description: "Delete your notes", phishing_resistant: true },
  purchase: { description: "Pay for pinned notes", currency: "EUR" },
};

/** The kit of a notes service on `clock`, accepting `grants`' attestor; `database` default in memory. */
export function authorityKitOptions(
  grants: GrantAttestor,
  clock: TestClock,
  overrides: Partial<KitOptions> = {},
): KitOptions {
  return {
    publicUrl: ORIGIN,
    database: "sqlite::memory:",
    discovery: { service_did: SERVICE_DID, recipient_types: ["oidc"] },
    permissions: PERMISSIONS,
    attestors: grants.config(),
    now: clock.now,
    webBotAuth: false,
    ...overrides,
  };
}

export interface SignedCall {
  body?: unknown;
  attestation?: string;
  headers?: Record<string, string>;
}

/** A request of `agent` to the service at `base` (where it listens), signed for `ORIGIN`. */
export async function signedCall(
  base: string,
  agent: Agent,
  clock: TestClock,
  method: string,
  path: string,
  options: SignedCall = {},
): Promise<Answer> {
  const body = options.body === undefined ? undefined : JSON.stringify(options.body);
  const signed = signRequest(
    { method, url: ORIGIN, target: path, body },
    { keyid: agent.did, privateKey: agent.privateKey, created: clock.nowSeconds() },
  );
  const headers: Record<string, string> = { ...signed.headers, ...options.headers };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (options.attestation !== undefined) headers["proto-attestation"] = options.attestation;
  return answer(await fetch(`${base}${path}`, { method, headers, ...(body === undefined ? {} : { body }) }));
}
