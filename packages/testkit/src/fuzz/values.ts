/**
 * Hostile values: the strings, numbers and JSON a careless or malicious client sends, and the
 * percent-encoding that carries them in a URL (including encodings that are themselves wrong).
 */
import fc from "fast-check";

/** Strings that have broken parsers, validators, databases and HTML before. */
const NASTY = [
  "",
  " ",
  "\u0000",
  "a\u0000b",
  "\u0001\u0008\u001b\u001f\u007f",
  "\t\r\n",
  "line\r\nSet-Cookie: x=1",
  "\ud800",
  "x\udfffy",
  "\udc00\ud800",
  "\ufeff",
  "\u202e\u0645",
  "😀",
  "ä".normalize("NFD"),
  "..",
  "../../etc/passwd",
  "%",
  "%00",
  "%zz",
  "<script>alert(1)</script>",
  "' OR 1=1 --",
  '"; DROP TABLE x; --',
  "\\",
  "{}",
  "[]",
  "null",
  "true",
  "-1",
  "0",
  "1e309",
  "NaN",
  "9007199254740993",
  "did:key:",
  "did:key:z",
  "did:web:",
  "did:web:%00",
  "did:web:example.com:..:..",
  "did:web:a%3A99999",
  "https://evil.example",
  "//evil.example",
  "/\t/evil.example",
  "/%09/evil.example",
  "/\\evil.example",
  "javascript:alert(1)",
  "http://127.0.0.1:22/",
  "__proto__",
  "constructor",
];

/** A string of UTF-16 code units, lone surrogates included (JSON.stringify escapes them). */
const codeUnits = (maxLength: number) =>
  fc.string({ unit: fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)), maxLength });

const controlString = fc.string({
  unit: fc.integer({ min: 0, max: 0x1f }).map((c) => String.fromCharCode(c)),
  minLength: 1,
  maxLength: 8,
});

/** A long run of one character, near and past the limits (URL, parameter, body, header). */
export const longString = fc
  .tuple(fc.constantFrom(1_000, 2_049, 8_200, 17_000, 70_000), fc.constantFrom("a", "%", "é", "\u0000", "😀"))
  .map(([n, c]) => c.repeat(n));

/** A hostile string, optionally glued to a plausible value so it passes the first checks. */
export function hostileString(plausible: string[] = []): fc.Arbitrary<string> {
  const base = fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom(...NASTY) },
    { weight: 2, arbitrary: codeUnits(24) },
    { weight: 1, arbitrary: fc.string({ unit: "binary", maxLength: 24 }) },
    { weight: 1, arbitrary: controlString },
    { weight: 1, arbitrary: longString },
  );
  if (plausible.length === 0) return base;
  return fc.oneof(
    { weight: 2, arbitrary: base },
    {
      weight: 2,
      arbitrary: fc
        .tuple(fc.constantFrom(...plausible), base, fc.constantFrom("prefix", "suffix", "middle"))
        .map(([value, bad, where]) =>
          where === "prefix"
            ? `${bad}${value}`
            : where === "suffix"
              ? `${value}${bad}`
              : `${value.slice(0, value.length >> 1)}${bad}${value.slice(value.length >> 1)}`,
        ),
    },
  );
}

/** Any JSON value of the wrong kind for a field (numbers out of range, objects, arrays, null). */
export const wrongJsonValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(null, true, false, 0, -1, 1.5, 1e308, -0, 2 ** 53 + 2, [], {}, [null], { "": "" }),
  fc.integer(),
  fc.double({ noNaN: true }),
  fc.array(fc.string({ maxLength: 4 }), { maxLength: 3 }),
  fc.jsonValue({ maxDepth: 3 }),
);

const UNRESERVED = /[A-Za-z0-9\-._~]/;

/** Percent-encodes the UTF-8 of `value` (lone surrogates become U+FFFD, as in any UTF-8 encoder). */
export function percentEncode(value: string): string {
  let out = "";
  for (const byte of Buffer.from(value, "utf8")) {
    const char = String.fromCharCode(byte);
    out += UNRESERVED.test(char) ? char : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

/** Encoded forms that are wrong, or decode to something no UTF-8 encoder would produce. */
export const BROKEN_ENCODINGS = [
  "%",
  "%2",
  "%zz",
  "%%",
  "%u0041",
  "%C3%28",
  "%FF",
  "%ED%A0%80",
  "%C0%AF",
  "%F4%90%80%80",
  "%00",
  "%0A",
  "%7F",
  "%E2%80%AE",
  "a%2Fb",
  "%252e%252e",
];
