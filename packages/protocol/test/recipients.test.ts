import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { loadVectors } from "@proto/testkit";
import { encodeDidKey } from "../src/did-key.js";
import { DISCOVERY_SCHEMA } from "../src/discovery.js";
import type { Recipient } from "../src/recipients.js";
import {
  isRecipientType,
  normalizeRecipient,
  RECIPIENT_TYPES,
  RecipientError,
  recipientKey,
  recipientsMatch,
} from "../src/recipients.js";

interface RecipientVector {
  name: string;
  recipient_type: string;
  input: unknown;
  expected: { type: "accept"; canonical: Recipient } | { type: "reject"; reason: string };
}

const { vectors, skipReason } = loadVectors<RecipientVector>("recipients");
const DID_KEY = encodeDidKey(new Uint8Array(32).fill(7));

function accepts(input: unknown, canonical: Recipient) {
  assert.deepEqual(normalizeRecipient(input), { ok: true, recipient: canonical });
}

function rejects(input: unknown, reason: string) {
  assert.deepEqual(normalizeRecipient(input), { ok: false, reason });
}

describe("recipient vectors", () => {
  test("the recipient vector folder is complete", { skip: skipReason ?? false }, () => {
    assert.equal(vectors.length, 19);
  });

  for (const { file, vector } of vectors) {
    const { expected } = vector;
    if (expected.type === "accept") {
      test(`${file}: canonical form`, () => {
        accepts(vector.input, expected.canonical);
        accepts(expected.canonical, expected.canonical);
        assert.equal(recipientsMatch(vector.input, expected.canonical), true);
      });
    } else {
      test(`${file}: rejected`, () => {
        rejects(vector.input, expected.reason);
        assert.equal(recipientsMatch(vector.input, vector.input), false);
      });
    }
  }
});

describe("recipient types", () => {
  test("are the four the discovery schema allows", () => {
    const properties = DISCOVERY_SCHEMA.properties as Record<string, { items: { enum: string[] } }>;
    assert.deepEqual([...RECIPIENT_TYPES], properties.recipient_types?.items.enum);
    assert.equal(isRecipientType("email"), true);
    assert.equal(isRecipientType("fax"), false);
  });

  test("an unknown type is flagged so a service can answer unsupported_recipient_type", () => {
    assert.deepEqual(normalizeRecipient({ type: "fax", value: "+14155550173" }), {
      ok: false,
      reason: 'unsupported recipient type "fax"',
      unsupportedType: true,
    });
  });

  test("malformed recipients are rejected without the unsupported flag", () => {
    rejects({ value: "alice@example.com" }, "recipient type must be a string");
    rejects({ type: 1, value: "alice@example.com" }, "recipient type must be a string");
    for (const input of [null, "alice@example.com", ["email", "a@b"]]) {
      rejects(input, "recipient must be an object {type, value}");
    }
  });

  test("unknown members of the input are dropped", () => {
    accepts({ type: "email", value: "a@b.example", note: "x" }, { type: "email", value: "a@b.example" });
    accepts(
      { type: "oidc", value: { issuer: "https://i.example", sub: "1", email: "a@b" } },
      { type: "oidc", value: { issuer: "https://i.example", sub: "1" } },
    );
  });
});

describe("email recipients", () => {
  const email = (value: unknown) => ({ type: "email", value });

  test("NFKC then lowercase, including non-ASCII letters", () => {
    accepts(email("ÉLISE@Example.COM"), email("élise@example.com") as Recipient);
    accepts(email("alice＠example.com"), email("alice@example.com") as Recipient);
  });

  test("exactly one @ with a non-empty local part and domain", () => {
    rejects(email("alice.example.com"), "email must contain exactly one @");
    rejects(email("a@b@example.com"), "email must contain exactly one @");
    rejects(email("@example.com"), "email has an empty local part");
    rejects(email("alice@"), "email domain is not a domain name");
    rejects(email("alice@example..com"), "email domain is not a domain name");
    rejects(email("alice@.example.com"), "email domain is not a domain name");
  });

  test("no whitespace, control or invisible characters", () => {
    for (const value of [
      " alice@example.com",
      "alice@example.com\n",
      "al ice@example.com",
      "al\u200Bice@example.com",
    ]) {
      rejects(email(value), "email contains whitespace or control characters");
    }
  });

  test("at most 254 characters", () => {
    const local = "a".repeat(64);
    const fits = `${local}@${"d".repeat(254 - 65)}`;
    accepts(email(fits), email(fits) as Recipient);
    rejects(email(`${fits}d`), "email is longer than 254 characters");
    rejects(email("a".repeat(100_000)), "email is longer than 254 characters");
  });

  test("the value must be a string", () => {
    rejects(email(42), "email must be a string");
  });
});

describe("phone recipients", () => {
  const phone = (value: unknown) => ({ type: "phone", value });

  test("E.164 from 2 to 15 digits", () => {
    accepts(phone("+44"), phone("+44") as Recipient);
    accepts(phone("+123456789012345"), phone("+123456789012345") as Recipient);
    rejects(phone("+1234567890123456"), "phone is not E.164 (2 to 15 digits after +)");
    rejects(phone("+1"), "phone is not E.164 (2 to 15 digits after +)");
  });

  test("every non-E.164 spelling gets a precise reason", () => {
    rejects(phone("+04155550173"), "phone is not E.164 (country code cannot start with 0)");
    rejects(phone("++14155550173"), "phone is not E.164 (+ may only lead)");
    rejects(phone("+(415)5550173"), "phone contains characters other than + and 0-9");
    rejects(phone("+14155550173x42"), "phone contains E.164 extension syntax");
    rejects(phone(""), "phone is not E.164 (missing leading +)");
    rejects(phone(`+${"1".repeat(100)}`), "phone is not E.164 (too long)");
    rejects(phone(14155550173), "phone must be a string");
  });
});

