import type { FastifyInstance } from "fastify";
import type { KeyRing } from "./keys.js";
import type { TrustService } from "./service.js";

const bindingBody = {
  type: "object",
  required: ["binding_id"],
  properties: { binding_id: { type: "string", minLength: 1, maxLength: 128 } },
} as const;

/** The attestor's `/__test/*` routes of decisions.md; registered only with `PROTO_TEST_HOOKS=1`. */
export function registerTrustTestHooks(app: FastifyInstance, service: TrustService, keys: KeyRing): void {
  app.post<{ Body: { req_id: string; email: string } }>(
    "/__test/link/confirm",
    {
      schema: {
        body: {
          type: "object",
          required: ["req_id", "email"],
          properties: { req_id: { type: "string", maxLength: 128 }, email: { type: "string", maxLength: 320 } },
        },
      },
    },
    async (request) => {
      const humanId = await service.findOrCreateHumanByEmail(request.body.email);
      const { binding_id } = await service.confirmLink(request.body.req_id, humanId);
      return { binding_id };
    },
  );
  app.post<{ Body: { binding_id: string } }>(
    "/__test/bindings/revoke",
    { schema: { body: bindingBody } },
    async (request) => {
      const result = await service.revokeBinding(request.body.binding_id, undefined);
      return { binding_id: request.body.binding_id, revoked_at: result.revoked_at };
    },
  );
  app.post<{ Body: { binding_id: string; aud: string; suspended?: boolean } }>(
    "/__test/bindings/suspend",
    {
      schema: {
        body: {
          type: "object",
          required: ["binding_id", "aud"],
          properties: {
            binding_id: { type: "string", minLength: 1, maxLength: 128 },
            aud: { type: "string", minLength: 1, maxLength: 2048 },
            suspended: { type: "boolean" },
          },
        },
      },
    },
    async (request) => {
      const { binding_id, aud, suspended = true } = request.body;
      const result = await service.setServiceSuspended(binding_id, undefined, aud, suspended);
      return {
        binding_id,
        aud,
        suspended_at: result.suspended_at === null ? null : new Date(result.suspended_at).toISOString(),
      };
    },
  );
  app.post<{ Body: { binding_id: string } }>(
    "/__test/bindings/expire",
    { schema: { body: bindingBody } },
    async (request) => {
      await service.expireBinding(request.body.binding_id);
      return { binding_id: request.body.binding_id, expired: true };
    },
  );
  app.post<{ Body: { email: string } }>(
    "/__test/humans/clear-verifications",
    {
      schema: {
        body: { type: "object", required: ["email"], properties: { email: { type: "string", maxLength: 320 } } },
      },
    },
    async (request) => {
      await service.clearVerifications(request.body.email);
      return { email: request.body.email, cleared: true };
    },
  );
  app.post("/__test/keys/rotate", async () => {
    const rotation = await keys.rotate();
    return {
      kid: rotation.kid,
      published_at: new Date(rotation.publish_at).toISOString(),
      signs_from: new Date(rotation.activate_at).toISOString(),
    };
  });
}
