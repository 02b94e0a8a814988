/**
 * The form that sets a grant's content on the attestor's pages: a box per permission (in the
 * service's words), limits under each spending permission, and an end date. Read back strictly:
 * every field is checked here, and every mistake is named next to its field, never a 500.
 *
 * Fields: `permit.NAME` (a ticked box), `tx.NAME` / `pp.NAME` / `period.NAME` (a limit per
 * transaction, per period and the period, in the currency's major unit), `ends` (a date, UTC).
 * One field per name, because the attestor refuses a form field given twice.
 */
import {
  type DiscoveryPermissions,
  MAX_PERMISSIONS,
  parseAmount,
  plainAmount,
  SPEND_PERIODS,
  type SpendLimit,
  type SpendPeriod,
} from "@proto/protocol";
import { html, type SafeHtml } from "../../platform/html.js";
import type { GrantContent } from "../authority/grants.js";

/** A grant ends at most this far ahead; the person can always extend it. */
const MAX_END_DAYS = 5 * 366;
const DAY_MS = 86_400_000;
const PERIOD_WORDS: Record<SpendPeriod, string> = { day: "a day", week: "a week", month: "a month" };

/** One permission on the form. */
export interface FormPermission {
  name: string;
  /** The service's description; undefined when its declaration could not be read. */
  description: string | undefined;
  /** Giving it needs a passkey (declared `phishing_resistant`). */
  passkey: boolean;
  /** The currency of a spending permission. */
  currency: string | undefined;
  /** Held by the grant, but no longer declared by the service. */
  undeclared: boolean;
}

/** What the fields hold: a grant's content, or what the person sent. */
export interface FormValues {
  permitted: Set<string>;
  perTransaction: Map<string, string>;
  perPeriod: Map<string, string>;
  period: Map<string, string>;
  ends: string;
}

/** A mistake in one field: its id (the summary links to it) and what is wrong. */
export interface FieldProblem {
  field: string;
  message: string;
}

export type FormReading = { content: GrantContent } | { problems: FieldProblem[]; values: FormValues };

/** The form's fields in the schema of a route that takes them. */
export const GRANT_FORM_FIELDS = {
  properties: { ends: { type: "string", maxLength: 32 } },
  patternProperties: { "^(permit|tx|pp|period)\\.": { type: "string", maxLength: 64 } },
  maxProperties: 4 * MAX_PERMISSIONS + 8,
} as const;

/**
 * The permissions the form offers: every one the service declares, in its order, then any the
 * grant holds that it no longer declares (so they can be removed). Without the declaration, only
 * those the grant holds, by name.
 */
export function formPermissions(declared: DiscoveryPermissions | undefined, content: GrantContent): FormPermission[] {
  const out: FormPermission[] = Object.entries(declared ?? {}).map(([name, permission]) => ({
    name,
    description: permission.description,
    passkey: permission.phishing_resistant === true,
    currency: permission.currency,
    undeclared: false,
  }));
  const listed = new Set(out.map((p) => p.name));
  const limitCurrency = new Map(content.spendLimits.map((limit) => [limit.permission, limit.currency]));
  for (const name of content.permissions) {
    if (listed.has(name)) continue;
    listed.add(name);
    out.push({
      name,
      description: undefined,
      passkey: false,
      currency: limitCurrency.get(name),
      undeclared: declared !== undefined,
    });
  }
  return out;
}

/** The day (UTC) a person sees for an expiry: the last day the grant is in force. */
export function endDay(expiresAt: number): string {
  return new Date(expiresAt - 1).toISOString().slice(0, 10);
}

/** The fields as they show `content`. */
export function formValues(content: GrantContent): FormValues {
  const values: FormValues = {
    permitted: new Set(content.permissions),
    perTransaction: new Map(),
    perPeriod: new Map(),
    period: new Map(),
    ends: content.expiresAt === null ? "" : endDay(content.expiresAt),
  };
  for (const limit of content.spendLimits) {
    if (limit.perTransaction !== undefined) {
      values.perTransaction.set(limit.permission, plainAmount(limit.perTransaction, limit.currency));
    }
    if (limit.perPeriod !== undefined)
      values.perPeriod.set(limit.permission, plainAmount(limit.perPeriod, limit.currency));
    if (limit.period !== undefined) values.period.set(limit.permission, limit.period);
  }
  return values;
}

const fieldId = (kind: string, name: string) => `${kind}-${name}`;

/** The label a person knows a permission by: the service's description, else its name. */
export function permissionLabel(permission: Pick<FormPermission, "name" | "description">): string {
  return permission.description ?? permission.name;
}

/**
 * Reads the sent fields against the permissions on the form. `current` is the grant's content
 * before (its expiry may stay as it is even when past), `now` the attestor's clock.
 */
