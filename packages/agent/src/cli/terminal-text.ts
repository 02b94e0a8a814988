/**
 * What servers wrote, made safe to show on a terminal. Tool names, listing titles, response bodies
 * and error messages come from parties the user does not control; printed as they came, an escape
 * sequence in them runs on the user's terminal: OSC 52 writes the clipboard, OSC 8 disguises a
 * link, CSI 2J clears the screen, cursor moves overwrite earlier lines, and bidi overrides make
 * text read differently from what it is (CVE-2021-42574). Every control character, C0, DEL and
 * C1 (0x9b alone is a CSI on many terminals), and every bidi embedding, override, isolate and
 * mark is shown as a visible escape instead (`\x1b`, `\u202e`), so the text stays readable and
 * what was sent stays apparent. `--json` documents keep every string as it came: JSON.stringify
 * escapes C0 already, and `jsonText` spells the rest as `\uXXXX`, which parses back the same.
 */

// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const UNSAFE_IN_BLOCK = /\r\n|[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
/** What JSON.stringify leaves raw that a terminal may act on; also U+2028/2029 (line breaks to some). */
const UNSAFE_IN_JSON = /[\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

const NAMED: Record<string, string> = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };

function visible(char: string): string {
  const named = NAMED[char];
  if (named !== undefined) return named;
  const code = char.charCodeAt(0);
  return code < 0x100 ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`;
}

/** One-line text (a name, a title, a table cell): every control character escaped, line breaks and tabs too. */
export function inline(text: string): string {
  return text.replace(UNSAFE, visible);
}

/**
 * Multi-line text (a response body, a tool's result, lines of output): line feeds and tabs kept,
 * CRLF read as a line feed, every other control character escaped (a lone CR would overwrite the line).
 */
export function block(text: string): string {
  return text.replace(UNSAFE_IN_BLOCK, (match) => (match === "\r\n" ? "\n" : visible(match)));
}

/** `JSON.stringify` whose text carries no character a terminal acts on; `JSON.parse` gives the same value. */
export function jsonText(value: unknown, indent?: number): string {
  const text = JSON.stringify(value, null, indent) ?? "null";
  return text.replace(UNSAFE_IN_JSON, (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`);
}
