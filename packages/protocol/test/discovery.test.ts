import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { loadVectors } from "@proto/testkit";
import type { DiscoveryValidationError } from "../src/discovery.js";
import {
  assertAgentCompatible,
  checkAgentCompatibility,
  DISCOVERY_SCHEMA,
  DISCOVERY_SCHEMA_ID,
  DiscoveryIncompatibleError,
  InvalidEndpointError,
  isPermissionName,
  MAX_REPORTED_ERRORS,
  PROTO_VERSION,
  resolveEndpoint,
  SIGNED_ENDPOINTS,
  validateDiscoveryDocument,
  validateDiscoveryPermissions,
} from "../src/discovery.js";

interface DiscoveryVector {
  name: string;
  description: string;
  document: unknown;
  expected: { type: "accept" } | { type: "reject"; reason: string };
}

const { vectors, skipReason } = loadVectors<DiscoveryVector>("discovery");

/** Per the vectors README these are agent rules: the directory's schema accepts them. */
const CLIENT_SIDE_ONLY = new Set(["reject-wrong-version"]);

function minimal(): Record<string, unknown> & { endpoints: Record<string, unknown> } {
  return {
    proto_version: "0.1",
    service_did: "did:web:api.example.com",
    endpoints: {
      accounts: "/proto/v1/accounts",
      owner_invitation: "/proto/v1/accounts/me/owner-invitation",
      claim_page: "https://claim.example.com/claim",
      claim_completion: "/proto/v1/claim",
    },
    signature_algorithms: ["ed25519"],
  };
}

function withEndpoint(key: string, value: unknown) {
  const doc = minimal();
  doc.endpoints[key] = value;
  return doc;
}

function errorsOf(doc: unknown): DiscoveryValidationError[] {
  const result = validateDiscoveryDocument(doc);
  assert.equal(result.valid, false, "document should be rejected");
  return result.valid ? [] : result.errors;
}

function assertRejected(doc: unknown, path: string, message: string) {
  assert.deepEqual(errorsOf(doc), [{ path, message }]);
}

function assertValid(doc: unknown) {
  const result = validateDiscoveryDocument(doc);
  assert.deepEqual(result.valid ? [] : result.errors, []);
}

/** The vectors word reasons slightly differently ("missing required endpoints.accounts"). */
function loose(text: string): string {
  return text.replaceAll("field ", "").replaceAll(":", "");
}

describe("discovery vectors", () => {
  test("the discovery vector folder is complete", { skip: skipReason ?? false }, () => {
    assert.equal(vectors.length, 18);
  });

  for (const { file, vector } of vectors) {
    const { expected } = vector;
    if (expected.type === "accept") {
      test(`${file}: accepted by the schema and by a v0.1 agent`, () => {
        const result = validateDiscoveryDocument(vector.document);
        assert.deepEqual(result, { valid: true, document: vector.document });
        assert.equal(checkAgentCompatibility(vector.document).compatible, true);
      });
      continue;
    }
    test(`${file}: rejected with a readable reason`, () => {
      const schema = validateDiscoveryDocument(vector.document);
      if (CLIENT_SIDE_ONLY.has(vector.name)) {
        assert.equal(schema.valid, true, "the directory accepts any proto_version");
      } else {
        assert.equal(schema.valid, false);
        for (const error of schema.valid ? [] : schema.errors) {
          assert.match(error.path, /^(\/[^/]+)*$/, "a JSON pointer");
        }
      }
      const agent = checkAgentCompatibility(vector.document);
      assert.equal(agent.compatible, false);
      const reasons = agent.compatible ? [] : agent.reasons;
      assert.ok(
        reasons.some((r) => loose(r).includes(loose(expected.reason))),
        `expected a reason like ${JSON.stringify(expected.reason)}, got ${JSON.stringify(reasons)}`,
      );
    });
  }
});

