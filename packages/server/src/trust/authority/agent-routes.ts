/**
 * The agent's side of bounded authority (docs/authority.md): requests signed with the agent's key
 * (RFC 9421, as `POST /v1/token`), answered in the attestor's envelope.
 */
import { spendLimitDetail } from "@proto/protocol";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { ERROR_ENVELOPE } from "../../platform/openapi.js";
import type { TrustService } from "../service.js";
import type { TrustSettings } from "../settings.js";
import type { Grant } from "./grants.js";

export interface AgentAuthorityRoutesOptions {
  service: TrustService;
  settings: TrustSettings;
}

export const GRANTS_PATH = "/v1/grants";

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/** A grant as the agent reads it. */
export function grantView(grant: Grant) {
  return {
    grant_id: grant.id,
    aud: grant.aud,
    service_url: grant.serviceUrl,
    scope: grant.permissions.join(" "),
    authorization_details: grant.spendLimits.map(spendLimitDetail),
    expires_at: iso(grant.expiresAt),
    revoked_at: iso(grant.revokedAt),
    updated_at: iso(grant.updatedAt),
  };
}

const nullableTime = { type: ["string", "null"], format: "date-time" } as const;

export const GRANT_VIEW_SCHEMA = {
  type: "object",
  required: ["grant_id", "aud", "scope", "authorization_details", "expires_at", "revoked_at", "updated_at"],
  properties: {
    grant_id: { type: "string" },
    aud: { type: "string" },
    service_url: { type: "string" },
    scope: { type: "string", description: "The granted permission names, space-separated." },
    authorization_details: {
      type: "array",
      items: { type: "object", additionalProperties: true },
      description: "RFC 9396 entries; `spend_limit` ones are the spend limits.",
    },
    expires_at: nullableTime,
    revoked_at: nullableTime,
    updated_at: nullableTime,
  },
} as const;

/** The raw request the verifier reads: the exact bytes signed. */
export function signedRequest(request: FastifyRequest) {
  const body = Buffer.isBuffer(request.body) ? request.body : null;
  return {
    method: request.method,
    url: `http://${request.headers.host ?? "localhost"}${request.url}`,
    headers: request.headers,
    body,
  };
}

export async function agentAuthorityRoutes(app: FastifyInstance, options: AgentAuthorityRoutesOptions): Promise<void> {
  const { service, settings } = options;
  // Signatures cover the exact body bytes: keep them raw.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", { parseAs: "buffer" }, (_request, body, done) => done(null, body));

  app.get(
    GRANTS_PATH,
    {
      schema: {
        summary: "The agent's grants",
        description:
          "Signed by the agent's key (RFC 9421) for `{trust_url}/v1/grants`, covering @method and @target-uri, with created, expires and nonce. What the agent's person granted it, one entry per service (docs/authority.md).\n\nErrors: 401 `invalid_signature`, `expired_signature`, `replayed_nonce`, `unauthorized` (not linked); 403 `binding_revoked`; 410 `binding_expired`; 429 `rate_limited` with `Retry-After`.",
        tags: ["authority"],
        security: [{ httpSignature: [] }],
        response: {
          200: {
            type: "object",
            required: ["grants"],
            properties: { grants: { type: "array", items: GRANT_VIEW_SCHEMA } },
          },
          "4xx": ERROR_ENVELOPE,
        },
      },
    },
    async (request) => {
      const { agentDid } = await service.verifyAgentRequest(
        signedRequest(request),
        GRANTS_PATH,
        request.ip,
        settings.rateLimits.approvalPoll,
      );
      return { grants: (await service.agentGrants(agentDid)).map(grantView) };
    },
  );
}
