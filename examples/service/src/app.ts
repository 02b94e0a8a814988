/**
 * The notes service: a small Fastify application built on @proto/kit.
 *
 * - `/.well-known/proto` and every kit endpoint (accounts, owner invitation, claim page, claim
 *   completion, key rotation, owner sign-in with the attestor, the e-mail ceremony) come from
 *   `createService(kit)`. Owners are invited by e-mail address (the kit mails the link) or as
 *   the person their agent's attestations name at the attestor (`oidc`).
 * - `POST /notes`, `GET /notes`, `DELETE /notes[/:id]` and `POST /notes/:id/pin` are the service's
 *   own agent API, guarded by the kit: a valid request signature, an attestation at signup
 *   (`attested_only`), and the permissions the person granted (`NOTES_PERMISSIONS`): reading and
 *   writing by default, deleting once the person approved it with a passkey, pinning paid for
 *   under the person's spend limits.
 * - `GET /owner` is the page where a person who claimed an agent reads its notes.
 * - `GET /.well-known/proto-registry-proof` serves the directory's challenge token from `proofDir`,
 *   where `proto directory register --proof-dir` (or `writeProofFile`) puts it.
 */
import { timingSafeEqual } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import formbody from "@fastify/formbody";
import {
  type AccountRecord,
  type AgentContext,
  createKit,
  type InvitationEvent,
  type Kit,
  type KitMailOptions,
  type KitWebBotAuthOptions,
  type OwnerSession,
  openKitStore,
} from "@proto/kit";
import { agentRoute, createService, protoServerOptions } from "@proto/kit/fastify";
import {
  type DiscoveryPermissions,
  type FetchFunction,
  isDidKey,
  ProtoError,
  protoError,
  recipientKey,
} from "@proto/protocol";
import Fastify, { type FastifyInstance, type FastifyReply } from "fastify";
import { mountMcp } from "./mcp.js";
import { type Note, NotesStore } from "./notes-store.js";
import {
  type ConfirmInput,
  confirmPage,
  donePage,
  escapeHtml,
  homePage,
  messagePage,
  type OwnedAgent,
  ownerPage,
  PAGE_HEADERS,
  signInAgainPage,
} from "./pages.js";
import { noteNotFound, pinNote } from "./pins.js";

/** The attestation issuer of our attestor (`iss` of its attestations). */
export const DEFAULT_ATTESTOR_ISSUER = "proto-trust";
/** The attestor in words: the name its own pages carry. */
export const DEFAULT_ATTESTOR_NAME = "proto trust";
/** Longest note, in characters (Unicode code points). */
export const MAX_NOTE_LENGTH = 2000;
export const OWNER_PAGE = "/owner";
export const PROOF_PATH = "/.well-known/proto-registry-proof";

/**
 * What an agent may do here (docs/authority.md). Reading and writing are granted at sign-up, so
 * every agent (an upstream SDK's, an attestor's without grants) works as it always did; deleting
 * needs the person's approval with a passkey; pinning is paid, under the person's spend limits.
 */
export const NOTES_PERMISSIONS = {
  "notes:read": { description: "Read your notes", default: true },
  "notes:write": { description: "Add notes", default: true },
  "notes:delete": { description: "Delete your notes", phishing_resistant: true },
  purchase: { description: "Pay to pin notes", currency: "EUR" },
} as const satisfies DiscoveryPermissions;

