import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  appendChallenge,
  attemptedProtocol,
  findProtoChallenge,
  formatProtoChallenge,
  parseWwwAuthenticate,
} from "../src/challenge.js";

describe("the Proto challenge (upstream §5.7)", () => {
  test("formats: discovery first, values quoted only when they are not tokens", () => {
    assert.equal(
      formatProtoChallenge({ discovery: "https://api.example/.well-known/proto" }),
      'Proto discovery="https://api.example/.well-known/proto"',
    );
    assert.equal(
      formatProtoChallenge({
        discovery: "https://api.example/.well-known/proto",
        realm: "did:web:api.example",
        error: "attestation_required",
        attestors: ["proto-trust", "other"],
        ownerLogin: "https://api.example/owner/signin",
      }),
      'Proto discovery="https://api.example/.well-known/proto", realm="did:web:api.example", ' +
        'error=attestation_required, attestors="proto-trust other", owner_login="https://api.example/owner/signin"',
    );
    assert.equal(
      formatProtoChallenge({ discovery: 'a"b\\c', attestors: [] }),
      'Proto discovery="a\\"b\\\\c", attestors=""',
    );
  });

  test("round-trips through the parser", () => {
    const challenge = {
      discovery: "https://api.example/.well-known/proto",
      realm: "did:web:api.example",
      error: "invalid_attestation",
      attestors: ["proto-trust"],
      ownerLogin: "https://api.example/o?x=1,2",
    };
    assert.deepEqual(findProtoChallenge(formatProtoChallenge(challenge)), challenge);
  });

  test("found among other schemes' challenges, in one field or several, with unknown parameters ignored", () => {
    const fields = [
      'Bearer realm="api", error="invalid_token", resource_metadata="https://api.example/.well-known/oauth-protected-resource"',
      'Negotiate abc123==, proto discovery = "https://api.example/.well-known/proto" , future=thing, error=revoked_key',
    ];
    const all = parseWwwAuthenticate(fields);
    assert.deepEqual(
      all.map((c) => c.scheme),
      ["Bearer", "Negotiate", "proto"],
    );
    assert.equal(all[0]?.params.resource_metadata, "https://api.example/.well-known/oauth-protected-resource");
    assert.equal(all[1]?.token68, "abc123==");
    assert.deepEqual(findProtoChallenge(fields), {
      discovery: "https://api.example/.well-known/proto",
      error: "revoked_key",
    });
    assert.deepEqual(findProtoChallenge(fields.join(", ")), findProtoChallenge(fields));
    assert.equal(findProtoChallenge('Basic realm="x"'), undefined);
    assert.equal(findProtoChallenge("Proto error=x"), undefined, "no discovery: not a usable challenge");
    assert.equal(findProtoChallenge(null), undefined);
  });

  test("garbage never throws", () => {
    for (const value of ['Proto discovery="unterminated', ",,,", "=", "Proto ,", 'a b="c" d', "\u0000Proto x=y"]) {
      assert.doesNotThrow(() => parseWwwAuthenticate(value), value);
    }
    assert.equal(findProtoChallenge('Proto discovery="unterminated'), undefined);
  });

  test("appended after the challenges already there, which keep their order", () => {
    assert.deepEqual(appendChallenge(undefined, "Proto discovery=x"), ["Proto discovery=x"]);
    assert.deepEqual(appendChallenge(["Bearer a=b", "Basic"], "Proto discovery=x"), [
      "Bearer a=b",
      "Basic",
      "Proto discovery=x",
    ]);
    assert.deepEqual(appendChallenge("Bearer a=b", "Proto discovery=x"), ["Bearer a=b", "Proto discovery=x"]);
  });

  test("a request attempted the protocol when it carries a signature or an attestation", () => {
    assert.equal(attemptedProtocol(new Headers()), false);
    assert.equal(attemptedProtocol(new Headers({ authorization: "Bearer x" })), false);
    assert.equal(attemptedProtocol(new Headers({ signature: "sig1=:AA==:" })), true);
    assert.equal(attemptedProtocol(new Headers({ "signature-input": "sig1=()" })), true);
    assert.equal(attemptedProtocol(new Headers({ "proto-attestation": "x.y.z" })), true);
  });
});
