import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { hostileRedirects } from "@proto/testkit";
import { hasUnsafeUrlCharacter, sameOriginPath } from "../src/redirect.js";

const ORIGIN = "https://trust.test";

describe("sameOriginPath", () => {
  for (const { name, value } of hostileRedirects(ORIGIN)) {
    test(`refuses ${name}`, () => {
      assert.equal(sameOriginPath(value, ORIGIN), undefined, JSON.stringify(value));
    });
  }

  test("refuses what is not a non-empty string", () => {
    for (const value of [undefined, null, 42, ["/account"], { toString: () => "/account" }, ""]) {
      assert.equal(sameOriginPath(value, ORIGIN), undefined);
    }
  });

  test("refuses every C0 control and DEL, as given and percent-encoded", () => {
    for (let code = 0; code <= 0x1f; code++) {
      const character = String.fromCharCode(code);
      const encoded = `%${code.toString(16).padStart(2, "0")}`;
      for (const value of [
        `/a${character}b`,
        `/a${encoded}b`,
        `/a${encoded.toUpperCase()}b`,
        `/account?x=${encoded}`,
      ]) {
        assert.equal(sameOriginPath(value, ORIGIN), undefined, JSON.stringify(value));
      }
    }
    assert.equal(sameOriginPath("/a\u007fb", ORIGIN), undefined);
    assert.equal(sameOriginPath("/a%7Fb", ORIGIN), undefined);
  });

  test("a path on the own origin comes back as the parser spells it", () => {
    assert.equal(sameOriginPath("/account", ORIGIN), "/account");
    assert.equal(sameOriginPath("/link?req=lr_abc", ORIGIN), "/link?req=lr_abc");
    assert.equal(sameOriginPath("/a b", ORIGIN), "/a%20b");
    assert.equal(sameOriginPath("/a/../account", ORIGIN), "/account");
    // A fragment is not sent to the server; it is dropped.
    assert.equal(sameOriginPath("/account#top", ORIGIN), "/account");
    // An `@` in a path is a path character, not user info: the browser stays here.
    assert.equal(sameOriginPath("/@evil.example", ORIGIN), "/@evil.example");
    assert.equal(sameOriginPath("@evil.example", ORIGIN), "/@evil.example");
  });

  test("an absolute URL on the own origin becomes its path and query", () => {
    assert.equal(sameOriginPath("https://trust.test/account?x=1", ORIGIN), "/account?x=1");
    assert.equal(sameOriginPath("HTTPS://TRUST.TEST:443/account", ORIGIN), "/account");
    assert.equal(sameOriginPath("/x", "https://trust.test/base/"), "/x");
  });

  test("a resumed OpenID request keeps its encoded redirect_uri", () => {
    const resume = `/oidc/authorize?${new URLSearchParams({
      client_id: "did:web:rp.example",
      redirect_uri: "https://rp.example/callback?a=1&b=2",
      state: "s t",
    })}`;
    assert.equal(sameOriginPath(resume, ORIGIN), resume);
  });

  test("a malformed escape is text, not an error", () => {
    assert.equal(sameOriginPath("/100%", ORIGIN), "/100%");
    assert.equal(sameOriginPath("/a%zz", ORIGIN), "/a%zz");
  });

  test("the longest accepted value is 2048 characters", () => {
    const longest = `/${"a".repeat(2047)}`;
    assert.equal(sameOriginPath(longest, ORIGIN), longest);
    assert.equal(sameOriginPath(`${longest}a`, ORIGIN), undefined);
  });

  test("an http origin compares by scheme, host and port", () => {
    const origin = "http://127.0.0.1:8081";
    assert.equal(sameOriginPath("http://127.0.0.1:8081/account", origin), "/account");
    assert.equal(sameOriginPath("http://localhost:8081/account", origin), undefined);
    assert.equal(sameOriginPath("http://127.0.0.1/account", origin), undefined);
  });
});

describe("hasUnsafeUrlCharacter", () => {
  test("sees controls and backslashes as given and behind any number of escapes", () => {
    assert.equal(hasUnsafeUrlCharacter("http://127.0.0.1:5000/callback"), false);
    assert.equal(hasUnsafeUrlCharacter("http://127.0.0.1:5000/a%20b"), false);
    for (const value of ["a\tb", "a\\b", "a%5cb", "a%255Cb", "a%25250Ab", "a%00b", "a\u007fb"]) {
      assert.equal(hasUnsafeUrlCharacter(value), true, JSON.stringify(value));
    }
  });
});
