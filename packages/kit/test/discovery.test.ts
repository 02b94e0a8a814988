import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { isReservedErrorCode, RESERVED_ERRORS, validateDiscoveryDocument } from "@proto/protocol";
import { loadVectors } from "@proto/testkit";
import { endpointPath } from "../src/discovery.js";
import {
  assertDiscoveryDocument,
  buildDiscoveryDocument,
  createKit,
  DEFAULT_ENDPOINTS,
  DiscoveryDocumentError,
  KIT_ERRORS,
} from "../src/index.js";

describe("discovery document builder", () => {
  test("defaults: a complete, schema-valid document in the attested_only posture", () => {
    const doc = buildDiscoveryDocument(
      { service_did: "did:web:api.example.com" },
      { publicUrl: "https://api.example.com", acceptedAttestors: ["proto-trust"] },
    );
    assert.ok(validateDiscoveryDocument(doc).valid);
    assert.deepEqual(doc, {
      proto_version: "0.1",
      service_did: "did:web:api.example.com",
      endpoints: {
        accounts: DEFAULT_ENDPOINTS.accounts,
        owner_invitation: DEFAULT_ENDPOINTS.owner_invitation,
        claim_completion: DEFAULT_ENDPOINTS.claim_completion,
        key_rotation: DEFAULT_ENDPOINTS.key_rotation,
        key_rekey: DEFAULT_ENDPOINTS.key_rekey,
        key_revocation: DEFAULT_ENDPOINTS.key_revocation,
        claim_page: "https://api.example.com/proto/claim",
      },
      signature_algorithms: ["ed25519"],
      billing: { unclaimed_mode: "attested_only", accepted_attestors: ["proto-trust"] },
      features: ["attestation", "key_rotation"],
    });
  });

  test("every optional member is kept, unknown members too; key_rotation can be left out", () => {
    const doc = buildDiscoveryDocument(
      {
        service_did: "did:key:z6MkiYbwC5honA2sxE7XLAyJMDFibLvVg8FgodBX4A4CaUgr",
        endpoints: { claim_page: "https://claim.example/c", key_rotation: null },
        recipient_types: ["email", "phone", "oidc", "did"],
        features: ["attestation", "attested_session"],
        limits: { unclaimed_rate_limit_per_hour: 60, unclaimed_ttl_seconds: 86400 },
        billing: { unclaimed_mode: "free", accepted_attestors: ["proto-trust", "other-trust"] },
        x402: { facilitator: "f", networks: [], assets: [], payment_endpoint: "/pay" },
        acme_extension: { a: 1 },
      },
      {},
    );
    assert.ok(validateDiscoveryDocument(doc).valid);
    assert.equal(doc.endpoints.key_rotation, undefined);
    assert.deepEqual(doc.recipient_types, ["email", "phone", "oidc", "did"]);
    assert.deepEqual(doc.limits, { unclaimed_rate_limit_per_hour: 60, unclaimed_ttl_seconds: 86400 });
    assert.deepEqual(doc.acme_extension, { a: 1 });
    assert.deepEqual(doc.billing?.accepted_attestors, ["proto-trust", "other-trust"]);
  });

  test("invalid input throws DiscoveryDocumentError with the schema's reasons", () => {
    const cases: [string, () => unknown, RegExp][] = [
      [
        "bad DID",
        () => buildDiscoveryDocument({ service_did: "did:plc:x" }, { publicUrl: "https://a.example" }),
        /service_did/,
      ],
      [
        "no claim page and no public URL",
        () => buildDiscoveryDocument({ service_did: "did:web:a.example" }),
        /claim_page/,
      ],
      [
        "claim page neither a URI nor a path",
        () => buildDiscoveryDocument({ service_did: "did:web:a.example", endpoints: { claim_page: "claim" } }),
        /claim_page/,
      ],
      [
        "signed endpoint on another origin",
        () =>
          buildDiscoveryDocument(
            { service_did: "did:web:a.example", endpoints: { accounts: "https://api.b.example/accounts" } },
            { publicUrl: "https://a.example" },
          ),
        /endpoints\.accounts \(https:\/\/api\.b\.example\/accounts\) is on another origin than the service/,
      ],
      [
        "http endpoint",
        () =>
          buildDiscoveryDocument(
            { service_did: "did:web:a.example", endpoints: { owner_invitation: "http://a.example/invite" } },
            { publicUrl: "https://a.example" },
          ),
        /endpoints\.owner_invitation: must be a path on the service host .* or an absolute https URL/,
      ],
      [
        "endpoint that is not a path",
        () =>
          buildDiscoveryDocument(
            { service_did: "did:web:a.example", endpoints: { accounts: "//evil" } },
            { publicUrl: "https://a.example" },
          ),
        /accounts/,
      ],
      [
        "TTL below an hour",
        () =>
          buildDiscoveryDocument(
            {
              service_did: "did:web:a.example",
              limits: { unclaimed_rate_limit_per_hour: 1, unclaimed_ttl_seconds: 60 },
            },
            { publicUrl: "https://a.example" },
          ),
        /unclaimed_ttl_seconds/,
      ],
      [
        "unknown recipient type",
        () =>
          buildDiscoveryDocument(
            { service_did: "did:web:a.example", recipient_types: ["fax" as "email"] },
            { publicUrl: "https://a.example" },
          ),
        /recipient_types/,
      ],
      [
        "did:web of another host",
        () => buildDiscoveryDocument({ service_did: "did:web:b.example" }, { publicUrl: "https://a.example" }),
        /does not name the host/,
      ],
      [
        "key_rotation feature without the endpoint",
        () =>
          buildDiscoveryDocument(
            { service_did: "did:web:a.example", features: ["key_rotation"], endpoints: { key_rotation: null } },
            { publicUrl: "https://a.example" },
          ),
        /key_rotation/,
      ],
    ];
    for (const [what, build, reason] of cases) {
      assert.throws(
        build,
        (error: unknown) =>
          error instanceof DiscoveryDocumentError && reason.test(error.message) && error.errors.length > 0,
        what,
      );
    }
  });

  test("endpoints given as absolute URLs on the public origin are written as paths; a claim page path as a full URI", () => {
    const doc = buildDiscoveryDocument(
      {
        service_did: "did:web:a.example%3A8443",
        endpoints: {
          accounts: "https://a.example:8443/api/accounts",
          owner_invitation: "https://A.EXAMPLE:8443/api/../api/invite?v=2",
          claim_page: "/claim",
          claim_completion: "/api/claim",
          key_rotation: "https://a.example:8443/api/rotate",
        },
        billing: { unclaimed_mode: "free" },
      },
      { publicUrl: "https://a.example:8443/app/" },
    );
    assert.deepEqual(doc.endpoints, {
      accounts: "/api/accounts",
      owner_invitation: "/api/invite?v=2",
      claim_page: "https://a.example:8443/claim",
      claim_completion: "/api/claim",
      key_rotation: "/api/rotate",
      key_rekey: DEFAULT_ENDPOINTS.key_rekey,
      key_revocation: DEFAULT_ENDPOINTS.key_revocation,
    });
    assert.ok(validateDiscoveryDocument(doc).valid);
  });

  test("without a public URL, absolute endpoints are kept as given", () => {
    const endpoints = {
      accounts: "https://api.example.com/proto/v1/accounts",
      owner_invitation: "https://api.example.com/proto/v1/accounts/me/owner-invitation",
      claim_page: "/claim",
      claim_completion: "https://api.example.com/proto/v1/claim",
      key_rotation: "https://api.example.com/proto/v1/accounts/me/keys/rotate",
    };
    const doc = buildDiscoveryDocument({
      service_did: "did:web:api.example.com",
      endpoints: { ...endpoints, key_rekey: null, key_revocation: null },
    });
    assert.deepEqual(doc.endpoints, endpoints);
  });

  test("assertDiscoveryDocument accepts an upstream-style document with absolute endpoints, and names a bad one", () => {
    const upstream = {
      proto_version: "0.1",
      service_did: "did:web:api.example.com",
      signature_algorithms: ["ed25519"],
      endpoints: {
        accounts: "https://api.example.com/proto/v1/accounts",
        owner_invitation: "https://api.example.com/proto/v1/accounts/me/owner-invitation",
        claim_page: "https://api.example.com/claim",
        claim_completion: "https://api.example.com/proto/v1/claim",
        key_rotation: "https://api.example.com/proto/v1/accounts/me/keys/rotate",
      },
      billing: { unclaimed_mode: "attested_only", accepted_attestors: ["proto-trust"] },
    };
    assert.equal(assertDiscoveryDocument(upstream), upstream);
    const bad = { ...upstream, endpoints: { ...upstream.endpoints, accounts: "https://user@api.example.com/x" } };
    assert.throws(
      () => assertDiscoveryDocument(bad),
      (error: unknown) =>
        error instanceof DiscoveryDocumentError &&
        error.errors.length === 1 &&
        error.errors[0]?.path === "/endpoints/accounts" &&
        /no user name or password/.test(error.message),
    );
  });

  test("endpointPath: where the kit mounts an endpoint; another origin is refused at startup", () => {
    const origin = "https://a.example:8443";
    assert.equal(endpointPath(origin, "/proto/v1/accounts"), "/proto/v1/accounts");
    assert.equal(endpointPath(origin, "https://a.example:8443/proto/v1/accounts"), "/proto/v1/accounts");
    assert.equal(endpointPath(`${origin}/ignored/path`, "https://A.example:8443/x/../claim?v=1"), "/claim");
    assert.equal(endpointPath(origin, "/a b"), "/a%20b");
    const refused: [string, RegExp][] = [
      [
        "https://a.example/proto/v1/accounts",
        /endpoints\.accounts \(https:\/\/a\.example\/proto\/v1\/accounts\) is on another origin than the service \(https:\/\/a\.example:8443\)/,
      ],
      ["https://api.other.example:8443/x", /another origin/],
      ["//a.example:8443/x", /endpoints\.accounts: endpoint "\/\/a\.example:8443\/x" names a host/],
      ["accounts", /endpoints\.accounts: endpoint "accounts" is neither a path/],
    ];
    for (const [value, reason] of refused) {
      assert.throws(
        () => endpointPath(origin, value, "accounts"),
        (error: unknown) =>
          error instanceof DiscoveryDocumentError &&
          error.errors[0]?.path === "/endpoints/accounts" &&
          reason.test(error.message),
        value,
      );
    }
  });

  test("createKit refuses an attested_only service without an attestor, and an accepted attestor without a key set", async () => {
    await assert.rejects(
      createKit({
        publicUrl: "https://a.example",
        discovery: { service_did: "did:web:a.example" },
        database: "sqlite::memory:",
      }),
      /attested_only needs at least one accepted attestor/,
    );
    await assert.rejects(
      createKit({
        publicUrl: "https://a.example",
        discovery: {
          service_did: "did:web:a.example",
          billing: { unclaimed_mode: "attested_only", accepted_attestors: ["x"] },
        },
        attestors: {},
        database: "sqlite::memory:",
      }),
      /no entry for it/,
    );
    await assert.rejects(
      createKit({
        publicUrl: "https://a.example",
        discovery: { service_did: "did:web:a.example" },
        attestors: { "proto-trust": { url: "http://trust.example" } },
        database: "sqlite::memory:",
      }),
      /must be https/,
    );
    await assert.rejects(
      createKit({
        publicUrl: "https://a.example",
        discovery: { service_did: "did:web:a.example", billing: { unclaimed_mode: "free" } },
        ownerFreshnessSeconds: 30,
        database: "sqlite::memory:",
      }),
      /ownerFreshnessSeconds/,
    );
  });
});

