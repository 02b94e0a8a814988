/**
 * The kit's Express and Hono adapters as fuzz targets: the small applications of
 * `adapter-apps.ts` (the kit's routes and the journey's guarded ones) over HTTP on a test store,
 * with OUR attestor in process as the one the service accepts. The route list is the kit's
 * (`kit.routes`) and the application's own, read from its router.
 */

import { signRequest } from "@proto/protocol";
import { type FuzzRequest, type FuzzRoute, type FuzzTarget, kindByPath, type RouteKind } from "@proto/testkit/fuzz";
import type { Express } from "express";
import type { Hono } from "hono";
import { createKit, type Kit } from "../../src/index.js";
import { type AdapterApp, expressApp, honoApp, startExpress, startHono } from "./adapter-apps.js";
import { TestAttestor } from "./attestor.js";
import { createTestDatabase, emailAddress, freePort, newAgent, TestClock } from "./env.js";

export interface RunningTarget extends FuzzTarget {
  close(): Promise<void>;
}

/** Where the target's data lives: SQLite, or PostgreSQL (`TEST_POSTGRES_URL`). */
export interface TargetStore {
  name: string;
  engine: "sqlite" | "postgres";
}

/**
 * The kit's agent API and owner JSON routes, the discovery document; claim completion takes JSON
 * from agents and the claim page's form from people; the rest of the kit's routes are pages.
 * The application's `/api/*` routes are API routes.
 */
