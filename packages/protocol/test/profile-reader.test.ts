import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ProtoError } from "../src/errors.js";
import { buildSignatureBase, type ComponentIdentifier } from "../src/http-signatures/components.js";
import { contentDigest } from "../src/http-signatures/content-digest.js";
import { type ProfileSignature, readAnySpelling, readSignerSpelling } from "../src/http-signatures/profile-reader.js";
import type { BareItem } from "../src/http-signatures/sf-types.js";
import { signatureHeaderPair, signMessage, signRequest } from "../src/http-signatures/sign.js";
import { type CoveredComponent, profileSignatureBase } from "../src/http-signatures/signature-base.js";
import { fetchTargetUri } from "../src/http-signatures/target-uri.js";
import { createRequestVerifier } from "../src/http-signatures/verify.js";
import { MemoryNonceStore } from "../src/nonce-store.js";
import { newAgent } from "./helpers.js";

const agent = newAgent();
const URL_ = "https://svc.example/v1/things?q=1";
const NOW = 1_700_000_000;

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

function pick<T>(next: () => number, values: readonly T[]): T {
  return values[Math.floor(next() * values.length)] as T;
}

function mutate(next: () => number, input: string): string {
  const at = Math.floor(next() * (input.length + 1));
  const char = pick(next, [...' \t,;=()":?*-.@\\/+aZ09é']);
  const kind = next();
  if (kind < 0.33) return input.slice(0, at) + char + input.slice(at);
  if (kind < 0.66) return input.slice(0, at) + input.slice(at + 1);
  return input.slice(0, at) + char + input.slice(at + 1);
}

type Headers = Record<string, string>;

/** Headers signed with `signMessage`, so components and parameters can be in any order. */
function signedOver(
  components: readonly string[],
  params: ReadonlyArray<readonly [string, BareItem]>,
  body: string | null,
  label = "sig1",
): Headers {
  const digest = body === null ? undefined : contentDigest(new TextEncoder().encode(body));
  const sent: Headers = digest === undefined ? {} : { "content-digest": digest };
  const signature = signMessage(
    { method: body === null ? "GET" : "POST", targetUri: fetchTargetUri(URL_), header: (name) => sent[name] },
    components.map((name): ComponentIdentifier => [name, new Map()]),
    params,
    agent.privateKey,
    label,
  );
  return { ...sent, ...signatureHeaderPair([signature]) };
}

function profileParams(nonce: string): Array<[string, BareItem]> {
  return [
    ["created", NOW],
    ["expires", NOW + 60],
    ["nonce", nonce],
    ["keyid", agent.did],
    ["alg", "ed25519"],
  ];
}

function signed(body: string | null, options: { nonce?: string; label?: string } = {}): Headers {
  const s = signRequest(
    { method: body === null ? "GET" : "POST", url: URL_, body },
    {
      keyid: agent.did,
      privateKey: agent.privateKey,
      created: NOW,
      nonce: options.nonce ?? "n-1",
      label: options.label,
    },
  );
  return { ...s.headers };
}

function withInput(headers: Headers, edit: (value: string) => string): Headers {
  return { ...headers, "signature-input": edit(headers["signature-input"] as string) };
}

/** A reading with the signature bytes as hex, for comparing. */
function plain(reading: ProfileSignature | undefined): unknown {
  return reading === undefined ? undefined : { ...reading, signature: Buffer.from(reading.signature).toString("hex") };
}

function general(headers: Headers, hasBody: boolean, label: string | undefined): ProfileSignature | undefined {
  try {
    return readAnySpelling((name) => headers[name], hasBody, label);
  } catch (error) {
    assert.ok(error instanceof ProtoError && error.code === "invalid_signature", String(error));
    return undefined;
  }
}

/** Asserts that the signer-spelling reader, when it reads anything, reads what the general one does. */
function agrees(headers: Headers, hasBody: boolean, label: string | undefined): boolean {
  const fast = readSignerSpelling(headers["signature-input"], headers.signature, hasBody, label);
  if (fast === undefined) return false;
  assert.deepStrictEqual(plain(fast), plain(general(headers, hasBody, label)), JSON.stringify(headers));
  return true;
}

