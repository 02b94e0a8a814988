/**
 * Our own servers, started in-process on SQLite, as conformance targets: an attestor whose
 * `{trust_url}` is the URL the probes use, a directory with a few listings registered through
 * the real challenge flow (sites on a local HTTPS host under a test CA), and a mirror of it.
 */
import { generateKeyPairSync, type KeyObject, sign } from "node:crypto";
import { Writable } from "node:stream";
import { createKit } from "@proto/kit";
import { createService } from "@proto/kit/fastify";
import { encodeDidKey, rawPublicKey, type SpendLimit } from "@proto/protocol";
import { buildDirectoryApp, buildTrustApp, readDirectoryConfig, readTrustConfig } from "@proto/server";
import { createTestCA, createTestDatabase, DISCOVERY_PATH, freePort, startHttpsHost } from "@proto/testkit";
import Fastify from "fastify";
import { buildNotesService } from "../../../../examples/service/src/app.js";
import { putGrant } from "../../../server/src/trust/authority/grants.js";

/** Every run of the suite comes from 127.0.0.1: limits high enough never to meet one; the limiter stays on. */
const RELAXED_RATE_LIMITS =
  "link_start=100000/60,link_start_agent=100000/3600,link_poll=100000/60,token=100000/60,approval_poll=100000/60";

const quiet = () =>
  new Writable({
    write(_chunk, _encoding, done) {
      done();
    },
  });

async function post(url: string, body: unknown): Promise<Record<string, unknown>> {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const json = (await response.json()) as Record<string, unknown>;
  if (!response.ok) throw new Error(`${url} answered ${response.status}: ${JSON.stringify(json)}`);
  return json;
}

export interface Attestor {
  /** Where it listens. */
  url: string;
  /** Links a new agent through the test hook; its key as PEM, for `--agent-key`. */
  linkAgent(): Promise<{ did: string; pem: string }>;
  /** The agent's person grants it `permissions` (and limits) at `aud`, as on their account page. */
  grant(agentDid: string, aud: string, content: { permissions: string[]; spendLimits?: SpendLimit[] }): Promise<void>;
  close(): Promise<void>;
}

/**
 * An attestor listening on `port` whose `{trust_url}` is `publicUrl` (by default its own URL; a
 * stand-in in front of it passes its own, so what the attestor signs for is what the probes use).
 */
export async function startAttestor(options: { publicUrl?: string; port?: number } = {}): Promise<Attestor> {
  const port = options.port ?? (await freePort());
  const url = `http://127.0.0.1:${port}`;
  const database = await createTestDatabase("sqlite", "conformance");
  const app = await buildTrustApp(
    readTrustConfig({
      PROTO_TEST_HOOKS: "1",
      TRUST_PUBLIC_URL: options.publicUrl ?? url,
      TRUST_DATABASE_URL: database.url,
      TRUST_KEY_ENCRYPTION_KEY: Buffer.alloc(32, 7).toString("base64url"),
      TRUST_PSEUDONYM_KEY: Buffer.alloc(32, 9).toString("base64url"),
      TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS,
      LOG_LEVEL: "warn",
    }),
    { logStream: quiet() },
  );
  await app.app.listen({ port, host: "127.0.0.1" });
  return {
    url,
    async linkAgent() {
      const { privateKey, publicKey } = generateKeyPairSync("ed25519");
      const raw = rawPublicKey(publicKey);
      const did = encodeDidKey(raw);
      const started = await post(`${url}/v1/link/start`, {
        agent_did: did,
        agent_pubkey_b64: Buffer.from(raw).toString("base64url"),
      });
      const reqId = String(started.req_id);
      await post(`${url}/__test/link/confirm`, { req_id: reqId, email: `person-${port}@example.com` });
      const polled = await post(`${url}/v1/link/poll`, { req_id: reqId, sig_b64: signUtf8(privateKey, reqId) });
      if (polled.state !== "confirmed") throw new Error(`the link did not confirm: ${JSON.stringify(polled)}`);
      return { did, pem: privateKey.export({ type: "pkcs8", format: "pem" }).toString() };
    },
    async grant(agentDid, aud, content) {
      const db = app.service.database.db;
      const binding = await db
        .selectFrom("trust_bindings")
        .select(["id", "human_id"])
        .where("agent_did", "=", agentDid)
        .where("revoked_at", "is", null)
        .executeTakeFirstOrThrow();
      await db.transaction().execute((trx) =>
        putGrant(
          trx,
          {
            bindingId: binding.id,
            humanId: binding.human_id,
            aud,
            serviceUrl: `https://${aud.slice("did:web:".length).replace("%3A", ":")}`,
            now: Date.now(),
            method: "session",
          },
          { permissions: content.permissions, spendLimits: content.spendLimits ?? [], expiresAt: null },
        ),
      );
    },
    async close() {
      await app.close();
      await database.drop();
    },
  };
}

