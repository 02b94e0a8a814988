/** Challenge validation and mirror probes (directory.md §POST /v1/listings/challenge). */
import { randomBytes } from "node:crypto";
import { expectError, isObject } from "../checks.js";
import { check, type Probe, ProbeSkip, pass } from "../probe.js";

const SECTION = "directory.md §POST /v1/listings/challenge";
/** A mirror refuses every write, valid or not: its refusal is what the mirror probe checks. */
const MIRROR_SKIP = "the target is a mirror (--mirror): it takes no challenge requests";

/** An invalid challenge request is refused before anything is issued: read-only. */
function invalidChallenge(id: string, description: string, body: Record<string, unknown>, section = SECTION): Probe {
  return {
    id,
    description,
    section: `${section}; directory.md §Errors`,
    async run(context) {
      if (context.options.mirror) throw new ProbeSkip(MIRROR_SKIP);
      const response = await context.http.post(`${context.baseUrl}/v1/listings/challenge`, body);
      expectError(response, 400, "invalid_request", "POST /v1/listings/challenge");
      return pass();
    },
  };
}

export const challengeMissingUrl = invalidChallenge(
  "directory.challenge.missing-url",
  "a challenge request without discovery_url is 400 invalid_request",
  {},
);

export const challengeNotHttps = invalidChallenge(
  "directory.challenge.not-https",
  "a challenge request for an http:// discovery URL is 400 invalid_request",
  { discovery_url: "http://proto-conformance.invalid/.well-known/proto" },
);

export const challengeWrongPath = invalidChallenge(
  "directory.challenge.wrong-path",
  "a challenge request for a URL other than https://host/.well-known/proto is 400 invalid_request",
  { discovery_url: "https://proto-conformance.invalid/somewhere/else" },
  "decisions.md §Directory 1",
);

/**
 * The contract says anyone may run a mirror "implementing the same contract" but not how a
 * mirror says it is one, so the operator says so with --mirror. A mirror must refuse writes with
 * the error envelope and issue nothing.
 */
export const mirrorReadOnly: Probe = {
  id: "directory.mirror.read-only",
  description: "a read-only mirror refuses a well-formed challenge request with an error envelope",
  section: "directory.md §What the service does; §Errors",
  async run(context) {
    if (!context.options.mirror) throw new ProbeSkip("not a mirror (pass --mirror when the target is one)");
    const response = await context.http.post(`${context.baseUrl}/v1/listings/challenge`, {
      discovery_url: "https://proto-conformance.invalid/.well-known/proto",
    });
    check(
      response.status >= 400 && response.status < 500,
      `a mirror must refuse writes with a 4xx, got ${response.status}`,
      response.exchange,
    );
    const body = response.json;
    check(
      isObject(body) &&
        isObject(body.error) &&
        typeof body.error.code === "string" &&
        typeof body.error.message === "string",
      "the refusal is not the error envelope { error: { code, message } }",
      response.exchange,
    );
    return pass();
  },
};

/** A valid challenge is issued and kept for 30 minutes, and counts against the host's cap: a write. */
export const challengeValid: Probe = {
  id: "directory.challenge.valid",
  description: "a valid challenge request is 200 with challenge_token (ch_ + 22), proof_url and expires_at",
  section: SECTION,
  writes: true,
  async run(context) {
    if (context.options.mirror) throw new ProbeSkip(MIRROR_SKIP);
    // A host of its own per run: the contract caps active challenges per host (10 an hour).
    const host = `proto-conformance-${randomBytes(6).toString("hex")}.invalid`;
    const response = await context.http.post(`${context.baseUrl}/v1/listings/challenge`, {
      discovery_url: `https://${host}/.well-known/proto`,
    });
    check(response.status === 200, `expected 200, got ${response.status}`, response.exchange);
    const body = response.json;
    check(isObject(body), "the challenge is not a JSON object", response.exchange);
    check(
      typeof body.challenge_token === "string" && /^ch_[A-Za-z0-9_-]{22}$/.test(body.challenge_token),
      "challenge_token must be ch_ followed by 22 url-safe base64 characters",
      response.exchange,
    );
    check(
      body.proof_url === `https://${host}/.well-known/proto-registry-proof`,
      `proof_url must be https://${host}/.well-known/proto-registry-proof`,
      response.exchange,
    );
    const expires = typeof body.expires_at === "string" ? Date.parse(body.expires_at) : Number.NaN;
    check(!Number.isNaN(expires), "expires_at must be an RFC 3339 time", response.exchange);
    const minutes = (expires - context.nowSeconds() * 1000) / 60_000;
    // 30 minutes after issuance, give or take the two clocks' difference.
    check(
      minutes > 25 && minutes <= 35,
      `expires_at must be 30 minutes out, is ${minutes.toFixed(1)}`,
      response.exchange,
    );
    return pass();
  },
};
