/**
 * The Hono adapter (`@proto/kit/hono`, Hono 4). Hono is an optional peer dependency: only its types
 * and its route helper are used, and the application is the one you build.
 *
 * Hono hands over a Fetch `Request`, whose URL is already serialised: `'` in a query arrives as
 * `%27`, `%2e%2e` segments are resolved. A signature over the request-target as the client sent it
 * needs the raw one; on Node with `@hono/node-server` it is still there (`c.env.incoming.url`) and
 * used when it names the same URL. Elsewhere (workers, Deno, Bun) the serialised URL is what is
 * verified, so a client must sign what `fetch` sends (the proto agent does).
 */
import type { Context, MiddlewareHandler } from "hono";
import { routePath } from "hono/route";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { checkGuardOptions, guardRequest, type RequireAgentOptions } from "./guard.js";
import { fromFetchRequest, type KitRequest, type KitResponse, publicUrlFor } from "./http.js";
import type { AgentContext, Kit } from "./kit.js";
import type { SignedAgentIdentity } from "./signed-agents.js";

export type { RequireAgentOptions } from "./guard.js";
/** Node's refusals before routing in the envelope: `protoClientErrors(server)` on the server you listen with. */
export { protoClientErrors } from "./node-server.js";

/** What the guard sets: `c.get("proto")`, `c.get("signedAgent")`. */
export interface ProtoVariables {
  /** The verified agent of the request, null for an anonymous or signed-agent caller. */
  proto: AgentContext | null;
  /** A caller identified by Web Bot Auth alone, on routes whose `signedAgents` policy is `allow`; else null. */
  signedAgent: SignedAgentIdentity | null;
}

/** The environment of guarded routes: `new Hono<ProtoEnv>()`, or inferred from `agentRoute`. */
export interface ProtoEnv {
  Variables: ProtoVariables;
}

/**
 * The request-target as received, when the runtime kept it: node's `IncomingMessage` of
 * `@hono/node-server` (`c.env.incoming`), only when it is origin-form and parses to the request's
 * own URL (so nothing else in `env` can pass for it). Else undefined.
 */
export function rawRequestTarget(c: Context): string | undefined {
  const incoming = (c.env as { incoming?: { url?: unknown } } | undefined)?.incoming;
  const raw = incoming?.url;
  if (typeof raw !== "string" || !raw.startsWith("/")) return undefined;
  try {
    const received = new URL(c.req.url);
    const parsed = publicUrlFor(received.origin, raw);
    return parsed.pathname === received.pathname && parsed.search === received.search ? raw : undefined;
  } catch {
    return undefined;
  }
}

/** The kit's view of a Hono request: the public URL, the request-target, the exact body (read from a clone). */
export async function toKitRequest(kit: Kit, c: Context): Promise<KitRequest> {
  if (c.req.raw.bodyUsed) {
    // Its bytes are gone (a validator or `c.req.json()` ran first): no signature over them can be checked.
    throw new Error("@proto/kit/hono: the request body was read before the kit; put agentRoute before validators");
  }
  const request = await fromFetchRequest(c.req.raw.clone(), kit.origin, kit.maxBodyBytes);
  const raw = rawRequestTarget(c);
  if (raw !== undefined) request.target = raw;
  request.clientAddress = peerAddress(c);
  return request;
}

/**
 * The peer's address when the runtime is `@hono/node-server` (its socket). Hono has no trusted-proxy
 * setting, so behind a proxy every client is the proxy: pass the address yourself to `kit.handle`.
 */
function peerAddress(c: Context): string | undefined {
  const socket = (c.env as { incoming?: { socket?: { remoteAddress?: unknown } } } | undefined)?.incoming?.socket;
  return typeof socket?.remoteAddress === "string" ? socket.remoteAddress : undefined;
}

/**
 * A refusal through the context, so that headers the application set before (`c.header`) stay:
 * its own `WWW-Authenticate` challenges (a bearer scheme, say) first, the kit's appended after
 * them (upstream §5.7).
 */
function refuse(c: Context, response: KitResponse): Response {
  for (const [name, value] of Object.entries(response.headers)) {
    const values = typeof value === "string" ? [value] : value;
    if (name !== "www-authenticate") c.header(name, undefined);
    for (const item of values) c.header(name, item, { append: true });
  }
  // Refusals are error envelopes: always a body.
  return c.body(response.body ?? "", response.status as ContentfulStatusCode);
}

/**
 * The guard of the service's own agent routes: verifies the request (signature over the exact
 * body and the request-target, replay, revocation, attestation, account: implicit signup, expiry,
 * rate limit, attested session), sets `c.get("proto")` and `c.get("signedAgent")`, and answers
 * errors in the kit's envelope with the `Proto` challenge. The handler can still read the body
 * (`c.req.json()`): the guard reads a clone. `app.post("/api/notes", agentRoute(kit), handler)`,
 * or `app.use("/api/*", agentRoute(kit))`.
 */
export function agentRoute(kit: Kit, given: RequireAgentOptions = {}): MiddlewareHandler<ProtoEnv> {
  const options = checkGuardOptions(kit, given, "agentRoute");
  return async function protoAgentRoute(c, next) {
    const headers = c.req.raw.headers;
    // The pattern of the route that answers (`/posts/:id`), whichever middleware this is.
    const route = options.route ?? `${c.req.method} ${routePath(c, -1)}`;
    const outcome = await guardRequest(kit, headers, route, options, () => toKitRequest(kit, c));
    if (!outcome.pass) return refuse(c, outcome.response);
    c.set("proto", outcome.proto);
    c.set("signedAgent", outcome.signedAgent);
    await next();
  };
}

/** `agentRoute` under the Fastify adapter's other name, for guarding a whole group of routes. */
export const requireAgent = agentRoute;

/**
 * The kit's own endpoints as Hono middleware: `/.well-known/proto` and every endpoint the
 * discovery document names (accounts, `accounts/me`, owner invitation, key rotation, claim page,
 * claim completion, owner re-key and revocation) plus the owner routes (`{ownerPath}/signin`,
 * `/callback`, `/signout`, `/accounts`, `/email-signin`, and with `mail.developmentOutbox`
 * `/dev/outbox`). Anything else goes on to the application. `app.use(createService(kit))`.
 */
export function createService(kit: Kit): MiddlewareHandler {
  return async function protoService(c, next) {
    const answer = await kit.handle(c.req.raw, { target: rawRequestTarget(c), clientAddress: peerAddress(c) });
    if (answer === undefined) return next();
    return answer;
  };
}