export interface NotesServiceOptions {
  /** The public origin agents sign and people visit (`https://notes.example`), whatever the process listens on. */
  publicUrl: string;
  /** `sqlite:PATH`, `sqlite::memory:` or `postgres://...`: the kit's tables and the notes. */
  database: string;
  /** Default `did:web:<host of publicUrl>` (a port is encoded as `%3A`). */
  serviceDid?: string;
  /** `{trust_url}` of the attestor whose attestations are accepted (and where owners sign in). */
  attestorUrl: string;
  /** Its attestation issuer (default `proto-trust`). */
  attestorIssuer?: string;
  /** What people call the attestor on the claim page ("Sign in with proto trust"); default `proto trust`. */
  attestorName?: string;
  /** Owners sign in (and claim agents) only with a passkey at the attestor (the kit's `phishingResistantSignIn`). */
  phishingResistantSignIn?: boolean;
  /** The folder whose `.well-known/proto-registry-proof` is served (directory listing); none: 404. */
  proofDir?: string;
  /** Serve HTTPS directly (PEM key and certificate); otherwise plain HTTP, e.g. behind a TLS proxy. */
  https?: { key: string | Buffer; cert: string | Buffer };
  /** Fastify's logger (default off). */
  logger?: boolean | { level: string };
  /** Milliseconds since the epoch (default `Date.now`). */
  now?: () => number;
  /** The fetch the kit reaches the attestor with (key set, OpenID configuration). */
  fetch?: FetchFunction;
  /**
   * How the links of e-mail invitations reach the person: SMTP (`smtpUrl` + `from`) or, in
   * development, the outbox at `/proto/owner/dev/outbox` (see `@proto/kit`).
   */
  mail: KitMailOptions;
  /** Called when an agent stages an owner invitation (`mailed` says whether the kit mailed its link). */
  onInvitation?: (event: InvitationEvent) => void | Promise<void>;
  /** Web Bot Auth callers (see `@proto/kit`); default on, key directories reached through the SSRF-safe fetch. */
  webBotAuth?: false | KitWebBotAuthOptions;
}

export interface NotesService {
  app: FastifyInstance;
  kit: Kit;
  notes: NotesStore;
  serviceDid: string;
  /** The redirect URI to register at the attestor (`TRUST_OIDC_CLIENTS`). */
  redirectUri: string;
  /** The `TRUST_OIDC_CLIENTS` entry the attestor needs for owner sign-in. */
  oidcClient: { client_id: string; service_did: string; redirect_uris: string[] };
  /** Closes the server, the kit and the database. */
  close(): Promise<void>;
}

/** `did:web:<host>` for a public URL: `https://notes.example:8443` -> `did:web:notes.example%3A8443`. */
export function didWebFor(publicUrl: string): string {
  return `did:web:${new URL(publicUrl).host.replace(":", "%3A")}`;
}

function safeEqual(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
}

/** `{ "text": "..." }`, nothing else; 1 to 2,000 characters, not only white space. */
export function parseNoteText(body: Record<string, unknown>): string {
  const unknown = Object.keys(body).filter((key) => key !== "text");
  if (unknown.length > 0) {
    throw protoError("malformed_request", { message: `unknown field ${JSON.stringify(unknown[0])}; send {"text"}` });
  }
  const text = body.text;
  if (typeof text !== "string") throw protoError("malformed_request", { message: "text (a string) is required" });
  if (text.trim().length === 0) throw new ProtoError("notes_invalid_text", 400, "the note is empty");
  const length = [...text].length;
  if (length > MAX_NOTE_LENGTH) {
    throw new ProtoError(
      "notes_invalid_text",
      400,
      `a note has at most ${MAX_NOTE_LENGTH} characters (this one has ${length})`,
    );
  }
  return text;
}

function noteResource(note: Note) {
  return { id: note.id, text: note.text, created_at: new Date(note.createdAt).toISOString(), pinned: note.pinned };
}

/** The agent a guarded route's handler serves (the kit's guard ran before it). */
function agentOf(request: { proto?: AgentContext | null }): AgentContext {
  if (request.proto === undefined || request.proto === null) throw new Error("the kit's guard did not run");
  return request.proto;
}

function sendError(reply: FastifyReply, error: ProtoError): FastifyReply {
  return reply
    .code(error.status)
    .headers({ ...error.headers(), "cache-control": "no-store" })
    .send(error.toEnvelope());
}

/** The kit's ownership rule: a claimed account whose owner is this person or one of the session's identities. */
function isOwner(session: OwnerSession, keys: Set<string>, record: AccountRecord): boolean {
  if (record.claimedAt === undefined) return false;
  if (record.ownerPersonId !== undefined && record.ownerPersonId === session.personId) return true;
  return record.ownerKey !== undefined && keys.has(record.ownerKey);
}