describe("discovery schema document", () => {
  test("is JSON Schema 2020-12 with a stable $id", () => {
    assert.equal(DISCOVERY_SCHEMA.$schema, "https://json-schema.org/draft/2020-12/schema");
    assert.equal(DISCOVERY_SCHEMA_ID, "https://proto.dev/schemas/discovery-0.1.json");
    assert.equal(DISCOVERY_SCHEMA.$id, DISCOVERY_SCHEMA_ID);
  });

  test("is the file the package exports as ./discovery.schema.json", () => {
    const onDisk = JSON.parse(readFileSync(new URL("../schema/discovery.schema.json", import.meta.url), "utf8"));
    assert.deepEqual(DISCOVERY_SCHEMA, onDisk);
  });

  test("cannot be edited by a caller", () => {
    const endpoints = (DISCOVERY_SCHEMA.properties as Record<string, Record<string, unknown>>).endpoints;
    assert.throws(() => {
      (endpoints as Record<string, unknown>).required = [];
    }, TypeError);
  });

  test("never closes an object to unknown members", () => {
    const closed: string[] = [];
    const walk = (node: unknown, at: string) => {
      if (typeof node !== "object" || node === null) return;
      for (const [key, child] of Object.entries(node)) {
        if ((key === "additionalProperties" || key === "unevaluatedProperties") && child === false) closed.push(at);
        walk(child, `${at}/${key}`);
      }
    };
    walk(DISCOVERY_SCHEMA, "#");
    assert.deepEqual(closed, []);
  });
});

describe("discovery required fields", () => {
  test("the minimal document is valid and returned as is", () => {
    const doc = minimal();
    assert.deepEqual(validateDiscoveryDocument(doc), { valid: true, document: doc });
  });

  for (const field of ["proto_version", "service_did", "endpoints", "signature_algorithms"]) {
    test(`missing ${field} is named`, () => {
      const doc = minimal();
      delete doc[field];
      assertRejected(doc, `/${field}`, `missing required field ${field}`);
    });
  }

  for (const key of ["accounts", "owner_invitation", "claim_page", "claim_completion"]) {
    test(`missing endpoints.${key} is named with its pointer`, () => {
      const doc = minimal();
      delete doc.endpoints[key];
      assertRejected(doc, `/endpoints/${key}`, `missing required field endpoints.${key}`);
    });
  }

  test("a document that is not an object", () => {
    for (const doc of [null, [], "{}", 42]) {
      assertRejected(doc, "", "document: must be an object");
    }
  });
});

describe("discovery proto_version", () => {
  test("the schema accepts any version string", () => {
    for (const version of ["0.1", "0.2", "1.0-beta", ""]) {
      assertValid({ ...minimal(), proto_version: version });
    }
  });

  test("a version that is not a string is rejected", () => {
    assertRejected({ ...minimal(), proto_version: 0.1 }, "/proto_version", "proto_version: must be a string");
  });
});

describe("discovery service_did", () => {
  test("did:web and did:key are accepted", () => {
    for (const did of ["did:web:api.example.com", "did:web:h%3A8443:users:alice", "did:key:z6MkiYbwC5ho"]) {
      assertValid({ ...minimal(), service_did: did });
    }
  });

  test("other methods and bare prefixes are rejected", () => {
    for (const did of ["did:plc:abc", "did:web:", "DID:web:example.com", "web:example.com", "https://example.com"]) {
      assertRejected(
        { ...minimal(), service_did: did },
        "/service_did",
        "service_did: must be a did:web or did:key DID",
      );
    }
  });
});

