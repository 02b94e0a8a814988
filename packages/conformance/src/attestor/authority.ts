/**
 * Bounded authority at the attestor (docs/authority.md): the agent's grants, the refusals of
 * approval requests, and the grant claims an attestation carries.
 */
import { readGrantClaims } from "@proto/protocol";
import { decodeJwt } from "jose";
import { expectError, expectStatus, isObject, jsonObject } from "../checks.js";
import type { HttpResponse } from "../http.js";
import { check, type Probe, type ProbeContext, ProbeFailure, pass } from "../probe.js";
import { newAgentKey } from "./keys.js";
import { expectUnsignedRefused, linkedAgent, send, signedAgentRequest } from "./signed.js";
import { mintOnce, PROBE_AUD } from "./token.js";

const GRANTS_SECTION = "authority.md §Grants at the attestor (the agent's view)";
const APPROVALS_SECTION = "authority.md §Approvals: asking the person";
const CLAIMS_SECTION = "authority.md §The claims a token carries";

/** `reason` may be 1 to 200 characters: one more is refused. */
const REASON_TOO_LONG = "x".repeat(201);
const ISO_8601 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

/** `GET /v1/grants` signed by the linked agent, once per run (the OAuth probe reads it too). */
export const grantsOfLinkedAgent = (context: ProbeContext): Promise<HttpResponse> =>
  context.memo("grants", () => send(context, signedAgentRequest(context, linkedAgent(context), "GET", "/v1/grants")));

/** What is wrong with one entry of the listing, or undefined. */
function grantEntryProblem(entry: unknown): string | undefined {
  if (!isObject(entry)) return "is not an object";
  for (const name of ["grant_id", "aud", "service_url", "scope"]) {
    if (typeof entry[name] !== "string") return `${name} must be a string, got ${JSON.stringify(entry[name])}`;
  }
  if (!URL.canParse(entry.service_url as string)) return `service_url is not a URL: ${String(entry.service_url)}`;
  if (!Array.isArray(entry.authorization_details)) return "authorization_details must be an array";
  for (const name of ["expires_at", "revoked_at", "updated_at"]) {
    const value = entry[name];
    if (value !== null && (typeof value !== "string" || !ISO_8601.test(value) || Number.isNaN(Date.parse(value)))) {
      return `${name} must be an ISO 8601 time or null, got ${JSON.stringify(value)}`;
    }
  }
  // The same reader a service applies to a token's claims: what the agent is shown is what it holds.
  try {
    readGrantClaims({
      grant_id: entry.grant_id,
      scope: entry.scope,
      authorization_details: entry.authorization_details,
    });
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
  return undefined;
}

export const grantsListing: Probe = {
  id: "attestor.grants.listing",
  description: "GET /v1/grants is 401 unsigned; signed by the linked agent, 200 { grants } of well-formed grants",
  section: GRANTS_SECTION,
  async run(context) {
    const unsigned = await context.http.get(`${context.baseUrl}/v1/grants`);
    expectUnsignedRefused(unsigned, "unsigned GET /v1/grants");
    linkedAgent(context, "the unsigned listing was refused as it must be; the signed one ");
    const response = await grantsOfLinkedAgent(context);
    expectStatus(response, 200, "GET /v1/grants signed by the linked agent");
    const body = jsonObject(response, "the grants");
    check(Array.isArray(body.grants), "the body has no grants array", response.exchange);
    for (const [i, entry] of body.grants.entries()) {
      const problem = grantEntryProblem(entry);
      check(problem === undefined, `grants[${i}]: ${problem}`, response.exchange);
    }
    return pass();
  },
};

/** An approval body that is valid but for what `change` does; its service is one nobody can serve. */
const approvalBody = (change: (body: Record<string, unknown>) => void): string => {
  const body: Record<string, unknown> = {
    aud: PROBE_AUD,
    permissions: ["conformance:read"],
    reason: "proto-conformance checks that this request is refused",
  };
  change(body);
  return JSON.stringify(body);
};

/**
 * Every request is refused before anything is created: unsigned, unlinked or malformed; and the
 * service asked about (`*.invalid`) has no document, so even an attestor that let one through
 * could not open a request for a person to answer.
 */
export const approvalRefusals: Probe = {
  id: "attestor.approvals.refusals",
  description:
    "POST /v1/approvals is 401 unsigned or unlinked, 400 invalid_request with a 201-character reason or nothing asked; an unknown approval is 404",
  section: APPROVALS_SECTION,
  async run(context) {
    const url = `${context.baseUrl}/v1/approvals`;
    const valid = approvalBody(() => {});
    const unsigned = await context.http.post(url, valid);
    expectUnsignedRefused(unsigned, "unsigned POST /v1/approvals");
    const unlinked = await send(context, signedAgentRequest(context, newAgentKey(), "POST", "/v1/approvals", valid));
    expectError(unlinked, 401, "unauthorized", "POST /v1/approvals signed by an unlinked key");

    const agent = linkedAgent(context, "the unsigned and unlinked requests were refused as they must be; the rest ");
    const longReason = approvalBody((body) => {
      body.reason = REASON_TOO_LONG;
    });
    const tooLong = await send(context, signedAgentRequest(context, agent, "POST", "/v1/approvals", longReason));
    expectError(tooLong, 400, "invalid_request", "POST /v1/approvals with a 201-character reason");
    const askingNothing = approvalBody((body) => {
      delete body.permissions;
    });
    const nothing = await send(context, signedAgentRequest(context, agent, "POST", "/v1/approvals", askingNothing));
    expectError(nothing, 400, "invalid_request", "POST /v1/approvals asking no permission and no spend limit");
    const unknownId = `apr_conformance${Date.now().toString(36)}`;
    const unknown = await send(context, signedAgentRequest(context, agent, "GET", `/v1/approvals/${unknownId}`));
    expectError(unknown, 404, "not_found", "GET /v1/approvals/{approval_id} of an unknown request");
    return pass();
  },
};

export const tokenGrantClaims: Probe = {
  id: "attestor.token.grant-claims",
  description: "a minted attestation carries no grant claims or well-formed ones (grant_id, scope, spend limits)",
  section: CLAIMS_SECTION,
  async run(context) {
    const { response, jwt } = await mintOnce(context);
    try {
      // Throws on malformed claims, `scope` or `authorization_details` without a `grant_id` among them.
      readGrantClaims(decodeJwt(jwt));
    } catch (error) {
      throw new ProbeFailure(
        `the attestation's grant claims are malformed: ${error instanceof Error ? error.message : String(error)}`,
        response.exchange,
      );
    }
    return pass();
  },
};
