/**
 * The Express adapter (`@proto/kit/express`, Express 5). Express is an optional peer dependency:
 * only its types are used here, and the application is the one you build.
 *
 * The guard reads the request body itself, exactly as it arrived (a signature covers those bytes),
 * so it must come before any body parser on its routes; it then sets `req.body` as `express.json()`
 * (JSON content types) or `express.raw()` (any other) would.
 */
import type { IncomingMessage } from "node:http";
import { protoError } from "@proto/protocol";
import type { NextFunction, Request, RequestHandler, Response } from "express";
import { kitError } from "./errors.js";
import { checkGuardOptions, guardRequest, type RequireAgentOptions } from "./guard.js";
import { type KitRequest, type KitResponse, mergeChallenges, publicUrlFor, toHeaders } from "./http.js";
import type { AgentContext, Kit } from "./kit.js";
import { isJson } from "./request-body.js";
import type { SignedAgentIdentity } from "./signed-agents.js";

export type { RequireAgentOptions } from "./guard.js";
/** Node's refusals before routing in the envelope: `protoClientErrors(server)` on the server you listen with. */
export { protoClientErrors } from "./node-server.js";

// Express declares its request type in this global namespace.
declare global {
  namespace Express {
    interface Request {
      /** The verified agent of the request (set by `agentRoute`), null for an anonymous or signed-agent caller. */
      proto?: AgentContext | null;
      /** A caller identified by Web Bot Auth alone, on routes whose `signedAgents` policy is `allow`; else null. */
      signedAgent?: SignedAgentIdentity | null;
    }
  }
}

/** The exact body bytes of requests the adapter has read (the stream cannot be read twice). */
const rawBodies = new WeakMap<IncomingMessage, Buffer>();

function headersOf(req: IncomingMessage): Headers {
  return toHeaders(req.headers as Record<string, string | string[] | undefined>);
}

/** Whether the request says it carries a body (a parser that ran before us leaves no other trace). */
function declaresBody(headers: Headers): boolean {
  const length = headers.get("content-length");
  return headers.has("transfer-encoding") || (length !== null && length.trim() !== "0");
}

/**
 * Reads the whole body, at most `maxBytes` (413 `payload_too_large` beyond, declared or sent). A
 * refused body is left to drain, unread, and the answer closes the connection.
 */
function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const declared = Number(req.headers["content-length"] ?? "0");
  if (Number.isFinite(declared) && declared > maxBytes) return Promise.reject(kitError("payload_too_large"));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let total = 0;
    const stop = () => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
      req.off("close", onError);
    };
    const onData = (chunk: Buffer | string) => {
      const buffer = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
      total += buffer.length;
      if (total > maxBytes) {
        // The stream keeps flowing without listeners: the rest is discarded, never buffered.
        stop();
        reject(kitError("payload_too_large"));
        return;
      }
      chunks.push(buffer);
    };
    const onEnd = () => {
      stop();
      resolve(Buffer.concat(chunks));
    };
    const onError = () => {
      stop();
      reject(protoError("malformed_request", { message: "the request body could not be read" }));
    };
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onError);
    // A client gone before the end: no body to verify (and nobody to answer).
    req.on("close", onError);
  });
}

/**
 * The exact body bytes of `req`, read once (undefined when there are none). A body some parser
 * consumed before is a wiring mistake: its bytes are gone, so no signature over them can be checked.
 */
async function exactBody(req: IncomingMessage, maxBytes: number): Promise<Buffer | undefined> {
  let body = rawBodies.get(req);
  if (body === undefined) {
    if (req.readableDidRead || req.readableEnded) {
      if (declaresBody(headersOf(req))) {
        throw new Error(
          "@proto/kit/express: the request body was read before the kit; put agentRoute and createService before any body parser (express.json())",
        );
      }
      body = Buffer.alloc(0);
    } else {
      body = await readBody(req, maxBytes);
    }
    rawBodies.set(req, body);
  }
  return body.length === 0 ? undefined : body;
}

