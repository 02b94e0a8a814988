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
import { limitPhrase } from "../authority/amounts.js";
import type { GrantDiff } from "../authority/changes.js";
import {
  editGrant,
  type GrantEditResult,
  type GrantTarget,
  judgeChange,
  revokeOwnGrant,
} from "../authority/grant-edits.js";
import { findGrant, type Grant, type GrantContent, grantById, grantHistory } from "../authority/grants.js";
import {
  defaultPermissions,
  type ServiceDeclaration,
  type ServiceDeclarations,
} from "../authority/service-declarations.js";
import type { BindingRow, TrustSchema } from "../migrations.js";
import type { Passkeys } from "../passkeys.js";
import * as store from "../store.js";
import { date } from "./dates.js";
import {
  type FieldProblem,
  type FormPermission,
  type FormValues,
  formPermissions,
  formValues,
  GRANT_FORM_FIELDS,
  grantFormFields,
  hiddenGrantFields,
  problemSummary,
  readGrantForm,
} from "./grant-form.js";
import { historyList } from "./grant-history.js";
import { declarationOf, endedText, endsText, grantState, originOfAud, stateBadge } from "./grants-view.js";
import { sendMessage, sendPage } from "./layout.js";
import { shortenDid } from "./link-page.js";
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

const agentName = (b: Pick<BindingRow, "agent_label" | "agent_did">) => b.agent_label ?? shortenDid(b.agent_did);
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

/** What a grant page is about: the grant (or the pair a new one is for), its agent and service. */
interface Subject {
  grant: Grant | undefined;
  binding: BindingRow;
  aud: string;
  declaration: ServiceDeclaration | undefined;
}

/** What the form shows: the permissions on it, their values, and any mistakes. */
interface FormState {
  permissions: FormPermission[];
  values: FormValues;
  problems: FieldProblem[];
}

/** The content the form starts from: the grant's, else the service's defaults. */
function startingContent(subject: Subject): GrantContent {
  if (subject.grant !== undefined) return subject.grant;
  const defaults = subject.declaration === undefined ? [] : defaultPermissions(subject.declaration);
  return { permissions: defaults, spendLimits: [], expiresAt: null };
}