describe("discovery endpoints", () => {
  const SIGNED_MESSAGE =
    'must be a path on the service host (one leading "/") or an absolute https URL (no user name or password, no fragment, no spaces or control characters)';

  test("claim_page is a full URI or a path on the service host", () => {
    for (const page of ["claim", "claim.example.com/claim", "", "//claim.example/c", "/\\claim.example"]) {
      assertRejected(
        withEndpoint("claim_page", page),
        "/endpoints/claim_page",
        'endpoints.claim_page: must be a full URI or a path on the service host (one leading "/")',
      );
    }
    assertValid(withEndpoint("claim_page", "/claim"));
  });

  test("claim_page may be on another host", () => {
    assertValid(withEndpoint("claim_page", "https://claim.other.example:8443/c?flow=1"));
  });

  for (const key of ["accounts", "owner_invitation", "claim_completion", "key_rotation"]) {
    test(`${key} is a path on the service host or an absolute https URL`, () => {
      const bad = [
        "//evil.example/x",
        "/\\evil.example/x",
        "/\t/evil.example/x",
        "/proto/v1/\u0000",
        "proto/v1",
        "",
        "http://api.example.com/x",
        "HTTPS://api.example.com/x",
        "ftp://api.example.com/x",
        "https://",
        "https://user:secret@api.example.com/x",
        "https://api.example.com@evil.example/x",
        "https://api.example.com\\@evil.example/x",
        "https://api.example.com/x#fragment",
        "https://api.example.com/a b",
        "https://api.example.com/a\nb",
        "https://api%2eexample.com/x",
      ];
      for (const value of bad) {
        assertRejected(withEndpoint(key, value), `/endpoints/${key}`, `endpoints.${key}: ${SIGNED_MESSAGE}`);
      }
      for (const value of [
        "/",
        "/proto/v1/x//y",
        "/a b",
        "https://api.example.com/proto/v1/x",
        "https://api.example.com",
        "https://api.other.example:8443/p?q=1",
        "https://[::1]:8443/x",
        "https://192.0.2.7/x",
      ]) {
        assertValid(withEndpoint(key, value));
      }
    });
  }

  test("an absolute endpoint no URL parser accepts is named", () => {
    for (const value of ["https://api.example.com:99999/x", "https://192.0.2.999/x"]) {
      assertRejected(withEndpoint("accounts", value), "/endpoints/accounts", "endpoints.accounts: must be a valid URL");
    }
    assertRejected(
      withEndpoint("claim_page", "https://claim.example:70000/"),
      "/endpoints/claim_page",
      "endpoints.claim_page: must be a valid URL",
    );
  });

  test("an endpoint that is not a string is rejected", () => {
    assertRejected(withEndpoint("accounts", 7), "/endpoints/accounts", "endpoints.accounts: must be a string");
  });

  test("endpoints that is not an object is rejected", () => {
    assertRejected({ ...minimal(), endpoints: ["/a"] }, "/endpoints", "endpoints: must be an object");
  });
});

/** §4.1 of the upstream core specification, with our renames. */
function upstreamSpecExample(): Record<string, unknown> {
  return {
    proto_version: "0.1",
    service_did: "did:web:api.example.com",
    endpoints: {
      accounts: "/proto/v1/accounts",
      owner_invitation: "/proto/v1/accounts/me/owner-invitation",
      claim_page: "https://claim.example.com",
      claim_completion: "/proto/v1/claim",
      key_rotation: "/proto/v1/accounts/me/keys/rotate",
    },
    signature_algorithms: ["ed25519"],
    features: ["attestation", "key_rotation"],
    recipient_types: ["email", "oidc"],
    limits: { unclaimed_ttl_seconds: 2592000, unclaimed_rate_limit_per_hour: 100 },
    billing: { unclaimed_mode: "free", accepted_attestors: ["stripe-projects", "microsoft-entra-agent-id"] },
  };
}

/** What a service built with the upstream SDK's defaults publishes: every endpoint absolute. */
function upstreamSdkDefaults(base = "https://api.example.com"): Record<string, unknown> {
  return {
    proto_version: "0.1",
    service_did: "did:web:api.example.com",
    signature_algorithms: ["ed25519"],
    endpoints: {
      accounts: `${base}/proto/v1/accounts`,
      owner_invitation: `${base}/proto/v1/accounts/me/owner-invitation`,
      claim_page: `${base}/claim`,
      claim_completion: `${base}/proto/v1/claim`,
      key_rotation: `${base}/proto/v1/accounts/me/keys/rotate`,
    },
    billing: { unclaimed_mode: "attested_only", accepted_attestors: ["proto-trust"] },
  };
}

