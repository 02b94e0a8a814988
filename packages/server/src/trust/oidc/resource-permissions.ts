/**
 * What an access token's scopes may be (docs/authority.md, "OAuth access tokens"): a resource's
 * scopes are its service's declared permissions, read from the discovery document at the
 * resource's origin, which must call itself the resource's audience. A token carries only what
 * the person granted: ticked on the consent page, or their agent's grant (else the defaults).
 * A permission the service protects with a passkey is granted on the consent page only by a
 * person signed in with one.
 */

import type { DiscoveryPermission } from "@proto/protocol";
import {
  DeclarationProblem,
  type ServiceDeclaration,
  type ServiceDeclarations,
} from "../authority/service-declarations.js";
import { resourceAudience } from "./resource.js";

/** The scope of the sign-in itself: an id_token, no permission at the resource. */
export const IDENTITY_SCOPE = "openid";

/**
 * The declaration of the service `resource` belongs to. Throws DeclarationProblem (no acceptable
 * document) or FetchRefused (fetching now would exceed the bounds for `address`).
 */
export function resourceDeclaration(
  declarations: ServiceDeclarations,
  resource: string,
  address: string,
): Promise<ServiceDeclaration> {
  return declarations.of(new URL(resource).origin, resourceAudience(resource), address);
}

/** As resourceDeclaration, but undefined when the service's document cannot be read. */
export async function readableDeclaration(
  declarations: ServiceDeclarations,
  resource: string,
  address: string,
): Promise<ServiceDeclaration | undefined> {
  try {
    return await resourceDeclaration(declarations, resource, address);
  } catch (error) {
    if (error instanceof DeclarationProblem) return undefined;
    throw error;
  }
}

/** The declaration of `name`; own members only (a scope named `constructor` declares nothing). */
function declared(declaration: ServiceDeclaration | undefined, name: string): DiscoveryPermission | undefined {
  if (declaration === undefined || !Object.hasOwn(declaration.permissions, name)) return undefined;
  return declaration.permissions[name];
}

/** Whether the service declares any permission: then nothing else is a grantable scope. */
function declaresPermissions(declaration: ServiceDeclaration | undefined): boolean {
  return declaration !== undefined && Object.keys(declaration.permissions).length > 0;
}

/** One requested scope as the consent page offers it. */
export interface ScopeChoice {
  name: string;
  /** `identity`: openid; `declared`: the service describes it; `undescribed`: it does not. */
  kind: "identity" | "declared" | "undescribed";
  /** The service's own words (third-party text), for a declared scope. */
  description?: string;
  /** Ticked when the page opens: the identity and what the service describes. */
  ticked: boolean;
  /**
   * Whether it can be granted here: not when the service declares permissions but not this one,
   * nor when it needs a passkey and the person did not sign in with one.
   */
  grantable: boolean;
  /** Declared `phishing_resistant`, asked of a person who did not sign in with a passkey. */
  needsPasskey?: true;
  /**
   * The currency of a spending permission. Granted here it carries no spend limit, so the token
   * allows no spending with it (docs/authority.md).
   */
  currency?: string;
}

/** The requested scopes, in their order, as a person signed in with `passkey` (or not) is asked about them. */
export function scopeChoices(
  requested: readonly string[],
  declaration: ServiceDeclaration | undefined,
  passkey: boolean,
): ScopeChoice[] {
  const closed = declaresPermissions(declaration);
  return requested.map((name) => {
    if (name === IDENTITY_SCOPE) return { name, kind: "identity", ticked: true, grantable: true };
    const permission = declared(declaration, name);
    if (permission !== undefined) {
      // A session opened by e-mail may be someone who got hold of the mailbox: what the service
      // protects with a passkey is not theirs to give.
      const lacksPasskey = permission.phishing_resistant === true && !passkey;
      return {
        name,
        kind: "declared",
        description: permission.description,
        ticked: !lacksPasskey,
        grantable: !lacksPasskey,
        ...(lacksPasskey ? { needsPasskey: true as const } : {}),
        ...(permission.currency === undefined ? {} : { currency: permission.currency }),
      };
    }
    return { name, kind: "undescribed", ticked: false, grantable: !closed };
  });
}

/**
 * The scope a code is issued with: what the person ticked of what was asked, less whatever cannot
 * be granted (a form can be forged: a scope not offered, not grantable, or needing a passkey the
 * session was not opened with, is dropped here).
 */
export function consentedScope(
  requested: readonly string[],
  ticked: readonly string[],
  declaration: ServiceDeclaration | undefined,
  passkey: boolean,
): string[] {
  const chosen = new Set(ticked);
  return scopeChoices(requested, declaration, passkey)
    .filter((choice) => choice.grantable && chosen.has(choice.name))
    .map((choice) => choice.name);
}

/** The requested scopes within `granted`, in the order asked. */
export function grantedOf(requested: readonly string[], granted: readonly string[]): string[] {
  const allowed = new Set(granted);
  return requested.filter((name) => allowed.has(name));
}
