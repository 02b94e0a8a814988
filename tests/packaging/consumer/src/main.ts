/**
 * A user's first program on the four packages, as their READMEs' quick starts write it. The
 * packaging test copies this folder into an empty project outside the workspace, type-checks it
 * against the installed tarballs and runs the compiled JavaScript with plain node.
 *
 *   PROTO_HOME=<agent home made by `proto init`> node dist/main.js <data dir>
 *
 * It prints one JSON line of what it saw; the test asserts on it.
 */
import { generateKeyPairSync } from "node:crypto";
import { join } from "node:path";
import { AgentStore } from "@proto/agent";
import { createKit } from "@proto/kit";
import { agentRoute, createService, protoServerOptions } from "@proto/kit/fastify";
import {
  DISCOVERY_SCHEMA_ID,
  encodeDidKey,
  isDidKey,
  rawPublicKey,
  signRequest,
  validateDiscoveryDocument,
} from "@proto/protocol";
import discoverySchema from "@proto/protocol/discovery.schema.json" with { type: "json" };
import { ConfigError, readDirectoryConfig } from "@proto/server";
import Fastify from "fastify";

const dataDir = process.argv[2];
const home = process.env.PROTO_HOME;
if (dataDir === undefined || home === undefined)
  throw new Error("usage: PROTO_HOME=<home> node dist/main.js <data dir>");

// @proto/protocol, "did:key": a fresh key and its identifier.
const { publicKey } = generateKeyPairSync("ed25519");
const freshDid = encodeDidKey(rawPublicKey(publicKey));

// @proto/agent, "Identity and the agent home": the key `proto init` created.
const identity = new AgentStore(home).loadIdentity();

// @proto/kit, "Quick start (Fastify)", with a free posture: no attestor to run for this check.
const publicUrl = "https://notes.example";
const kit = await createKit({
  publicUrl,
  database: `sqlite:${join(dataDir, "kit.db")}`,
  discovery: {
    service_did: "did:web:notes.example",
    recipient_types: ["email"],
    limits: { unclaimed_rate_limit_per_hour: 600 },
    billing: { unclaimed_mode: "free" },
  },
  mail: { developmentOutbox: true },
});
const app = Fastify({ ...protoServerOptions() });
await app.register(createService(kit));
app.post("/api/notes", agentRoute(kit), async (request) => {
  const agent = request.proto!;
  return { owner: agent.account.state, did: agent.did, note: request.body };
});
const origin = await app.listen({ port: 0, host: "127.0.0.1" });

try {
  // @proto/protocol, "Signing": the agent signs the public URL; the request goes to the local port.
  const body = JSON.stringify({ text: "hello from a tarball" });
  const signed = signRequest(
    { method: "POST", url: `${publicUrl}/api/notes`, body },
    { keyid: identity.did, privateKey: identity.privateKey },
  );
  const post = (headers: Record<string, string>, payload: string) =>
    fetch(`${origin}/api/notes`, {
      method: "POST",
      headers: { ...headers, "content-type": "application/json" },
      body: payload,
    });
  const accepted = await post(signed.headers, body);
  // The same signature over other bytes: the kit must refuse it.
  const tampered = await post(signed.headers, JSON.stringify({ text: "changed" }));
  const discovery = await fetch(`${origin}/.well-known/proto`);
  const document: unknown = await discovery.json();

  // @proto/server: its configuration reader, as a program embedding the directory would use it.
  let configError = "";
  try {
    readDirectoryConfig({ DIRECTORY_DATABASE_URL: "mysql://nope" });
  } catch (error) {
    if (error instanceof ConfigError) configError = error.name;
  }

  // One JSON document on stdout: what the packaging test reads back.
  process.stdout.write(
    `${JSON.stringify({
      freshDidIsDidKey: isDidKey(freshDid),
      agentDid: identity.did,
      accepted: { status: accepted.status, body: await accepted.json() },
      tampered: { status: tampered.status, body: await tampered.json() },
      discovery: { status: discovery.status, valid: validateDiscoveryDocument(document).valid, document },
      schemaId: DISCOVERY_SCHEMA_ID,
      schemaFileId: discoverySchema.$id,
      configError,
    })}\n`,
  );
} finally {
  await app.close();
  await kit.close();
}
