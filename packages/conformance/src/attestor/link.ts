/** Link start validation and poll probes (trust.md §POST /v1/link/start, §POST /v1/link/poll). */
import { expectError, expectStatus, jsonObject } from "../checks.js";
import { check, type Probe, type ProbeContext, pass } from "../probe.js";
import { newAgentKey, signReqId } from "./keys.js";

const START_SECTION = "trust.md §POST /v1/link/start";
const POLL_SECTION = "trust.md §POST /v1/link/poll";

/**
 * A link start whose body is invalid in one way must be 400 `invalid_request` (trust.md §Errors:
 * "Body failed schema validation") and creates nothing, so these run without --write.
 */
function invalidStart(
  id: string,
  description: string,
  body: (context: ProbeContext) => Record<string, unknown>,
): Probe {
  return {
    id,
    description,
    section: `${START_SECTION}, §Errors`,
    async run(context) {
      const response = await context.http.post(`${context.baseUrl}/v1/link/start`, body(context));
      expectError(response, 400, "invalid_request", "POST /v1/link/start");
      return pass();
    },
  };
}

export const startMissingFields = invalidStart(
  "attestor.link.start.missing-fields",
  "a link start without agent_did and agent_pubkey_b64 is 400 invalid_request",
  () => ({ agent_label: "proto-conformance" }),
);

export const startBadPubkey = invalidStart(
  "attestor.link.start.bad-pubkey",
  "a link start whose agent_pubkey_b64 is not an Ed25519 key is 400 invalid_request",
  () => ({ agent_did: newAgentKey().did, agent_pubkey_b64: "bm90IGEga2V5" }),
);

export const startDidMismatch = invalidStart(
  "attestor.link.start.did-mismatch",
  "a link start whose did:key does not derive from agent_pubkey_b64 is 400 invalid_request",
  () => ({ agent_did: newAgentKey().did, agent_pubkey_b64: newAgentKey().publicKeyB64 }),
);

export const startCallbackNotLoopback = invalidStart(
  "attestor.link.start.callback-not-loopback",
  "a link start with a non-loopback callback_url is 400 invalid_request",
  () => {
    const agent = newAgentKey();
    return {
      agent_did: agent.did,
      agent_pubkey_b64: agent.publicKeyB64,
      callback_url: "https://conformance.invalid/callback",
    };
  },
);

/**
 * A label over the contract's 80 characters, on an otherwise valid body: only the label can be
 * what is refused. (A server that ignored the limit would open a link request that simply expires.)
 */
export const startLabelTooLong = invalidStart(
  "attestor.link.start.label-too-long",
  "a link start whose agent_label is over 80 characters is 400 invalid_request",
  () => {
    const agent = newAgentKey();
    return { agent_did: agent.did, agent_pubkey_b64: agent.publicKeyB64, agent_label: "x".repeat(81) };
  },
);

/** A valid start creates a link request that stays until it expires: a write. */
export const startValid: Probe = {
  id: "attestor.link.start.valid",
  description: "a valid link start is 200 with req_id (lr_), link_url, poll_url and expires_in 1800",
  section: START_SECTION,
  writes: true,
  async run(context) {
    const agent = newAgentKey();
    const response = await context.http.post(`${context.baseUrl}/v1/link/start`, {
      agent_did: agent.did,
      agent_pubkey_b64: agent.publicKeyB64,
      agent_label: "proto-conformance",
    });
    expectStatus(response, 200, "POST /v1/link/start");
    const body = jsonObject(response, "the link request");
    check(
      typeof body.req_id === "string" && body.req_id.startsWith("lr_"),
      "req_id must start with lr_",
      response.exchange,
    );
    check(typeof body.link_url === "string", "link_url must be a string", response.exchange);
    check(
      body.poll_url === `${context.baseUrl}/v1/link/poll`,
      `poll_url must be ${context.baseUrl}/v1/link/poll`,
      response.exchange,
    );
    check(body.expires_in === 1800, "expires_in must be 1800", response.exchange);
    // The request just made is pending: its first poll says so.
    const polled = await context.http.post(`${context.baseUrl}/v1/link/poll`, {
      req_id: body.req_id,
      sig_b64: signReqId(agent, body.req_id),
    });
    expectStatus(polled, 200, "POST /v1/link/poll of the new request");
    check(
      jsonObject(polled, "the poll").state === "pending",
      "a new link request must poll as pending",
      polled.exchange,
    );
    return pass();
  },
};

export const pollUnknown: Probe = {
  id: "attestor.link.poll.unknown",
  description: "a signed poll of an unknown req_id is 404 not_found",
  section: `${POLL_SECTION}, §Errors`,
  async run(context) {
    const agent = newAgentKey();
    const reqId = `lr_conformance${Date.now().toString(36)}unknown`;
    const response = await context.http.post(`${context.baseUrl}/v1/link/poll`, {
      req_id: reqId,
      sig_b64: signReqId(agent, reqId),
    });
    expectError(response, 404, "not_found", "POST /v1/link/poll of an unknown req_id");
    return pass();
  },
};
