import type { FastifyInstance, FastifyRequest } from "fastify";
import { ApiError } from "../platform/errors.js";
import { rateLimitHook } from "../platform/http.js";
import type { RateLimiter } from "../platform/rate-limit.js";
import type { KeyRing } from "./keys.js";
import type { LinkStartInput, TrustService } from "./service.js";
import type { TrustSettings } from "./settings.js";

export interface TrustRoutesOptions {
  service: TrustService;
  keys: KeyRing;
  limiter: RateLimiter;
  settings: TrustSettings;
  /** The signed-in human behind a request, when there is one (the session arrives with sign-in). */
  humanOf: (request: FastifyRequest) => Promise<string | undefined>;
}

const linkStartBody = {
  type: "object",
  required: ["agent_did", "agent_pubkey_b64"],
  properties: {
    agent_did: { type: "string", minLength: 1, maxLength: 2048 },
    agent_pubkey_b64: { type: "string", minLength: 1, maxLength: 128 },
    agent_label: { type: "string", maxLength: 80 },
    callback_url: { type: "string", minLength: 1, maxLength: 2048 },
  },
} as const;

const linkPollBody = {
  type: "object",
  required: ["req_id", "sig_b64"],
  properties: {
    req_id: { type: "string", minLength: 1, maxLength: 128 },
    sig_b64: { type: "string", minLength: 1, maxLength: 256 },
  },
} as const;

export const JWKS_CACHE_CONTROL = "public, max-age=300, stale-while-revalidate=900";

/** The attestor's agent-facing API of spec `trust.md`. */
export async function trustRoutes(app: FastifyInstance, options: TrustRoutesOptions): Promise<void> {
  const { service, keys, limiter, settings } = options;
  const limits = settings.rateLimits;

  app.get("/.well-known/jwks.json", { onRequest: rateLimitHook(limiter, limits.read) }, async (_request, reply) => {
    await keys.fresh();
    return reply
      .header("cache-control", JWKS_CACHE_CONTROL)
      .header("access-control-allow-origin", "*")
      .send({ keys: keys.publicKeys() });
  });

  app.post<{ Body: LinkStartInput }>(
    "/v1/link/start",
    { schema: { body: linkStartBody }, onRequest: rateLimitHook(limiter, limits.linkStart) },
    async (request) => service.linkStart(request.body),
  );

  app.post<{ Body: { req_id: string; sig_b64: string } }>(
    "/v1/link/poll",
    { schema: { body: linkPollBody }, onRequest: rateLimitHook(limiter, limits.linkPoll) },
    async (request) => service.linkPoll(request.body.req_id, request.body.sig_b64),
  );

  // The token request is verified over its exact body bytes, so this route keeps them raw.
  await app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser("*", { parseAs: "buffer" }, (_request, body, done) => done(null, body));
    scope.post("/v1/token", { onRequest: rateLimitHook(limiter, limits.token) }, async (request) => {
      const body = Buffer.isBuffer(request.body) ? request.body : undefined;
      const host = request.headers.host ?? "localhost";
      return service.mint({
        method: request.method,
        url: `http://${host}${request.url}`,
        headers: request.headers,
        body: body ?? null,
      });
    });
  });

  app.delete<{ Params: { id: string } }>(
    "/v1/bindings/:id",
    // A bucket of its own: an agent polling from the same address must not lock its human out.
    { onRequest: rateLimitHook(limiter, { ...limits.read, name: "trust.revoke" }) },
    async (request) => {
      const humanId = await options.humanOf(request);
      if (humanId === undefined) {
        throw new ApiError(401, "unauthorized", "revoking a binding needs the person's signed-in session");
      }
      return service.revokeBinding(request.params.id, humanId);
    },
  );
}