/** The kit's view of an Express request: the public URL, the request-target as received, the exact body. */
export async function toKitRequest(kit: Kit, req: Request): Promise<KitRequest> {
  // `originalUrl` is node's request-target, untouched by mounting (`req.url` loses the mount path).
  const target = req.originalUrl;
  return {
    method: req.method.toUpperCase(),
    url: publicUrlFor(kit.origin, target),
    target,
    headers: headersOf(req),
    body: await exactBody(req, kit.maxBodyBytes),
    // Express's `ip` honours its `trust proxy` setting.
    clientAddress: req.ip,
  };
}

function send(req: IncomingMessage, res: Response, response: KitResponse): void {
  res.status(response.status);
  for (const [name, value] of Object.entries(response.headers)) {
    if (name === "www-authenticate") {
      res.setHeader(name, mergeChallenges(res.getHeader(name) as string | string[] | undefined, value));
    } else {
      res.setHeader(name, value);
    }
  }
  // A body refused half-read would otherwise keep the connection busy with bytes nobody reads.
  if (!req.readableEnded && declaresBody(headersOf(req))) res.setHeader("connection", "close");
  res.end(response.body ?? "");
}

/** `req.body` from the exact bytes, as `express.json()` or `express.raw()` would set it. */
function parsedBody(headers: Headers, body: Buffer | undefined): unknown {
  if (body === undefined) return undefined;
  if (!isJson(headers)) return body;
  try {
    return JSON.parse(body.toString("utf8"));
  } catch {
    throw protoError("malformed_request", { message: "body is not valid JSON" });
  }
}

/**
 * The guard of the service's own agent routes: verifies the request (signature over the exact
 * body and the request-target as received, replay, revocation, attestation, account: implicit
 * signup, expiry, rate limit, attested session), sets `req.proto` (and `req.signedAgent`) and
 * `req.body`, and answers errors in the kit's envelope with the `Proto` challenge.
 * `app.post("/api/notes", agentRoute(kit), handler)`, or `app.use("/api", agentRoute(kit))`.
 * Mount it before any body parser of its routes.
 */
export function agentRoute(kit: Kit, given: RequireAgentOptions = {}): RequestHandler {
  const options = checkGuardOptions(kit, given, "agentRoute");
  return async function protoAgentRoute(req: Request, res: Response, next: NextFunction) {
    const headers = headersOf(req);
    // The route pattern when the guard runs inside a route, else the path (pass `route` to group).
    const pattern = typeof req.route?.path === "string" ? req.route.path : req.path;
    const route = options.route ?? `${req.method} ${req.baseUrl}${pattern}`;
    const outcome = await guardRequest(kit, headers, route, options, () => toKitRequest(kit, req));
    if (!outcome.pass) return send(req, res, outcome.response);
    try {
      req.body = parsedBody(headers, await exactBody(req, kit.maxBodyBytes));
    } catch (error) {
      return send(req, res, kit.errorResponse(error, { headers }));
    }
    req.proto = outcome.proto;
    req.signedAgent = outcome.signedAgent;
    next();
  };
}

/** `agentRoute` under the Fastify adapter's other name, for guarding a whole router. */
export const requireAgent = agentRoute;

/**
 * The kit's own endpoints as Express middleware: `/.well-known/proto` and every endpoint the
 * discovery document names (accounts, `accounts/me`, owner invitation, key rotation, claim page,
 * claim completion, owner re-key and revocation) plus the owner routes (`{ownerPath}/signin`,
 * `/callback`, `/signout`, `/accounts`, `/email-signin`, and with `mail.developmentOutbox`
 * `/dev/outbox`). Anything else goes on to the application. `app.use(createService(kit))`, before
 * any body parser: the kit reads its routes' bodies itself.
 */
export function createService(kit: Kit): RequestHandler {
  return async function protoService(req: Request, res: Response, next: NextFunction) {
    const url = publicUrlFor(kit.origin, req.originalUrl);
    if (!kit.hasRoute(req.method, url.pathname)) return next();
    const headers = headersOf(req);
    let request: KitRequest;
    try {
      request = await toKitRequest(kit, req);
    } catch (error) {
      return send(req, res, kit.routeErrorResponse(req.method, url.pathname, error, { headers }));
    }
    send(req, res, await kit.dispatch(request));
  };
}