describe("upstream-style discovery documents", () => {
  test("the core specification's example is valid and usable by an agent", () => {
    const doc = upstreamSpecExample();
    assert.deepEqual(validateDiscoveryDocument(doc), { valid: true, document: doc });
    assert.deepEqual(checkAgentCompatibility(doc), { compatible: true, document: doc });
  });

  test("the upstream SDK's defaults (absolute endpoint URLs) are valid and usable by an agent", () => {
    const doc = upstreamSdkDefaults();
    assert.deepEqual(validateDiscoveryDocument(doc), { valid: true, document: doc });
    assert.deepEqual(checkAgentCompatibility(doc), { compatible: true, document: doc });
  });

  test("relative endpoints of upstream custom layouts, claim page included", () => {
    const doc = upstreamSpecExample();
    doc.endpoints = {
      accounts: "/api/v2/accounts",
      owner_invitation: "/api/v2/accounts/me/invite-owner",
      claim_page: "/claim",
      claim_completion: "/api/v2/claim",
      key_rotation: "/api/v2/accounts/me/keys/rotate",
      key_rekey: "/api/v2/owner/rekey",
    };
    assertValid(doc);
  });

  test("the two forms mix, and signed endpoints may live on another host", () => {
    const doc = upstreamSdkDefaults();
    Object.assign(doc.endpoints as Record<string, unknown>, {
      owner_invitation: "/proto/v1/accounts/me/owner-invitation",
      claim_completion: "https://claims.example.net/proto/v1/claim",
    });
    assertValid(doc);
  });
});

describe("resolveEndpoint", () => {
  const DISCOVERY_URL = "https://api.example.com:8443/.well-known/proto";

  test("a path resolves against the discovery document's origin, never its path", () => {
    const cases: [string, string][] = [
      ["/proto/v1/accounts", "https://api.example.com:8443/proto/v1/accounts"],
      ["/", "https://api.example.com:8443/"],
      ["/a/../b?x=1", "https://api.example.com:8443/b?x=1"],
      ["/a b", "https://api.example.com:8443/a%20b"],
    ];
    for (const [value, expected] of cases) {
      for (const base of [DISCOVERY_URL, "https://api.example.com:8443", new URL("https://api.example.com:8443/x/y")]) {
        assert.equal(resolveEndpoint(base, value).href, expected, `${value} against ${String(base)}`);
      }
    }
  });

  test("an absolute URL stands as given, on this host or another", () => {
    for (const value of [
      "https://api.example.com:8443/proto/v1/accounts",
      "https://api.other.example/proto/v1/accounts?v=2",
      "https://claim.example.com/",
    ]) {
      assert.equal(resolveEndpoint(DISCOVERY_URL, value).href, value);
    }
    // Serialised as a URL parser does: the form an agent signs as @target-uri.
    assert.equal(resolveEndpoint(DISCOVERY_URL, "https://API.Example.com:443/x").href, "https://api.example.com/x");
  });

  test("every endpoint of a valid document resolves", () => {
    for (const doc of [upstreamSpecExample(), upstreamSdkDefaults(), minimal()]) {
      const result = validateDiscoveryDocument(doc);
      assert.ok(result.valid);
      for (const key of [...SIGNED_ENDPOINTS, "claim_page"]) {
        const value = result.document.endpoints[key];
        if (typeof value === "string") assert.ok(resolveEndpoint(DISCOVERY_URL, value) instanceof URL, key);
      }
    }
  });

  test("values no valid document holds are refused with a reason", () => {
    const cases: [string, RegExp][] = [
      ["//evil.example/x", /names a host/],
      ["/\\evil.example/x", /backslash or a control character/],
      ["/\t/evil.example/x", /backslash or a control character/],
      ["proto/v1/accounts", /neither a path on the service host nor an absolute URL/],
      ["https://api.example.com:99999/", /neither a path/],
      ["https://user:pw@api.example.com/x", /user name or password/],
      ["", /non-empty string/],
    ];
    for (const [value, reason] of cases) {
      assert.throws(
        () => resolveEndpoint(DISCOVERY_URL, value),
        (error: unknown) => error instanceof InvalidEndpointError && reason.test(error.message),
        JSON.stringify(value),
      );
    }
  });

  test("the signed endpoints are the four an agent calls; the claim page is for people", () => {
    assert.deepEqual([...SIGNED_ENDPOINTS], ["accounts", "owner_invitation", "claim_completion", "key_rotation"]);
  });
});