export async function buildNotesService(options: NotesServiceOptions): Promise<NotesService> {
  const publicUrl = new URL(options.publicUrl);
  const serviceDid = options.serviceDid ?? didWebFor(publicUrl.href);
  const issuer = options.attestorIssuer ?? DEFAULT_ATTESTOR_ISSUER;
  const attestorUrl = new URL(options.attestorUrl);
  const now = options.now ?? Date.now;

  const store = await openKitStore(options.database);
  let kit: Kit;
  let notes: NotesStore;
  try {
    notes = await NotesStore.open(store);
    kit = await createKit({
      publicUrl: publicUrl.origin,
      // Without TLS (no NOTES_TLS_CERT) the service is for browsers and tests on this machine: the
      // kit refuses plain http anywhere else, and agents call services over https only.
      allowHttp: publicUrl.protocol === "http:",
      // The kit's pages (the claim page) say "Notes" and link on to this service's owner page.
      serviceName: "Notes",
      ownerPage: OWNER_PAGE,
      store,
      permissions: NOTES_PERMISSIONS,
      discovery: {
        service_did: serviceDid,
        // An e-mail recipient proves the address with the link the kit mails (every conforming
        // service takes `email`); an `oidc` recipient signs in with the attestor, which proves a
        // pairwise subject there and never an address.
        recipient_types: ["email", "oidc"],
        limits: { unclaimed_rate_limit_per_hour: 600 },
        billing: { unclaimed_mode: "attested_only", accepted_attestors: [issuer] },
        features: ["attestation", "key_rotation"],
        // `mcp` (where agents find the tools, docs/discovery-mcp.md) is written by the kit when
        // mountMcp configures the protected resource.
      },
      attestors: {
        // Plain http is accepted for an attestor on this machine only (development, tests).
        [issuer]: { url: attestorUrl.href, displayName: options.attestorName ?? DEFAULT_ATTESTOR_NAME },
      },
      now,
      mail: options.mail,
      phishingResistantSignIn: options.phishingResistantSignIn ?? false,
      ...(options.fetch === undefined ? {} : { fetch: options.fetch }),
      ...(options.onInvitation === undefined ? {} : { onInvitation: options.onInvitation }),
      ...(options.webBotAuth === undefined ? {} : { webBotAuth: options.webBotAuth }),
    });
  } catch (error) {
    await store.close();
    throw error;
  }

  // Claim links carry their token in the query: request logs show paths only.
  const logger =
    options.logger === undefined || options.logger === false
      ? false
      : {
          ...(options.logger === true ? {} : options.logger),
          serializers: {
            req: (request: { method: string; url: string }) => ({
              method: request.method,
              url: request.url.split("?")[0],
            }),
          },
        };
  // Errors refused before any route is known answer in the envelope too (see protoServerOptions).
  const serverOptions = protoServerOptions();
  const app = (options.https === undefined
    ? Fastify({ logger, ...serverOptions })
    : Fastify({
        logger,
        ...serverOptions,
        https: { ...options.https, ...serverOptions.http },
      })) as unknown as FastifyInstance;
  app.addHook("onClose", async () => {
    await kit.close();
    await store.close();
  });

  app.setErrorHandler((error: Error & { statusCode?: number }, request, reply) => {
    // Through the kit: a refusal for want of a permission carries the challenge naming it.
    if (error instanceof ProtoError) {
      const refusal = kit.errorResponse(error);
      return reply
        .code(refusal.status)
        .headers({ ...refusal.headers, "cache-control": "no-store" })
        .send(refusal.body);
    }
    const status = error.statusCode ?? 500;
    if (status === 413) return sendError(reply, new ProtoError("payload_too_large", 413, "the body is too large"));
    if (status >= 400 && status < 500) return sendError(reply, new ProtoError("malformed_request", 400, error.message));
    request.log.error({ err: error }, "unexpected error");
    return sendError(reply, new ProtoError("internal_error", 500, "an unexpected error occurred"));
  });
  app.setNotFoundHandler((_request, reply) => sendError(reply, new ProtoError("not_found", 404, "no such route")));

  // `/.well-known/proto`, the kit's agent endpoints, the claim page and the owner routes.
  await app.register(createService(kit));

  // The service's own agent API. Bodies reach the handler as the exact signed bytes; the kit
  // verifies them (signature, replay, revocation, attestation, account, rate limit) before.
  await app.register(async (api) => {
    api.removeAllContentTypeParsers();
    api.addContentTypeParser("*", { parseAs: "buffer" }, (_request, body, done) => done(null, body));
    api.addHook("onSend", async (_request, reply) => {
      reply.header("cache-control", "no-store");
    });

    api.post(
      "/notes",
      { ...agentRoute(kit, { route: "notes.write", permissions: ["notes:write"] }), bodyLimit: kit.maxBodyBytes },
      async (request, reply) => {
        const agent = agentOf(request);
        const note = await notes.add(agent.record.id, parseNoteText(agent.json()), now());
        return reply.code(201).send({ note: noteResource(note) });
      },
    );

    api.get("/notes", agentRoute(kit, { route: "notes.read", permissions: ["notes:read"] }), async (request) => {
      return { notes: (await notes.list(agentOf(request).record.id)).map(noteResource) };
    });

    // Deleting needs `notes:delete`, which no agent holds until its person approved it.
    const deleting = agentRoute(kit, { route: "notes.delete", permissions: ["notes:delete"] });
    api.delete<{ Params: { id: string } }>("/notes/:id", deleting, async (request) => {
      if (!(await notes.remove(agentOf(request).record.id, request.params.id))) throw noteNotFound();
      return { deleted: 1 };
    });
    api.delete("/notes", deleting, async (request) => ({ deleted: await notes.removeAll(agentOf(request).record.id) }));

    // Pinning is paid (0.50 EUR, `kit.spend`): the permission is `purchase`, checked as it spends.
    api.post<{ Params: { id: string } }>(
      "/notes/:id/pin",
      { ...agentRoute(kit, { route: "notes.pin" }), bodyLimit: kit.maxBodyBytes },
      async (request) => {
        const pinned = await pinNote(kit, notes, agentOf(request), request.params.id, now());
        return {
          note: noteResource(pinned.note),
          payment: {
            reference: pinned.reference,
            amount: pinned.pin.amount,
            currency: pinned.pin.currency,
            replayed: pinned.replayed,
          },
        };
      },
    );

    // Who the service takes the caller for, in each tier: anonymous, a signed agent (Web Bot Auth
    // alone: who vouches for it and its key), or an agent acting for its account.
    api.get("/whoami", agentRoute(kit, { route: "whoami", optional: true, signedAgents: "allow" }), async (request) => {
      if (request.proto !== null) {
        const agent = request.proto;
        return {
          caller: "account",
          account_id: agent.account.account_id,
          agent_did: agent.did,
          attested: agent.attestation !== undefined,
          web_bot_auth: agent.signedAgent === undefined ? null : { signer_origin: agent.signedAgent.signerOrigin },
        };
      }
      if (request.signedAgent !== null) {
        const { signerOrigin, signatureAgent, thumbprint, did } = request.signedAgent;
        return {
          caller: "signed_agent",
          signer_origin: signerOrigin,
          signature_agent: signatureAgent,
          thumbprint,
          did,
        };
      }
      return { caller: "anonymous" };
    });
  });

  // The MCP endpoint: the same notes as tools, for agents and people's MCP clients with tokens
  // from the attestor (its own scope keeps Fastify's JSON parser, which the MCP transport reads).
  await app.register(async (scope) => {
    mountMcp(scope, kit, notes, { now, parseText: parseNoteText });
  });

  // The human pages.
  await app.register(async (pages) => {
    await pages.register(formbody, { bodyLimit: 4096 });
    // A page's client mistakes (a form too large, in the wrong format) are pages too.
    pages.setErrorHandler((error: Error & { statusCode?: number }, request, reply) => {
      const status = error.statusCode ?? 500;
      if (status >= 400 && status < 500) {
        return reply
          .code(status)
          .headers(PAGE_HEADERS)
          .send(messagePage("This form could not be read", "Go back, reload the page and try again."));
      }
      request.log.error({ err: error }, "page failed");
      return reply
        .code(500)
        .headers(PAGE_HEADERS)
        .send(messagePage("Something went wrong", "Please try again in a moment."));
    });

    pages.get("/", async (_request, reply) =>
      reply
        .headers(PAGE_HEADERS)
        .send(homePage({ serviceDid, discoveryPath: "/.well-known/proto", ownerPage: OWNER_PAGE })),
    );

    pages.get(OWNER_PAGE, async (request, reply) => {
      const session = await kit.ownerSession(request.headers);
      const signInLinks = kit.attestors.signInAttestors().map((attestor) => ({
        label: attestor.url ?? attestor.name,
        href: `${kit.ownerPath}/signin?${new URLSearchParams({ attestor: attestor.name, return_to: OWNER_PAGE })}`,
      }));
      if (session === undefined) {
        return reply
          .headers(PAGE_HEADERS)
          .send(ownerPage({ session: undefined, signInLinks, signOutPath: `${OWNER_PAGE}/signout` }));
      }
      const keys = new Set(session.identities.map((identity) => recipientKey(identity)));
      const records = await kit.store.listAccountsForPerson(session.personId, [...keys]);
      const owned: OwnedAgent[] = [];
      const unclaimed: string[] = [];
      for (const record of records) {
        if (isOwner(session, keys, record)) {
          owned.push({
            did: record.did,
            claimedAt: record.claimedAt === undefined ? undefined : new Date(record.claimedAt).toISOString(),
            keyRevokedAt: record.keyRevokedAt === undefined ? undefined : new Date(record.keyRevokedAt).toISOString(),
            notes: (await notes.list(record.id)).map((note) => ({
              text: note.text,
              createdAt: new Date(note.createdAt).toISOString(),
              pinned: note.pinned,
            })),
          });
        } else if (record.claimedAt === undefined) {
          unclaimed.push(record.did);
        }
      }
      const person = session.personId === undefined ? undefined : await kit.store.findPerson(session.personId);
      return reply.headers(PAGE_HEADERS).send(
        ownerPage({
          session: {
            issuer: person === undefined ? undefined : (kit.attestors.get(person.issuer)?.url ?? person.issuer),
            emails: session.identities.flatMap((identity) => (identity.type === "email" ? [identity.value] : [])),
            authenticatedAt:
              session.authenticatedAt === undefined ? undefined : new Date(session.authenticatedAt).toISOString(),
            csrf: session.csrf,
            owned,
            unclaimed,
          },
          signInLinks,
          signOutPath: `${OWNER_PAGE}/signout`,
        }),
      );
    });

    /**
     * Re-key and revoke from the owner page: the kit's owner operations (upstream §8.2, §8.4), each
     * confirmed on a page of its own; a session older than five minutes is asked to sign in again.
     */
    const ownerAction =
      (run: (session: OwnerSession, body: Record<string, string>) => Promise<string | { confirm: ConfirmInput }>) =>
      async (request: { headers: Record<string, unknown>; body: unknown }, reply: FastifyReply) => {
        const session = await kit.ownerSession(request.headers as Record<string, string | undefined>);
        const body = (request.body ?? {}) as Record<string, string>;
        if (session === undefined) return reply.code(303).header("location", OWNER_PAGE).send();
        if (!safeEqual(typeof body.csrf === "string" ? body.csrf : "", session.csrf)) {
          return reply
            .code(403)
            .headers(PAGE_HEADERS)
            .send(messagePage("Nothing changed", "This form was not sent from the notes page. Go back and try again."));
        }
        try {
          const outcome = await run(session, body);
          if (typeof outcome === "string") return reply.headers(PAGE_HEADERS).send(donePage("Done", outcome));
          return reply.headers(PAGE_HEADERS).send(confirmPage(outcome.confirm));
        } catch (error) {
          if (!(error instanceof ProtoError)) throw error;
          if (error.code === "owner_session_too_stale") {
            const links = kit.attestors.signInAttestors().map((attestor) => ({
              label: attestor.url ?? attestor.name,
              href: `${kit.ownerPath}/signin?${new URLSearchParams({ attestor: attestor.name, return_to: OWNER_PAGE })}`,
            }));
            const byEmail = session.identities.some((identity) => identity.type === "email");
            return reply.code(403).headers(PAGE_HEADERS).send(signInAgainPage(links, byEmail));
          }
          return reply.code(error.status).headers(PAGE_HEADERS).send(messagePage("Nothing changed", error.message));
        }
      };

    pages.post(
      `${OWNER_PAGE}/rekey`,
      ownerAction(async (session, body) => {
        const did = body.did ?? "";
        const next = (body.new_did ?? "").trim();
        if (body.confirm !== "yes") {
          // Checked before the confirmation, so a typo is told at once.
          if (!isDidKey(next)) throw protoError("malformed_request", { message: "The new key must be a did:key." });
          return {
            confirm: {
              title: "Re-key this agent?",
              explanation: `The agent's current key <code>${escapeHtml(did)}</code> stops working here at once, and the key <code>${escapeHtml(next)}</code> takes its place. Its notes and your ownership stay. Then link the new key to you at the attestor with <code>proto trust link</code>.`,
              action: `${OWNER_PAGE}/rekey`,
              fields: { csrf: session.csrf, did, new_did: next },
              button: "Yes, re-key",
              danger: false,
            },
          };
        }
        const result = await kit.rekeyAccount(session, did, next);
        return `Agent re-keyed: it now signs with <code>${escapeHtml(result.agent_did)}</code>; the old key was revoked at ${escapeHtml(result.old_revoked_at)}.`;
      }),
    );

    pages.post(
      `${OWNER_PAGE}/revoke`,
      ownerAction(async (session, body) => {
        const did = body.did ?? "";
        if (body.confirm !== "yes") {
          return {
            confirm: {
              title: "Revoke this agent's key?",
              explanation: `The agent <code>${escapeHtml(did)}</code> can no longer act here, at once. Its notes stay, and you can give it a new key later (re-key).`,
              action: `${OWNER_PAGE}/revoke`,
              fields: { csrf: session.csrf, did },
              button: "Yes, revoke the key",
              danger: true,
            },
          };
        }
        const result = await kit.revokeAccountKey(session, { agent_did: did });
        return `Agent <code>${escapeHtml(did)}</code> revoked at ${escapeHtml(result.revoked_at)}: it can no longer act here until you re-key it.`;
      }),
    );

    pages.post<{ Body: Record<string, string> | undefined }>(`${OWNER_PAGE}/signout`, async (request, reply) => {
      const session = await kit.ownerSession(request.headers);
      if (session === undefined) {
        return reply.code(303).header("location", OWNER_PAGE).header("set-cookie", kit.sessions.clearCookie()).send();
      }
      const csrf = typeof request.body?.csrf === "string" ? request.body.csrf : "";
      if (!safeEqual(csrf, session.csrf)) {
        return reply
          .code(403)
          .headers(PAGE_HEADERS)
          .send(messagePage("Not signed out", "This form was not sent from the notes page. Go back and try again."));
      }
      const cookie = await kit.sessions.destroy(session);
      return reply.code(303).header("location", OWNER_PAGE).header("set-cookie", cookie).send();
    });
  });

  // The directory's proof of control of this host (written by `proto directory register --proof-dir`).
  app.get(PROOF_PATH, async (_request, reply) => {
    let token: Buffer | undefined;
    if (options.proofDir !== undefined) {
      try {
        token = await readFile(join(options.proofDir, PROOF_PATH));
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
      }
    }
    if (token === undefined) return sendError(reply, new ProtoError("not_found", 404, "no listing proof is published"));
    return reply.headers({ "content-type": "text/plain", "cache-control": "no-store" }).send(token);
  });

  return {
    app,
    kit,
    notes,
    serviceDid,
    redirectUri: kit.redirectUri,
    oidcClient: { client_id: serviceDid, service_did: serviceDid, redirect_uris: [kit.redirectUri] },
    close: () => app.close(),
  };
}
