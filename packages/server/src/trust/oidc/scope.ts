/** RFC 6749 §3.3 scope strings: space-separated tokens of printable ASCII but `"` and `\`. */

const SCOPE_TOKEN = /^[\x21\x23-\x5B\x5D-\x7E]{1,128}$/;
export const MAX_SCOPE_TOKENS = 30;

/** The scope's tokens, de-duplicated in their order, or undefined when it is not a scope. */
export function parseScope(value: unknown): string[] | undefined {
  if (typeof value !== "string" || value.length > 2048) return undefined;
  const tokens = value.split(" ").filter((t) => t.length > 0);
  if (tokens.length > MAX_SCOPE_TOKENS || !tokens.every((t) => SCOPE_TOKEN.test(t))) return undefined;
  return [...new Set(tokens)];
}

/** Whether every token of `asked` is in `granted`. */
export function withinScope(asked: readonly string[], granted: readonly string[]): boolean {
  const allowed = new Set(granted);
  return asked.every((t) => allowed.has(t));
}