export function readGrantForm(
  body: Record<string, unknown>,
  permissions: readonly FormPermission[],
  current: GrantContent | undefined,
  now: number,
): FormReading {
  const text = (key: string) => {
    const value = body[key];
    return typeof value === "string" ? value : "";
  };
  const known = new Map(permissions.map((p) => [p.name, p]));
  const problems: FieldProblem[] = [];
  const values: FormValues = {
    permitted: new Set(),
    perTransaction: new Map(),
    perPeriod: new Map(),
    period: new Map(),
    ends: text("ends").trim(),
  };
  for (const key of Object.keys(body)) {
    const dot = key.indexOf(".");
    if (dot < 0) continue;
    const name = key.slice(dot + 1);
    if (!known.has(name)) {
      problems.push({ field: "permissions", message: `“${name}” is not a permission this service declares.` });
    }
  }
  const limits: SpendLimit[] = [];
  for (const permission of permissions) {
    const { name } = permission;
    if (body[`permit.${name}`] !== undefined) values.permitted.add(name);
    const tx = text(`tx.${name}`).trim();
    const pp = text(`pp.${name}`).trim();
    const period = text(`period.${name}`) || "month";
    if (tx !== "") values.perTransaction.set(name, tx);
    if (pp !== "") values.perPeriod.set(name, pp);
    values.period.set(name, period);
    // Limits mean something only on a spending permission that is granted.
    if (permission.currency === undefined || !values.permitted.has(name)) continue;
    const limit: SpendLimit = { permission: name, currency: permission.currency };
    const label = permissionLabel(permission);
    if (tx !== "") {
      const read = parseAmount(tx, permission.currency);
      if ("problem" in read)
        problems.push({ field: fieldId("tx", name), message: `Most per transaction for “${label}” ${read.problem}.` });
      else limit.perTransaction = read.amount;
    }
    if (pp !== "") {
      const read = parseAmount(pp, permission.currency);
      if ("problem" in read)
        problems.push({ field: fieldId("pp", name), message: `Most per period for “${label}” ${read.problem}.` });
      else limit.perPeriod = read.amount;
      if (!(SPEND_PERIODS as readonly string[]).includes(period)) {
        problems.push({
          field: fieldId("period", name),
          message: `The period for “${label}” must be a day, a week or a month.`,
        });
      } else limit.period = period as SpendPeriod;
    }
    if (limit.perTransaction !== undefined || (limit.perPeriod !== undefined && limit.period !== undefined)) {
      limits.push(limit);
    }
  }
  if (values.permitted.size > MAX_PERMISSIONS) {
    problems.push({ field: "permissions", message: `At most ${MAX_PERMISSIONS} permissions can be given.` });
  }
  const expiresAt = readEnd(values.ends, current?.expiresAt ?? null, now);
  if (typeof expiresAt === "string") problems.push({ field: "ends", message: expiresAt });
  if (problems.length > 0 || typeof expiresAt === "string") return { problems, values };
  return {
    content: {
      permissions: permissions.filter((p) => values.permitted.has(p.name)).map((p) => p.name),
      spendLimits: limits,
      expiresAt,
    },
  };
}

/** The expiry a typed end date means (the end of that day, UTC), or what is wrong with it. */
function readEnd(ends: string, current: number | null, now: number): number | null | string {
  if (ends === "") return null;
  // The date shown for the current expiry, sent back untouched, keeps that expiry to the millisecond.
  if (current !== null && ends === endDay(current)) return current;
  const match = /^(\d{4})-(\d{2})-(\d{2})$/.exec(ends);
  const day = match === null ? Number.NaN : Date.UTC(Number(match[1]), Number(match[2]) - 1, Number(match[3]));
  if (Number.isNaN(day) || new Date(day).toISOString().slice(0, 10) !== ends) {
    return "The end date must be a date, like 2027-01-31.";
  }
  const expiresAt = day + DAY_MS;
  if (expiresAt <= now) return "The end date must be today or later.";
  if (expiresAt > now + MAX_END_DAYS * DAY_MS) return "The end date must be within five years.";
  return expiresAt;
}

function problemOf(problems: readonly FieldProblem[], field: string): FieldProblem | undefined {
  return problems.find((p) => p.field === field);
}

/** `aria-invalid` and `aria-describedby` for a field with a problem. */
function invalid(problems: readonly FieldProblem[], field: string): SafeHtml | string {
  return problemOf(problems, field) === undefined ? "" : html` aria-invalid="true" aria-describedby="${field}-problem"`;
}

function fieldProblem(problems: readonly FieldProblem[], field: string): SafeHtml | string {
  const problem = problemOf(problems, field);
  return problem === undefined ? "" : html`<p class="error" id="${field}-problem">${problem.message}</p>`;
}

