import { setTimeout as sleep } from "node:timers/promises";
import type { FastifyInstance } from "fastify";
import { OUTAGE_RETRY_AFTER_SECONDS } from "./dependency.js";

/**
 * The pause between `/readyz` turning unready and the server closing: real time, not the
 * service clock, since it waits on load balancers' health checks.
 */
export async function drainDelay(seconds: number): Promise<void> {
  if (seconds > 0) await sleep(seconds * 1000);
}

export interface Readiness {
  /** False once shutdown begins, so load balancers stop sending work first. */
  accepting: boolean;
  /** The dependencies (database, Redis when configured) that do not answer now. */
  unavailable(): Promise<string[]>;
  /**
   * More of the answer, asked once the database answered: fields added to it (as `details` when
   * unready), and why the service is not ready yet (undefined: it is). The directory's mirror
   * mode reports its lag here.
   */
  extra?(): { fields: Record<string, unknown>; unready?: string };
}

const statusBody = (value: string) =>
  ({ type: "object", required: ["status"], properties: { status: { type: "string", const: value } } }) as const;
const unavailable = {
  description: "Shutting down, or the database or Redis is unreachable (error code `unavailable`).",
  type: "object",
  properties: { error: { type: "object", properties: { code: { type: "string" }, message: { type: "string" } } } },
} as const;

export function registerHealthRoutes(app: FastifyInstance, readiness: Readiness): void {
  app.get(
    "/healthz",
    {
      schema: {
        summary: "Liveness: the process is up",
        tags: ["operations"],
        response: { 200: { description: "The process answers.", ...statusBody("ok") } },
      },
    },
    async (_request, reply) => reply.header("cache-control", "no-store").send({ status: "ok" }),
  );
  const readySchema = {
    summary: "Readiness: the database (and Redis, when configured) answers and the server is not shutting down",
    tags: ["operations"],
    response: { 200: { description: "Ready for traffic.", ...statusBody("ready") }, 503: unavailable },
  };
  app.get("/readyz", { schema: readySchema }, async (_request, reply) => {
    reply.header("cache-control", "no-store");
    if (!readiness.accepting) {
      return reply.code(503).send({ error: { code: "unavailable", message: "the server is shutting down" } });
    }
    const unavailable = await readiness.unavailable();
    if (unavailable.length > 0) {
      return reply
        .code(503)
        .header("retry-after", String(OUTAGE_RETRY_AFTER_SECONDS))
        .send({
          error: {
            code: "unavailable",
            message: `unreachable: ${unavailable.join(", ")}`,
            details: { unavailable },
          },
        });
    }
    const extra = readiness.extra?.();
    if (extra?.unready !== undefined) {
      return reply.code(503).send({ error: { code: "unavailable", message: extra.unready, details: extra.fields } });
    }
    return { status: "ready", ...extra?.fields };
  });
}
