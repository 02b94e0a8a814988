/**
 * What a node:http(s) server refuses before any application code runs, answered in the kit's
 * error envelope: for Express and Hono (`@hono/node-server`), whose servers are node's own. The
 * Fastify adapter gets the same from `protoServerOptions()`; the answers come from the one
 * implementation the servers use too (`@proto/protocol` transport errors).
 */
import { type IncomingMessage, type RequestListener, Server, type ServerResponse } from "node:http";
import type { Http2SecureServer, Http2Server } from "node:http2";
import { Server as HttpsServer } from "node:https";
import {
  ProtoError,
  refuseBadHost,
  refuseBeforeRouting,
  socketErrorResponder,
  type TransportError,
} from "@proto/protocol";

/** A refusal below routing as the kit's envelope: `malformed_request` with the transport's status. */
export const transportEnvelope = ({ status, message }: TransportError) =>
  new ProtoError("malformed_request", status, message).toEnvelope();

/** An absolute-form target: `http(s)://` and a URL that parses. */
function absoluteTarget(target: string): boolean {
  if (!/^https?:\/\//i.test(target)) return false;
  return URL.canParse(target);
}

/**
 * Why the request cannot be routed though its Host passed `refuseBadHost`, or undefined. Only
 * origin-form (`/path?query`), absolute-form and `*` for OPTIONS name a resource (RFC 9112 §3.2);
 * a backslash in the path is read as a slash by URL parsers but not by routers; a host name that
 * a URL parser rewrites (`a%41` is `aa`) names another host than the one sent. Either way no one
 * can say which resource is meant (`@hono/node-server` answers these with an empty 400).
 */
function routingProblem(request: IncomingMessage): string | undefined {
  const target = request.url ?? "";
  if (!(target === "*" && request.method === "OPTIONS")) {
    if (!target.startsWith("/") && !absoluteTarget(target)) return "the request-target is not a path";
    const query = target.indexOf("?");
    const path = query === -1 ? target : target.slice(0, query);
    if (path.includes("\\")) return "the request path contains a backslash";
  }
  const host = request.headers.host;
  if (host !== undefined && new URL(`http://${host}/`).hostname !== host.replace(/:\d*$/, "").toLowerCase()) {
    return "the Host header's name is not in canonical form";
  }
  return undefined;
}

function refuseUnroutable(request: IncomingMessage, response: ServerResponse): boolean {
  const problem = routingProblem(request);
  if (problem === undefined) return false;
  refuseBeforeRouting(response, transportEnvelope({ status: 400, message: problem }));
  return true;
}

/**
 * The servers `serve()` of `@hono/node-server` may return (its `ServerType`), so that its answer
 * is taken as it is; node:http's, its default, is the one this guards.
 */
type NodeServer = Server | Http2Server | Http2SecureServer;

/**
 * Makes `server` answer in the error envelope what is refused before any route is known, as the
 * Fastify adapter's `protoServerOptions()` does: what node's parser refuses (a malformed request
 * line, bad header bytes, oversized headers, broken framing: 400, 408 or 431), a Host that cannot
 * stand (none on HTTP/1.1, two, no host, or one a URL parser rewrites) and a request-target that
 * names no path (400). Node
 * answers the first with a bare status line and its own Host check with an empty body; Express
 * and `@hono/node-server` would not answer the last in any format of yours.
 *
 * Call it once the application is attached, on the server it listens with:
 * `protoClientErrors(app.listen(3000))` (Express), `protoClientErrors(serve({ fetch: app.fetch }))`
 * (Hono). The checks run before the application's request listeners, which it takes over; a
 * server with none yet is a wiring mistake and throws, and so does an HTTP/2 server, whose
 * requests carry no Host for these checks to read. Returns the server.
 */
export function protoClientErrors<S extends NodeServer>(server: S): S {
  if (!(server instanceof Server || server instanceof HttpsServer)) {
    throw new TypeError("protoClientErrors: not a node:http or node:https server (HTTP/2 servers are not supported)");
  }
  guard(server);
  return server;
}

function guard(server: Server): void {
  const listeners = server.listeners("request") as RequestListener[];
  if (listeners.length === 0) {
    throw new Error("protoClientErrors: the server has no request listener yet; call it after attaching the app");
  }
  // Node's own Host check answers with an empty body: the check below answers instead.
  (server as { requireHostHeader?: boolean }).requireHostHeader = false;
  server.on("clientError", socketErrorResponder(transportEnvelope));
  server.removeAllListeners("request");
  server.on("request", (request: IncomingMessage, response: ServerResponse) => {
    if (refuseBadHost(request, response, transportEnvelope) || refuseUnroutable(request, response)) return;
    for (const listener of listeners) listener.call(server, request, response);
  });
}