interface ErrorVector {
  code: string;
  http_status: number;
  envelope: { error: { code: string; message: string } };
}

const { vectors, skipReason } = loadVectors<ErrorVector>("errors");
/** vectors/README: where the data differs from spec/trust.md, the spec wins. */
const SPEC_OVERRIDES: Record<string, number> = { invitation_not_found: 404, owner_authentication_required: 401 };

describe("the kit's error table", () => {
  test("covers exactly the reserved codes, each with the spec's statuses", () => {
    assert.deepEqual(Object.keys(KIT_ERRORS).sort(), Object.keys(RESERVED_ERRORS).sort());
    for (const [code, use] of Object.entries(KIT_ERRORS)) {
      const spec = RESERVED_ERRORS[code as keyof typeof RESERVED_ERRORS] as {
        status: number;
        alternateStatus?: { status: number };
      };
      assert.equal(use.statuses[0], spec.status, `${code}: the spec's status first`);
      for (const status of use.statuses) {
        assert.ok(status === spec.status || status === spec.alternateStatus?.status, `${code}: ${status}`);
      }
      assert.ok(use.situations.length > 0);
    }
  });

  test("agrees with the shared error vectors (spec wins where they differ)", { skip: skipReason ?? false }, () => {
    assert.equal(vectors.length, 18);
    for (const { file, vector } of vectors) {
      assert.ok(isReservedErrorCode(vector.code), `${file}: reserved`);
      const use = KIT_ERRORS[vector.code];
      const expected = SPEC_OVERRIDES[vector.code] ?? vector.http_status;
      assert.equal(use.statuses[0], expected, `${file}: status`);
      assert.deepEqual(Object.keys(vector.envelope), ["error"]);
      assert.equal(vector.envelope.error.code, vector.code);
    }
    // The two codes with a second status: owner_authentication_required uses both (401 without a
    // session, 403 otherwise); a replaced invitation answers invitation_expired (410), so
    // invitation_not_found is always 404.
    assert.deepEqual([...KIT_ERRORS.owner_authentication_required.statuses], [401, 403]);
    assert.deepEqual([...KIT_ERRORS.invitation_not_found.statuses], [404]);
  });
});
