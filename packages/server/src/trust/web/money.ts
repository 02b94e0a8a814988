/**
 * Amounts as people type them into a form. Grants keep integers in minor units of the currency
 * (cents for EUR, docs/authority.md); the fields take and show the currency's major unit (`20.50`),
 * converted through digit strings so no amount is rounded on the way.
 */
import { MAX_AMOUNT } from "@proto/protocol";
import { formatAmount, minorDigits } from "../authority/amounts.js";

/** `2050` of EUR as `20.50`: what a field shows for an amount, without grouping or code. */
export function fieldAmount(amount: number, currency: string): string {
  const digits = minorDigits(currency);
  const text = String(amount).padStart(digits + 1, "0");
  return digits === 0 ? text : `${text.slice(0, -digits)}.${text.slice(-digits)}`;
}

/** What a typed amount is: minor units, or why it cannot be one. */
export type TypedAmount = { amount: number } | { problem: string };

/**
 * An amount a person typed in the currency's major unit: digits, and at most one decimal
 * separator (`.` or `,`) followed by no more decimals than the currency has. No grouping.
 */
export function readAmount(text: string, currency: string): TypedAmount {
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
