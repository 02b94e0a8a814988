/**
 * The kit's Hono quick start. The packaging test installs this project's dependencies from the
 * packed tarballs and runs `tsc --noEmit` on it: the app alone without the "DOM" lib
 * (tsconfig.json), and served with @hono/node-server (tsconfig.node.json).
 */
import { createKit } from "@proto/kit";
import { agentRoute, createService, type ProtoEnv } from "@proto/kit/hono";
import { Hono } from "hono";

const kit = await createKit({
  publicUrl: "https://notes.example",
  database: "sqlite:./data/kit.db",
  discovery: { service_did: "did:web:notes.example", recipient_types: ["email"] },
  attestors: { "proto-trust": { url: "https://trust.example" } },
  mail: { developmentOutbox: true },
});

export const app = new Hono<ProtoEnv>();
app.use(createService(kit));
app.post("/api/notes", agentRoute(kit), async (c) => {
  const agent = c.get("proto");
  if (agent === null) return c.json({ error: { code: "unauthorized", message: "sign the request" } }, 401);
  return c.json({ owner: agent.account.state, did: agent.did, note: await c.req.json() });
});