describe("discovery signature_algorithms", () => {
  test("both algorithms are accepted, in any order", () => {
    assertValid({ ...minimal(), signature_algorithms: ["ecdsa-p256-sha256", "ed25519"] });
  });

  test("an empty list is rejected", () => {
    assertRejected(
      { ...minimal(), signature_algorithms: [] },
      "/signature_algorithms",
      "signature_algorithms: must not be empty",
    );
  });

  test("an unknown algorithm is named by its position", () => {
    assertRejected(
      { ...minimal(), signature_algorithms: ["ed25519", "rsa-sha256"] },
      "/signature_algorithms/1",
      'signature_algorithms[1]: must be one of "ed25519", "ecdsa-p256-sha256"',
    );
  });
});

describe("discovery optional fields", () => {
  test("features and recipient_types accept their listed values", () => {
    assertValid({
      ...minimal(),
      features: ["attestation", "key_rotation", "attested_session"],
      recipient_types: ["email", "phone", "oidc", "did"],
    });
  });

  test("an unknown feature or recipient type is rejected", () => {
    assertRejected(
      { ...minimal(), features: ["two_step_invitation"] },
      "/features/0",
      'features[0]: must be one of "attestation", "key_rotation", "attested_session"',
    );
    assertRejected(
      { ...minimal(), recipient_types: ["email", "fax"] },
      "/recipient_types/1",
      'recipient_types[1]: must be one of "email", "phone", "oidc", "did"',
    );
  });

  test("limits: the TTL is at least an hour", () => {
    const limits = (ttl: number) => ({
      ...minimal(),
      limits: { unclaimed_rate_limit_per_hour: 10, unclaimed_ttl_seconds: ttl },
    });
    assertRejected(limits(3599), "/limits/unclaimed_ttl_seconds", "limits.unclaimed_ttl_seconds: must be >= 3600");
    assertRejected(limits(3600.5), "/limits/unclaimed_ttl_seconds", "limits.unclaimed_ttl_seconds: must be an integer");
    assertValid(limits(3600));
  });

  test("limits: the rate limit is required and not negative; the TTL may be omitted", () => {
    assertValid({ ...minimal(), limits: { unclaimed_rate_limit_per_hour: 0 } });
    assertRejected(
      { ...minimal(), limits: { unclaimed_rate_limit_per_hour: -1 } },
      "/limits/unclaimed_rate_limit_per_hour",
      "limits.unclaimed_rate_limit_per_hour: must be >= 0",
    );
    assertRejected(
      { ...minimal(), limits: { unclaimed_ttl_seconds: 7200 } },
      "/limits/unclaimed_rate_limit_per_hour",
      "missing required field limits.unclaimed_rate_limit_per_hour",
    );
  });

  test("billing: unclaimed_mode is required and one of three", () => {
    for (const mode of ["free", "attested_only", "denied"])
      assertValid({ ...minimal(), billing: { unclaimed_mode: mode } });
    assertRejected(
      { ...minimal(), billing: { accepted_attestors: ["proto-trust"] } },
      "/billing/unclaimed_mode",
      "missing required field billing.unclaimed_mode",
    );
    assertRejected(
      { ...minimal(), billing: { unclaimed_mode: "paid" } },
      "/billing/unclaimed_mode",
      'billing.unclaimed_mode: must be one of "free", "attested_only", "denied"',
    );
    assertRejected(
      { ...minimal(), billing: { unclaimed_mode: "free", accepted_attestors: [42] } },
      "/billing/accepted_attestors/0",
      "billing.accepted_attestors[0]: must be a string",
    );
  });

  test("x402: all four members are required, of any type", () => {
    const x402 = {
      facilitator: "https://f.example",
      networks: ["base"],
      assets: [{ symbol: "USDC" }],
      payment_endpoint: 1,
    };
    assertValid({ ...minimal(), x402 });
    for (const member of Object.keys(x402)) {
      const partial: Record<string, unknown> = { ...x402 };
      delete partial[member];
      assertRejected({ ...minimal(), x402: partial }, `/x402/${member}`, `missing required field x402.${member}`);
    }
  });
});