const signUtf8 = (key: KeyObject, text: string) => sign(null, Buffer.from(text, "utf8"), key).toString("base64url");

export interface Directory {
  url: string;
  /** A read-only mirror of this directory, synced once. */
  mirror(): Promise<{ url: string; close(): Promise<void> }>;
  close(): Promise<void>;
}

/** Titles and tags of the listings made: enough for every filter to have something to match. */
const LISTINGS = [
  { title: "Notes for agents", description: "Keeps notes", tags: ["notes", "productivity"] },
  { title: "Weather service", description: "Forecasts by city", tags: ["weather"] },
  { title: "Calendar", description: "Meetings and NOTES", tags: ["calendar", "productivity"] },
];

export async function startDirectory(): Promise<Directory> {
  const ca = await createTestCA();
  const hostnames = LISTINGS.map((_, i) => `site${i}.test`);
  const sites = await startHttpsHost({ ca, hostnames });
  const database = await createTestDatabase("sqlite", "conformance");
  const env: Record<string, string> = {
    PROTO_TEST_HOOKS: "1",
    PROTO_FETCH_ALLOW_PRIVATE: "1",
    PROTO_FETCH_RESOLVE: sites.resolveEntries(),
    DIRECTORY_DATABASE_URL: database.url,
    DIRECTORY_PUBLIC_URL: "https://directory.test",
    DIRECTORY_ADMIN_TOKEN: "admin-token-for-tests-0123456789",
    DIRECTORY_REVALIDATE_TICK_SECONDS: "0",
    DIRECTORY_RATE_LIMITS: "challenge=100000/60,read=100000/60,sitemap=100000/60",
    DIRECTORY_HOST_CHALLENGE_LIMIT: "100000",
    LOG_LEVEL: "warn",
  };
  const app = await buildDirectoryApp(readDirectoryConfig(env), { logStream: quiet(), fetchCa: ca.certPem });
  await app.app.listen({ port: 0, host: "127.0.0.1" });
  const address = app.app.server.address();
  if (address === null || typeof address === "string") throw new Error("no address");
  const url = `http://127.0.0.1:${address.port}`;

  // One host answers for every site name; each site's discovery document and proof are chosen by Host.
  const proofs = new Map<string, string>();
  const siteOf = (host: string | undefined) => (host ?? "").split(":")[0] ?? "";
  sites.route(DISCOVERY_PATH, (req, res) => {
    const name = siteOf(req.headers.host);
    const authority = `${name}:${sites.port}`;
    res.writeHead(200, { "content-type": "application/json" });
    res.end(
      JSON.stringify({
        proto_version: "0.1",
        service_did: `did:web:${name}%3A${sites.port}`,
        endpoints: {
          accounts: "/proto/v1/accounts",
          owner_invitation: "/proto/v1/accounts/me/owner-invitation",
          claim_page: `https://${authority}/claim`,
          claim_completion: "/proto/v1/claim",
        },
        signature_algorithms: ["ed25519"],
      }),
    );
  });
  sites.route("/.well-known/proto-registry-proof", (req, res) => {
    res.writeHead(200, { "content-type": "text/plain" });
    res.end(proofs.get(siteOf(req.headers.host)) ?? "");
  });
  for (const [i, listing] of LISTINGS.entries()) {
    const name = hostnames[i] ?? "";
    const discoveryUrl = `https://${name}:${sites.port}${DISCOVERY_PATH}`;
    const challenge = await post(`${url}/v1/listings/challenge`, { discovery_url: discoveryUrl });
    proofs.set(name, String(challenge.challenge_token));
    await post(`${url}/v1/listings`, {
      discovery_url: discoveryUrl,
      challenge_token: challenge.challenge_token,
      ...listing,
    });
  }

  const mirrors: { close(): Promise<void> }[] = [];
  return {
    url,
    async mirror() {
      const mirrorDb = await createTestDatabase("sqlite", "conformance-mirror");
      const mirrorApp = await buildDirectoryApp(
        readDirectoryConfig({
          ...env,
          DIRECTORY_DATABASE_URL: mirrorDb.url,
          DIRECTORY_PUBLIC_URL: "https://mirror.test",
          DIRECTORY_MIRROR_OF: url,
          DIRECTORY_MIRROR_POLL_SECONDS: "0",
        }),
        { logStream: quiet() },
      );
      await mirrorApp.app.listen({ port: 0, host: "127.0.0.1" });
      const mirrorAddress = mirrorApp.app.server.address();
      if (mirrorAddress === null || typeof mirrorAddress === "string") throw new Error("no address");
      const mirrorUrl = `http://127.0.0.1:${mirrorAddress.port}`;
      await post(`${mirrorUrl}/__test/mirror/sync`, {});
      const handle = {
        url: mirrorUrl,
        async close() {
          await mirrorApp.close();
          await mirrorDb.drop();
        },
      };
      mirrors.push(handle);
      return handle;
    },
    async close() {
      for (const m of mirrors) await m.close();
      await app.close();
      await sites.close();
      await database.drop();
    },
  };
}

