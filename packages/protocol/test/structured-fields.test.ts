import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { describe, test } from "node:test";
import { isInnerList, parseDictionary as referenceParse, serializeInnerList } from "structured-headers";
import { encodeDidKey } from "../src/did-key.js";
import { rawPublicKey } from "../src/ed25519.js";
import { signRequest } from "../src/http-signatures/sign.js";
import { parseDictionary, parseDictionaryFast } from "../src/http-signatures/structured-fields.js";
import { createRequestVerifier } from "../src/http-signatures/verify.js";
import { MemoryNonceStore } from "../src/nonce-store.js";

// A seeded generator, so that a failure reproduces.
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const KEYS = ["sig1", "sig2", "a", "*x", "b-2.c_d", "A", "1a", "sha-256", ""];
const BARE = [
  "0",
  "7",
  "1700000000",
  "-3",
  "-0",
  "007",
  "1234567890123456",
  "123456789012345",
  "1.5",
  "1.",
  '"@method"',
  '"content-digest"',
  '"did:key:z6MkgNQURJkKuabsHsNoza6JiWy2HZis2xHaAp9SeWXNGsms"',
  '"a\\"b"',
  '"a\\\\b"',
  '"a\\nb"',
  '"é"',
  '"tab\there"',
  '""',
  "tok",
  "*tok",
  "foo/bar:baz",
  "Tok!#$%&'*+-.^_`|~",
  ":AAAA:",
  ":AA==:",
  ":AAA=:",
  ":AB==:",
  ":AA:",
  ":A===:",
  ":QUJD:",
  "::",
  "?1",
  "?0",
  "?2",
  "@1700000000",
  '%"x%20y"',
  "",
];
const SPACES = ["", " ", "  ", "\t"];

function pick<T>(next: () => number, values: readonly T[]): T {
  return values[Math.floor(next() * values.length)] as T;
}

function parameters(next: () => number): string {
  let out = "";
  const count = Math.floor(next() * 4);
  for (let i = 0; i < count; i++) {
    const value = next() < 0.2 ? "" : `=${pick(next, BARE)}`;
    out += `;${next() < 0.1 ? pick(next, SPACES) : ""}${pick(next, ["created", "keyid", "alg", "nonce", "key", "req", "X", "tag"])}${value}`;
  }
  return out;
}

function member(next: () => number): string {
  const kind = next();
  if (kind < 0.1) return parameters(next);
  if (kind < 0.3) return `=${pick(next, BARE)}${parameters(next)}`;
  const items: string[] = [];
  const count = Math.floor(next() * 4);
  for (let i = 0; i < count; i++) items.push(`${pick(next, BARE)}${next() < 0.3 ? parameters(next) : ""}`);
  const gap = () => (next() < 0.85 ? " " : pick(next, SPACES));
  const open = next() < 0.9 ? "" : pick(next, SPACES);
  const close = next() < 0.9 ? "" : pick(next, SPACES);
  return `=(${open}${items.join(gap())}${close})${parameters(next)}`;
}

function dictionary(next: () => number): string {
  const count = 1 + Math.floor(next() * 3);
  const members: string[] = [];
  for (let i = 0; i < count; i++) members.push(`${pick(next, KEYS)}${member(next)}`);
  const separator = () => (next() < 0.8 ? ", " : pick(next, [",", ",\t", " ,", ",  "]));
  let out = members.join(separator());
  if (next() < 0.05) out = ` ${out}`;
  if (next() < 0.05) out += pick(next, [",", " ", "\t", ", "]);
  return out;
}

function mutate(next: () => number, input: string): string {
  const at = Math.floor(next() * (input.length + 1));
  const char = pick(next, [...' \t,;=()":?*-.@%\\/aZ09é']);
  const kind = next();
  if (kind < 0.33) return input.slice(0, at) + char + input.slice(at);
  if (kind < 0.66) return input.slice(0, at) + input.slice(at + 1);
  return input.slice(0, at) + char + input.slice(at + 1);
}

