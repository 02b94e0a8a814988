/**
 * The kit's Express quick start in an existing Express project. The packaging test installs this
 * project's dependencies from the packed tarballs and runs `tsc --noEmit -p tsconfig.json` on it.
 */
import { createKit, type Kit } from "@proto/kit";
import { agentRoute, createService, protoClientErrors } from "@proto/kit/express";
import express from "express";

const kit: Kit = await createKit({
  publicUrl: "https://notes.example",
  database: "sqlite:./data/kit.db",
  discovery: { service_did: "did:web:notes.example", recipient_types: ["email"] },
  attestors: { "proto-trust": { url: "https://trust.example" } },
  mail: { developmentOutbox: true },
});

const app = express();
app.use(createService(kit));
app.post("/api/notes", agentRoute(kit), (req, res) => {
  const agent = req.proto;
  if (!agent) return void res.status(401).end();
  res.json({ owner: agent.account.state, did: agent.did, note: req.body });
});
app.use(express.json());

protoClientErrors(app.listen(3000));