const dayOf = (ms: number) => new Date(ms).toISOString().slice(0, 10);

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

  function formOf(subject: Subject, values?: FormValues, problems: FieldProblem[] = []): FormState {
    const start = startingContent(subject);
    return {
      permissions: formPermissions(subject.declaration?.permissions, start),
      values: values ?? formValues(start),
      problems,
    };
  }

  /** The grant's page, or the new-grant page, with its form as `form` says. */
  function page(
    reply: FastifyReply,
    subject: Subject,
    form: FormState,
    options: { status?: number; notice?: SafeHtml; history?: SafeHtml },
  ) {
    const { grant, binding, aud, declaration } = subject;
    const now = clock.now();
    const csrf = reply.generateCsrf();
    const who = agentName(binding);
    const where = serviceName(aud);
    const state = grant === undefined ? undefined : grantState(grant, now);
    const editable =
      binding.revoked_at === null && (declaration !== undefined || (grant !== undefined && state !== "revoked"));
    const today = dayOf(now);
    const action = grant === undefined ? `/account/bindings/${binding.id}/grants` : `/account/grants/${grant.id}`;
    const stateLine =
      grant === undefined || state === undefined
        ? html`<dd>No permissions set: the agent has the service's default permissions.</dd>`
        : state === "live"
          ? html`<dd>${stateBadge(state)} ${endsText(grant.expiresAt)}</dd>`
          : state === "used_up"
            ? html`<dd>${stateBadge(state)} ended ${endedText(grant.expiresAt)}: the agent has the service's default permissions and cannot spend. Set a later last day, or clear it, to give these permissions again.</dd>`
            : html`<dd>${stateBadge(state)} ${date(grant.revokedAt)}: the agent gets no token for this service.</dd>`;
    const saveLabel =
      grant === undefined ? "Set permissions" : state === "revoked" ? "Give these permissions again" : "Save changes";
    const formPart = !editable
      ? binding.revoked_at !== null
        ? html`<p class="muted">This agent's link was revoked: its permissions are kept here for their history only.</p>`
        : html`<p class="muted">The service's list of permissions could not be loaded right now, so they cannot be given again yet. Try again in a minute.</p>`
      : html`<form method="post" action="${action}" class="grant-form" novalidate>
  <input type="hidden" name="_csrf" value="${csrf}">
  ${grant === undefined ? html`<input type="hidden" name="aud" value="${aud}">` : html`<input type="hidden" name="version" value="${grant.updatedAt}">`}
  ${problemSummary(form.problems)}
  ${
    declaration === undefined
      ? html`<p class="notice caution">The service's descriptions could not be loaded right now, so permissions are shown by name. You can remove permissions and change limits; adding one waits until the service's list can be read.</p>`
      : ""
  }
  ${grantFormFields(form.permissions, form.values, form.problems, today)}
  <p class="muted">Removing permissions and lowering limits take effect at the agent's next token; a token it already holds lasts at most 15 minutes. Adding a permission that needs a passkey, or setting or raising a limit, asks for your passkey.</p>
  <div class="actions"><button type="submit">${saveLabel}</button><a class="button secondary" href="/account">Cancel</a></div>
</form>`;
    const revokePart =
      grant === undefined || state === "revoked" || binding.revoked_at !== null
        ? ""
        : html`<h2>Revoke</h2>
<p>${who} will get no token for ${where} until you give it permissions again. A token it already holds lasts at most 15 minutes.</p>
<form method="post" action="/account/grants/${grant.id}/revoke">
  <input type="hidden" name="_csrf" value="${csrf}">
  <button class="danger" type="submit">Revoke<span class="visually-hidden"> the permissions of ${who} at ${where}</span></button>
</form>`;
    return sendPage(reply, {
      status: options.status ?? 200,
      title: `${who} at ${where}`,
      signedIn: { csrf },
      body: html`<p class="back"><a href="/account">← Your account</a></p>
<h1>What ${who} may do at ${where}</h1>
${options.notice}
<dl class="card">
  <dt>Agent</dt><dd>${binding.agent_label ?? html`<span class="muted">(no name given)</span>`} <code title="${binding.agent_did}">${shortenDid(binding.agent_did)}</code></dd>
  <dt>Service</dt><dd><strong>${where}</strong> <code>${aud}</code></dd>
  <dt>State</dt>${stateLine}
</dl>
<h2>${grant === undefined ? "Set permissions" : state === "revoked" ? "Give again" : "Change"}</h2>
${formPart}
${revokePart}
${options.history}`,
    });
  }

  /** The history section of a grant's page (nothing before there is a grant). */
  async function historyOf(subject: Subject): Promise<SafeHtml | undefined> {
    if (subject.grant === undefined) return undefined;
    const events = await grantHistory(db, subject.grant.id);
    return html`<h2>History</h2>${historyList(events, subject.declaration?.permissions, clock.now())}`;
  }

  /** The step a widening change takes: what it gives, and the passkey button that confirms it. */
  async function confirmPage(
    reply: FastifyReply,
    session: HumanSession,
    subject: Subject,
    body: Body,
    diff: GrantDiff,
    problem?: string,
  ): Promise<FastifyReply> {
    const csrf = reply.generateCsrf();
    const { grant, binding, aud, declaration } = subject;
    const who = agentName(binding);
    const where = serviceName(aud);
    const label = (name: string) => {
      const description = declaration?.permissions[name]?.description;
      return description === undefined ? name : `${description} (${name})`;
    };
    const lines = [
      ...diff.added.map((name) => `Adds: ${label(name)}`),
      ...diff.limits
        .filter((change) => change.after !== undefined)
        .map((change) => {
          const after = change.after as NonNullable<typeof change.after>;
          return `${label(after.permission)}: ${limitPhrase(after)}${change.before === undefined ? "" : ` (now ${limitPhrase(change.before)})`}`;
        }),
      ...diff.removed.map((name) => `Removes: ${label(name)}`),
    ];
    const hasPasskey = (await deps.passkeys.list(session.humanId)).length > 0;
    const action = grant === undefined ? `/account/bindings/${binding.id}/grants` : `/account/grants/${grant.id}`;
    const back = grant === undefined ? "/account" : `/account/grants/${grant.id}`;
    return sendPage(reply, {
      status: problem === undefined ? 200 : 400,
      title: "Confirm with your passkey",
      signedIn: { csrf },
      scripts: PASSKEY_SCRIPTS,
      body: html`<h1>Confirm with your passkey</h1>
${problem === undefined ? "" : html`<p class="notice caution" role="alert"><strong>Not confirmed.</strong> ${problem}</p>`}
<p>This gives ${who} more at ${where} than it has now. Nothing is saved until you confirm.</p>
<ul class="changes">${lines.map((line) => html`<li>${line}</li>`)}</ul>
<p class="muted">Giving a permission that needs a passkey, or setting or raising a spending limit, is confirmed with your passkey, so that someone who got hold of your signed-in session cannot widen what your agents may do. Removing, lowering and revoking never ask for it.</p>
${
  hasPasskey
    ? html`<form id="passkey-confirm" data-passkey="confirm" method="post" action="${action}" hidden>
  <input type="hidden" name="_csrf" value="${csrf}">
  ${grant === undefined ? html`<input type="hidden" name="aud" value="${aud}">` : html`<input type="hidden" name="version" value="${body.version ?? ""}">`}
  ${hiddenGrantFields(body)}
  <input type="hidden" name="passkey" value="">
  <div class="actions"><button type="submit">Confirm with a passkey</button><a class="button secondary" href="${back}">Cancel</a></div>
  <p id="passkey-confirm-status" aria-live="polite"></p>
</form>
<p class="muted" data-passkey-unsupported>Confirming needs a browser with passkeys and JavaScript.</p>`
    : html`<p>You have no passkey yet. <a href="/account#passkeys">Add one on your account page</a>, then make this change again.</p>
<p><a class="button secondary" href="${back}">Back</a></p>`
}`,
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
      return page(reply, subject, formOf(subject, reading.values, reading.problems), {
        status: 400,
        history: await historyOf(subject),
      });
    }
    const defaults = subject.declaration === undefined ? [] : defaultPermissions(subject.declaration);
    let method: "passkey" | "session" = "session";
    if (body.passkey !== undefined && body.passkey !== "") {
      const problem = await passkeyConfirmationProblem(deps.passkeys, session, body.passkey);
      if (problem !== undefined) {
        const declared = subject.declaration?.permissions;
        const diff = judgeChange(subject.grant, reading.content, declared, defaults, now);
        return confirmPage(reply, session, subject, body, diff, problem);
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
        return confirmPage(reply, session, subject, body, result.diff);
      case "stale":
      case "exists": {
        const fresh = { ...subject, grant: result.grant };
        return page(reply, fresh, formOf(fresh), {
          status: 409,
          history: await historyOf(fresh),
          notice: html`<p class="notice caution" role="alert"><strong>Nothing was saved.</strong> These permissions changed since you opened the page. Here they are as they are now: make your change again.</p>`,
        });
      }
      case "invalid": {
        const problems = [{ field: "permissions", message: `Nothing was saved: ${result.problem}.` }];
        return page(reply, subject, formOf(subject, formValues(reading.content), problems), {
          status: 400,
          history: await historyOf(subject),
        });
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

  const NOTICES: Record<string, (who: string, where: string) => SafeHtml> = {
    saved: (who, where) =>
      html`<p class="notice" role="status"><strong>Saved.</strong> ${who}'s next token for ${where} carries these permissions; a token it already holds lasts at most 15 minutes.</p>`,
    created: (who, where) =>
      html`<p class="notice" role="status"><strong>Permissions set.</strong> ${who}'s next token for ${where} carries them.</p>`,
    unchanged: () => html`<p class="notice" role="status">Nothing changed.</p>`,
    revoked: (who, where) =>
      html`<p class="notice" role="status"><strong>Revoked.</strong> ${who} gets no token for ${where} until you give it permissions again. A token it already holds lasts at most 15 minutes.</p>`,
  };

  app.get<{ Params: { id: string }; Querystring: { done?: string } }>("/account/grants/:id", async (request, reply) => {
    const session = await sessions.current(request);
    if (session === undefined) return reply.redirect(`/signin?next=${encodeURIComponent(request.url)}`, 303);
    const subject = await grantSubject(session.humanId, request.params.id, request.ip);
    if (subject === undefined) return unknownGrant(reply);
    const notice = NOTICES[String(request.query.done ?? "")]?.(agentName(subject.binding), serviceName(subject.aud));
    return page(reply, subject, formOf(subject), {
      history: await historyOf(subject),
      ...(notice === undefined ? {} : { notice }),
    });
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
          history: await historyOf(subject),
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
      return page(reply, found.subject, formOf(found.subject), {});
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
      const refused = declarationRefusal(reply, found.subject.declaration);
      if (refused !== undefined || found.subject.declaration === undefined) return refused ?? reply;
      const target: GrantTarget = {
        kind: "new",
        bindingId: found.subject.binding.id,
        aud: found.subject.aud,
        serviceUrl: found.subject.declaration.serviceUrl,
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
