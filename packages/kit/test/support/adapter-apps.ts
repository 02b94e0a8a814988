/**
 * The small Express and Hono applications on the kit that the adapter journeys and the fuzz
 * targets run: the kit's routes, the journey's guarded routes (see `adapter-journey.ts`), the JSON
 * not-found and error answers an application of ours gives, and node's refusals before routing in
 * the envelope (`protoClientErrors`).
 */
import { once } from "node:events";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { serve } from "@hono/node-server";
import { agentRoute, createService, protoClientErrors } from "@proto/kit/express";
import { agentRoute as honoAgentRoute, createService as honoService } from "@proto/kit/hono";
import { ProtoError } from "@proto/protocol";
import express, { type Express, type NextFunction, type Request, type Response } from "express";
import { Hono } from "hono";
import type { Kit } from "../../src/index.js";

export interface AdapterApp {
  /** Where the server listens: `http://127.0.0.1:PORT`. */
  url: string;
  close(): Promise<void>;
}

/** The application's own answers to what no route serves, in the envelope like the kit's. */
const notFound = () => new ProtoError("not_found", 404, "no such route").toEnvelope();
const internalError = () => new ProtoError("internal_error", 500, "an unexpected error occurred").toEnvelope();

/**
 * The journey's application on Express: `more` adds the test's own routes (wiring mistakes
 * included) before the not-found and error answers.
 */
export function expressApp(kit: Kit, more?: (app: Express) => void): Express {
  const app = express();
  app.use(createService(kit));
  app.get("/api/whoami", agentRoute(kit), (req, res) => {
    res.json({ did: req.proto?.did, state: req.proto?.account.state });
  });
  app.post("/api/notes", agentRoute(kit), (req, res) => {
    res.json({ did: req.proto?.did, note: req.body, raw: Buffer.from(req.proto?.body ?? []).toString("utf8") });
  });
  app.get("/api/maybe", agentRoute(kit, { optional: true }), (req, res) => {
    res.json({ did: req.proto?.did ?? null });
  });
  app.get(
    "/api/bearer-too",
    (_req, res, next) => {
      res.setHeader("www-authenticate", 'Bearer realm="notes"');
      next();
    },
    agentRoute(kit),
    (req, res) => {
      res.json({ did: req.proto?.did });
    },
  );
  more?.(app);
  app.use((_req: Request, res: Response) => {
    res.status(404).json(notFound());
  });
  // Express's own refusals (a body its parser rejects) keep their 4xx status; the rest is 500.
  app.use((error: { status?: number; message?: string }, _req: Request, res: Response, _next: NextFunction) => {
    const status = error.status ?? 500;
    if (status >= 400 && status < 500) {
      res.status(status).json(new ProtoError("malformed_request", status, error.message ?? "bad request").toEnvelope());
    } else {
      res.status(500).json(internalError());
    }
  });
  return app;
}

/** The journey's application on Hono: `more` adds the test's own routes. */
export function honoApp(kit: Kit, more?: (app: Hono) => void): Hono {
  const app = new Hono();
  app.use(honoService(kit));
  app.get("/api/whoami", honoAgentRoute(kit), (c) =>
    c.json({ did: c.get("proto")?.did, state: c.get("proto")?.account.state }),
  );
  app.post("/api/notes", honoAgentRoute(kit), async (c) => {
    let note: unknown;
    try {
      note = await c.req.json();
    } catch {
      return c.json(new ProtoError("malformed_request", 400, "body is not valid JSON").toEnvelope(), 400);
    }
    // The guard read a clone: the handler reads the body as usual.
    return c.json({ did: c.get("proto")?.did, note, raw: Buffer.from(c.get("proto")?.body ?? []).toString("utf8") });
  });
  app.get("/api/maybe", honoAgentRoute(kit, { optional: true }), (c) => c.json({ did: c.get("proto")?.did ?? null }));
  app.get(
    "/api/bearer-too",
    async (c, next) => {
      c.header("WWW-Authenticate", 'Bearer realm="notes"');
      await next();
    },
    honoAgentRoute(kit),
    (c) => c.json({ did: c.get("proto")?.did }),
  );
  more?.(app);
  app.notFound((c) => c.json(notFound(), 404));
  app.onError((_error, c) => c.json(internalError(), 500));
  return app;
}

async function listening(server: Server): Promise<AdapterApp> {
  if (!server.listening) await once(server, "listening");
  protoClientErrors(server);
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** `app` on a real server (`app.listen`) on 127.0.0.1, at `port` (default any). */
export function startExpress(app: Express, port = 0): Promise<AdapterApp> {
  return listening(app.listen(port, "127.0.0.1"));
}

/** `app` on a real server (`@hono/node-server`) on 127.0.0.1, at `port` (default any). */
export function startHono(app: Hono, port = 0): Promise<AdapterApp> {
  return listening(serve({ fetch: app.fetch, port, hostname: "127.0.0.1" }) as Server);
}
