import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { loadVectors } from "@proto/testkit";
import {
  ATTESTOR_ERRORS,
  FINAL_MINT_ERRORS,
  invitationNotFound,
  isReservedErrorCode,
  ownerAuthenticationRequired,
  ProtoError,
  parseErrorEnvelope,
  protoError,
  RESERVED_ERRORS,
  rateLimitExceeded,
} from "../src/errors.js";

interface ErrorVector {
  code: string;
  http_status: number;
  envelope: { error: { code: string; message: string } };
}

const { vectors, skipReason } = loadVectors<ErrorVector>("errors");
/** The vectors README: where the data differs from spec/trust.md, the spec wins. */
const SPEC_OVERRIDES: Record<string, number> = { invitation_not_found: 404, owner_authentication_required: 401 };

describe("reserved error codes", () => {
  test("the table has the 18 codes of the spec", () => {
    assert.equal(Object.keys(RESERVED_ERRORS).length, 18);
  });

  test("every error vector matches the table", { skip: skipReason ?? false }, () => {
    assert.equal(vectors.length, 18);
    for (const { file, vector } of vectors) {
      assert.ok(isReservedErrorCode(vector.code), `${file}: ${vector.code} is reserved`);
      const spec = RESERVED_ERRORS[vector.code as keyof typeof RESERVED_ERRORS];
      const expected = SPEC_OVERRIDES[vector.code] ?? vector.http_status;
      assert.equal(spec.status, expected, `${file}: status`);
      if (SPEC_OVERRIDES[vector.code] !== undefined) {
        assert.equal((spec as { alternateStatus?: { status: number } }).alternateStatus?.status, vector.http_status);
      }
      const error = protoError(vector.code as keyof typeof RESERVED_ERRORS);
      assert.deepEqual(error.toEnvelope(), vector.envelope, `${file}: envelope`);
    }
  });

  test("the attestor's codes: the spec's table, service_suspended and grant_revoked (403), final for their service", () => {
    const statuses = Object.fromEntries(Object.entries(ATTESTOR_ERRORS).map(([code, spec]) => [code, spec.status]));
    assert.deepEqual(statuses, {
      invalid_request: 400,
      invalid_signature: 401,
      unauthorized: 401,
      binding_revoked: 403,
      verification_required: 403,
      service_suspended: 403,
      grant_revoked: 403,
      not_found: 404,
      binding_expired: 410,
      link_request_expired: 410,
      rate_limited: 429,
      internal_error: 500,
    });
    assert.deepEqual([...FINAL_MINT_ERRORS].sort(), [
      "binding_expired",
      "binding_revoked",
      "grant_revoked",
      "service_suspended",
    ]);
    // The attestor's codes are not the reserved codes of services.
    assert.equal(isReservedErrorCode("service_suspended"), false);
  });

  test("the two codes with a second status", () => {
    assert.equal(invitationNotFound().status, 404);
    assert.equal(invitationNotFound({ replaced: true }).status, 410);
    assert.equal(ownerAuthenticationRequired({ hasSession: false }).status, 401);
    assert.equal(ownerAuthenticationRequired({ hasSession: true }).status, 403);
    assert.throws(() => protoError("revoked_key", { status: 403 }), RangeError);
  });

  test("rate limits carry Retry-After in whole seconds", () => {
    const error = rateLimitExceeded(2.2);
    assert.equal(error.status, 429);
    assert.deepEqual(error.headers(), { "retry-after": "3" });
    assert.deepEqual(protoError("malformed_request").headers(), {});
  });

  test("details and a custom message reach the envelope", () => {
    const error = protoError("malformed_request", { message: "aud is required", details: { field: "aud" } });
    assert.ok(error instanceof ProtoError);
    assert.deepEqual(error.toEnvelope(), {
      error: { code: "malformed_request", message: "aud is required", details: { field: "aud" } },
    });
  });

  test("parses envelopes and refuses other shapes", () => {
    assert.deepEqual(parseErrorEnvelope({ error: { code: "x", message: "y" } }), {
      error: { code: "x", message: "y" },
    });
    assert.equal(parseErrorEnvelope({ error: { code: 1, message: "y" } }), undefined);
    assert.equal(parseErrorEnvelope("nope"), undefined);
    assert.equal(parseErrorEnvelope({ error: { code: "x", message: "y", details: [] } }), undefined);
  });
});
