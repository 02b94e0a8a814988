/**
 * The ways a request is broken, each an arbitrary of a named change to a draft. Names are
 * `family:what` (`query:repeated`, `body:deep`): failures are grouped by route and by these.
 */
import fc from "fast-check";
import { BODY_METHODS, type Draft, type FuzzVocabulary, HEADER_LIMIT } from "./request.js";
import { BROKEN_ENCODINGS, hostileString, percentEncode, wrongJsonValue } from "./values.js";

export interface Mutation {
  kind: string;
  apply(draft: Draft): void;
}

const mutation = (kind: string, apply: (draft: Draft) => void): Mutation => ({ kind, apply });

function appendQuery(draft: Draft, part: string): void {
  draft.query = draft.query === undefined || draft.query === "" ? part : `${draft.query}&${part}`;
}

/** The names worth breaking for a route: its example's, then any the vocabulary knows. */
function namesFor(draft: Draft, vocabulary: FuzzVocabulary, source: "query" | "body"): string[] {
  const example = vocabulary.examples[`${draft.route.method} ${draft.route.url}`];
  const own = Object.keys((source === "query" ? example?.query : example?.body) ?? {});
  return own.length > 0 ? own : Object.keys(vocabulary.fields);
}

/** Control characters other than tab, which HTTP parsing refuses in a header value. */
const hasControl = (value: string) =>
  [...value].some((c) => {
    const code = c.charCodeAt(0);
    return (code < 0x20 && code !== 0x09) || code === 0x7f;
  });

const pick = <T>(items: T[], index: number): T => items[index % items.length] as T;

function queryMutations(vocabulary: FuzzVocabulary): fc.Arbitrary<Mutation>[] {
  const plausible = (name: string) => vocabulary.fields[name] ?? [];
  return [
    fc
      .tuple(fc.nat(), fc.integer({ min: 2, max: 4 }), fc.array(hostileString(), { minLength: 0, maxLength: 3 }))
      .map(([index, times, bad]) =>
        mutation("query:repeated", (d) => {
          const name = pick(namesFor(d, vocabulary, "query"), index);
          const values = [...plausible(name), ...bad, "a", "b"].slice(0, times);
          while (values.length < times) values.push(`v${values.length}`);
          for (const value of values) appendQuery(d, `${percentEncode(name)}=${percentEncode(value)}`);
        }),
      ),
    fc.tuple(fc.nat(), fc.constantFrom(...BROKEN_ENCODINGS), fc.boolean()).map(([index, broken, inName]) =>
      mutation("query:bad-encoding", (d) => {
        const name = pick(namesFor(d, vocabulary, "query"), index);
        const value = percentEncode(plausible(name)[0] ?? "x");
        // In place of the query: next to the example's own parameter it would be a repeated one.
        d.query = inName ? `${percentEncode(name)}${broken}=${value}` : `${percentEncode(name)}=${value}${broken}`;
      }),
    ),
    fc.tuple(fc.nat(), hostileString()).map(([index, value]) =>
      mutation("query:hostile-value", (d) => {
        const name = pick(namesFor(d, vocabulary, "query"), index);
        const part = `${percentEncode(name)}=${percentEncode(value)}`;
        d.query = part;
        if (d.path.length + part.length > HEADER_LIMIT - 512) d.transport = true;
      }),
    ),
    fc
      .constantFrom(
        "a[]=1&a[]=2",
        "a[b][c]=1",
        "__proto__[polluted]=1",
        "constructor[prototype][polluted]=1",
        "=x",
        "&&&",
        "x",
        "x=1=2",
        "?x=1",
        "+",
        ";x=1",
        "#frag",
        "limit=-1&cursor=%00",
        "limit=1e309&cursor=",
      )
      .map((raw) => mutation("query:shape", (d) => appendQuery(d, raw))),
  ];
}

