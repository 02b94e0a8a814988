/**
 * A grant's own page (`/account/grants/{id}`, only its person's): its state, the form that sets
 * what the agent may do and spend and until when, Revoke, and its history. And the same form for a
 * service an agent used without a grant ("Set permissions"), starting from the service's defaults.
 *
 * Saving takes the session when the change only narrows; a change that widens what the agent
 * holds (a permission declared phishing_resistant, a limit set or raised) is shown back for the
 * person to confirm with a passkey (web/passkeys.ts, passkeyConfirmationProblem).
 */
import type {} from "@fastify/csrf-protection";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Kysely } from "kysely";
import type { Clock } from "../../platform/clock.js";
import { html, type SafeHtml } from "../../platform/html.js";
import { SINGLE_LINE } from "../../platform/input-rules.js";
import type { GrantDiff } from "../authority/changes.js";
import {
  editGrant,
  type GrantEditResult,
  type GrantTarget,
  judgeChange,
  revokeOwnGrant,
} from "../authority/grant-edits.js";
import { findGrant, grantById, grantHistory } from "../authority/grants.js";
import {
  defaultPermissions,
  type ServiceDeclaration,
  type ServiceDeclarations,
} from "../authority/service-declarations.js";
import type { TrustSchema } from "../migrations.js";
import type { Passkeys } from "../passkeys.js";
import * as store from "../store.js";
import { formValues, GRANT_FORM_FIELDS, readGrantForm } from "./grant-form.js";
import {
  agentName,
  confirmPage,
  type FormState,
  formOf,
  GRANT_NOTICES,
  grantPage,
  historySection,
  type Subject,
} from "./grant-page-view.js";
import { declarationOf, originOfAud } from "./grants-view.js";
import { sendMessage, sendPage } from "./layout.js";
import { MAX_PASSKEY_CONFIRMATION, PASSKEY_SCRIPTS, passkeyConfirmationProblem } from "./passkeys.js";
import { serviceName } from "./service-names.js";
import type { HumanSession, SessionManager } from "./session.js";

export interface GrantPagesDeps {
  db: Kysely<TrustSchema>;
  clock: Clock;
  declarations: ServiceDeclarations;
  passkeys: Passkeys;
  sessions: SessionManager;
  /** The account forms' guard: the person's session, or the answer already sent. */
  accountForm: (request: FastifyRequest, reply: FastifyReply) => Promise<HumanSession | FastifyReply>;
}

const MAX_ID = 64;

const saveForm = {
  type: "object",
  properties: {
    _csrf: { type: "string", maxLength: 256 },
    version: { type: "string", maxLength: 20 },
    aud: { type: "string", minLength: 1, maxLength: 2048, pattern: SINGLE_LINE },
    passkey: { type: "string", maxLength: MAX_PASSKEY_CONFIRMATION },
    ...GRANT_FORM_FIELDS.properties,
  },
  patternProperties: GRANT_FORM_FIELDS.patternProperties,
  maxProperties: GRANT_FORM_FIELDS.maxProperties,
  additionalProperties: false,
} as const;

const csrfOnlyForm = {
  type: "object",
  properties: { _csrf: { type: "string", maxLength: 256 } },
} as const;

type Body = Record<string, string | undefined>;

const onward = html`<p><a class="button" href="/account">Go to your account</a></p>`;

function unknownGrant(reply: FastifyReply): FastifyReply {
  return sendMessage(
    reply,
    404,
    "Unknown permissions",
    "These permissions do not exist, or they are not yours.",
    onward,
  );
}

function unknownService(reply: FastifyReply): FastifyReply {
  return sendMessage(
    reply,
    404,
    "Unknown agent or service",
    "That agent is not linked to your account, or it has not used that service.",
    onward,
  );
}

