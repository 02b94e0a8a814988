import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { didWebForHost, didWebMismatch } from "../src/did.js";
import { isLoopbackHostname, isLoopbackHttpUrl } from "../src/loopback.js";

describe("isLoopbackHttpUrl: the one rule for plain http, shared by the agent and the kit", () => {
  test("http on localhost, 127.0.0.0/8 and [::1] is this machine", () => {
    for (const url of [
      "http://localhost:8081",
      "http://LOCALHOST:8081/",
      "http://127.0.0.1:8081",
      "http://127.1.2.3",
      "http://127.1:8081", // the URL parser writes it 127.0.0.1
      "http://[::1]:8081",
      "http://[0:0:0:0:0:0:0:1]:8081", // written [::1]
    ]) {
      assert.equal(isLoopbackHttpUrl(url), true, url);
    }
  });

  test("anything else is not: other hosts, look-alikes, https, garbage", () => {
    for (const url of [
      "http://trust.example",
      "http://localhost.example.com",
      "http://app.localhost", // not every resolver keeps .localhost on this machine
      "http://128.0.0.1",
      "http://10.0.0.1",
      "http://[::2]",
      "http://[::ffff:127.0.0.1]",
      "https://localhost:8081",
      "ftp://localhost",
      "localhost:8081",
      "not a url",
    ]) {
      assert.equal(isLoopbackHttpUrl(url), false, url);
    }
    assert.equal(isLoopbackHostname("127.0.0.1.example"), false);
  });
});

describe("didWebMismatch: the DID that names the host, port written %3A", () => {
  test("a bare :port is a path segment; the message gives the %3A form", () => {
    assert.equal(didWebForHost("localhost:18103"), "did:web:localhost%3A18103");
    assert.equal(didWebForHost("Notes.Example:443"), "did:web:notes.example");
    assert.equal(
      didWebMismatch("did:web:localhost:18103", "localhost:18103"),
      "did:web:localhost:18103 does not name the host localhost:18103: the did:web of that host is did:web:localhost%3A18103 (did:web writes the port's colon as %3A)",
    );
  });

  test("undefined when the DID names the host; an IPv6 host cannot be named", () => {
    assert.equal(didWebMismatch("did:web:localhost%3A18103", "localhost:18103"), undefined);
    assert.equal(didWebMismatch("did:web:notes.example", "notes.example"), undefined);
    assert.match(didWebMismatch("did:web:localhost", "[::1]:3000") ?? "", /cannot name an IPv6 address/);
    assert.equal(
      didWebMismatch("did:web:b.example", "a.example", "the host of https://a.example"),
      "did:web:b.example does not name the host of https://a.example: the did:web of that host is did:web:a.example",
    );
  });
});
