import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { loadVectorFile } from "@proto/testkit";
import { didUrlComponent, didWebHost, didWebMatchesHost, isDidSyntax, MAX_DID_LENGTH, parseDid } from "../src/did.js";
import { encodeDidKey } from "../src/did-key.js";
import type { Keypair } from "./helpers.js";

const keypair = loadVectorFile<Keypair>("keypair.json");
const DID_KEY = encodeDidKey(new Uint8Array(32).fill(7));

function rejects(value: unknown, reason: string) {
  assert.deepEqual(parseDid(value), { ok: false, reason });
  assert.equal(isDidSyntax(value), false);
}

describe("parseDid: did:key", () => {
  test("the published test key parses", {
    skip: keypair ? false : "reference vectors not found (keypair.json)",
  }, () => {
    assert.deepEqual(parseDid(keypair?.did_key), { ok: true, did: { method: "key", did: keypair?.did_key } });
  });

  test("a canonical Ed25519 did:key parses", () => {
    assert.deepEqual(parseDid(DID_KEY), { ok: true, did: { method: "key", did: DID_KEY } });
    assert.equal(isDidSyntax(DID_KEY), true);
  });

  test("a did:key that does not decode strictly is refused with the decoder's reason", () => {
    const truncated = parseDid(DID_KEY.slice(0, -2));
    assert.equal(truncated.ok, false);
    assert.match(truncated.ok ? "" : truncated.reason, /^did:key is not a canonical Ed25519 did:key: /);
    rejects(
      "did:key:f0123",
      "did:key is not a canonical Ed25519 did:key: did:key must use the base58btc multibase prefix 'z'",
    );
  });
});

describe("parseDid: did:web", () => {
  test("host only", () => {
    assert.deepEqual(parseDid("did:web:example.com"), {
      ok: true,
      did: {
        method: "web",
        did: "did:web:example.com",
        host: "example.com",
        hostname: "example.com",
        port: undefined,
        path: [],
      },
    });
  });

  test("a %3A-encoded port is part of the host", () => {
    const parsed = parseDid("did:web:example.com%3A8443");
    assert.equal(parsed.ok && parsed.did.method === "web" ? parsed.did.host : undefined, "example.com:8443");
    assert.equal(parsed.ok && parsed.did.method === "web" ? parsed.did.port : undefined, 8443);
  });

  test("colon path segments are split off the host and decoded once", () => {
    const parsed = parseDid("did:web:example.com%3A8443:users:al%7Eice");
    assert.deepEqual(parsed.ok && parsed.did.method === "web" ? [parsed.did.host, parsed.did.path] : undefined, [
      "example.com:8443",
      ["users", "al~ice"],
    ]);
  });

  test("percent-decoding happens exactly once", () => {
    rejects("did:web:h%253A8443", "did:web host is not a valid domain name");
    const once = parseDid("did:web:ex%61mple.com");
    assert.equal(once.ok && once.did.method === "web" ? once.did.host : undefined, "example.com");
  });

  test("letter case is kept as written", () => {
    const parsed = parseDid("did:web:Example.COM");
    assert.equal(parsed.ok && parsed.did.method === "web" ? parsed.did.host : undefined, "Example.COM");
  });

  test("invalid hosts and ports are refused", () => {
    for (const host of ["exa_mple.com", "-example.com", "example.com.", "exa%20mple.com", `${"a".repeat(64)}.com`]) {
      rejects(`did:web:${host}`, "did:web host is not a valid domain name");
    }
    for (const port of ["0", "65536", "08443", "", "1%3A2"]) {
      rejects(`did:web:example.com%3A${port}`, "did:web port is not a valid port number");
    }
    rejects("did:web:example.com::alice", "did:web has an empty segment");
    rejects("did:web:%C3", "did:web contains invalid percent-encoding");
  });
});

describe("parseDid: what is not a bare did:web or did:key", () => {
  test("DID URL components are named", () => {
    rejects(`${DID_KEY}#key-1`, "did contains DID URL component (fragment)");
    rejects(`${DID_KEY}?versionId=1`, "did contains DID URL component (query)");
    rejects("did:web:example.com/path?x#y", "did contains DID URL component (path)");
    assert.equal(didUrlComponent("did:web:example.com#a/b"), "fragment");
    assert.equal(didUrlComponent("did:web:example.com"), undefined);
  });

  test("other methods, non-DIDs and oversized input", () => {
    rejects("did:plc:ewvi7nxzyoun6zhxrhs64oiz", 'unsupported DID method "plc" (expected did:web or did:key)');
    for (const value of ["did:web:", "DID:web:example.com", "did:Web:example.com", "example.com", ""]) {
      rejects(value, "not a DID (expected did:<method>:<identifier>)");
    }
    rejects("did:web:exa mple.com", "did contains characters a DID does not allow");
    rejects("did:web:example.com:", "did contains characters a DID does not allow");
    rejects(`did:web:${"a".repeat(MAX_DID_LENGTH)}`, `did is longer than ${MAX_DID_LENGTH} characters`);
    rejects(undefined, "did must be a string");
  });
});

describe("didWebHost and host matching", () => {
  test("the host is lowercased, keeps its port and ignores the path", () => {
    assert.equal(didWebHost("did:web:Example.COM"), "example.com");
    assert.equal(didWebHost("did:web:h%3A8443"), "h:8443");
    assert.equal(didWebHost("did:web:api.example.com:users:alice"), "api.example.com");
  });

  test("is undefined for anything but a valid did:web", () => {
    assert.equal(didWebHost(DID_KEY), undefined);
    assert.equal(didWebHost("did:web:h%253A8443"), undefined);
    assert.equal(didWebHost("https://example.com"), undefined);
  });

  test("matches the host of an https URL (decisions §1)", () => {
    const host = (url: string) => new URL(url).host;
    assert.equal(didWebMatchesHost("did:web:h%3A8443", host("https://h:8443/.well-known/proto")), true);
    assert.equal(didWebMatchesHost("did:web:h%3A8443", host("https://h/.well-known/proto")), false);
    assert.equal(didWebMatchesHost("did:web:h", host("https://h:8443/.well-known/proto")), false);
    assert.equal(didWebMatchesHost("did:web:API.Example.com", host("https://api.example.COM/.well-known/proto")), true);
    assert.equal(didWebMatchesHost("did:web:api.example.com:users:alice", "api.example.com"), true);
    assert.equal(didWebMatchesHost("did:web:h%3A443", host("https://h:443/.well-known/proto")), true);
    assert.equal(didWebMatchesHost("did:web:h%253A8443", "h:8443"), false);
    assert.equal(didWebMatchesHost(DID_KEY, "example.com"), false);
  });
});