describe("discovery mcp", () => {
  const withMcp = (mcp: unknown) => ({ ...minimal(), mcp });
  const PATH_OR_HTTPS =
    'must be a path on the service host (one leading "/") or an absolute https URL (no user name or password, no fragment, no spaces or control characters)';
  const validated = (doc: unknown) => {
    const result = validateDiscoveryDocument(doc);
    assert.ok(result.valid, JSON.stringify(result));
    return result.document;
  };

  test("url (and resource_metadata) is a path on the service host or an absolute https URL", () => {
    for (const url of ["/mcp", "https://api.example.com/mcp", "https://mcp.other.example:8443/v1/mcp?x=1"]) {
      const doc = withMcp({ url, resource_metadata: "/.well-known/oauth-protected-resource/mcp" });
      assert.deepEqual(validated(doc).mcp, doc.mcp);
    }
    // Unknown members stay open, as everywhere in the document.
    assertValid(withMcp({ url: "/mcp", transport: "streamable-http" }));
  });

  test("a document without mcp stays valid: the member is optional", () => {
    assert.equal(validated(minimal()).mcp, undefined);
  });

  test("other values are refused, each with its pointer", () => {
    for (const value of [
      "http://api.example.com/mcp",
      "//evil.example/mcp",
      "mcp",
      "",
      "https://user:secret@api.example.com/mcp",
      "https://api.example.com/mcp#x",
      `/${"m".repeat(2048)}`,
    ]) {
      const message =
        value.length > 2048 ? "mcp.url: must be at most 2048 characters long" : `mcp.url: ${PATH_OR_HTTPS}`;
      assertRejected(withMcp({ url: value }), "/mcp/url", message);
    }
    assertRejected(
      withMcp({ url: "/mcp", resource_metadata: "http://api.example.com/m" }),
      "/mcp/resource_metadata",
      `mcp.resource_metadata: ${PATH_OR_HTTPS}`,
    );
    assertRejected(withMcp({ url: "https://api.example.com:99999/mcp" }), "/mcp/url", "mcp.url: must be a valid URL");
    assertRejected(withMcp({}), "/mcp/url", "missing required field mcp.url");
    assertRejected(withMcp({ url: 7 }), "/mcp/url", "mcp.url: must be a string");
    assertRejected(withMcp("https://api.example.com/mcp"), "/mcp", "mcp: must be an object");
  });

  test("resolves like an endpoint: a path against the discovery origin", () => {
    const doc = validated(withMcp({ url: "/mcp" }));
    assert.equal(
      resolveEndpoint("https://api.example.com/.well-known/proto", doc.mcp?.url ?? "").href,
      "https://api.example.com/mcp",
    );
  });
});

describe("discovery forward compatibility", () => {
  test("unknown members are accepted at every level and kept", () => {
    const doc = {
      ...minimal(),
      future_top: { nested: [1, 2] },
      endpoints: { ...minimal().endpoints, future_endpoint: "/future", weird: 3 },
      limits: { unclaimed_rate_limit_per_hour: 1, burst: 5 },
      billing: { unclaimed_mode: "denied", currency: "EUR" },
      x402: { facilitator: 1, networks: 2, assets: 3, payment_endpoint: 4, scheme: "exact" },
    };
    const result = validateDiscoveryDocument(doc);
    assert.equal(result.valid, true);
    assert.deepEqual(result.valid ? result.document.future_top : undefined, { nested: [1, 2] });
    assert.equal(result.valid ? result.document.endpoints.future_endpoint : undefined, "/future");
  });

  test("validation leaves the document untouched", () => {
    const doc = { ...minimal(), limits: { unclaimed_rate_limit_per_hour: 1 } };
    const before = structuredClone(doc);
    validateDiscoveryDocument(doc);
    assert.deepEqual(doc, before);
  });
});