export function registerGrantPages(app: FastifyInstance, deps: GrantPagesDeps): void {
  const { db, clock, sessions } = deps;

  /** The grant of this person, with its agent and service's declaration; undefined when not theirs. */
  async function grantSubject(humanId: string, id: string, address: string): Promise<Subject | undefined> {
    if (id.length > MAX_ID) return undefined;
    const grant = await grantById(db, id);
    if (grant === undefined || grant.humanId !== humanId) return undefined;
    const binding = await store.findBinding(db, grant.bindingId);
    if (binding === undefined || binding.human_id !== humanId) return undefined;
    const declaration = await declarationOf(deps.declarations, grant.serviceUrl, grant.aud, address);
    return { grant, binding, aud: grant.aud, declaration };
  }

  /** A live agent of this person and a service it used, without a grant yet (else undefined). */
  async function pairSubject(humanId: string, bindingId: string, aud: unknown, address: string) {
    if (bindingId.length > MAX_ID || typeof aud !== "string" || aud.length === 0 || aud.length > 2048) return undefined;
    const binding = await store.findBinding(db, bindingId);
    if (binding === undefined || binding.human_id !== humanId || binding.revoked_at !== null) return undefined;
    if ((await store.findServiceUse(db, bindingId, aud)) === undefined) return undefined;
    const existing = (await findGrant(db, bindingId, aud))?.id;
    const declaration = await declarationOf(deps.declarations, originOfAud(aud), aud, address);
    return { subject: { grant: undefined, binding, aud, declaration } satisfies Subject, existing };
  }

  /** The history section of a grant's page (nothing before there is a grant). */
  async function historyOf(subject: Subject): Promise<SafeHtml | undefined> {
    if (subject.grant === undefined) return undefined;
    const events = await grantHistory(db, subject.grant.id);
    return historySection(events, subject.declaration?.permissions, clock.now());
  }

  /** The grant's page (or the new-grant page) with its history, as `form` says. */
  async function page(
    reply: FastifyReply,
    subject: Subject,
    form: FormState,
    options: { status?: number; notice?: SafeHtml } = {},
  ): Promise<FastifyReply> {
    const csrf = reply.generateCsrf();
    const content = grantPage(subject, form, {
      csrf,
      now: clock.now(),
      notice: options.notice,
      history: await historyOf(subject),
    });
    return sendPage(reply, { ...content, status: options.status ?? 200, signedIn: { csrf } });
  }

  /** The passkey step of a widening change, with the problem of a failed ceremony if there was one. */
  async function confirm(
    reply: FastifyReply,
    session: HumanSession,
    subject: Subject,
    body: Body,
    diff: GrantDiff,
    problem?: string,
  ): Promise<FastifyReply> {
    const csrf = reply.generateCsrf();
    const hasPasskey = (await deps.passkeys.list(session.humanId)).length > 0;
    const content = confirmPage(subject, body, diff, { csrf, hasPasskey, problem });
    return sendPage(reply, {
      ...content,
      status: problem === undefined ? 200 : 400,
      signedIn: { csrf },
      scripts: PASSKEY_SCRIPTS,
    });
  }

  /** Reads the form, confirms a passkey if one was sent, saves, and answers with what happened. */
  async function save(
    request: FastifyRequest<{ Body: Body }>,
    reply: FastifyReply,
    session: HumanSession,
    subject: Subject,
    target: GrantTarget,
  ): Promise<FastifyReply> {
    const body = request.body;
    const now = clock.now();
    const form = formOf(subject);
    const reading = readGrantForm(body, form.permissions, subject.grant, now);
    if ("problems" in reading) {
      return page(reply, subject, formOf(subject, reading.values, reading.problems), { status: 400 });
    }
    const defaults = subject.declaration === undefined ? [] : defaultPermissions(subject.declaration);
    let method: "passkey" | "session" = "session";
    if (body.passkey !== undefined && body.passkey !== "") {
      const problem = await passkeyConfirmationProblem(deps.passkeys, session, body.passkey);
      if (problem !== undefined) {
        const declared = subject.declaration?.permissions;
        const diff = judgeChange(subject.grant, reading.content, declared, defaults, now);
        return confirm(reply, session, subject, body, diff, problem);
      }
      method = "passkey";
    }
    const result: GrantEditResult = await editGrant(db, {
      humanId: session.humanId,
      target,
      content: reading.content,
      declared: subject.declaration?.permissions,
      defaults,
      method,
      now,
    });
    switch (result.outcome) {
      case "saved":
        return reply.redirect(
          `/account/grants/${result.grant.id}?done=${subject.grant === undefined ? "created" : "saved"}`,
          303,
        );
      case "unchanged":
        return reply.redirect(`/account/grants/${result.grant.id}?done=unchanged`, 303);
      case "needs_passkey":
        return confirm(reply, session, subject, body, result.diff);
      case "stale":
      case "exists": {
        const fresh = { ...subject, grant: result.grant };
        return page(reply, fresh, formOf(fresh), {
          status: 409,
          notice: html`<p class="notice caution" role="alert"><strong>Nothing was saved.</strong> These permissions changed since you opened the page. Here they are as they are now: make your change again.</p>`,
        });
      }
      case "invalid": {
        const problems = [{ field: "permissions", message: `Nothing was saved: ${result.problem}.` }];
        return page(reply, subject, formOf(subject, formValues(reading.content), problems), { status: 400 });
      }
      case "agent_revoked":
        return sendMessage(
          reply,
          410,
          "This agent's link was revoked",
          "Its permissions can no longer be changed.",
          onward,
        );
      case "unknown":
        return subject.grant === undefined ? unknownService(reply) : unknownGrant(reply);
    }
  }

  app.get<{ Params: { id: string }; Querystring: { done?: string } }>("/account/grants/:id", async (request, reply) => {
    const session = await sessions.current(request);
    if (session === undefined) return reply.redirect(`/signin?next=${encodeURIComponent(request.url)}`, 303);
    const subject = await grantSubject(session.humanId, request.params.id, request.ip);
    if (subject === undefined) return unknownGrant(reply);
    const notice = GRANT_NOTICES[String(request.query.done ?? "")]?.(
      agentName(subject.binding),
      serviceName(subject.aud),
    );
    return page(reply, subject, formOf(subject), notice === undefined ? {} : { notice });
  });

  app.post<{ Params: { id: string }; Body: Body }>(
    "/account/grants/:id",
    { schema: { body: saveForm, consumes: ["application/x-www-form-urlencoded"] }, preHandler: app.csrfProtection },
    async (request, reply) => {
      const session = await deps.accountForm(request, reply);
      if (!("humanId" in session)) return session;
      const subject = await grantSubject(session.humanId, request.params.id, request.ip);
      if (subject === undefined || subject.grant === undefined) return unknownGrant(reply);
      const version = Number(request.body.version);
      if (!Number.isSafeInteger(version)) {
        return page(reply, subject, formOf(subject), {
          status: 400,
          notice: html`<p class="notice caution" role="alert"><strong>Nothing was saved.</strong> The form was incomplete. Make your change again.</p>`,
        });
      }
      return save(request, reply, session, subject, { kind: "existing", grantId: subject.grant.id, version });
    },
  );

  app.post<{ Params: { id: string } }>(
    "/account/grants/:id/revoke",
    {
      schema: { body: csrfOnlyForm, consumes: ["application/x-www-form-urlencoded"] },
      preHandler: app.csrfProtection,
    },
    async (request, reply) => {
      const session = await deps.accountForm(request, reply);
      if (!("humanId" in session)) return session;
      const id = request.params.id;
      if (id.length > MAX_ID) return unknownGrant(reply);
      const revoked = await revokeOwnGrant(db, session.humanId, id, clock.now());
      const grant = revoked ? undefined : await grantById(db, id);
      // Pressed twice (two tabs): it is revoked all the same.
      if (!revoked && (grant === undefined || grant.humanId !== session.humanId || grant.revokedAt === null)) {
        return unknownGrant(reply);
      }
      return reply.redirect(`/account/grants/${id}?done=revoked`, 303);
    },
  );

  app.get<{ Params: { id: string }; Querystring: { aud?: string } }>(
    "/account/bindings/:id/grants/new",
    async (request, reply) => {
      const session = await sessions.current(request);
      if (session === undefined) return reply.redirect(`/signin?next=${encodeURIComponent(request.url)}`, 303);
      const found = await pairSubject(session.humanId, request.params.id, request.query.aud, request.ip);
      if (found === undefined) return unknownService(reply);
      if (found.existing !== undefined) return reply.redirect(`/account/grants/${found.existing}`, 303);
      const refused = declarationRefusal(reply, found.subject.declaration);
      if (refused !== undefined) return refused;
      return page(reply, found.subject, formOf(found.subject));
    },
  );

  app.post<{ Params: { id: string }; Body: Body }>(
    "/account/bindings/:id/grants",
    { schema: { body: saveForm, consumes: ["application/x-www-form-urlencoded"] }, preHandler: app.csrfProtection },
    async (request, reply) => {
      const session = await deps.accountForm(request, reply);
      if (!("humanId" in session)) return session;
      const found = await pairSubject(session.humanId, request.params.id, request.body.aud, request.ip);
      if (found === undefined) return unknownService(reply);
      const { declaration } = found.subject;
      const refused = declarationRefusal(reply, declaration);
      if (refused !== undefined || declaration === undefined) return refused ?? unknownService(reply);
      const target: GrantTarget = {
        kind: "new",
        bindingId: found.subject.binding.id,
        aud: found.subject.aud,
        serviceUrl: declaration.serviceUrl,
      };
      return save(request, reply, session, found.subject, target);
    },
  );
}

/** A new grant needs the service's list: the answer when it cannot be had or is empty. */
function declarationRefusal(
  reply: FastifyReply,
  declaration: ServiceDeclaration | undefined,
): FastifyReply | undefined {
  if (declaration !== undefined && Object.keys(declaration.permissions).length > 0) return undefined;
  if (declaration !== undefined) {
    return sendMessage(reply, 404, "No permissions to set", "This service declares no permissions.", onward);
  }
  reply.header("retry-after", "60");
  return sendMessage(
    reply,
    503,
    "The service's permissions could not be loaded",
    "Its list of permissions could not be read just now, so none can be set yet. Try again in a minute.",
    onward,
  );
}
