/**
 * The agent's side of bounded authority (docs/authority.md): requests signed with the agent's key
 * (RFC 9421, as `POST /v1/token`), answered in the attestor's envelope.
 */
import { spendLimitDetail } from "@proto/protocol";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { ERROR_ENVELOPE } from "../../platform/openapi.js";
import type { TrustService } from "../service.js";
import type { TrustSettings } from "../settings.js";
import {
  type AgentApprovalView,
  APPROVAL_POLL_INTERVAL_SECONDS,
  type Approval,
  type AskDeps,
  approvalForAgent,
  askApproval,
} from "./approvals.js";
import type { Grant } from "./grants.js";

export interface AgentAuthorityRoutesOptions {
  service: TrustService;
  settings: TrustSettings;
  /** `{trust_url}`: where approval pages are. */
  publicUrl: string;
  /** What asking for an approval needs (the binding check is the service's). */
  approvals: Omit<AskDeps, "bindingInForce">;
}

export const GRANTS_PATH = "/v1/grants";
export const APPROVALS_PATH = "/v1/approvals";

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

/** The 201 answer to `POST /v1/approvals`. */
export function approvalCreatedView(approval: Approval, publicUrl: string) {
  return {
    approval_id: approval.id,
    approval_url: `${publicUrl}/approvals/${approval.id}`,
    status: approval.status,
    expires_at: new Date(approval.expiresAt).toISOString(),
    interval: APPROVAL_POLL_INTERVAL_SECONDS,
  };
}

/** An approval as the agent that asked polls it. */
export function approvalView({ approval, granted }: AgentApprovalView) {
  return {
    approval_id: approval.id,
    status: approval.status,
    expires_at: new Date(approval.expiresAt).toISOString(),
    ...(granted === undefined
      ? {}
      : {
          grant: {
            grant_id: granted.grantId,
            scope: granted.permissions.join(" "),
            authorization_details: granted.spendLimits.map(spendLimitDetail),
          },
        }),
  };
}

const APPROVAL_STATUS = {
  type: "string",
  enum: ["pending", "approved", "declined", "expired"],
  description: "`expired`: the person did not answer within 10 minutes; nothing changed.",
} as const;

const SIGNED_ERRORS =
  "401 `invalid_signature`, `expired_signature`, `replayed_nonce`, `unauthorized` (not linked); 403 `binding_revoked`; 410 `binding_expired`; 429 `rate_limited` with `Retry-After`";

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

  const deps: AskDeps = { ...options.approvals, bindingInForce: (agentDid) => service.bindingInForce(agentDid) };

  app.post(
    APPROVALS_PATH,
    {
      schema: {
        summary: "Ask the person for more",
        description: `Signed by the agent's key (RFC 9421) for \`{trust_url}/v1/approvals\`, covering @method, @target-uri and content-digest. The agent asks its person for permissions and spend limits at one service; the person answers on \`approval_url\` (they are also told by e-mail and on their account page). The request waits 10 minutes; poll \`GET /v1/approvals/{approval_id}\` every \`interval\` seconds (docs/authority.md).

Body: \`aud\` (the service's DID), \`service_url\` (its origin; default https:// and the did:web's host), \`permissions\` (names the service declares), \`spend_limits\` (\`{ permission, currency, per_transaction?, per_period?, period? }\`, amounts in minor units, the currency the permission declares), \`reason\` (1 to 200 characters, one line: shown to the person as the agent's words). At least one permission or limit; a limit also asks for its permission.

Errors: 400 \`invalid_request\` (what is wrong; also a permission the service does not declare, a service_url whose document names another service, or a service whose discovery document cannot be read); ${SIGNED_ERRORS} (10 a minute per agent, 30 an hour per person); 503 \`service_unavailable\` with \`Retry-After\` when every one of the attestor's fetches of services' documents is busy.`,
        tags: ["authority"],
        security: [{ httpSignature: [] }],
        response: {
          201: {
            type: "object",
            required: ["approval_id", "approval_url", "status", "expires_at", "interval"],
            properties: {
              approval_id: { type: "string" },
              approval_url: { type: "string", description: "The page where the person answers (their session)." },
              status: APPROVAL_STATUS,
              expires_at: { type: "string", format: "date-time" },
              interval: { type: "integer", description: "Seconds to wait between polls." },
            },
          },
          "4xx": ERROR_ENVELOPE,
          503: ERROR_ENVELOPE,
        },
      },
    },
    async (request, reply) => {
      const { agentDid, body } = await service.verifyAgentRequest(
        signedRequest(request),
        APPROVALS_PATH,
        request.ip,
        settings.rateLimits.approvalPoll,
      );
      const approval = await askApproval(deps, agentDid, body, request.ip);
      return reply.code(201).send(approvalCreatedView(approval, options.publicUrl));
    },
  );

  app.get<{ Params: { approval_id: string } }>(
    `${APPROVALS_PATH}/:approval_id`,
    {
      schema: {
        summary: "An approval request's answer",
        description: `Signed by the agent's key (RFC 9421) for \`{trust_url}/v1/approvals/{approval_id}\`, covering @method and @target-uri. Only the agent that asked sees its request (another's is 404 \`not_found\`). When approved, \`grant\` is what the approval granted: the next \`POST /v1/token\` for the service carries it.

Errors: 404 \`not_found\`; ${SIGNED_ERRORS}.`,
        tags: ["authority"],
        security: [{ httpSignature: [] }],
        params: {
          type: "object",
          required: ["approval_id"],
          properties: { approval_id: { type: "string", minLength: 1, maxLength: 128 } },
        },
        response: {
          200: {
            type: "object",
            required: ["approval_id", "status", "expires_at"],
            properties: {
              approval_id: { type: "string" },
              status: APPROVAL_STATUS,
              expires_at: { type: "string", format: "date-time" },
              grant: {
                type: "object",
                required: ["grant_id", "scope", "authorization_details"],
                properties: {
                  grant_id: GRANT_VIEW_SCHEMA.properties.grant_id,
                  scope: GRANT_VIEW_SCHEMA.properties.scope,
                  authorization_details: GRANT_VIEW_SCHEMA.properties.authorization_details,
                },
              },
            },
          },
          "4xx": ERROR_ENVELOPE,
        },
      },
    },
    async (request) => {
      // The signature is over the URL as the agent sent it (its path and any query).
      const { agentDid } = await service.verifyAgentRequest(
        signedRequest(request),
        request.url,
        request.ip,
        settings.rateLimits.approvalPoll,
      );
      return approvalView(await approvalForAgent(deps, agentDid, request.params.approval_id));
    },
  );
}
