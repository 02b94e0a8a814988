import assert from "node:assert/strict";
import { test } from "node:test";
import { agentRoute } from "@proto/kit/hono";
import { signRequest } from "@proto/protocol";
import type { Hono } from "hono";
import type { Kit } from "../src/index.js";
import { type AdapterApp, honoApp, startHono } from "./support/adapter-apps.js";
import { adapterJourney, ORIGIN, toAnswer } from "./support/adapter-journey.js";
import { CodeLedger } from "./support/service.js";

/**
 * Issue 16: the Hono adapter (`@proto/kit/hono`) on Node (`@hono/node-server`, a real server),
 * through the journey every adapter goes through; then the same application without node's
 * request, as on workers, where only the serialised URL is left to verify.
 */

/** The journey's application, and a route of this suite's own. */
function build(kit: Kit): Hono {
  return honoApp(kit, (app) => {
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
  });
}

const start = (kit: Kit): Promise<AdapterApp> => startHono(build(kit));

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

  test("a body that breaks off mid-stream (the client went away) is 400 malformed_request, nothing reported", async () => {
    const agent = await context.signedUp();
    const body = '{"text":"a note"}';
    const headers = signRequest(
      { method: "POST", url: ORIGIN, target: "/api/notes", body },
      { keyid: agent.did, privateKey: agent.privateKey, created: context.clock.nowSeconds() },
    ).headers;
    const broken = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(Buffer.from(body.slice(0, 5)));
        controller.error(new Error("aborted"));
      },
    });
    const request = new Request(`${ORIGIN}/api/notes`, {
      method: "POST",
      headers: { ...headers, "content-type": "application/json" },
      body: broken,
      duplex: "half",
    } as RequestInit);
    const answer = await toAnswer(await build(context.kit).fetch(request));
    new CodeLedger().expect(answer, 400, "malformed_request");
    assert.deepEqual(context.unexpected, []);
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