export const KIT_ROUTE_KINDS: [RegExp, RouteKind][] = [
  [/^\/\.well-known\/proto$/, "api"],
  [/^\/proto\/v1\/claim\/[^/]+$/, "dual"],
  [/^\/proto\/v1\//, "api"],
  [/^\/proto\/owner\/(signout|accounts)/, "api"],
  [/^\/api\//, "api"],
];

/** GET routes answer HEAD too, in both frameworks. */
const withHead = (routes: FuzzRoute[]): FuzzRoute[] =>
  routes.flatMap((route) => (route.method === "GET" ? [route, { method: "HEAD", url: route.url }] : [route]));

function kitRoutes(kit: Kit): FuzzRoute[] {
  return kit.routes.map(({ method, path }) => ({ method, url: path }));
}

/** The routes an Express application declares at its root (`app.get`, `app.post`, ...). */
function expressRoutes(app: Express): FuzzRoute[] {
  const stack = (app as unknown as { router: { stack: { route?: { path: unknown; methods: object } }[] } }).router
    .stack;
  return stack.flatMap(({ route }) =>
    route === undefined || typeof route.path !== "string"
      ? []
      : Object.keys(route.methods).map((method) => ({ method: method.toUpperCase(), url: route.path as string })),
  );
}

/** The routes a Hono application declares (middleware, `ALL`, left out). */
function honoRoutes(app: Hono): FuzzRoute[] {
  return app.routes.filter((route) => route.method !== "ALL").map(({ method, path }) => ({ method, url: path }));
}

type Framework = "express" | "hono";

async function startTarget(framework: Framework, store: TargetStore): Promise<RunningTarget> {
  const clock = new TestClock();
  const port = await freePort();
  const publicUrl = `http://127.0.0.1:${port}`;
  const serviceDid = `did:web:127.0.0.1%3A${port}`;
  const attestor = await TestAttestor.start(clock, [
    { client_id: serviceDid, service_did: serviceDid, redirect_uris: [`${publicUrl}/proto/owner/callback`] },
  ]);
  const db = await createTestDatabase(store.engine);
  let kit: Kit | undefined;
  let app: AdapterApp | undefined;
  try {
    kit = await createKit({
      publicUrl,
      allowHttp: true,
      database: db.url,
      discovery: {
        service_did: serviceDid,
        recipient_types: ["email", "oidc"],
        // One signing key sends every signed request of the run: its hourly bucket must not run out.
        limits: { unclaimed_rate_limit_per_hour: 1_000_000 },
      },
      attestors: { "proto-trust": { url: attestor.url, allowHttp: true } },
      now: clock.now,
      // Invitation mails wait in the development outbox, whose page is fuzzed too.
      mail: { developmentOutbox: true },
      webBotAuth: false,
    });
    let routes: FuzzRoute[];
    if (framework === "express") {
      const built = expressApp(kit);
      routes = [...kitRoutes(kit), ...expressRoutes(built)];
      app = await startExpress(built, port);
    } else {
      const built = honoApp(kit);
      routes = [...kitRoutes(kit), ...honoRoutes(built)];
      app = await startHono(built, port);
    }

    // The signing agent has an account (signed up with an attestation): its requests reach the handlers.
    const agent = await attestor.link(newAgent(), emailAddress("fuzz"));
    const signup = signRequest(
      { method: "GET", url: `${publicUrl}/api/whoami` },
      { keyid: agent.did, privateKey: agent.privateKey, created: clock.nowSeconds() },
    );
    const signedUp = await fetch(`${publicUrl}/api/whoami`, {
      headers: { ...signup.headers, "proto-attestation": await attestor.mint(agent, serviceDid) },
    });
    if (signedUp.status !== 200) throw new Error(`signup answered ${signedUp.status}: ${await signedUp.text()}`);
    const other = newAgent();

    const sign = async (request: FuzzRequest): Promise<[string, string][]> => {
      const signed = signRequest(
        {
          method: request.method,
          url: `${publicUrl}${request.target}`,
          ...(request.body ? { body: request.body } : {}),
        },
        { keyid: agent.did, privateKey: agent.privateKey, created: clock.nowSeconds() },
      );
      return Object.entries(signed.headers);
    };
    const running = { kit, app };
    return {
      name: `kit ${framework === "express" ? "Express" : "Hono"} adapter (${store.name})`,
      url: publicUrl,
      routes: withHead(routes),
      kindOf: kindByPath(KIT_ROUTE_KINDS),
      signable: [
        "POST /proto/v1/accounts",
        "GET /proto/v1/accounts/me",
        "POST /proto/v1/accounts/me/owner-invitation",
        "POST /proto/v1/accounts/me/keys/rotate",
        "GET /api/whoami",
        "POST /api/notes",
        "GET /api/maybe",
        "GET /api/bearer-too",
      ],
      sign,
      // Owner sign-in goes to the attestor.
      redirectOrigins: [attestor.url],
      healthPath: null,
      vocabulary: {
        params: {},
        fields: {
          text: ["a note"],
          token: ["a-claim-token"],
          csrf: ["a-csrf-token"],
          attestor: ["proto-trust"],
          return_to: ["/"],
          state: ["state-1"],
          code: ["a-code"],
          did: [agent.did],
          agent_did: [agent.did],
          current_account_did: [agent.did],
          new_account_did: [other.did],
          recipient: ["someone@mail.test"],
          email: ["someone@mail.test"],
        },
        examples: {
          "POST /api/notes": { body: { text: "a note" } },
          "GET /proto/claim": { query: { token: "a-claim-token" } },
          "POST /proto/v1/claim/:token": { body: { csrf: "a-csrf-token" } },
          "POST /proto/owner/email-signin": { body: { token: "a-claim-token" }, headers: { origin: publicUrl } },
          "GET /proto/owner/signin": { query: { attestor: "proto-trust", return_to: "/" } },
          "GET /proto/owner/callback": { query: { state: "state-1", code: "a-code" } },
          "POST /proto/v1/accounts/me/owner-invitation": {
            body: { recipient: { type: "email", value: "someone@mail.test" } },
          },
          "POST /proto/v1/accounts/keys/revoke": { body: { agent_did: agent.did } },
          "POST /proto/v1/accounts/keys/rekey": {
            body: { current_account_did: agent.did, new_account_did: other.did },
          },
          "POST /proto/owner/signout": { body: { csrf: "a-csrf-token" } },
        },
        cookies: [],
      },
      async normal() {
        const response = await fetch(`${publicUrl}/.well-known/proto`);
        await response.arrayBuffer();
        return response.status === 200 ? undefined : `GET /.well-known/proto answered ${response.status}`;
      },
      async close() {
        await running.app.close();
        await running.kit.close();
        await attestor.close();
        await db.drop();
      },
    };
  } catch (error) {
    await app?.close();
    await kit?.close();
    await attestor.close();
    await db.drop();
    throw error;
  }
}

/** The Express adapter (`@proto/kit/express`) on `store`, listening on 127.0.0.1. */
export const startExpressTarget = (store: TargetStore) => startTarget("express", store);

/** The Hono adapter (`@proto/kit/hono`, on `@hono/node-server`) on `store`, listening on 127.0.0.1. */
export const startHonoTarget = (store: TargetStore) => startTarget("hono", store);
