/**
 * The notes service (built on @proto/kit) as a fuzz target: over HTTP on a test store, with OUR
 * attestor in the same process as the attestor whose key set and sign-in it uses. Every route is
 * read from its Fastify instance, the kit's included.
 */
import { generateKeyPairSync } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { Agent, createMcpAuthProvider } from "@proto/agent";
import { encodeDidKey, rawPublicKey, signRequest } from "@proto/protocol";
import { buildTrustApp, readTrustConfig } from "@proto/server";
import { createTestDatabase } from "@proto/testkit";
import { type FuzzRequest, type FuzzTarget, kindByPath, type RouteKind, routesOf } from "@proto/testkit/fuzz";
import { quietLog } from "../../../../packages/server/test/support/http.js";
import type { StoreVariant } from "../../../../packages/server/test/support/stores.js";
import { freePort, trustTestEnv } from "../../../../packages/server/test/support/trust.js";
import { buildNotesService } from "../../src/app.js";
import { MCP_PATH } from "../../src/mcp.js";
import { putAgentGrant, type TrustApp } from "./notes-stack.js";

export interface RunningTarget extends FuzzTarget {
  close(): Promise<void>;
}

/**
 * The kit's agent API and owner JSON routes, the discovery document; claim completion takes JSON
 * from agents and the claim page's form from people; the rest are pages (the e-mail sign-in's
 * form post and the development outbox included).
 */