function limitFields(permission: FormPermission, values: FormValues, problems: readonly FieldProblem[]): SafeHtml {
  const { name, currency } = permission;
  const tx = fieldId("tx", name);
  const pp = fieldId("pp", name);
  const period = fieldId("period", name);
  const chosen = values.period.get(name) ?? "month";
  return html`<fieldset class="limits">
    <legend>Spending limits, in ${currency}<span class="visually-hidden"> for ${permissionLabel(permission)}</span></legend>
    <div class="limit-row">
      <label for="${tx}">Most per transaction</label>
      <span class="amount"><input id="${tx}" name="tx.${name}" type="text" inputmode="decimal" autocomplete="off" maxlength="20" value="${values.perTransaction.get(name) ?? ""}"${invalid(problems, tx)}> <span>${currency}</span></span>
    </div>
    ${fieldProblem(problems, tx)}
    <div class="limit-row">
      <label for="${pp}">Most per period</label>
      <span class="amount"><input id="${pp}" name="pp.${name}" type="text" inputmode="decimal" autocomplete="off" maxlength="20" value="${values.perPeriod.get(name) ?? ""}"${invalid(problems, pp)}> <span>${currency}</span>
      <select id="${period}" name="period.${name}" aria-label="Period"${invalid(problems, period)}>${SPEND_PERIODS.map(
        (p) => html`<option value="${p}"${p === chosen ? " selected" : ""}>${PERIOD_WORDS[p]}</option>`,
      )}</select></span>
    </div>
    ${fieldProblem(problems, pp)}${fieldProblem(problems, period)}
    <p class="muted">Leave both empty and the agent cannot spend. Days, weeks (from Monday) and months are counted in UTC.</p>
  </fieldset>`;
}

function permissionChoice(permission: FormPermission, values: FormValues, problems: readonly FieldProblem[]): SafeHtml {
  const id = fieldId("permit", permission.name);
  const notes = [
    permission.passkey ? "needs your passkey to give" : "",
    permission.currency === undefined ? "" : `spends in ${permission.currency}`,
    permission.undeclared ? "no longer declared by the service" : "",
  ].filter((note) => note !== "");
  return html`<li>
    <label for="${id}"><input type="checkbox" id="${id}" name="permit.${permission.name}" value="1"${
      values.permitted.has(permission.name) ? " checked" : ""
    }><span>${permission.description ?? html`<code>${permission.name}</code>`}</span>${
      permission.description === undefined ? "" : html`<code>${permission.name}</code>`
    }${notes.length > 0 ? html`<span class="choice-note">${notes.join(" · ")}</span>` : ""}</label>
    ${permission.currency === undefined ? "" : limitFields(permission, values, problems)}
  </li>`;
}

/** The summary of a form's mistakes, linking to each field. */
export function problemSummary(problems: readonly FieldProblem[]): SafeHtml | string {
  if (problems.length === 0) return "";
  return html`<div class="notice caution" role="alert" id="form-problems">
  <p><strong>Nothing was saved.</strong> ${problems.length === 1 ? "One thing needs" : `${problems.length} things need`} fixing:</p>
  <ul>${problems.map((p) => html`<li><a href="#${p.field}">${p.message}</a></li>`)}</ul>
</div>`;
}

/** The form's fields: the permissions with their limits, then the end date. */
export function grantFormFields(
  permissions: readonly FormPermission[],
  values: FormValues,
  problems: readonly FieldProblem[],
  today: string,
): SafeHtml {
  return html`<fieldset id="permissions" class="permissions">
    <legend>What the agent may do</legend>
    ${
      permissions.length === 0
        ? html`<p class="muted">The service declares no permissions.</p>`
        : html`<ul class="choices">${permissions.map((p) => permissionChoice(p, values, problems))}</ul>`
    }
    ${fieldProblem(problems, "permissions")}
  </fieldset>
  <label for="ends">Last day</label>
  <input id="ends" name="ends" type="date" min="${today}" value="${values.ends}"${
    problemOf(problems, "ends") === undefined
      ? html` aria-describedby="ends-hint"`
      : html` aria-invalid="true" aria-describedby="ends-hint ends-problem"`
  }>
  <p class="muted" id="ends-hint">The last day (UTC) the agent holds these permissions; after it, it gets the service's default permissions and cannot spend. Leave it empty for no end.</p>
  ${fieldProblem(problems, "ends")}`;
}

/** The sent fields again, hidden: the confirmation step posts exactly what the person chose. */
export function hiddenGrantFields(body: Record<string, unknown>): SafeHtml[] {
  return Object.entries(body)
    .filter(([key, value]) => typeof value === "string" && (key === "ends" || /^(permit|tx|pp|period)\./.test(key)))
    .map(([key, value]) => html`<input type="hidden" name="${key}" value="${value as string}">`);
}
