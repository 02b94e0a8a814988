/**
 * Redirect targets a request names (`next` after sign-in, `return_to`): a server follows one only
 * to a path on its own origin, or a sign-in page becomes an open redirect.
 */

/**
 * C0 controls, DEL and the backslash. The URL parser strips TAB, CR and LF wherever they stand and
 * reads `\` as `/`, so `/\t/evil.example` is `//evil.example` to a browser: a value that carries
 * one does not mean what a string check of it sees.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const UNSAFE_CHARACTER = /[\u0000-\u001f\u007f\\]/;

/** Longer than any path a server of ours builds. */
const MAX_TARGET_LENGTH = 2048;

/**
 * The value as given, then percent-decoded again and again until nothing changes: every spelling a
 * decoder further along (a proxy, a framework, a browser) might act on. Only ASCII escapes are
 * decoded; each round shortens the text, so the rounds end.
 */
export function percentDecodedSpellings(value: string): string[] {
  const all = [value];
  let current = value;
  for (;;) {
    const decoded = current.replace(/%([0-7][0-9a-f])/gi, (_escape, hex: string) =>
      String.fromCharCode(Number.parseInt(hex, 16)),
    );
    if (decoded === current) return all;
    all.push(decoded);
    current = decoded;
  }
}

/** Whether a URL carries a control character or a backslash, as given or once percent-decoded. */
export function hasUnsafeUrlCharacter(value: string): boolean {
  return percentDecodedSpellings(value).some((spelling) => UNSAFE_CHARACTER.test(spelling));
}

function parse(value: string, base: string): URL | undefined {
  try {
    return new URL(value, base);
  } catch {
    return undefined;
  }
}

/**
 * The path and query to redirect to for `value` (a path, or an absolute URL on `origin`), or
 * undefined when it could lead anywhere else. Every spelling of the value is resolved against the
 * origin by the WHATWG URL parser (the one browsers use) and must keep that origin and carry no
 * user info; the answer is rebuilt from the parsed URL, never the raw text.
 */
export function sameOriginPath(value: unknown, origin: string): string | undefined {
  if (typeof value !== "string" || value.length === 0 || value.length > MAX_TARGET_LENGTH) return undefined;
  const own = new URL(origin).origin;
  let target: URL | undefined;
  for (const spelling of percentDecodedSpellings(value)) {
    if (UNSAFE_CHARACTER.test(spelling)) return undefined;
    const url = parse(spelling, own);
    if (url === undefined || url.origin !== own || url.username !== "" || url.password !== "") return undefined;
    target ??= url;
  }
  return target === undefined ? undefined : `${target.pathname}${target.search}`;
}
