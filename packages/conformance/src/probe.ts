/**
 * What a probe is and what it answers. A probe checks one rule of the contract against a live
 * deployment; its result says what was sent and what came back when the rule does not hold, so an
 * operator can act on a failure without re-running anything.
 */
import type { HttpClient, HttpExchange } from "./http.js";

export type ProbeStatus = "pass" | "fail" | "skipped";

export interface ProbeOutcome {
  status: ProbeStatus;
  /** Why it failed, or why it was skipped; empty on a pass. */
  message: string;
  /** The request and response that broke the rule (failures only, when there was one). */
  exchange?: HttpExchange;
  /** Something a reader should know about a pass (e.g. a walk stopped at its bound). */
  note?: string;
}

export interface ProbeOptions {
  /** Probes that create something run only when the operator asks for it. */
  write: boolean;
  /** PEM of an Ed25519 private key of an agent the operator linked (attestor mints). */
  agentKeyPem?: string;
  /** The audience DID to mint for. */
  aud?: string;
  /** `{trust_url}` of an attestor that mints for `agentKeyPem` (service mode: an attested account). */
  attestorUrl?: string;
  /** A route of the service and the permission it needs (`--permission-route`). */
  permissionRoute?: PermissionRoute;
  /** The operator says the directory is a read-only mirror (the contract has no way to say it). */
  mirror: boolean;
  /** Page size used to walk the listings, and how many pages at most. */
  pageSize: number;
  maxPages: number;
}

/** `DELETE /notes/x notes:delete`: a request the service refuses unless the caller holds `permission`. */
export interface PermissionRoute {
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  /** Path (and query) on the service's origin. */
  path: string;
  permission: string;
}

export interface ProbeContext {
  /** The URL probed, without a trailing slash: `{trust_url}` or `{registry_url}`. */
  baseUrl: string;
  http: HttpClient;
  options: ProbeOptions;
  /** Seconds since the epoch, for signature parameters; injectable so tests are deterministic. */
  nowSeconds(): number;
  /**
   * Values several probes need (the key set, one mint, the listing walk), computed once per run so
   * a deployment is not asked the same thing many times.
   */
  memo<T>(key: string, compute: () => Promise<T>): Promise<T>;
}

export interface Probe {
  id: string;
  description: string;
  /** The contract section it checks, e.g. `trust.md §GET /.well-known/jwks.json`. */
  section: string;
  /** A probe that creates state on the target runs only with `--write`. */
  writes?: boolean;
  run(context: ProbeContext): Promise<ProbeOutcome>;
}

/** Thrown inside a probe to fail it with the exchange that showed the problem. */
export class ProbeFailure extends Error {
  constructor(
    message: string,
    readonly exchange?: HttpExchange,
  ) {
    super(message);
  }
}

/** Thrown inside a probe (or a memoized helper) when it cannot run here. */
export class ProbeSkip extends Error {}

export const pass = (note?: string): ProbeOutcome => ({ status: "pass", message: "", ...(note ? { note } : {}) });

export function check(condition: unknown, message: string, exchange?: HttpExchange): asserts condition {
  if (!condition) throw new ProbeFailure(message, exchange);
}
