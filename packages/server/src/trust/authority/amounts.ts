/**
 * Spend limits in words a person reads: amounts are stored in minor units (cents), shown in the
 * currency's own unit with its usual decimals (`50` EUR is `0.50 EUR`, `500` JPY is `500 JPY`).
 */
import type { SpendLimit } from "@proto/protocol";

const digitsCache = new Map<string, number>();

/** How many decimals the currency's minor unit has (ISO 4217, as the runtime's ICU knows it; 2 if unknown). */
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

/** `1234567` EUR as `12,345.67 EUR`: exact (integer arithmetic on the digits), grouped by thousands. */
export function formatAmount(minor: number, currency: string): string {
  const digits = minorDigits(currency);
  const text = String(Math.trunc(Math.abs(minor))).padStart(digits + 1, "0");
  const whole = text.slice(0, text.length - digits).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  const fraction = digits === 0 ? "" : `.${text.slice(text.length - digits)}`;
  return `${minor < 0 ? "-" : ""}${whole}${fraction} ${currency}`;
}

/**
 * What a limit allows, in one phrase: `up to 1.00 EUR per transaction and 10.00 EUR per month`.
 * No limit at all means no spending (docs/authority.md).
 */
export function limitPhrase(limit: SpendLimit | undefined): string {
  if (limit === undefined) return "no spending";
  const parts: string[] = [];
  if (limit.perTransaction !== undefined)
    parts.push(`${formatAmount(limit.perTransaction, limit.currency)} per transaction`);
  if (limit.perPeriod !== undefined && limit.period !== undefined) {
    parts.push(`${formatAmount(limit.perPeriod, limit.currency)} per ${limit.period}`);
  }
  return `up to ${parts.join(" and ")}`;
}