describe("oidc recipients", () => {
  const oidc = (issuer: unknown, sub: unknown) => ({ type: "oidc", value: { issuer, sub } });

  test("the issuer is opaque: case and trailing slash are significant", () => {
    assert.equal(recipientsMatch(oidc("https://i.example", "1"), oidc("https://i.example/", "1")), false);
    assert.equal(recipientsMatch(oidc("https://I.example", "1"), oidc("https://i.example", "1")), false);
    assert.equal(recipientsMatch(oidc("https://i.example", "1"), oidc("https://i.example", "1")), true);
  });

  test("issuer and sub are non-empty and bounded", () => {
    rejects(oidc("", "1"), "oidc issuer must be a non-empty string");
    rejects(oidc(undefined, "1"), "oidc issuer must be a non-empty string");
    rejects(oidc("https://i.example", ""), "oidc sub must be a non-empty string");
    rejects(oidc("https://i.example", 1), "oidc sub must be a non-empty string");
    rejects(oidc(`https://${"i".repeat(2048)}`, "1"), "oidc issuer is longer than 2048 characters");
    rejects(oidc("https://i.example", "s".repeat(256)), "oidc sub is longer than 255 characters");
    accepts(oidc("https://i.example", "s".repeat(255)), oidc("https://i.example", "s".repeat(255)) as Recipient);
  });

  test("the value must be an object", () => {
    rejects({ type: "oidc", value: "https://i.example|1" }, "oidc value must be an object {issuer, sub}");
  });
});

describe("did recipients", () => {
  const did = (value: unknown) => ({ type: "did", value });

  test("canonical did:key and lowercase did:web pass through", () => {
    for (const value of [
      DID_KEY,
      "did:web:example.com",
      "did:web:example.com%3A8443",
      "did:web:example.com:users:alice",
    ]) {
      accepts(did(value), did(value) as Recipient);
    }
  });

  test("a did:key that does not decode strictly is rejected", () => {
    const result = normalizeRecipient(did(DID_KEY.slice(0, -1)));
    assert.equal(result.ok, false);
    assert.match(result.ok ? "" : result.reason, /^did:key is not a canonical Ed25519 did:key/);
  });

  test("did:web must already be canonical: it is never rewritten", () => {
    rejects(did("did:web:EXAMPLE.com:users:alice"), "did:web host MUST be lowercase");
    const host = "did:web host is not canonical (only the port separator is percent-encoded, as %3A)";
    rejects(did("did:web:example.com%3a8443"), host);
    rejects(did("did:web:ex%61mple.com"), host);
    rejects(
      did("did:web:example.com:%61lice"),
      "did:web path is not canonical (percent-encode only what has no literal form, with uppercase hex)",
    );
    accepts(did("did:web:example.com:%7Ealice"), did("did:web:example.com:%7Ealice") as Recipient);
  });

  test("other methods and non-DIDs are rejected", () => {
    rejects(did("did:plc:abc"), 'unsupported DID method "plc" (expected did:web or did:key)');
    rejects(did("alice@example.com"), "not a DID (expected did:<method>:<identifier>)");
    rejects(did(42), "did must be a string");
  });
});

describe("matching and keys", () => {
  test("recipients match when their canonical forms are equal", () => {
    assert.equal(
      recipientsMatch({ type: "email", value: "Alice@Example.com" }, { type: "email", value: "alice@EXAMPLE.com" }),
      true,
    );
    assert.equal(
      recipientsMatch({ type: "email", value: "alice@example.com" }, { type: "email", value: "bob@example.com" }),
      false,
    );
  });

  test("the same text under two types does not match", () => {
    assert.equal(recipientsMatch({ type: "did", value: DID_KEY }, { type: "email", value: DID_KEY }), false);
  });

  test("an invalid recipient matches nothing, not even itself", () => {
    const bad = { type: "phone", value: "415-555-0173" };
    assert.equal(recipientsMatch(bad, bad), false);
  });

  test("keys are canonical, typed and unambiguous", () => {
    assert.equal(recipientKey({ type: "email", value: "Alice@Example.com" }), "email:alice@example.com");
    assert.equal(recipientKey({ type: "phone", value: "+14155550173" }), "phone:+14155550173");
    assert.equal(recipientKey({ type: "did", value: DID_KEY }), `did:${DID_KEY}`);
    assert.equal(
      recipientKey({ type: "oidc", value: { issuer: "https://i.example", sub: "1" } }),
      'oidc:["https://i.example","1"]',
    );
    assert.notEqual(
      recipientKey({ type: "oidc", value: { issuer: "a:b", sub: "c" } }),
      recipientKey({ type: "oidc", value: { issuer: "a", sub: "b:c" } }),
    );
  });

  test("a key is refused for an invalid recipient", () => {
    assert.throws(
      () => recipientKey({ type: "phone", value: "0173" }),
      (error: unknown) => error instanceof RecipientError && error.message === "phone is not E.164 (missing leading +)",
    );
  });
});