export interface Notes {
  /** Where it listens (its public URL unless a stand-in is in front). */
  url: string;
  /** The attestor whose attestations it accepts. */
  attestor: Attestor;
  close(): Promise<void>;
}

/**
 * The example notes service (@proto/kit, `attested_only`) on SQLite over plain http, accepting our
 * attestor's attestations. Its public URL is `publicUrl` (by default its own): a stand-in in front
 * passes its own, so the `@target-uri` an agent signs is the one the service checks.
 */
export async function startNotes(options: { publicUrl?: string; port?: number } = {}): Promise<Notes> {
  const port = options.port ?? (await freePort());
  const url = `http://127.0.0.1:${port}`;
  const attestor = await startAttestor();
  const database = await createTestDatabase("sqlite", "conformance-notes");
  const notes = await buildNotesService({
    publicUrl: options.publicUrl ?? url,
    database: database.url,
    attestorUrl: attestor.url,
    mail: { developmentOutbox: true },
  });
  await notes.app.listen({ port, host: "127.0.0.1" });
  return {
    url,
    attestor,
    async close() {
      await notes.close();
      await database.drop();
      await attestor.close();
    },
  };
}

/**
 * A service on @proto/kit whose `unclaimed_mode` is `free` (implicit signup, no attestation), taking
 * e-mail and `did` recipients: the other posture the service probes know.
 */
export async function startFreeService(): Promise<{ url: string; close(): Promise<void> }> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const database = await createTestDatabase("sqlite", "conformance-free");
  const kit = await createKit({
    publicUrl: url,
    // Conformance probes on this machine speak plain http; proto agents would need https.
    allowHttp: true,
    database: database.url,
    discovery: {
      service_did: `did:web:127.0.0.1%3A${port}`,
      billing: { unclaimed_mode: "free" },
      recipient_types: ["email", "did"],
    },
    mail: { developmentOutbox: true },
  });
  const app = Fastify({ logger: false });
  await app.register(createService(kit));
  await app.listen({ port, host: "127.0.0.1" });
  return {
    url,
    async close() {
      await app.close();
      await kit.close();
      await database.drop();
    },
  };
}
