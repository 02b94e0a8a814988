/**
 * The permissions a service declares (docs/authority.md): checked at start, written into the
 * discovery document's `permissions` member, and the names its protected resources publish as
 * `scopes_supported`. Grants and their enforcement build on `kit.permissions`.
 */
import { type DiscoveryPermissions, validateDiscoveryPermissions } from "@proto/protocol";
import { KitConfigError } from "./config-error.js";

/** The members the kit writes; the document's readers ignore others, so here one is a typo. */
const KNOWN_FIELDS = ["description", "default", "phishing_resistant", "currency"];

/**
 * The `permissions` option, checked by the discovery schema's rules, frozen. Throws KitConfigError
 * naming the option's path (`permissions["notes:read"].description`): a typo such as
 * `phishingResistant` is refused, since ignoring it would let an agent be granted what the service
 * meant to guard with a passkey.
 */
export function checkPermissions(value: unknown): Readonly<DiscoveryPermissions> {
  const result = validateDiscoveryPermissions(value);
  if (!result.valid) {
    const [first] = result.errors;
    const option = optionPath(first?.path ?? "/permissions");
    // The messages name each member already (`permissions.notes:read.description: ...`).
    throw new KitConfigError(option, result.errors.map((error) => error.message).join("; "));
  }
  const permissions: DiscoveryPermissions = {};
  for (const [name, declaration] of Object.entries(result.permissions)) {
    for (const field of Object.keys(declaration)) {
      if (!KNOWN_FIELDS.includes(field)) {
        const option = `permissions[${JSON.stringify(name)}].${field}`;
        throw new KitConfigError(option, `${option} is not a permission field (${KNOWN_FIELDS.join(", ")})`);
      }
    }
    permissions[name] = Object.freeze({ ...declaration });
  }
  return Object.freeze(permissions);
}

/**
 * The declared permissions of a kit: the `permissions` option, or the `permissions` member of a
 * discovery document given whole. Both at once is refused: one would silently lose.
 */
export function declaredPermissions(option: unknown, discovery: unknown): Readonly<DiscoveryPermissions> | undefined {
  const inDocument =
    typeof discovery === "object" && discovery !== null
      ? (discovery as Record<string, unknown>).permissions
      : undefined;
  if (option !== undefined && inDocument !== undefined) {
    throw new KitConfigError(
      "permissions",
      "permissions: give the permissions once, in the permissions option or in discovery.permissions, not both",
    );
  }
  if (option !== undefined) return checkPermissions(option);
  return undefined;
}

/** `/permissions/notes:read/description` -> `permissions["notes:read"].description`. */
function optionPath(pointer: string): string {
  const [, root, name, ...rest] = pointer.split("/").map((token) => token.replaceAll("~1", "/").replaceAll("~0", "~"));
  let path = root ?? "permissions";
  if (name !== undefined) path += `[${JSON.stringify(name.length > 80 ? `${name.slice(0, 80)}…` : name)}]`;
  for (const token of rest) path += `.${token}`;
  return path;
}
