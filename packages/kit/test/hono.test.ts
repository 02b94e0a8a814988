import assert from "node:assert/strict";
import { once } from "node:events";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { serve } from "@hono/node-server";
import { agentRoute, createService } from "@proto/kit/hono";
import { signRequest } from "@proto/protocol";
import { Hono } from "hono";
import type { Kit } from "../src/index.js";
import { type AdapterApp, adapterJourney, ORIGIN, toAnswer } from "./support/adapter-journey.js";
import { CodeLedger } from "./support/service.js";

/**
 * Issue 16: the Hono adapter (`@proto/kit/hono`) on Node (`@hono/node-server`, a real server),
 * through the journey every adapter goes through; then the same application without node's
 * request, as on workers, where only the serialised URL is left to verify.
 */

function build(kit: Kit): Hono {
  const app = new Hono();
  app.use(createService(kit));
  app.get("/api/whoami", agentRoute(kit), (c) =>
    c.json({ did: c.get("proto")?.did, state: c.get("proto")?.account.state }),
  );
  app.post("/api/notes", agentRoute(kit), async (c) =>
    c.json({
      did: c.get("proto")?.did,
      // The guard read a clone: the handler reads the body as usual.
      note: await c.req.json(),
      raw: Buffer.from(c.get("proto")?.body ?? []).toString("utf8"),
    }),
  );
  app.get("/api/maybe", agentRoute(kit, { optional: true }), (c) => c.json({ did: c.get("proto")?.did ?? null }));
  app.get(
    "/api/bearer-too",
    async (c, next) => {
      c.header("WWW-Authenticate", 'Bearer realm="notes"');
      await next();
    },
    agentRoute(kit),
    (c) => c.json({ did: c.get("proto")?.did }),
  );
  // A wiring mistake: the body read before the guard leaves no bytes to verify.
  app.post(
    "/api/read-first",
    async (c, next) => {
      await c.req.json();
      await next();
    },
    agentRoute(kit),
    (c) => c.json({}),
  );
  return app;
}

async function start(kit: Kit): Promise<AdapterApp> {
  const server = serve({ fetch: build(kit).fetch, port: 0, hostname: "127.0.0.1" });
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

adapterJourney("Hono adapter (@hono/node-server)", start, (context) => {
  const target = "/api/whoami?q=it's";

  test("without node's request (workers, Deno, Bun) the serialised URL is verified: ' arrives as %27", async () => {
    const agent = await context.signedUp();
    const app = build(context.kit);
    const sign = (spelled: string) =>
      signRequest(
        { method: "GET", url: ORIGIN, target: spelled },
        { keyid: agent.did, privateKey: agent.privateKey, created: context.clock.nowSeconds() },
      ).headers;
    // What a Fetch runtime hands over: the WHATWG serialisation of the URL.
    const asSent = await toAnswer(await app.fetch(new Request(`${ORIGIN}${target}`, { headers: sign(target) })));
    new CodeLedger().expect(asSent, 401, "invalid_signature");
    const asFetched = await toAnswer(
      await app.fetch(new Request(`${ORIGIN}${target}`, { headers: sign("/api/whoami?q=it%27s") })),
    );
    assert.equal(asFetched.status, 200, asFetched.text);
    assert.equal(asFetched.json.did, agent.did);
  });

  test("a raw target in the environment counts only when it names the request's own URL", async () => {
    const agent = await context.signedUp();
    const other = "/api/whoami?q=other";
    const headers = signRequest(
      { method: "GET", url: ORIGIN, target: other },
      { keyid: agent.did, privateKey: agent.privateKey, created: context.clock.nowSeconds() },
    ).headers;
    const request = new Request(`${ORIGIN}/api/whoami?q=mine`, { headers });
    const answer = await toAnswer(await build(context.kit).fetch(request, { incoming: { url: other } }));
    new CodeLedger().expect(answer, 401, "invalid_signature");
  });

  test("a body read before the guard is a wiring mistake: 500 internal_error, reported to onError", async () => {
    const agent = await context.signedUp();
    const answer = await context.signed(agent, "POST", "/api/read-first", { body: '{"a":1}' });
    new CodeLedger().expect(answer, 500, "internal_error");
    const reported = context.unexpected.splice(0);
    assert.equal(reported.length, 1);
    assert.match(String((reported[0] as Error).message), /read before the kit/);
  });
});
