import assert from "node:assert/strict";
import { test } from "node:test";
import { agentRoute } from "@proto/kit/express";
import express from "express";
import type { Kit } from "../src/index.js";
import { type AdapterApp, expressApp, startExpress } from "./support/adapter-apps.js";
import { adapterJourney } from "./support/adapter-journey.js";
import { CodeLedger } from "./support/service.js";

/**
 * Issue 16: the Express adapter (`@proto/kit/express`) over a real server, through the journey
 * every adapter goes through (signed, attested, tampered, replayed, optional, raw targets).
 */

/** The journey's application, and two routes of this suite's own. */
function start(kit: Kit): Promise<AdapterApp> {
  const app = expressApp(kit, (app) => {
    // A wiring mistake: a body parser before the guard leaves no bytes to verify.
    app.post("/api/parsed-first", express.json(), agentRoute(kit), (_req, res) => {
      res.json({});
    });
    // A router under a prefix, guarded as a whole: `req.url` loses `/v2`, the agent signed it.
    const v2 = express.Router();
    v2.use(agentRoute(kit));
    v2.post("/notes", (req, res) => {
      res.json({ did: req.proto?.did, note: req.body });
    });
    app.use("/v2", v2);
  });
  return startExpress(app);
}

adapterJourney("Express adapter", start, (context) => {
  test("a router mounted under a prefix and guarded as a whole verifies the full request-target", async () => {
    const agent = await context.signedUp();
    const answer = await context.signed(agent, "POST", "/v2/notes", { body: '{"a":[1,2]}' });
    assert.equal(answer.status, 200, answer.text);
    assert.deepEqual(answer.json, { did: agent.did, note: { a: [1, 2] } });
  });

  test("a body parser before the guard is a wiring mistake: 500 internal_error, reported to onError", async () => {
    const agent = await context.signedUp();
    const answer = await context.signed(agent, "POST", "/api/parsed-first", { body: '{"a":1}' });
    new CodeLedger().expect(answer, 500, "internal_error");
    const reported = context.unexpected.splice(0);
    assert.equal(reported.length, 1);
    assert.match(String((reported[0] as Error).message), /before any body parser/);
  });

  test("a signed body that is not JSON is 400 malformed_request after verification, never a 500", async () => {
    const agent = await context.signedUp();
    const answer = await context.signed(agent, "POST", "/api/notes", { body: "{not json" });
    new CodeLedger().expect(answer, 400, "malformed_request");
  });
});