describe("discovery size bounds", () => {
  test("a giant string or array is rejected with its bound", () => {
    for (const value of [`/${"a".repeat(2048)}`, `https://api.example.com/${"a".repeat(2048)}`]) {
      assertRejected(
        withEndpoint("accounts", value),
        "/endpoints/accounts",
        "endpoints.accounts: must be at most 2048 characters long",
      );
    }
    assertRejected(
      { ...minimal(), signature_algorithms: Array(65).fill("ed25519") },
      "/signature_algorithms",
      "signature_algorithms: must have at most 64 entries",
    );
  });

  test("every problem is reported, up to a cap", () => {
    const errors = errorsOf({ ...minimal(), features: Array(64).fill("nope") });
    assert.equal(errors.length, MAX_REPORTED_ERRORS);
    assert.deepEqual(errors[0], {
      path: "/features/0",
      message: 'features[0]: must be one of "attestation", "key_rotation", "attested_session"',
    });
  });

  test("several problems in one document are all listed, with their paths", () => {
    const doc = { ...minimal(), proto_version: 1, endpoints: { accounts: "x", claim_page: "c" } };
    assert.deepEqual(
      errorsOf(doc).map((e) => e.path),
      [
        "/proto_version",
        "/endpoints/owner_invitation",
        "/endpoints/claim_completion",
        "/endpoints/accounts",
        "/endpoints/claim_page",
      ],
    );
  });
});

describe("agent compatibility", () => {
  test("this library speaks 0.1", () => {
    assert.equal(PROTO_VERSION, "0.1");
  });

  test("a v0.1 document with ed25519 is usable", () => {
    const doc = minimal();
    assert.deepEqual(checkAgentCompatibility(doc), { compatible: true, document: doc });
    assert.equal(assertAgentCompatible(doc), doc);
  });

  test("another version is refused with the version found", () => {
    const result = checkAgentCompatibility({ ...minimal(), proto_version: "0.2" });
    assert.deepEqual(result, { compatible: false, reasons: ['proto_version is not "0.1" (found "0.2")'] });
  });

  test("a service without ed25519 is refused even though the schema accepts it", () => {
    const doc = { ...minimal(), signature_algorithms: ["ecdsa-p256-sha256"] };
    assert.equal(validateDiscoveryDocument(doc).valid, true);
    assert.deepEqual(checkAgentCompatibility(doc), {
      compatible: false,
      reasons: ["service does not advertise ed25519"],
    });
  });

  test("schema errors and agent rules are reported together", () => {
    const doc = { ...minimal(), proto_version: "9", signature_algorithms: ["rsa-sha256"] };
    const result = checkAgentCompatibility(doc);
    assert.deepEqual(result.compatible ? [] : result.reasons, [
      'signature_algorithms[0]: must be one of "ed25519", "ecdsa-p256-sha256"',
      'proto_version is not "0.1" (found "9")',
      "service does not advertise ed25519",
    ]);
  });

  test("assertAgentCompatible throws every reason", () => {
    const doc = { ...minimal(), proto_version: "0.2", signature_algorithms: ["ecdsa-p256-sha256"] };
    assert.throws(
      () => assertAgentCompatible(doc),
      (error: unknown) =>
        error instanceof DiscoveryIncompatibleError &&
        error.reasons.length === 2 &&
        error.message ===
          'discovery document is not usable by a v0.1 agent: proto_version is not "0.1" (found "0.2"); service does not advertise ed25519',
    );
  });
});

