import type { FastifyInstance } from "fastify";
import type { AdjustableClock } from "./clock.js";

const clockBody = {
  type: "object",
  additionalProperties: false,
  properties: { advance_seconds: { type: "number", minimum: 0, maximum: 10 * 365 * 86400 } },
} as const;

/**
 * `/__test/clock`. Registered only when `PROTO_TEST_HOOKS=1`, which the configuration refuses
 * in production: the route does not exist otherwise.
 */
export function registerClockHook(app: FastifyInstance, clock: AdjustableClock): void {
  app.post<{ Body: { advance_seconds?: number } }>(
    "/__test/clock",
    { schema: { body: clockBody } },
    async (request) => {
      if (request.body?.advance_seconds !== undefined) clock.advance(request.body.advance_seconds);
      const now = clock.now();
      return {
        now: new Date(now).toISOString(),
        now_unix: Math.floor(now / 1000),
        offset_seconds: clock.offsetSeconds,
      };
    },
  );
}
