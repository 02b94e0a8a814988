import type { FastifyInstance } from "fastify";

export interface Readiness {
  /** False once shutdown begins, so load balancers stop sending work first. */
  accepting: boolean;
  check(): Promise<boolean>;
}

export function registerHealthRoutes(app: FastifyInstance, readiness: Readiness): void {
  app.get("/healthz", async (_request, reply) => reply.header("cache-control", "no-store").send({ status: "ok" }));
  app.get("/readyz", async (_request, reply) => {
    reply.header("cache-control", "no-store");
    if (!readiness.accepting) {
      return reply.code(503).send({ error: { code: "unavailable", message: "the server is shutting down" } });
    }
    if (!(await readiness.check())) {
      return reply.code(503).send({ error: { code: "unavailable", message: "the database is unreachable" } });
    }
    return { status: "ready" };
  });
}
