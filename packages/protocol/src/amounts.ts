/**
 * Amounts of bounded authority in a person's words. The wire counts integers in minor units of the
 * currency (cents for EUR); people read and type the currency's own unit with its usual decimals
 * (`50` EUR is `0.50 EUR`, `500` JPY is `500 JPY`). Converted through digit strings, never through
 * floating point, so no amount is rounded on the way. One definition for the attestor's pages, the
 * kit's owner view and the agent's CLI.
 */
import { MAX_AMOUNT, type SpendLimit } from "./authority.js";

const digitsCache = new Map<string, number>();

/** How many decimals the currency's minor unit has (ISO 4217 as the runtime's ICU knows it; 2 if unknown). */
export function minorDigits(currency: string): number {
  let digits = digitsCache.get(currency);
  if (digits === undefined) {
    try {
      digits =
        new Intl.NumberFormat("en", { style: "currency", currency }).resolvedOptions().maximumFractionDigits ?? 2;
    } catch {
      digits = 2;
    }
    digitsCache.set(currency, digits);
  }
  return digits;
}

/** `2050` of EUR as `20.50`: the amount in the major unit, without grouping or code (a form field's value). */
export function plainAmount(minor: number, currency: string): string {
  const digits = minorDigits(currency);
  const text = String(Math.trunc(Math.abs(minor))).padStart(digits + 1, "0");
  const major = digits === 0 ? text : `${text.slice(0, -digits)}.${text.slice(-digits)}`;
  return `${minor < 0 ? "-" : ""}${major}`;
}

/** `1234567` of EUR as `12,345.67 EUR`: exact, grouped by thousands, with the code. */
export function formatAmount(minor: number, currency: string): string {
  const [whole = "", fraction] = plainAmount(minor, currency).split(".");
  const grouped = whole.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  return `${grouped}${fraction === undefined ? "" : `.${fraction}`} ${currency}`;
}

/** What a typed amount is: minor units, or why it cannot be one. */
export type ParsedAmount = { amount: number } | { problem: string };

/**
 * An amount a person typed in the currency's major unit (`20`, `20.50`, `20,50`): digits and at
 * most one decimal separator followed by no more decimals than the currency has; no grouping.
 * Bounded by MAX_AMOUNT minor units.
 */
export function parseAmount(text: string, currency: string): ParsedAmount {
  const digits = minorDigits(currency);
  const shape = digits === 0 ? `a whole number of ${currency}` : `an amount in ${currency}, like 20 or 20.50`;
  const match = /^(\d{1,16})(?:[.,](\d*))?$/.exec(text.trim());
  if (match === null) return { problem: `must be ${shape}` };
  const fraction = (match[2] ?? "").replace(/0+$/, "");
  if (fraction.length > digits) return { problem: `must be ${shape}` };
  const minor = BigInt(match[1] as string) * 10n ** BigInt(digits) + BigInt(fraction.padEnd(digits, "0") || "0");
  if (minor > BigInt(MAX_AMOUNT)) return { problem: `must be at most ${formatAmount(MAX_AMOUNT, currency)}` };
  return { amount: Number(minor) };
}

/**
 * What a limit allows, in one phrase: `up to 1.00 EUR per transaction and 10.00 EUR per month`.
 * No limit at all means no spending (docs/authority.md).
 */
export function spendLimitPhrase(limit: SpendLimit | undefined): string {
  if (limit === undefined) return "no spending";
  const parts: string[] = [];
  if (limit.perTransaction !== undefined) {
    parts.push(`${formatAmount(limit.perTransaction, limit.currency)} per transaction`);
  }
  if (limit.perPeriod !== undefined && limit.period !== undefined) {
    parts.push(`${formatAmount(limit.perPeriod, limit.currency)} per ${limit.period}`);
  }
  return `up to ${parts.join(" and ")}`;
}
