/**
 * Bounded authority in the agent's suites: a notes service built on our kit (over HTTPS, accepting
 * the test attestor's tokens) whose routes need permissions and whose pins spend money; and what a
 * person does at the attestor, through its domain functions on its own database: a grant set on
 * their account, an approval approved or declined.
 */
import { createKit, type Kit } from "@proto/kit";
import { agentRoute, createService, protoServerOptions } from "@proto/kit/fastify";
import { RemoteKeySet, type SpendLimit } from "@proto/protocol";
import { testFetch } from "@proto/testkit";
import Fastify, { type FastifyInstance } from "fastify";
import {
  type ApprovalReview,
  approveApproval,
  declineApproval,
  reviewApproval,
} from "../../../server/src/trust/authority/approvals.js";
import { type ApprovalMethod, type Grant, putGrant, revokeGrant } from "../../../server/src/trust/authority/grants.js";
import { type Attestor, closedPort, type TestEnv } from "./env.js";

export const PERMISSIONS = {
  "notes:read": { description: "Read your notes", default: true },
  "notes:write": { description: "Write and delete your notes" },
  "notes:export": { description: "Export every note", phishing_resistant: true },
  "notes:share": { description: "Share a note with someone" },
  purchase: { description: "Pay for pinned notes", currency: "EUR" },
};

/** What a pin costs, in cents. */
export const PIN_PRICE = 500;

export interface NotesService {
  origin: string;
  did: string;
  kit: Kit;
  close(): Promise<void>;
}

/**
 * The notes service on `https://localhost:PORT`, attested_only, taking the test attestor's tokens:
 * `GET /notes` (notes:read, a default), `DELETE /notes/:id` (notes:write), `GET /export`
 * (notes:export, approved with a passkey), `POST /notes/:id/share` (notes:share),
 * `POST /notes/:id/pin` (spends `PIN_PRICE` EUR cents under `purchase`, once per note).
 */
export async function startNotesService(env: TestEnv): Promise<NotesService> {
  const { certPem, keyPem } = await env.ca.issue(["localhost"]);
  const port = await closedPort();
  const origin = `https://localhost:${port}`;
  const did = `did:web:localhost%3A${port}`;
  const keys = testFetch(env.ca);
  const kit = await createKit({
    publicUrl: origin,
    discovery: { service_did: did, billing: { unclaimed_mode: "attested_only" }, recipient_types: ["oidc"] },
    permissions: PERMISSIONS,
    database: "sqlite::memory:",
    attestors: {
      "proto-trust": {
        url: env.trustUrl,
        keySet: new RemoteKeySet(`${env.trustUrl}/.well-known/jwks.json`, { fetch: keys }),
        signIn: false,
      },
    },
    webBotAuth: false,
  });
  const app: FastifyInstance = Fastify({ ...protoServerOptions(), https: { key: keyPem, cert: certPem } });
  await app.register(createService(kit));
  app.get("/notes", agentRoute(kit, { permissions: ["notes:read"] }), async () => ({ notes: [1, 2, 3] }));
  app.delete("/notes/:id", agentRoute(kit, { permissions: ["notes:write"] }), async (request) => ({
    deleted: (request.params as { id: string }).id,
  }));
  app.get("/export", agentRoute(kit, { permissions: ["notes:export"] }), async () => ({ exported: true }));
  app.post("/notes/:id/share", agentRoute(kit, { permissions: ["notes:share"] }), async (request) => ({
    shared: (request.params as { id: string }).id,
  }));
  app.post("/notes/:id/pin", agentRoute(kit), async (request, reply) => {
    const id = (request.params as { id: string }).id;
    try {
      const spent = await kit.spend(request.proto as NonNullable<typeof request.proto>, {
        amount: PIN_PRICE,
        currency: "EUR",
        reference: `pin:${id}`,
      });
      return { pinned: id, spent: spent.amount };
    } catch (error) {
      // As the kit's README answers a refusal: its status, challenge and envelope.
      const refusal = kit.errorResponse(error);
      return reply.code(refusal.status).headers(refusal.headers).send(refusal.body);
    }
  });
  await app.listen({ port, host: "127.0.0.1" });
  return {
    origin,
    did,
    kit,
    async close() {
      await app.close();
      await kit.close();
      await keys.close();
    },
  };
}

/** The agent's live binding at the attestor, and its person. */
export async function bindingOf(attestor: Attestor, agentDid: string): Promise<{ bindingId: string; humanId: string }> {
  const row = await attestor.trust.service.database.db
    .selectFrom("trust_bindings")
    .select(["id", "human_id"])
    .where("agent_did", "=", agentDid)
    .where("revoked_at", "is", null)
    .executeTakeFirstOrThrow();
  return { bindingId: row.id, humanId: row.human_id };
}

/** The attestor's clock (its test clock may have been moved): approvals expire on it. */
async function clockOf(attestor: Attestor): Promise<{ now(): number }> {
  const { json } = await attestor.hook("/__test/clock", {});
  const offsetMs = Number(json.offset_seconds) * 1000;
  return { now: () => Date.now() + offsetMs };
}

/** The person sets the agent's grant at `aud` on their account (as the attestor's pages do). */
export async function setGrant(
  attestor: Attestor,
  agentDid: string,
  service: { aud: string; serviceUrl: string },
  content: { permissions: string[]; spendLimits?: SpendLimit[]; expiresAt?: number | null },
): Promise<Grant> {
  const { bindingId, humanId } = await bindingOf(attestor, agentDid);
  const now = (await clockOf(attestor)).now();
  return attestor.trust.service.database.db.transaction().execute((trx) =>
    putGrant(
      trx,
      { bindingId, humanId, aud: service.aud, serviceUrl: service.serviceUrl, now, method: "session" },
      {
        permissions: content.permissions,
        spendLimits: content.spendLimits ?? [],
        expiresAt: content.expiresAt ?? null,
      },
    ),
  );
}

/** The person revokes the grant on their account page (its domain function). */
export async function revokeGrantOf(attestor: Attestor, agentDid: string, grantId: string): Promise<boolean> {
  const { humanId } = await bindingOf(attestor, agentDid);
  const now = (await clockOf(attestor)).now();
  return attestor.trust.service.database.db
    .transaction()
    .execute((trx) => revokeGrant(trx, humanId, grantId, { now, method: "session" }));
}

/** The person approves the agent's request (`passkey`: as after the ceremony the page runs). */
export async function approve(
  attestor: Attestor,
  agentDid: string,
  approvalId: string,
  method: ApprovalMethod = "session",
): Promise<Grant> {
  const { humanId } = await bindingOf(attestor, agentDid);
  return approveApproval(attestor.trust.service.database.db, humanId, approvalId, method, await clockOf(attestor));
}

/** The person declines the agent's request. */
export async function decline(attestor: Attestor, agentDid: string, approvalId: string): Promise<void> {
  const { humanId } = await bindingOf(attestor, agentDid);
  await declineApproval(attestor.trust.service.database.db, humanId, approvalId, (await clockOf(attestor)).now());
}

/** The request as its person sees it on the approval page: the agent's reason, what would change. */
export async function review(attestor: Attestor, agentDid: string, approvalId: string): Promise<ApprovalReview> {
  const { humanId } = await bindingOf(attestor, agentDid);
  const found = await reviewApproval(
    attestor.trust.service.database.db,
    humanId,
    approvalId,
    (await clockOf(attestor)).now(),
  );
  if (found === undefined) throw new Error(`no approval ${approvalId} for this person`);
  return found;
}
