/**
 * Grants on the account page (docs/authority.md, "Grants at the attestor"): under each service of
 * each agent, what the agent may do there, in the service's own words, with its spend limits, end
 * and state, and the way to change it. Services' declarations are read through the bounded,
 * cached ServiceDeclarations; one that cannot be read leaves names without descriptions.
 */
import type { SpendLimit } from "@proto/protocol";
import { spendLimitPhrase as limitPhrase } from "@proto/protocol";
import { html, type SafeHtml } from "../../platform/html.js";
import { type Grant, grantsOfBindings } from "../authority/grants.js";
import {
  DeclarationProblem,
  defaultPermissions,
  type ServiceDeclaration,
  type ServiceDeclarations,
  serviceOrigin,
} from "../authority/service-declarations.js";
import type { BindingServiceRow } from "../migrations.js";
import { FetchRefused } from "../oidc/bounded-fetches.js";
import type { Db } from "../store.js";
import { date } from "./dates.js";
import { endDay } from "./grant-form.js";
import { serviceName } from "./service-names.js";

/** Services whose declarations one account page reads at most (the rest show names only). */
const MAX_DECLARATIONS_PER_PAGE = 50;

export type GrantState = "live" | "used_up" | "revoked";

export function grantState(grant: Pick<Grant, "revokedAt" | "expiresAt">, now: number): GrantState {
  if (grant.revokedAt !== null) return "revoked";
  return grant.expiresAt !== null && grant.expiresAt <= now ? "used_up" : "live";
}

/** The state as a badge a person reads. */
export function stateBadge(state: GrantState): SafeHtml {
  if (state === "live") return html`<span class="badge live">In force</span>`;
  if (state === "used_up") return html`<span class="badge used-up">Used up</span>`;
  return html`<span class="badge">Revoked</span>`;
}

/** When a live grant ends, as the person set it: a last day (the form's), else the moment. */
export function endsText(expiresAt: number | null): SafeHtml {
  if (expiresAt === null) return html`No end date`;
  if (expiresAt % 86_400_000 === 0) return html`Last day ${endDay(expiresAt)} (UTC)`;
  return html`Until ${date(expiresAt)}`;
}

/** When a used-up grant ended: after its last day (the form's), else at the moment. */
export function endedText(expiresAt: number | null): SafeHtml {
  if (expiresAt !== null && expiresAt % 86_400_000 === 0) return html`after its last day, ${endDay(expiresAt)} (UTC)`;
  return html`${date(expiresAt)}`;
}

/**
 * The service's declaration, or undefined when it cannot be had now (the document is missing,
 * invalid or names another service, or fetching it would exceed the bounds).
 */
export async function declarationOf(
  declarations: ServiceDeclarations,
  origin: string | undefined,
  aud: string,
  address: string,
): Promise<ServiceDeclaration | undefined> {
  if (origin === undefined) return undefined;
  try {
    return await declarations.of(origin, aud, address);
  } catch (error) {
    if (error instanceof DeclarationProblem || error instanceof FetchRefused) return undefined;
    throw error;
  }
}

/** Where a service without a grant is read from: https and the host its did:web names. */
export const originOfAud = (aud: string) => serviceOrigin(aud, undefined, true);

/** One permission as a line: the service's words, then the name; a spending one with its limit. */
function permissionLine(
  name: string,
  declaration: ServiceDeclaration | undefined,
  limits: readonly SpendLimit[],
): SafeHtml {
  const described = declaration?.permissions[name]?.description;
  const spending = declaration?.permissions[name]?.currency !== undefined || limits.some((l) => l.permission === name);
  const limit = limits.find((l) => l.permission === name);
  return html`<li>${described === undefined ? html`<code>${name}</code>` : html`${described} <code>${name}</code>`}${
    spending
      ? html`<br><span class="muted">${limit === undefined ? "Cannot spend: no limit set" : limitPhrase(limit)}</span>`
      : ""
  }</li>`;
}

function permissionList(
  names: readonly string[],
  declaration: ServiceDeclaration | undefined,
  limits: readonly SpendLimit[],
  label: string,
): SafeHtml {
  return html`<ul class="granted" aria-label="${label}">${names.map((name) => permissionLine(name, declaration, limits))}</ul>`;
}

const UNREADABLE = html`<p class="muted">The service's descriptions could not be loaded right now: names only.</p>`;

