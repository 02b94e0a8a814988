import type { RateLimitRule } from "../platform/rate-limit.js";

/** The spec's limits and lifetimes for the attestor; each can be changed by the operator. */
export interface TrustSettings {
  linkTtlSeconds: number;
  bindingInactivitySeconds: number;
  attestationTtlSeconds: number;
  /** Minimum time a new key is published before it signs (spec: at least 900 s). */
  keyPublishLeadSeconds: number;
  /** Scheduled rotation: a new key once the newest is this old. */
  keyRotationSeconds: number;
  /** How often each replica reloads the key list (a rotation elsewhere is seen within it). */
  keyRefreshSeconds: number;
  /**
   * The most agent keys the Web Bot Auth directory lists (the most recently published); verifiers
   * bound what they fetch, and one response must stay small enough to serve on every read.
   */
  wbaDirectoryMaxKeys: number;
  rateLimits: {
    linkStart: RateLimitRule;
    linkStartPerAgent: RateLimitRule;
    linkPoll: RateLimitRule;
    token: RateLimitRule;
    tokenPerBinding: RateLimitRule;
    read: RateLimitRule;
    /** RFC 7591 registrations per client address (MCP clients register once per install). */
    oauthRegister: RateLimitRule;
    /** Authorization requests (`GET /oidc/authorize`) per client address. */
    oauthAuthorize: RateLimitRule;
    /** Client metadata documents fetched because of one client address (cached ones are free). */
    oauthClientFetch: RateLimitRule;
    /** Approval requests (`POST /v1/approvals`) per agent. */
    approval: RateLimitRule;
    /** Approval requests per person, whichever of their agents asks. */
    approvalPerPerson: RateLimitRule;
    /** Approval polls (`GET /v1/approvals/{id}`) and grant listings per client address. */
    approvalPoll: RateLimitRule;
    /** Services' discovery documents fetched because of one client address (cached ones are free). */
    serviceFetch: RateLimitRule;
  };
  /** Outbound fetches of client metadata documents (https `client_id`s), for all addresses together. */
  clientMetadata: {
    /** Fetches out at once; past it a request that needs one more is answered 503. */
    maxConcurrentFetches: number;
    /** A document that could not be fetched or read is answered as such this long, not fetched again. */
    failureCacheSeconds: number;
  };
}

export const MAX_ATTESTATION_TTL_SECONDS = 900;

/** `TRUST_WBA_DIRECTORY_MAX_KEYS` at most: about 1.5 MB of JSON, rebuilt on every uncached read. */
export const WBA_DIRECTORY_MAX_KEYS_LIMIT = 10_000;

export const DEFAULT_TRUST_SETTINGS: TrustSettings = {
  linkTtlSeconds: 1800,
  bindingInactivitySeconds: 90 * 86400,
  attestationTtlSeconds: 900,
  keyPublishLeadSeconds: 900,
  keyRotationSeconds: 30 * 86400,
  keyRefreshSeconds: 30,
  wbaDirectoryMaxKeys: 1000,
  rateLimits: {
    linkStart: { name: "trust.link_start", limit: 30, windowSeconds: 60 },
    linkStartPerAgent: { name: "trust.link_start_agent", limit: 20, windowSeconds: 3600 },
    linkPoll: { name: "trust.link_poll", limit: 60, windowSeconds: 60 },
    token: { name: "trust.token", limit: 60, windowSeconds: 60 },
    // A quota, not an abuse brake: counted by the mint's own statement, in the database beside the
    // binding (exact across replicas and restarts), never by the rate limiter.
    tokenPerBinding: { name: "trust.token_binding", limit: 10_000, windowSeconds: 86400 },
    read: { name: "trust.read", limit: 600, windowSeconds: 60 },
    oauthRegister: { name: "trust.oauth_register", limit: 20, windowSeconds: 3600 },
    // A sign-in through a client is two or three authorization requests, and one document fetch
    // for a client not seen in the last minute or more.
    oauthAuthorize: { name: "trust.oauth_authorize", limit: 120, windowSeconds: 60 },
    oauthClientFetch: { name: "trust.oauth_client_fetch", limit: 20, windowSeconds: 60 },
    approval: { name: "trust.approval", limit: 10, windowSeconds: 60 },
    approvalPerPerson: { name: "trust.approval_person", limit: 30, windowSeconds: 3600 },
    approvalPoll: { name: "trust.approval_poll", limit: 60, windowSeconds: 60 },
    serviceFetch: { name: "trust.service_fetch", limit: 20, windowSeconds: 60 },
  },
  clientMetadata: { maxConcurrentFetches: 50, failureCacheSeconds: 60 },
};
