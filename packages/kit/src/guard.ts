/**
 * What a guarded route decides, whatever the framework: the verified agent, a signed agent the route
 * allows, an anonymous caller on an optional route, or the answer that refuses the request. The
 * Fastify, Express and Hono adapters only translate requests and answers around it.
 */
import { attemptedProtocol, protoError } from "@proto/protocol";
import type { KitRequest, KitResponse } from "./http.js";
import type { AgentContext, Kit } from "./kit.js";
import { isJson, MAX_JSON_DEPTH, nestsDeeperThan } from "./request-body.js";
import {
  SignedAgentChallenge,
  type SignedAgentIdentity,
  type SignedAgentPolicy,
  signedAgentIdentity,
  signedAgentRefused,
} from "./signed-agents.js";

export interface RequireAgentOptions {
  /** The rate-limit bucket (default `METHOD /route/pattern`). */
  route?: string;
  /**
   * Optional authentication (upstream §5.8): a request without a signature or an attestation goes
   * through anonymously (`proto` null); one that tries the protocol must pass it (401).
   */
  optional?: boolean;
  /**
   * Callers identified only by a Web Bot Auth signature (a signed agent with no account): `allow`
   * runs the handler with `signedAgent` set and `proto` null; `challenge` answers 403
   * `kit_signature_required` with `Accept-Signature`; `refuse` answers 403
   * `kit_signed_agent_refused`. Default: `allow` on optional routes, `challenge` elsewhere.
   */
  signedAgents?: SignedAgentPolicy;
  /**
   * Permissions the caller must hold (docs/authority.md), each declared in `createKit`'s
   * `permissions` (checked when the route is defined): its token's grant when it carries one, else
   * the declared defaults. A missing one answers 403 `insufficient_permission`.
   */
  permissions?: string[];
}

/**
 * The options of a guard, checked when the route is defined: the adapters call it once, so a
 * permission the service never declared fails at start instead of locking the route.
 */
export function checkGuardOptions(kit: Kit, options: RequireAgentOptions, adapter: string): RequireAgentOptions {
  if (options.permissions === undefined) return options;
  const where = options.route === undefined ? adapter : `${adapter} (route ${options.route})`;
  return { ...options, permissions: [...kit.routePermissions(options.permissions, where)] };
}

/** The outcome of a guarded request: go on with what the handler reads, or answer `response`. */
export type GuardOutcome =
  | { pass: true; proto: AgentContext | null; signedAgent: SignedAgentIdentity | null }
  | { pass: false; response: KitResponse };

/** A JSON body the handler would get nested past `MAX_JSON_DEPTH`: its refusal (400), else undefined. */
function boundedBody(kit: Kit, headers: Headers, request: KitRequest): GuardOutcome | undefined {
  if (request.body === undefined || !isJson(headers) || !nestsDeeperThan(request.body, MAX_JSON_DEPTH))
    return undefined;
  const refusal = protoError("malformed_request", {
    message: `the JSON body nests deeper than ${MAX_JSON_DEPTH} levels`,
  });
  return { pass: false, response: kit.errorResponse(refusal, { headers }) };
}

/**
 * Runs the guard, then checks the route's permissions against what the caller holds (a set
 * lookup on the verified token). `request` builds the kit's view of the request (reading the body may fail: a
 * body too large is answered like any refusal); it is not called for an anonymous caller of an
 * optional route, whose body the guard has no reason to read.
 */
export async function guardRequest(
  kit: Kit,
  headers: Headers,
  route: string,
  options: RequireAgentOptions,
  request: () => KitRequest | Promise<KitRequest>,
): Promise<GuardOutcome> {
  const outcome = await verifiedCaller(kit, headers, route, options, request);
  if (!outcome.pass || options.permissions === undefined) return outcome;
  try {
    kit.requirePermissions(outcome.proto, options.permissions);
  } catch (error) {
    return { pass: false, response: kit.errorResponse(error, { headers }) };
  }
  return outcome;
}

async function verifiedCaller(
  kit: Kit,
  headers: Headers,
  route: string,
  options: RequireAgentOptions,
  request: () => KitRequest | Promise<KitRequest>,
): Promise<GuardOutcome> {
  if (options.optional === true && !attemptedProtocol(headers)) return { pass: true, proto: null, signedAgent: null };
  let kitRequest: KitRequest | undefined;
  try {
    kitRequest = await request();
    const proto = await kit.authenticateRequest(kitRequest, route);
    return boundedBody(kit, headers, kitRequest) ?? { pass: true, proto, signedAgent: null };
  } catch (error) {
    if (error instanceof SignedAgentChallenge) {
      const policy = options.signedAgents ?? (options.optional === true ? "allow" : "challenge");
      if (policy === "allow") {
        const refused = kitRequest === undefined ? undefined : boundedBody(kit, headers, kitRequest);
        return refused ?? { pass: true, proto: null, signedAgent: signedAgentIdentity(error.agent) };
      }
      if (policy === "refuse") return { pass: false, response: kit.errorResponse(signedAgentRefused(), { headers }) };
    }
    return { pass: false, response: kit.errorResponse(error, { headers }) };
  }
}