describe("discovery permissions", () => {
  const example = {
    "notes:read": { description: "Read your notes", default: true },
    "notes:delete": { description: "Delete your notes", phishing_resistant: true },
    purchase: { description: "Pay for pinned notes", currency: "EUR" },
  };
  const withPermissions = (permissions: unknown) => ({ ...minimal(), permissions });
  const declaring = (declaration: unknown) => withPermissions({ "notes:read": declaration });

  test("the documented example is accepted, by an agent too, and kept as given", () => {
    assertValid(withPermissions(example));
    assert.deepEqual(assertAgentCompatible(withPermissions(example)).permissions, example);
    assert.deepEqual(validateDiscoveryPermissions(example), { valid: true, permissions: example });
  });

  test("a document without permissions, or with none declared, is accepted", () => {
    assertValid(minimal());
    assertValid(withPermissions({}));
  });

  test("unknown members of a declaration are ignored, up to 16 members", () => {
    assertValid(declaring({ description: "Read your notes", max_age: 3600 }));
    const crowded: Record<string, unknown> = { description: "Read your notes" };
    for (let i = 0; i < 16; i++) crowded[`x${i}`] = i;
    assertRejected(
      declaring(crowded),
      "/permissions/notes:read",
      "permissions.notes:read: must have at most 16 members",
    );
  });

  test("names: lowercase colon-separated segments of at most 64 characters", () => {
    for (const name of ["purchase", "notes:read", "notes.v2:read-all", "a:b:c_d", "x".repeat(64)]) {
      assert.equal(isPermissionName(name), true, name);
      assertValid(withPermissions({ [name]: { description: "Something" } }));
    }
    for (const name of [
      "",
      "Notes:read",
      "notes read",
      "notes:",
      ":read",
      "notes::read",
      "1notes",
      'a"b',
      "a\\b",
      "x".repeat(65),
      "nötes",
    ]) {
      assert.equal(isPermissionName(name), false, name);
      assertRejected(
        withPermissions({ [name]: { description: "Something" } }),
        `/permissions/${name}`,
        `permissions: ${JSON.stringify(name)} is not a permission name (lowercase segments separated by colons, like notes:read, at most 64 characters)`,
      );
    }
  });

  test("at most 64 permissions", () => {
    const many = (count: number) =>
      Object.fromEntries(Array.from({ length: count }, (_, i) => [`p${i}`, { description: `Permission ${i}` }]));
    assertValid(withPermissions(many(64)));
    assertRejected(withPermissions(many(65)), "/permissions", "permissions: must have at most 64 members");
  });

  test("a declaration needs a description of one line, 1 to 200 characters", () => {
    assertValid(declaring({ description: "é".repeat(200) }));
    assertRejected(
      declaring({}),
      "/permissions/notes:read/description",
      "missing required field permissions.notes:read.description",
    );
    const oneLine =
      "permissions.notes:read.description: must be one line of text, not blank (no line break or control character)";
    for (const description of ["", "   ", "Read\nyour notes", "Read\tnotes", "Read\u2028notes", "Read\u0085notes"]) {
      assertRejected(declaring({ description }), "/permissions/notes:read/description", oneLine);
    }
    assertRejected(
      declaring({ description: "x".repeat(201) }),
      "/permissions/notes:read/description",
      "permissions.notes:read.description: must be at most 200 characters long",
    );
    assertRejected(
      declaring({ description: 7 }),
      "/permissions/notes:read/description",
      "permissions.notes:read.description: must be a string",
    );
  });

  test("default and phishing_resistant are booleans", () => {
    assertValid(declaring({ description: "Read", default: false, phishing_resistant: false }));
    assertRejected(
      declaring({ description: "Read", default: "true" }),
      "/permissions/notes:read/default",
      "permissions.notes:read.default: must be a boolean",
    );
    assertRejected(
      declaring({ description: "Read", phishing_resistant: 1 }),
      "/permissions/notes:read/phishing_resistant",
      "permissions.notes:read.phishing_resistant: must be a boolean",
    );
  });

  test("currency is an ISO 4217 code", () => {
    assertValid(declaring({ description: "Pay", currency: "JPY" }));
    for (const currency of ["eur", "EURO", "E1R", ""]) {
      assertRejected(
        declaring({ description: "Pay", currency }),
        "/permissions/notes:read/currency",
        "permissions.notes:read.currency: must be an ISO 4217 currency code (three capital letters, EUR)",
      );
    }
  });

  test("permissions must be an object of objects", () => {
    assertRejected(withPermissions(["notes:read"]), "/permissions", "permissions: must be an object");
    assertRejected(
      declaring("Read your notes"),
      "/permissions/notes:read",
      "permissions.notes:read: must be an object",
    );
  });

  test("validateDiscoveryPermissions reports in the document's words", () => {
    const bad = { "notes:read": { description: "Read", default: "yes" } };
    assert.deepEqual(validateDiscoveryPermissions(bad), {
      valid: false,
      errors: [
        { path: "/permissions/notes:read/default", message: "permissions.notes:read.default: must be a boolean" },
      ],
    });
    assert.deepEqual(validateDiscoveryPermissions(bad), errorsResult(withPermissions(bad)));
  });
});

function errorsResult(doc: unknown) {
  return { valid: false, errors: errorsOf(doc) };
}