describe("reading the profile signature", () => {
  test("the signer's own spelling is read by the one-pass reader, as the general reader reads it", () => {
    for (const body of ['{"a":1}', null]) {
      for (const label of [undefined, "sig1"]) {
        assert.equal(agrees(signed(body), body !== null, label), true);
      }
    }
    assert.equal(agrees(signed(null, { label: "proto", nonce: "x".repeat(256) }), false, "proto"), true);
  });

  test("other spellings are left to the general reader", () => {
    const cases: Array<[string, Headers, boolean, string | undefined]> = [
      [
        "parameters reordered",
        signedOver(["@method", "@target-uri"], profileParams("n").reverse(), null),
        false,
        undefined,
      ],
      ["components reordered", signedOver(["@target-uri", "@method"], profileParams("n"), null), false, undefined],
      ["a tag", signedOver(["@method", "@target-uri"], [...profileParams("n"), ["tag", "t"]], null), false, undefined],
      ["an escaped nonce", signedOver(["@method", "@target-uri"], profileParams('a"b\\c'), null), false, undefined],
      ["another label asked for", signed(null), false, "other"],
      ["a body the signature does not cover", signed(null), true, undefined],
      ["no body where one is covered", signed("{}"), false, undefined],
      ["a nonce too long", signed(null, { nonce: "x".repeat(257) }), false, undefined],
      ["an empty nonce", signed(null, { nonce: "" }), false, undefined],
      ["a leading zero", withInput(signed(null), (v) => v.replace(";created=", ";created=0")), false, undefined],
      ["a space", withInput(signed(null), (v) => v.replace(";alg=", "; alg=")), false, undefined],
      ["a second member", withInput(signed(null), (v) => `${v}, b=("@method")`), false, undefined],
    ];
    for (const [name, headers, hasBody, label] of cases) {
      assert.equal(readSignerSpelling(headers["signature-input"], headers.signature, hasBody, label), undefined, name);
    }
  });

  test("whatever the headers say, the one-pass reader reads nothing the general reader would not, nor differently", () => {
    const next = random(9421);
    let fast = 0;
    for (let i = 0; i < 20_000; i++) {
      const body = next() < 0.5 ? '{"a":1}' : null;
      const label = pick(next, [undefined, undefined, "sig1", "sig2"]);
      const headers = signed(body, {
        nonce: pick(next, ["n-1", "a", "", 'q"q', "x".repeat(256), "x".repeat(257), "0"]),
        label: pick(next, ["sig1", "sig1", "sig2", "a-b.c*"]),
      });
      const mutations = Math.floor(next() * 3);
      for (let m = 0; m < mutations; m++) {
        const name = next() < 0.7 ? "signature-input" : "signature";
        headers[name] = mutate(next, headers[name] as string);
      }
      if (next() < 0.05) headers["signature-input"] = `other=("@method");alg="x", ${headers["signature-input"]}`;
      if (next() < 0.05) headers.signature += ", other=:AAAA:";
      if (agrees(headers, next() < 0.9 ? body !== null : body === null, label)) fast++;
    }
    // Both readers are exercised.
    assert.ok(fast > 1_000 && fast < 19_000, `one-pass readings: ${fast}`);
  });

  test("signatures spelled otherwise verify as before, and a broken one-pass spelling is still refused", async () => {
    const verify = (headers: Headers, body: string | null) =>
      createRequestVerifier({
        nonceStore: new MemoryNonceStore({ now: () => NOW * 1000 }),
        now: () => NOW * 1000,
      }).verify({ method: body === null ? "GET" : "POST", url: URL_, headers, body });
    const components = ["@method", "@target-uri", "content-digest"];
    const body = '{"a":1}';
    for (const headers of [
      signedOver([...components].reverse(), profileParams("n").reverse(), body),
      signedOver(components, [...profileParams("n"), ["tag", "proto"]], body),
      signedOver(components, profileParams('a"b\\c'), body),
    ]) {
      assert.equal((await verify(headers, body)).keyid, agent.did);
    }
    const escaped = signedOver(components, profileParams('a"b\\c'), body);
    assert.equal((await verify(escaped, body)).nonce, 'a"b\\c');

    // Pad bits that are not zero are read past, as RFC 8941 §4.2.7 asks.
    const padded = signed(body);
    const value = padded.signature as string;
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    // The character before "==" carries two bits of the last byte and four pad bits.
    const withPadBits = alphabet[alphabet.indexOf(value.at(-4) as string) ^ 1] as string;
    padded.signature = `${value.slice(0, -4)}${withPadBits}${value.slice(-3)}`;
    assert.notEqual(padded.signature, value);
    assert.equal((await verify(padded, body)).keyid, agent.did);

    for (const broken of [
      (v: string) => `${v.slice(0, 10)}!${v.slice(11)}`,
      (v: string) => `${v.slice(0, 10)}é${v.slice(11)}`,
      (v: string) => v.replace("==:", "AA:"),
      (v: string) => v.replace(/[A-Za-z0-9+/]{4}==:$/, "==:"),
    ]) {
      const headers = signed(body);
      headers.signature = broken(headers.signature as string);
      await assert.rejects(
        verify(headers, body),
        (e: unknown) => e instanceof ProtoError && e.code === "invalid_signature",
      );
    }
  });

  test("the profile's signature base is the general one, line for line, refusals alike", () => {
    const orders: CoveredComponent[][] = [
      ["@method", "@target-uri", "content-digest"],
      ["content-digest", "@method", "@target-uri"],
      ["@target-uri", "content-digest", "@method"],
      ["@target-uri", "@method"],
    ];
    const digest = contentDigest(new TextEncoder().encode("{}"));
    const params = '("@method");created=1;expires=2;nonce="n";keyid="k";alg="ed25519"';
    for (const order of orders) {
      for (const [method, value] of [
        ["POST", digest],
        ["GET\nX: y", digest],
        ["POST", `${digest}\r`],
      ] as const) {
        const general = () =>
          buildSignatureBase(
            {
              method,
              targetUri: fetchTargetUri(URL_),
              header: (name) => (name === "content-digest" ? value : undefined),
            },
            order.map((name): ComponentIdentifier => [name, new Map()]),
            params,
          );
        const profile = () => profileSignatureBase(order, method, fetchTargetUri(URL_), value, params);
        let expected: string;
        try {
          expected = general();
        } catch (error) {
          assert.throws(profile, { message: (error as Error).message });
          continue;
        }
        assert.equal(profile(), expected);
      }
    }
  });
});