function pathMutations(vocabulary: FuzzVocabulary): fc.Arbitrary<Mutation>[] {
  const hostileSegment = fc.oneof(
    hostileString(Object.values(vocabulary.params).flat()).map((value) => percentEncode(value)),
    fc.constantFrom(...BROKEN_ENCODINGS),
    fc.constantFrom("é", "%2F..%2F..", "..%2f", "%2e%2e", "😀"),
  );
  return [
    fc.tuple(fc.nat(), hostileSegment).map(([index, value]) =>
      mutation("path:hostile-param", (d) => {
        const segments = d.route.url.split("/");
        const params = segments.flatMap((segment, i) => (segment.startsWith(":") || segment === "*" ? [i] : []));
        const parts = d.path.split("/");
        if (params.length === 0) {
          // No parameter: break what follows the route instead (a 404 is then a fair answer).
          parts.push(value);
          d.offRoute = true;
        } else parts[pick(params, index)] = value;
        if (value === "" || value === "." || value === "..") d.offRoute = true;
        d.path = parts.join("/");
        // Raw bytes past ASCII in the request line are refused by HTTP parsing itself.
        if (d.path.length > HEADER_LIMIT - 512 || /[^\x20-\x7e]/.test(d.path)) d.transport = true;
      }),
    ),
    fc.constantFrom("//", "/./", "/../", "/%2e/", ";x=1", "/").map((extra) =>
      mutation("path:shape", (d) => {
        d.path = extra.startsWith(";") || extra === "/" ? `${d.path}${extra}` : d.path.replace(/^\//, extra);
        d.offRoute = true;
      }),
    ),
  ];
}

const CONTENT_TYPES = [
  null,
  "",
  "text/plain",
  "application/x-www-form-urlencoded",
  "application/json",
  "application/json; charset=utf-16",
  "application/json; charset=latin1",
  "application/jsonx",
  "application/json, text/html",
  "application/json;",
  "APPLICATION/JSON",
  "application/vnd.api+json",
  "multipart/form-data; boundary=x",
  "multipart/form-data",
  "application/xml",
  "text/html",
  "*/*",
  "application/octet-stream",
];

function headerMutations(vocabulary: FuzzVocabulary): fc.Arbitrary<Mutation>[] {
  const sessionNames = vocabulary.cookies.map((cookie) => cookie.split("=")[0] ?? "");
  return [
    fc.constantFrom(...CONTENT_TYPES).map((type) =>
      mutation("header:content-type", (d) => {
        d.contentType = type;
        if (d.fields === undefined && d.raw === undefined) d.raw = Buffer.from("{}");
      }),
    ),
    fc
      .constantFrom(
        "duplicate-same",
        "duplicate-different",
        "negative",
        "not-a-number",
        "plus",
        "short",
        "with-chunked",
      )
      .map((how) =>
        mutation(`framing:content-length-${how}`, (d) => {
          if (d.fields === undefined && d.raw === undefined) d.raw = Buffer.from("{}");
          const lengths: Record<string, (n: number) => string[]> = {
            "duplicate-same": (n) => [String(n), String(n)],
            "duplicate-different": (n) => [String(n), "0"],
            negative: () => ["-1"],
            "not-a-number": () => ["abc"],
            plus: (n) => [`+${n}`],
            // Never more than is sent (the server would wait for the rest); the byte left over is a
            // second, broken request on the same connection.
            short: (n) => [String(Math.max(0, n - 1))],
            "with-chunked": (n) => [String(n)],
          };
          d.contentLength = lengths[how];
          if (how === "with-chunked") d.chunked = "valid";
          d.transport = true;
        }),
      ),
    fc.constantFrom("valid", "broken").map((how) =>
      mutation(`framing:chunked-${how}`, (d) => {
        if (d.fields === undefined && d.raw === undefined) d.raw = Buffer.from("{}");
        d.chunked = how as "valid" | "broken";
        if (how === "broken") d.transport = true;
      }),
    ),
    fc.constantFrom("missing", "empty", "evil", "duplicate", "long", "with-path").map((how) =>
      mutation(`header:host-${how}`, (d) => {
        const own = d.host[0] ?? "";
        d.host = {
          missing: [],
          empty: [""],
          evil: ["evil.example"],
          duplicate: [own, "evil.example"],
          long: ["h".repeat(5000)],
          "with-path": [`${own}/x?y`],
        }[how] as string[];
        d.transport = true;
      }),
    ),
    fc
      .tuple(
        fc.constantFrom("huge", "too-large", "many", "malformed", "garbage-session", "duplicate-session"),
        hostileString(),
      )
      .map(([how, value]) =>
        mutation(`header:cookie-${how}`, (d) => {
          const name = sessionNames[0] ?? "session";
          const cookies: Record<string, string[]> = {
            huge: [`big=${"x".repeat(9000)}`],
            "too-large": [`big=${"x".repeat(HEADER_LIMIT + 1000)}`],
            many: Array.from({ length: 400 }, (_, i) => `c${i}=v`),
            malformed: ["=;;=", "a", 'b="unterminated', "c=%zz", `${name}`],
            "garbage-session":
              sessionNames.length > 0
                ? sessionNames.map((n) => `${n}=${percentEncode(value)}`)
                : [`session=${percentEncode(value)}`],
            "duplicate-session": [...d.cookies, ...sessionNames.map((n) => `${n}=${percentEncode(value)}`)],
          };
          d.cookies = cookies[how] ?? [];
          if (how === "too-large") d.transport = true;
        }),
      ),
    fc
      .constantFrom(
        ["origin", "null"],
        ["origin", "https://evil.example"],
        ["origin", "garbage"],
        ["referer", "https://evil.example/"],
        ["sec-fetch-site", "cross-site"],
        ["x-forwarded-for", ""],
        ["x-forwarded-for", "garbage"],
        ["x-forwarded-for", "1.2.3.4, 5.6.7.8"],
        ["x-forwarded-for", "::1"],
        ["x-forwarded-for", "[::1]:80"],
        ["x-forwarded-for", "999.999.1.1"],
        ["x-forwarded-for", Array.from({ length: 300 }, (_, i) => `10.0.${i >> 8}.${i & 255}`).join(", ")],
        ["x-forwarded-proto", "javascript"],
        ["x-forwarded-host", "evil.example"],
        ["authorization", "Bearer"],
        ["authorization", "Bearer "],
        ["authorization", `Bearer ${"a".repeat(4000)}`],
        ["authorization", "Basic Og=="],
        ["authorization", "Bearer a b"],
        ["signature-input", 'sig1=("@method");created=1'],
        ["signature", "sig1=:AAAA:"],
        ["content-digest", "sha-256=:AAAA:"],
        ["accept", "*/*"],
        ["accept", ""],
        ["accept", "garbage;;q=x"],
        ["accept", "application/json"],
        ["accept", "text/html"],
        ["accept-language", "zz;q=2, *;q=-1"],
        ["if-none-match", "*"],
        ["if-modified-since", "yesterday"],
        ["range", "bytes=9-1"],
        ["expect", "100-continue"],
      )
      .map(([name, value]) =>
        mutation(`header:${name}`, (d) => {
          d.headers = d.headers.filter(([n]) => n !== name);
          d.headers.push([name, value]);
        }),
      ),
    fc
      .tuple(
        fc.constantFrom("user-agent", "x-request-id", "idempotency-key", "accept-language", "origin"),
        hostileString(),
      )
      .map(([name, value]) =>
        mutation("header:hostile-value", (d) => {
          d.headers.push([name, value]);
          // Control characters (other than tab) in a header are refused by HTTP parsing itself.
          if (hasControl(value) || value.length > HEADER_LIMIT - 1024) d.transport = true;
        }),
      ),
    fc.integer({ min: 100, max: 2000 }).map((count) =>
      mutation("header:many", (d) => {
        for (let i = 0; i < count; i++) d.headers.push([`x-fuzz-${i}`, "v"]);
        // Near the limit, where node refuses (431) depends on its version's accounting of the
        // request head (Node 26 refuses sooner than 20): both answers are right there.
        if (count * `x-fuzz-${count}: v\r\n`.length > HEADER_LIMIT - 4096) d.transport = true;
      }),
    ),
  ];
}

function jsonWith(fields: Record<string, unknown>, extra: string): Buffer {
  const base = JSON.stringify(fields);
  return Buffer.from(base === "{}" ? `{${extra}}` : `${base.slice(0, -1)},${extra}}`, "utf8");
}

function bodyMutations(vocabulary: FuzzVocabulary): fc.Arbitrary<Mutation>[] {
  const fieldName = (d: Draft, index: number) => pick(namesFor(d, vocabulary, "body"), index);
  return [
    fc.uint8Array({ maxLength: 2000 }).map((bytes) =>
      mutation("body:random-bytes", (d) => {
        d.raw = Buffer.from(bytes);
      }),
    ),
    fc.nat().map((cut) =>
      mutation("body:truncated", (d) => {
        const text = d.encoding === "json" ? JSON.stringify(d.fields ?? { a: [1, "x"] }) : "a=1&b=%2";
        d.raw = Buffer.from(text.slice(0, cut % Math.max(1, text.length)));
      }),
    ),
    fc
      .tuple(fc.constantFrom(100, 1_000, 5_000, 20_000, 40_000), fc.constantFrom("array", "object", "open"))
      .map(([depth, shape]) =>
        mutation("body:deep", (d) => {
          d.raw = Buffer.from(
            shape === "array"
              ? `${"[".repeat(depth)}${"]".repeat(depth)}`
              : shape === "object"
                ? `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`
                : "[".repeat(depth),
          );
        }),
      ),
    fc.constantFrom(70 * 1024, 1024 * 1024).map((size) =>
      mutation("body:huge", (d) => {
        d.raw = Buffer.from(d.encoding === "json" ? JSON.stringify({ x: "a".repeat(size) }) : `x=${"a".repeat(size)}`);
      }),
    ),
    fc.tuple(fc.nat(), wrongJsonValue).map(([index, value]) =>
      mutation("body:wrong-type", (d) => {
        d.fields = { ...(d.fields ?? {}), [fieldName(d, index)]: value };
      }),
    ),
    fc.tuple(fc.nat(), fc.nat()).chain(([index]) =>
      hostileString(Object.values(vocabulary.fields).flat()).map((value) =>
        mutation("body:hostile-string", (d) => {
          d.fields = { ...(d.fields ?? {}), [fieldName(d, index)]: value };
        }),
      ),
    ),
    fc.tuple(fc.nat(), fc.constantFrom("ed a0 80", "ff", "c0 af", "f4 90 80 80", "00")).map(([index, hex]) =>
      mutation("body:invalid-utf8", (d) => {
        const bytes = Buffer.from(hex.replaceAll(" ", ""), "hex");
        const name = fieldName(d, index);
        const head = d.encoding === "json" ? jsonWith(d.fields ?? {}, `"${name}":"x`) : Buffer.from(`${name}=x`);
        d.raw = Buffer.concat([
          head.subarray(0, d.encoding === "json" ? -1 : head.length),
          bytes,
          Buffer.from(d.encoding === "json" ? '"}' : ""),
        ]);
      }),
    ),
    fc
      .constantFrom(
        '"__proto__":{"polluted":true,"isAdmin":true}',
        '"constructor":{"prototype":{"polluted":true}}',
        '"prototype":{"polluted":true}',
        '"__proto__":null',
        '"toString":"x","hasOwnProperty":1,"valueOf":[]',
      )
      .map((extra) =>
        mutation("body:prototype-keys", (d) => {
          if (d.encoding === "json") d.raw = jsonWith(d.fields ?? {}, extra);
          else d.raw = Buffer.from("__proto__[polluted]=1&constructor[prototype][polluted]=1&__proto__=x");
        }),
      ),
    fc.constantFrom("[]", "null", '"x"', "1", "true", "[{}]", "{}", " ", "\ufeff{}").map((text) =>
      mutation("body:not-an-object", (d) => {
        d.raw = Buffer.from(text);
      }),
    ),
    fc.tuple(fc.nat(), hostileString()).map(([index, value]) =>
      mutation("body:duplicate-keys", (d) => {
        const name = fieldName(d, index);
        const good = vocabulary.fields[name]?.[0] ?? "x";
        d.raw =
          d.encoding === "json"
            ? jsonWith(
                d.fields ?? {},
                `${JSON.stringify(name)}:${JSON.stringify(value)},${JSON.stringify(name)}:${JSON.stringify(good)}`,
              )
            : Buffer.from(
                `${percentEncode(name)}=${percentEncode(good)}&${percentEncode(name)}=${percentEncode(value)}`,
              );
      }),
    ),
    fc.constant(
      mutation("body:empty", (d) => {
        d.raw = Buffer.alloc(0);
      }),
    ),
    fc.jsonValue({ maxDepth: 4 }).map((value) =>
      mutation("body:any-json", (d) => {
        d.raw = Buffer.from(JSON.stringify(value) ?? "null");
      }),
    ),
    fc.dictionary(fc.string({ maxLength: 12 }), wrongJsonValue, { minKeys: 1, maxKeys: 6 }).map((extra) =>
      mutation("body:unknown-fields", (d) => {
        d.fields = { ...(d.fields ?? {}), ...extra };
      }),
    ),
    fc.tuple(fc.nat(), fc.constantFrom(...BROKEN_ENCODINGS)).map(([index, broken]) =>
      mutation("body:form-bad-encoding", (d) => {
        d.encoding = "form";
        d.raw = Buffer.from(`${percentEncode(fieldName(d, index))}=x${broken}`);
      }),
    ),
    fc.integer({ min: 1_000, max: 5_000 }).map((count) =>
      mutation("body:form-many-fields", (d) => {
        d.encoding = "form";
        d.raw = Buffer.from(Array.from({ length: count }, (_, i) => `f${i}=1`).join("&"));
      }),
    ),
  ];
}

/** One mutation for a route: query, path and header mutations always; body ones where a body is read. */
export function mutationFor(method: string, vocabulary: FuzzVocabulary): fc.Arbitrary<Mutation> {
  const families = [
    { weight: 3, arbitrary: fc.oneof(...queryMutations(vocabulary)) },
    { weight: 2, arbitrary: fc.oneof(...pathMutations(vocabulary)) },
    { weight: 3, arbitrary: fc.oneof(...headerMutations(vocabulary)) },
  ];
  if (BODY_METHODS.has(method)) families.push({ weight: 6, arbitrary: fc.oneof(...bodyMutations(vocabulary)) });
  return fc.oneof(...families);
}
