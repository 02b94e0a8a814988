/**
 * The permissions a listed service declares (the discovery document's `permissions`,
 * docs/authority.md), for people choosing a service: each name, the service's own one-line
 * description, and what approving it takes. The stored document may predate the schema that
 * bounds this member, or hold whatever its host wrote, so only entries of the declared shape are
 * shown and the rest are counted; the full document stays in the JSON view below.
 */
import { html, type SafeHtml } from "../../platform/html.js";

/** The schema's own bounds on the member. */
export const MAX_PERMISSIONS = 64;
const NAME = /^[a-z][a-z0-9_.-]*(:[a-z][a-z0-9_.-]*)*$/;
const MAX_NAME_LENGTH = 64;
const MAX_DESCRIPTION_LENGTH = 200;
const CURRENCY = /^[A-Z]{3}$/;

export interface PermissionView {
  name: string;
  description: string;
  grantedAtSignUp: boolean;
  needsPasskey: boolean;
  currency: string | undefined;
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

function wellFormed(name: string, declaration: unknown): PermissionView | undefined {
  if (name.length > MAX_NAME_LENGTH || !NAME.test(name) || !isRecord(declaration)) return undefined;
  const { description, default: granted, phishing_resistant: passkey, currency } = declaration;
  if (
    typeof description !== "string" ||
    description.trim() === "" ||
    description.length > MAX_DESCRIPTION_LENGTH ||
    /[\r\n\u2028\u2029]/.test(description)
  ) {
    return undefined;
  }
  if (granted !== undefined && typeof granted !== "boolean") return undefined;
  if (passkey !== undefined && typeof passkey !== "boolean") return undefined;
  if (currency !== undefined && (typeof currency !== "string" || !CURRENCY.test(currency))) return undefined;
  return {
    name,
    description,
    grantedAtSignUp: granted === true,
    needsPasskey: passkey === true,
    currency: currency as string | undefined,
  };
}

/** The declarations to show, at most `MAX_PERMISSIONS` of them, and how many were left out. */
export function readPermissions(value: unknown): { shown: PermissionView[]; omitted: number } {
  if (!isRecord(value)) return { shown: [], omitted: 0 };
  const entries = Object.entries(value);
  const shown: PermissionView[] = [];
  for (const [name, declaration] of entries) {
    if (shown.length === MAX_PERMISSIONS) break;
    const view = wellFormed(name, declaration);
    if (view !== undefined) shown.push(view);
  }
  return { shown, omitted: entries.length - shown.length };
}

function permissionItem(permission: PermissionView): SafeHtml {
  const badges = [
    permission.grantedAtSignUp ? html`<span class="badge granted">Granted at sign-up</span>` : "",
    permission.needsPasskey ? html`<span class="badge passkey">Needs a passkey to approve</span>` : "",
    permission.currency === undefined
      ? ""
      : html`<span class="badge spending">Spending, in ${permission.currency}</span>`,
  ];
  return html`<li data-permission="${permission.name}"><code class="permission-name">${permission.name}</code>
<p class="permission-description">${permission.description}</p>${
    badges.some((badge) => badge !== "") ? html`<p class="badges">${badges}</p>` : ""
  }</li>`;
}

/** The section, or nothing when the document declares no permission (as every older one does). */
export function permissionsSection(value: unknown): SafeHtml | "" {
  if (value === undefined || (isRecord(value) && Object.keys(value).length === 0)) return "";
  const { shown, omitted } = readPermissions(value);
  const notes = !isRecord(value)
    ? html`<p class="muted">Not a set of declarations; it is in the JSON below.</p>`
    : omitted === 0
      ? ""
      : html`<p class="muted">${omitted} more ${omitted === 1 ? "entry is" : "entries are"} not shown: not a well-formed declaration, or past the first ${MAX_PERMISSIONS}. They are in the JSON below.</p>`;
  return html`<h3 id="d-permissions">Permissions</h3>
<p class="muted">What this service says an agent may be allowed to do here, in the service's own words.</p>
${shown.length === 0 ? "" : html`<ul class="permissions">${shown.map(permissionItem)}</ul>`}
${notes}`;
}
