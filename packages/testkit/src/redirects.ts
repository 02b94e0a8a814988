/**
 * Redirect targets an attacker puts in `next` or `return_to` to send a browser off-site after
 * sign-in. A server given any of them must fall back to a page of its own.
 */

export interface HostileRedirect {
  name: string;
  value: string;
}

/** The hostile values for a server whose public origin is `origin` (`https://trust.test`). */
export function hostileRedirects(origin: string): HostileRedirect[] {
  const own = new URL(origin);
  const evil = "evil.example";
  return [
    { name: "TAB between the slashes", value: `/\t/${evil}` },
    { name: "TAB, percent-encoded", value: `/%09/${evil}` },
    { name: "TAB, encoded twice", value: `/%2509/${evil}` },
    { name: "CR LF", value: `/\r\n/${evil}` },
    { name: "CR LF header injection", value: "/account\r\nSet-Cookie: planted=1" },
    { name: "LF, percent-encoded", value: `/%0A/${evil}` },
    { name: "NUL", value: `/\u0000/${evil}` },
    { name: "NUL, percent-encoded", value: `/%00/${evil}` },
    { name: "DEL", value: `/\u007f/${evil}` },
    { name: "backslash", value: `\\${evil}` },
    { name: "slash backslash", value: `/\\${evil}` },
    { name: "backslash, percent-encoded", value: `/%5C${evil}` },
    { name: "backslash, encoded twice", value: `/%255C${evil}` },
    { name: "protocol-relative", value: `//${evil}` },
    { name: "three slashes", value: `///${evil}` },
    { name: "leading space", value: ` //${evil}` },
    { name: "slashes, percent-encoded", value: `%2F%2F${evil}` },
    { name: "path then encoded slashes", value: `/%2F%2F${evil}` },
    { name: "slashes, encoded twice", value: `%252F%252F${evil}` },
    { name: "absolute URL elsewhere", value: `https://${evil}/` },
    { name: "own scheme elsewhere", value: `${own.protocol}//${evil}/` },
    { name: "own host, other port", value: `${own.protocol}//${own.hostname}:1/` },
    { name: "own host, other scheme", value: `${own.protocol === "https:" ? "http:" : "https:"}//${own.host}/` },
    { name: "user info before the own host", value: `${own.protocol}//user@${own.host}/account` },
    { name: "own host as user info", value: `${own.protocol}//${own.host}@${evil}/` },
    { name: "own host as user info, relative", value: `//${own.host}@${evil}/` },
    { name: "javascript:", value: "javascript:alert(document.domain)" },
    { name: "JavaScript: in mixed case", value: "JaVaScRiPt:alert(1)" },
    { name: "data:", value: "data:text/html,<script>alert(1)</script>" },
    { name: "very long", value: `/${"a".repeat(10_000)}` },
  ];
}

/**
 * True for a value holding a raw control character: servers refuse it in a query string outright
 * (400, before any redirect logic), so such a value never reaches a redirect.
 */
export function hasRawControlCharacter(value: string): boolean {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it looks for
  return /[\u0000-\u001f\u007f]/.test(value);
}
