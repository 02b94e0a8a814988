/**
 * Requests an agent signs at the attestor (RFC 9421, `keyid` its did:key: `POST /v1/token` and
 * the agent's bounded-authority routes), and the refusal of one that is not signed.
 */
import { signRequest } from "@proto/protocol";
import { expectError, isObject } from "../checks.js";
import type { HttpResponse } from "../http.js";
import { type ProbeContext, ProbeSkip } from "../probe.js";
import { type AgentKey, agentKeyFromPem } from "./keys.js";

export interface SignedAgentRequest {
  method: string;
  url: string;
  body?: string;
  headers: Record<string, string>;
}

/** `{trust_url}{path}` signed by `agent`; a body is JSON. Built apart from sending, so it can be sent twice. */
export function signedAgentRequest(
  context: ProbeContext,
  agent: AgentKey,
  method: "GET" | "POST",
  path: string,
  body?: string,
): SignedAgentRequest {
  const url = `${context.baseUrl}${path}`;
  const signed = signRequest(
    { method, url, ...(body === undefined ? {} : { body }) },
    { keyid: agent.did, privateKey: agent.privateKey, created: context.nowSeconds() },
  );
  return {
    method,
    url,
    ...(body === undefined ? {} : { body }),
    headers: { ...(body === undefined ? {} : { "content-type": "application/json" }), ...signed.headers },
  };
}

export const send = (context: ProbeContext, request: SignedAgentRequest): Promise<HttpResponse> =>
  context.http.request(request.method, request.url, {
    headers: request.headers,
    ...(request.body === undefined ? {} : { body: request.body }),
  });

/**
 * An unsigned request to a signed route: 401. trust.md names `unauthorized` for a missing
 * credential, decisions.md `invalid_signature` for an unparsable signature: an absent one may be
 * read either way, so both are accepted.
 */
export function expectUnsignedRefused(response: HttpResponse, what: string): void {
  const code = isObject(response.json) && isObject(response.json.error) ? response.json.error.code : undefined;
  expectError(response, 401, code === "invalid_signature" ? "invalid_signature" : "unauthorized", what);
}

/** The operator's linked agent (`--agent-key`), or a skip saying what is missing. */
export function linkedAgent(context: ProbeContext, skipped = ""): AgentKey {
  const { agentKeyPem } = context.options;
  if (agentKeyPem === undefined) {
    throw new ProbeSkip(`${skipped}needs --agent-key FILE (a linked agent's Ed25519 key)`);
  }
  const agent = agentKeyFromPem(agentKeyPem);
  if (typeof agent === "string") throw new ProbeSkip(`${skipped}${agent}`);
  return agent;
}
