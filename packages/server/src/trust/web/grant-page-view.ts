/**
 * What the grant pages show (web/grant-pages.ts has the routes): a grant's page with its state,
 * form, Revoke and history, or the same form for a new grant; and the step that asks for a
 * passkey before a change that widens what the agent holds.
 */
import type { DiscoveryPermissions } from "@proto/protocol";
import { spendLimitPhrase as limitPhrase } from "@proto/protocol";
import { html, type SafeHtml } from "../../platform/html.js";
import type { GrantDiff } from "../authority/changes.js";
import type { Grant, GrantContent, GrantEvent } from "../authority/grants.js";
import { defaultPermissions, type ServiceDeclaration } from "../authority/service-declarations.js";
import type { BindingRow } from "../migrations.js";
import { date } from "./dates.js";
import {
  type FieldProblem,
  type FormPermission,
  type FormValues,
  formPermissions,
  formValues,
  grantFormFields,
  hiddenGrantFields,
  problemSummary,
} from "./grant-form.js";
import { historyList } from "./grant-history.js";
import { endedText, endsText, grantState, stateBadge } from "./grants-view.js";
import { shortenDid } from "./link-page.js";
import { serviceName } from "./service-names.js";

/** A page's title and body, for sendPage. */
export interface PageContent {
  title: string;
  body: SafeHtml;
}

export const agentName = (b: Pick<BindingRow, "agent_label" | "agent_did">) => b.agent_label ?? shortenDid(b.agent_did);

/** What a grant page is about: the grant (or the pair a new one is for), its agent and service. */
export interface Subject {
  grant: Grant | undefined;
  binding: BindingRow;
  aud: string;
  declaration: ServiceDeclaration | undefined;
}

/** What the form shows: the permissions on it, their values, and any mistakes. */
export interface FormState {
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

/** The form for `subject`: its content, or what the person sent (`values`), and any mistakes. */
export function formOf(subject: Subject, values?: FormValues, problems: FieldProblem[] = []): FormState {
  const start = startingContent(subject);
  return {
    permissions: formPermissions(subject.declaration?.permissions, start),
    values: values ?? formValues(start),
    problems,
  };
}

/** The grant's page, or the new-grant page, with its form as `form` says. */
export function grantPage(
  subject: Subject,
  form: FormState,
  options: { csrf: string; now: number; notice?: SafeHtml | undefined; history?: SafeHtml | undefined },
): PageContent {
  const { grant, binding, aud, declaration } = subject;
  const { csrf, now } = options;
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
  return {
    title: `${who} at ${where}`,
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
  };
}

/** The history section of a grant's page. */
export function historySection(
  events: readonly GrantEvent[],
  declared: DiscoveryPermissions | undefined,
  now: number,
): SafeHtml {
  return html`<h2>History</h2>${historyList(events, declared, now)}`;
}

/**
 * The step a widening change takes: what it gives, and the passkey button that posts the same
 * fields (`body`) again with the ceremony's answer.
 */
export function confirmPage(
  subject: Subject,
  body: Record<string, string | undefined>,
  diff: GrantDiff,
  options: { csrf: string; hasPasskey: boolean; problem?: string | undefined },
): PageContent {
  const { csrf, hasPasskey, problem } = options;
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
  const action = grant === undefined ? `/account/bindings/${binding.id}/grants` : `/account/grants/${grant.id}`;
  const back = grant === undefined ? "/account" : `/account/grants/${grant.id}`;
  return {
    title: "Confirm with your passkey",
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
  };
}

/** The notice after a button was pressed (`?done=...`). */
export const GRANT_NOTICES: Record<string, (who: string, where: string) => SafeHtml> = {
  saved: (who, where) =>
    html`<p class="notice" role="status"><strong>Saved.</strong> ${who}'s next token for ${where} carries these permissions; a token it already holds lasts at most 15 minutes.</p>`,
  created: (who, where) =>
    html`<p class="notice" role="status"><strong>Permissions set.</strong> ${who}'s next token for ${where} carries them.</p>`,
  unchanged: () => html`<p class="notice" role="status">Nothing changed.</p>`,
  revoked: (who, where) =>
    html`<p class="notice" role="status"><strong>Revoked.</strong> ${who} gets no token for ${where} until you give it permissions again. A token it already holds lasts at most 15 minutes.</p>`,
};
