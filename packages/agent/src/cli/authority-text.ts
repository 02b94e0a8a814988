/**
 * Bounded authority in plain words: amounts typed in a currency's units (the wire counts minor
 * units: cents for EUR), permissions with the service's own descriptions and their limits.
 */
import { type DiscoveryPermissions, parseAmount, type SpendLimit, spendLimitPhrase } from "@proto/protocol";
import { UsageError } from "../errors.js";
import { inline } from "./terminal-text.js";

/** `20.5` or `20.50` in EUR as `2050`; a UsageError naming `what` otherwise. */
export function amountArgument(text: string, currency: string, what: string): number {
  const parsed = parseAmount(text, currency);
  if ("problem" in parsed)
    throw new UsageError("invalid_argument", `${what} ${parsed.problem}, got ${JSON.stringify(text)}`);
  return parsed.amount;
}

/**
 * One line per permission: its name, the service's description when it declares it, and for a
 * spending permission how much (no limit: no spending).
 */
export function describePermissions(
  permissions: readonly string[],
  limits: readonly SpendLimit[],
  declared: DiscoveryPermissions | undefined,
): string[] {
  const names = [...permissions, ...limits.map((l) => l.permission).filter((name) => !permissions.includes(name))];
  return names.map((name) => {
    const declaration = declared !== undefined && Object.hasOwn(declared, name) ? declared[name] : undefined;
    const description = declaration === undefined ? "" : `: ${inline(String(declaration.description))}`;
    const own = limits.filter((limit) => limit.permission === name);
    const held = permissions.includes(name) ? "" : " (not granted)";
    let spending = "";
    if (own.length > 0) spending = ` (${own.map(spendLimitPhrase).join("; ")})`;
    else if (declaration?.currency !== undefined) spending = " (no spending: the person set no limit)";
    return `  ${name}${description}${spending}${held}`;
  });
}

/** A unix time as a person reads it: ISO 8601, and how far away. */
export function whenText(unixSeconds: number, nowMs = Date.now()): string {
  const seconds = Math.round(unixSeconds - nowMs / 1000);
  const iso = new Date(unixSeconds * 1000).toISOString();
  if (seconds <= 0) return `${iso} (passed)`;
  return seconds < 90 ? `${iso} (in ${seconds} s)` : `${iso} (in ${Math.round(seconds / 60)} min)`;
}