export const NOTES_ROUTE_KINDS: [RegExp, RouteKind][] = [
  [/^\/\.well-known\/proto-registry-proof$/, "asset"],
  [/^\/\.well-known\/proto$/, "api"],
  [/^\/proto\/v1\/claim\/[^/]+$/, "dual"],
  [/^\/proto\/v1\//, "api"],
  [/^\/proto\/owner\/(signout|accounts)/, "api"],
  [/^\/(notes(\/[^/]+(\/pin)?)?|whoami)$/, "api"],
  [/^\/mcp$/, "jsonrpc"],
  [/^\/\.well-known\/oauth-protected-resource(\/mcp)?$/, "api"],
];

export async function startNotesTarget(variant: StoreVariant): Promise<RunningTarget> {
  const [trustPort, notesPort] = [await freePort(), await freePort()];
  const trustUrl = `http://127.0.0.1:${trustPort}`;
  const publicUrl = `http://127.0.0.1:${notesPort}`;
  const serviceDid = `did:web:127.0.0.1%3A${notesPort}`;
  const trustDb = await createTestDatabase(variant.engine);
  const notesDb = await createTestDatabase(variant.engine);
  const trust = await buildTrustApp(
    readTrustConfig({
      ...trustTestEnv(variant, trustDb.url, trustUrl),
      TRUST_OIDC_CLIENTS: JSON.stringify([
        { client_id: serviceDid, service_did: serviceDid, redirect_uris: [`${publicUrl}/proto/owner/callback`] },
      ]),
    }),
    { logStream: quietLog(), redisPrefix: `test:notes-fuzz:${notesPort}:` },
  );
  await trust.app.listen({ port: trustPort, host: "127.0.0.1" });
  // Invitation mails wait in the development outbox, whose page is fuzzed too.
  const notes = await buildNotesService({
    publicUrl,
    database: notesDb.url,
    attestorUrl: trustUrl,
    mail: { developmentOutbox: true },
  });
  await notes.app.listen({ port: notesPort, host: "127.0.0.1" });

  const stop = async () => {
    await notes.close();
    await trust.close();
    await notesDb.drop();
    await trustDb.drop();
  };
  let bearer: Awaited<ReturnType<typeof mcpAccessToken>>;
  try {
    bearer = await mcpAccessToken(trust, trustUrl, notes.serviceDid, `${publicUrl}${MCP_PATH}`);
  } catch (error) {
    // Left running, the servers would keep the test process alive after the failure.
    await stop();
    throw error;
  }

  // Requests are signed by a key that has no account: signature checks pass, the account lookup does not.
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const did = encodeDidKey(rawPublicKey(publicKey));
  const sign = async (request: FuzzRequest): Promise<[string, string][]> => {
    // The MCP endpoint takes an access token: with one, requests reach the MCP transport.
    if (request.route.url === MCP_PATH) return [["authorization", `Bearer ${bearer.token}`]];
    const signed = signRequest(
      { method: request.method, url: `${publicUrl}${request.target}`, ...(request.body ? { body: request.body } : {}) },
      { keyid: did, privateKey },
    );
    return Object.entries(signed.headers);
  };
  const signable = [
    "POST /notes",
    "GET /notes",
    "DELETE /notes",
    "DELETE /notes/:id",
    "POST /notes/:id/pin",
    "GET /whoami",
    "POST /proto/v1/accounts",
    "GET /proto/v1/accounts/me",
  ];
  return {
    name: `notes service (${variant.name})`,
    url: publicUrl,
    routes: routesOf(notes.app),
    kindOf: kindByPath(NOTES_ROUTE_KINDS),
    signable: [
      ...signable,
      "POST /proto/v1/accounts/me/owner-invitation",
      "POST /proto/v1/accounts/me/keys/rotate",
      ...["POST", "GET", "DELETE"].map((method) => `${method} ${MCP_PATH}`),
    ],
    sign,
    // Owner sign-in goes to the attestor; the example has no health route.
    redirectOrigins: [trustUrl],
    healthPath: null,
    vocabulary: {
      params: { id: ["note_AAAAAAAAAAAAAAAA"] },
      fields: {
        text: ["a note"],
        token: ["a-claim-token"],
        csrf: ["a-csrf-token"],
        attestor: ["proto-trust"],
        return_to: ["/owner"],
        state: ["state-1"],
        code: ["a-code"],
        did: [did],
        agent_did: [did],
        current_account_did: [did],
        new_account_did: [did],
        recipient: ["someone@mail.test"],
      },
      examples: {
        "POST /notes": { body: { text: "a note" } },
        "GET /proto/claim": { query: { token: "a-claim-token" } },
        "POST /proto/v1/claim/:token": { body: { csrf: "a-csrf-token" } },
        // From the claim page itself (same Origin), so that it gets past the origin check.
        "POST /proto/owner/email-signin": { body: { token: "a-claim-token" }, headers: { origin: publicUrl } },
        "GET /proto/owner/signin": { query: { attestor: "proto-trust", return_to: "/owner" } },
        "GET /proto/owner/callback": { query: { state: "state-1", code: "a-code" } },
        "POST /proto/v1/accounts/keys/revoke": { body: { agent_did: did } },
        "POST /proto/v1/accounts/keys/rekey": { body: { current_account_did: did, new_account_did: did } },
        "POST /owner/signout": { body: { csrf: "a-csrf-token" } },
        "POST /mcp": {
          body: {
            jsonrpc: "2.0",
            id: 1,
            method: "tools/call",
            params: { name: "add_note", arguments: { text: "a note" } },
          },
          headers: { accept: "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18" },
        },
      },
      cookies: [],
    },
    async normal() {
      const response = await fetch(`${publicUrl}/.well-known/proto`);
      await response.arrayBuffer();
      return response.status === 200 ? undefined : `GET /.well-known/proto answered ${response.status}`;
    },
    async close() {
      await bearer.close();
      await stop();
    },
  };
}

/**
 * An access token for the MCP endpoint, as an agent gets one: linked to a person at the attestor
 * (its test hook confirms), then the agent SDK's JWT-bearer provider. Ten minutes: the whole run.
 * The person granted it `notes:read` here: the attestor, which reads a service's declared
 * permissions over HTTPS only, then need not read this plain-HTTP target's.
 */
async function mcpAccessToken(
  trust: TrustApp,
  trustUrl: string,
  serviceDid: string,
  mcpUrl: string,
): Promise<{ token: string; close(): Promise<void> }> {
  const home = mkdtempSync(join(tmpdir(), "proto-notes-fuzz-agent-"));
  const agent = Agent.init({ home, attestorUrl: trustUrl }).agent;
  const request = await agent.attestor().linkStart({ label: "fuzz agent" });
  const confirmed = await fetch(`${trustUrl}/__test/link/confirm`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ req_id: request.req_id, email: "fuzz@mail.test" }),
  });
  if (confirmed.status !== 200) throw new Error(`link confirmation answered ${confirmed.status}`);
  if ((await agent.attestor().pollOnce(request.req_id)).state !== "confirmed")
    throw new Error("the link did not confirm");
  await putAgentGrant(trust, agent.did, {
    aud: serviceDid,
    serviceUrl: new URL(mcpUrl).origin,
    permissions: ["notes:read", "notes:write"],
    now: Date.now(),
  });
  const provider = createMcpAuthProvider(agent);
  const client = new Client({ name: "fuzz", version: "1.0.0" });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: provider, fetch: provider.fetch }),
  );
  await client.close();
  const token = provider.tokens()?.access_token;
  if (token === undefined) throw new Error("no access token");
  return { token, close: async () => rmSync(home, { recursive: true, force: true }) };
}
