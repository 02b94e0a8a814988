import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { addressKey } from "../src/index.js";

describe("addressKey: the key per-address limits count a client under", () => {
  test("an IPv4 address is itself, as the keys already in Redis are", () => {
    assert.equal(addressKey("203.0.113.7"), "203.0.113.7");
    assert.equal(addressKey("127.0.0.1"), "127.0.0.1");
  });

  test("an IPv4-mapped IPv6 address is its IPv4 address", () => {
    assert.equal(addressKey("::ffff:203.0.113.7"), "203.0.113.7");
    assert.equal(addressKey("::FFFF:203.0.113.7"), "203.0.113.7");
    assert.equal(addressKey("::ffff:cb00:7107"), "203.0.113.7");
  });

  test("any other IPv6 address is its /64, written canonically however it came", () => {
    assert.equal(addressKey("2001:0db8:0000:0001:0000:0000:0000:0001"), "2001:db8:0:1::/64");
    assert.equal(addressKey("2001:db8:0:1::1"), "2001:db8:0:1::/64");
    assert.equal(addressKey("2001:DB8::1:0:0:1"), "2001:db8::/64");
    assert.equal(addressKey("2001:db8:aaaa:bbbb:cccc:dddd:eeee:ffff"), "2001:db8:aaaa:bbbb::/64");
    assert.equal(addressKey("::1"), "::/64");
    assert.equal(addressKey("::"), "::/64");
  });

  test("two addresses in one /64 share a key; two /64s do not", () => {
    assert.equal(addressKey("2001:db8:1:2::a"), addressKey("2001:db8:1:2:ffff:ffff:ffff:ffff"));
    assert.notEqual(addressKey("2001:db8:1:2::a"), addressKey("2001:db8:1:3::a"));
    assert.notEqual(addressKey("2001:db8:1:2::a"), addressKey("2001:db9:1:2::a"));
  });

  test("a zone id is dropped", () => {
    assert.equal(addressKey("fe80::1%eth0"), "fe80::/64");
    assert.equal(addressKey("fe80::1%eth0"), addressKey("fe80::2%wlan0"));
  });

  test("anything that is not an address comes back unchanged, never thrown", () => {
    for (const input of ["", "not an address", "1.2.3.4%eth0", "[2001:db8::1]", "2001:db8::1::2", "999.1.1.1", "%"]) {
      assert.equal(addressKey(input), input, input);
    }
  });
});
