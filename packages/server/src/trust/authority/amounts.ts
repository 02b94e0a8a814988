/**
 * Spend limits in words a person reads. The definitions live in @proto/protocol (one for the
 * attestor's pages, the kit's owner view and the agent's CLI); the attestor's modules import them
 * from here under the names they have always used.
 */
export { formatAmount, minorDigits, spendLimitPhrase as limitPhrase } from "@proto/protocol";
