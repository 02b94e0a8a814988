/**
 * OUR attestor and the notes service, wired as in production, for the tests of bounded authority:
 * the notes service over real HTTPS (a test CA, the host `localhost`, which the `proto` command
 * resolves by itself), the attestor in this process on one store variant (SQLite, or PostgreSQL
 * + Redis), allowed to read the notes service's discovery document (its declared permissions).
 * Agents are made with the @proto/agent SDK and linked through the attestor's test hook; grants
 * are written into the attestor's database as the person's approval writes them.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Agent } from "@proto/agent";
import type { SpendLimit } from "@proto/protocol";
import { buildTrustApp, readTrustConfig } from "@proto/server";
import { createTestCA, createTestDatabase, freePort, type TestCA, type TestFetch, testFetch } from "@proto/testkit";
import { type Grant, putGrant } from "../../../../packages/server/src/trust/authority/grants.js";
import { quietLog } from "../../../../packages/server/test/support/http.js";
import type { StoreVariant } from "../../../../packages/server/test/support/stores.js";
import { trustTestEnv } from "../../../../packages/server/test/support/trust.js";
import { buildNotesService, type NotesService } from "../../src/app.js";

export type TrustApp = Awaited<ReturnType<typeof buildTrustApp>>;

export interface AgentGrant {
  aud: string;
  serviceUrl: string;
  permissions: string[];
  spendLimits?: SpendLimit[];
  /** The attestor's clock, milliseconds since the epoch. */
  now: number;
}

/**
 * Sets the grant of the agent's live binding at `aud` as the person's approval does (`putGrant`,
 * in one transaction on the attestor's database); the agent's next mint carries it.
 */
export async function putAgentGrant(trust: TrustApp, agentDid: string, grant: AgentGrant): Promise<Grant> {
  const db = trust.service.database.db;
  const binding = await db
    .selectFrom("trust_bindings")
    .select(["id", "human_id"])
    .where("agent_did", "=", agentDid)
    .where("revoked_at", "is", null)
    .executeTakeFirstOrThrow();
  return db.transaction().execute((trx) =>
    putGrant(
      trx,
      {
        bindingId: binding.id,
        humanId: binding.human_id,
        aud: grant.aud,
        serviceUrl: grant.serviceUrl,
        now: grant.now,
        method: "passkey",
      },
      { permissions: grant.permissions, spendLimits: grant.spendLimits ?? [], expiresAt: null },
    ),
  );
}

export interface NotesStack {
  temp: string;
  ca: TestCA;
  /** The test CA's certificate as a file (for `NODE_EXTRA_CA_CERTS`). */
  caFile: string;
  trust: TrustApp;
  trustUrl: string;
  notes: NotesService;
  /** `https://localhost:PORT`. */
  publicUrl: string;
  /** A fetch that trusts the test CA. */
  fetch: TestFetch;
  /** A new agent (its own home), linked to the person `email` through the attestor's test hook. */
  linkAgent(label: string, email?: string): Promise<Agent>;
  /**
   * Sets the agent's grant at the notes service as an approval does (`putGrant`, in one
   * transaction on the attestor's database); the agent's next mint carries it.
   */
  grant(agent: Agent, content: { permissions: string[]; spendLimits?: SpendLimit[] }): Promise<Grant>;
  close(): Promise<void>;
}

export interface NotesStackOptions {
  /** More of the attestor's environment (SMTP_URL and MAIL_FROM, say). */
  trustEnv?: Record<string, string>;
  /**
   * The attestor's host name in its public URL (default `127.0.0.1`; it listens there either way):
   * `localhost` for passkeys, since WebAuthn needs a domain for its relying-party ID.
   */
  attestorHost?: "127.0.0.1" | "localhost";
}

export async function startNotesStack(variant: StoreVariant, options: NotesStackOptions = {}): Promise<NotesStack> {
  const temp = mkdtempSync(join(tmpdir(), "proto-notes-authority-"));
  const ca = await createTestCA();
  const caFile = ca.writeCertFile(temp);
  const trustDb = await createTestDatabase(variant.engine, "notes_auth_trust");
  const notesDb = await createTestDatabase(variant.engine, "notes_auth_notes");
  const [trustPort, notesPort] = [await freePort(), await freePort()];
  const trustUrl = `http://${options.attestorHost ?? "127.0.0.1"}:${trustPort}`;
  const publicUrl = `https://localhost:${notesPort}`;
  const serviceDid = `did:web:localhost%3A${notesPort}`;
  const parts: { trust?: TrustApp; notes?: NotesService; fetch?: TestFetch } = {};
  const close = async () => {
    await parts.notes?.close();
    await parts.trust?.close();
    await parts.fetch?.close();
    await notesDb.drop();
    await trustDb.drop();
    rmSync(temp, { recursive: true, force: true });
  };
  try {
    const trust = await buildTrustApp(
      readTrustConfig({
        ...trustTestEnv(variant, trustDb.url, trustUrl),
        // Owners sign in to the notes service with the attestor.
        TRUST_OIDC_CLIENTS: JSON.stringify([
          { client_id: serviceDid, service_did: serviceDid, redirect_uris: [`${publicUrl}/proto/owner/callback`] },
        ]),
        // The notes service is on this machine: the attestor reads its declared permissions there.
        PROTO_FETCH_ALLOW_PRIVATE: "1",
        ...options.trustEnv,
      }),
      {
        logStream: quietLog(),
        redisPrefix: `test:notes-authority:${randomBytes(4).toString("hex")}:`,
        fetchCa: ca.certPem,
      },
    );
    parts.trust = trust;
    await trust.app.listen({ port: trustPort, host: "127.0.0.1" });

    const { certPem, keyPem } = await ca.issue(["localhost"]);
    const notes = await buildNotesService({
      publicUrl,
      database: notesDb.url,
      attestorUrl: trustUrl,
      https: { key: keyPem, cert: certPem },
      mail: { developmentOutbox: true },
    });
    parts.notes = notes;
    await notes.app.listen({ port: notesPort, host: "127.0.0.1" });
    const fetch = testFetch(ca);
    parts.fetch = fetch;

    const hook = async (path: string, body: unknown) => {
      const answer = await fetch(`${trustUrl}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      const text = await answer.text();
      if (answer.status !== 200) throw new Error(`${path} answered ${answer.status}: ${text}`);
      return JSON.parse(text) as Record<string, unknown>;
    };

    return {
      temp,
      ca,
      caFile,
      trust,
      trustUrl,
      notes,
      publicUrl,
      fetch,
      async linkAgent(label, email = `person-${randomBytes(5).toString("hex")}@mail.test`) {
        const agent = Agent.init({
          home: join(temp, `agent-${randomBytes(5).toString("hex")}`),
          fetch,
          attestorUrl: trustUrl,
        }).agent;
        const request = await agent.attestor().linkStart({ label });
        await hook("/__test/link/confirm", { req_id: request.req_id, email });
        const polled = await agent.attestor().pollOnce(request.req_id);
        if (polled.state !== "confirmed") throw new Error(`the link of ${label} is ${polled.state}`);
        return agent;
      },
      async grant(agent, content) {
        // The attestor's clock (its test hook answers it), which tests may have moved.
        const now = Date.parse((await hook("/__test/clock", {})).now as string);
        return putAgentGrant(trust, agent.did, { ...content, aud: notes.serviceDid, serviceUrl: publicUrl, now });
      },
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}