/** A reading with byte sequences as hex, however they are held (`ArrayBuffer` or `Uint8Array`). */
function plain(value: unknown): unknown {
  if (value instanceof Map) return new Map([...value].map(([k, v]) => [k, plain(v)]));
  if (Array.isArray(value)) return value.map(plain);
  if (value instanceof ArrayBuffer) return `bytes:${Buffer.from(value).toString("hex")}`;
  if (value instanceof Uint8Array) return `bytes:${Buffer.from(value).toString("hex")}`;
  return value;
}

/** Asserts that the fast reading, when there is one, is the reference reading. */
function agrees(input: string): boolean {
  let reference: ReturnType<typeof referenceParse> | undefined;
  try {
    reference = referenceParse(input);
  } catch {
    reference = undefined;
  }
  const fast = parseDictionaryFast(input);
  if (fast !== undefined) {
    assert.ok(reference !== undefined, `fast parser accepted what the reference refuses: ${JSON.stringify(input)}`);
    assert.deepStrictEqual(plain(fast.members), plain(reference), JSON.stringify(input));
    for (const [key, text] of fast.texts) {
      const value = reference.get(key);
      assert.ok(value !== undefined && isInnerList(value));
      assert.equal(text, serializeInnerList(value), `inner list text of ${JSON.stringify(input)}`);
    }
  }
  if (reference === undefined) {
    assert.throws(() => parseDictionary(input));
  } else {
    const parsed = parseDictionary(input);
    assert.deepStrictEqual(plain(parsed.members), plain(reference));
    for (const [key, value] of reference) {
      if (isInnerList(value)) assert.equal(parsed.innerListText(key, value), serializeInnerList(value));
    }
  }
  return fast !== undefined;
}

describe("structured field dictionaries", () => {
  test("the one-pass parser reads the signature headers of the profile", () => {
    const { privateKey, publicKey } = generateKeyPairSync("ed25519");
    const keyid = encodeDidKey(rawPublicKey(publicKey));
    const signed = signRequest(
      { method: "POST", url: "https://api.example/x?y=1", body: '{"a":1}' },
      { keyid, privateKey, nonce: "n-1" },
    );
    for (const name of ["signature-input", "signature", "content-digest"] as const) {
      assert.equal(agrees(signed.headers[name] ?? ""), true, `${name} is read by the fast parser`);
    }
    const input = parseDictionaryFast(signed.headers["signature-input"]);
    assert.equal(input?.texts.get("sig1"), signed.headers["signature-input"].slice("sig1=".length));
  });

  test("every reading agrees with structured-headers, whatever the input", () => {
    const next = random(9421);
    let fastReadings = 0;
    for (let i = 0; i < 20_000; i++) {
      let input = dictionary(next);
      const mutations = next() < 0.5 ? 0 : 1 + Math.floor(next() * 3);
      for (let m = 0; m < mutations; m++) input = mutate(next, input);
      if (agrees(input)) fastReadings++;
    }
    // Both paths are exercised: many inputs are read fast, more are handed over.
    assert.ok(fastReadings > 1_000 && fastReadings < 19_000, `fast readings: ${fastReadings}`);
  });

  test("a signature whose Signature-Input is written loosely verifies against the serialised parameters", async () => {
    const { privateKey, publicKey } = generateKeyPairSync("ed25519");
    const keyid = encodeDidKey(rawPublicKey(publicKey));
    const url = "https://api.example/x";
    const signed = signRequest({ method: "POST", url, body: "{}" }, { keyid, privateKey, nonce: "n-2" });
    const loose = signed.headers["signature-input"]
      .replace("(", "( ")
      .replace('" "', '"  "')
      .replace(";created=", "; created=0")
      .replace(";alg=", ";  alg=");
    assert.equal(parseDictionaryFast(loose)?.texts.get("sig1"), undefined);
    const verifier = createRequestVerifier({ nonceStore: new MemoryNonceStore() });
    const verified = await verifier.verify({
      method: "POST",
      url,
      headers: { ...signed.headers, "signature-input": loose },
      body: "{}",
    });
    assert.equal(verified.keyid, keyid);
  });
});