/** The part of a service's entry that says what the agent may do there. */
function grantPart(grant: Grant, declaration: ServiceDeclaration | undefined, now: number, where: string): SafeHtml {
  const state = grantState(grant, now);
  const link = html`<a href="/account/grants/${grant.id}">${state === "revoked" ? "See or give again" : "Change or revoke"}<span class="visually-hidden"> the permissions at ${where}</span></a>`;
  const listed =
    grant.permissions.length === 0
      ? html`<p class="muted">No permission: the agent gets tokens for this service that allow nothing.</p>`
      : permissionList(grant.permissions, declaration, grant.spendLimits, `Permissions at ${where}`);
  const when =
    state === "revoked"
      ? html`<p class="muted">Revoked ${date(grant.revokedAt)}: the agent gets no token for this service until you give permissions again.</p>`
      : state === "used_up"
        ? html`<p class="muted">Ended ${endedText(grant.expiresAt)}: the agent has the service's default permissions again and cannot spend.</p>`
        : html`<p class="muted">${endsText(grant.expiresAt)}</p>`;
  return html`<div class="grant">
    <h4>Permissions ${stateBadge(state)}</h4>
    ${state === "revoked" ? "" : listed}
    ${state === "revoked" || declaration !== undefined || grant.permissions.length === 0 ? "" : UNREADABLE}
    ${when}
    <p>${link}</p>
  </div>`;
}

/** The part of a service's entry without a grant: the service's defaults, and the way to set more or less. */
function defaultsPart(
  bindingId: string,
  aud: string,
  declaration: ServiceDeclaration | undefined,
  where: string,
): SafeHtml {
  const query = new URLSearchParams({ aud }).toString();
  const defaults = declaration === undefined ? [] : defaultPermissions(declaration);
  const declares = declaration !== undefined && Object.keys(declaration.permissions).length > 0;
  return html`<div class="grant">
    <h4>Default permissions of the service</h4>
    ${
      declaration === undefined
        ? html`<p class="muted">The service's list of permissions could not be loaded right now.</p>`
        : !declares
          ? html`<p class="muted">The service declares no permissions.</p>`
          : defaults.length === 0
            ? html`<p class="muted">None: this service gives no permission by default.</p>`
            : permissionList(defaults, declaration, [], `Default permissions at ${where}`)
    }
    ${declares ? html`<p><a href="/account/bindings/${bindingId}/grants/new?${query}">Set permissions<span class="visually-hidden"> at ${where}</span></a></p>` : ""}
  </div>`;
}

/** What the account page shows of grants, service by service. */
export interface GrantsOnAccount {
  /** The permissions part of one service of one agent. */
  ofService(bindingId: string, aud: string): SafeHtml;
  /** Entries for the agent's grants at services not among `listed` (asked for before first use). */
  unlisted(bindingId: string, listed: readonly string[]): SafeHtml[];
}

/**
 * Reads the grants of the person's live agents and the declarations of their services (in
 * parallel, each bounded and cached), for the account page.
 */
export async function grantsOnAccount(
  deps: { db: Db; declarations: ServiceDeclarations },
  bindingIds: readonly string[],
  services: Map<string, { rows: BindingServiceRow[] }>,
  address: string,
  now: number,
): Promise<GrantsOnAccount> {
  const grants = await grantsOfBindings(deps.db, bindingIds);
  const byPair = new Map(grants.map((g) => [`${g.bindingId} ${g.aud}`, g]));
  const wanted = new Map<string, { origin: string | undefined; aud: string }>();
  for (const g of grants) wanted.set(`${g.serviceUrl} ${g.aud}`, { origin: g.serviceUrl, aud: g.aud });
  for (const id of bindingIds) {
    for (const row of services.get(id)?.rows ?? []) {
      if (byPair.has(`${id} ${row.aud}`)) continue;
      const origin = originOfAud(row.aud);
      wanted.set(`${origin} ${row.aud}`, { origin, aud: row.aud });
    }
  }
  const pairs = [...wanted].slice(0, MAX_DECLARATIONS_PER_PAGE);
  const read = await Promise.all(
    pairs.map(
      async ([key, { origin, aud }]) => [key, await declarationOf(deps.declarations, origin, aud, address)] as const,
    ),
  );
  const declared = new Map(read);
  const ofService = (bindingId: string, aud: string) => {
    const where = serviceName(aud);
    const grant = byPair.get(`${bindingId} ${aud}`);
    if (grant !== undefined) return grantPart(grant, declared.get(`${grant.serviceUrl} ${aud}`), now, where);
    return defaultsPart(bindingId, aud, declared.get(`${originOfAud(aud)} ${aud}`), where);
  };
  return {
    ofService,
    unlisted(bindingId, listed) {
      const shown = new Set(listed);
      return grants
        .filter((g) => g.bindingId === bindingId && !shown.has(g.aud))
        .map(
          (g) => html`<li class="service">
    <div><strong title="${g.aud}">${serviceName(g.aud)}</strong></div>
    <div><code>${g.aud}</code></div>
    ${ofService(bindingId, g.aud)}
  </li>`,
        );
    },
  };
}
