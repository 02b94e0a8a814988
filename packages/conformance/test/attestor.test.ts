import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { after, before, describe as suite, test } from "node:test";
import { encodeDidKey } from "@proto/protocol";
import { freePort } from "@proto/testkit";
import { decodeJwt, exportJWK, SignJWT } from "jose";
import { NOT_GRANTED } from "../src/attestor/oauth.js";
import { attestorProbes } from "../src/index.js";
import { describe, run } from "./support/run.js";
import {
  type Answer,
  type Breakage,
  bodyOf,
  editJson,
  pathOf,
  type StandIn,
  startStandIn,
} from "./support/stand-in.js";
import { type Attestor, startAttestor } from "./support/targets.js";

const AUD = "did:web:notes.example";
const ids = attestorProbes.map((p) => p.id);
/** What the linked agent's person granted it at AUD: a default-like permission and a limited spending one. */
const GRANT = {
  permissions: ["notes:read", "purchase"],
  spendLimits: [
    { permission: "purchase", currency: "EUR", perTransaction: 2000, perPeriod: 10_000, period: "month" as const },
  ],
};
/** The probes that need a linked agent's key. */
const AGENT_PROBES = [
  "attestor.token.mint",
  "attestor.token.jwt",
  "attestor.token.claims",
  "attestor.token.grant-claims",
  "attestor.grants.listing",
  "attestor.approvals.refusals",
  "attestor.oauth.scope-within-grant",
];

suite("attestor probes against our attestor", () => {
  let attestor: Attestor;
  let agentPem: string;
  before(async () => {
    attestor = await startAttestor();
    const agent = await attestor.linkAgent();
    await attestor.grant(agent.did, AUD, GRANT);
    agentPem = agent.pem;
  });
  after(() => attestor.close());

  test("every probe passes, with --write and a linked agent key holding a grant", async () => {
    const { results } = await run(attestorProbes, attestor.url, { write: true, agentKeyPem: agentPem, aud: AUD });
    assert.deepEqual(
      results.map((r) => `${r.id}: ${r.status}`),
      ids.map((id) => `${id}: pass`),
      describe(results),
    );
  });

  test("every probe passes for an agent without a grant (no grant claims, no grants, invalid_scope)", async () => {
    const { pem } = await attestor.linkAgent();
    const { results } = await run(attestorProbes, attestor.url, { write: true, agentKeyPem: pem, aud: AUD });
    assert.equal(results.filter((r) => r.status !== "pass").length, 0, describe(results));
  });

  test("a did:key audience skips the JWT-bearer probe: no resource derives from it", async () => {
    const r = await run(attestorProbes, attestor.url, { agentKeyPem: agentPem, aud: "did:key:z6MkConformance" });
    assert.equal(r.byId("attestor.oauth.scope-within-grant").status, "skipped");
    assert.match(r.byId("attestor.oauth.scope-within-grant").message, /is not a did:web/);
  });

  test("a trailing slash on the URL changes nothing (the issuer is compared without it)", async () => {
    const { results } = await run(attestorProbes, `${attestor.url}/`, { agentKeyPem: agentPem, aud: AUD });
    assert.equal(results.filter((r) => r.status === "fail").length, 0, describe(results));
  });

  test("without --write the link start is skipped; without --agent-key the mint probes say why", async () => {
    const r = await run(attestorProbes, attestor.url);
    assert.equal(r.byId("attestor.link.start.valid").status, "skipped");
    assert.match(r.byId("attestor.link.start.valid").message, /--write/);
    for (const id of AGENT_PROBES) {
      assert.equal(r.byId(id).status, "skipped", id);
      assert.match(r.byId(id).message, /--agent-key/);
    }
    // What could run without a key did, and the reason says so.
    assert.match(r.byId("attestor.grants.listing").message, /^the unsigned listing was refused as it must be/);
    assert.match(r.byId("attestor.approvals.refusals").message, /^the unsigned and unlinked requests were refused/);
    assert.equal(r.results.filter((x) => x.status === "fail").length, 0, describe(r.results));
  });

  test("an agent key that is not Ed25519 skips the mint probes with the reason", async () => {
    const rsa = generateKeyPairSync("rsa", { modulusLength: 1024 }).privateKey.export({ type: "pkcs8", format: "pem" });
    const r = await run(attestorProbes, attestor.url, { agentKeyPem: rsa.toString(), aud: AUD });
    assert.equal(r.byId("attestor.token.mint").status, "skipped");
    assert.match(r.byId("attestor.token.mint").message, /not Ed25519/);
  });
});

/** A key of the stand-in's own, to re-sign tokens whose claims it changed (the signature stays valid). */
const standInKey = generateKeyPairSync("ed25519");

const isPath = (path: string) => (e: { path: string }) => pathOf(e as never) === path;
/** The key set with the stand-in's key added, so what it re-signs verifies. */
async function withStandInKey(a: Answer): Promise<Answer> {
  const jwk = { ...(await exportJWK(standInKey.publicKey)), kid: "stand-in" };
  return editJson(a, (b) => {
    (b.keys as unknown[]).push(jwk);
  });
}
const standInJwt = (claims: Record<string, unknown>, typ = "JWT") =>
  new SignJWT(claims).setProtectedHeader({ alg: "EdDSA", typ, kid: "stand-in" }).sign(standInKey.privateKey);
const errorCode = (code: string) => (body: Record<string, unknown>) => {
  body.error = { ...(body.error as object), code };
};

/** For each probe, how to break exactly its rule. */
const BREAKAGES: { id: string; how: string; breakage: Breakage }[] = [
  {
    id: "attestor.jwks.shape",
    how: "a private member d on a key",
    breakage: {
      response: (e, a) =>
        isPath("/.well-known/jwks.json")(e)
          ? editJson(a, (b) => {
              (b.keys as Record<string, unknown>[])[0]!.d = "c2VjcmV0";
            })
          : undefined,
    },
  },
  {
    id: "attestor.jwks.cache",
    how: "no Cache-Control on the key set",
    breakage: {
      response: (e, a) => {
        if (!isPath("/.well-known/jwks.json")(e)) return undefined;
        const { "cache-control": _dropped, ...headers } = a.headers;
        return { ...a, headers };
      },
    },
  },
  {
    id: "attestor.openid.values",
    how: "subject_types_supported without pairwise",
    breakage: {
      response: (e, a) =>
        isPath("/.well-known/openid-configuration")(e)
          ? editJson(a, (b) => {
              b.subject_types_supported = ["public"];
            })
          : undefined,
    },
  },
  {
    id: "attestor.openid.cache",
    how: "the OpenID configuration cached 60 s",
    breakage: {
      response: (e, a) =>
        isPath("/.well-known/openid-configuration")(e)
          ? { ...a, headers: { ...a.headers, "cache-control": "public, max-age=60" } }
          : undefined,
    },
  },
  {
    id: "attestor.link.start.missing-fields",
    how: "another code for a start without fields",
    breakage: {
      response: (e, a) =>
        isPath("/v1/link/start")(e) && bodyOf(e).agent_did === undefined
          ? editJson(a, errorCode("missing_fields"))
          : undefined,
    },
  },
  {
    id: "attestor.link.start.bad-pubkey",
    how: "422 for a key that is not Ed25519",
    breakage: {
      response: (e, a) =>
        isPath("/v1/link/start")(e) && bodyOf(e).agent_pubkey_b64 === "bm90IGEga2V5"
          ? { ...a, status: 422 }
          : undefined,
    },
  },
  {
    id: "attestor.link.start.did-mismatch",
    how: "a link request opened for a DID that does not derive from the key",
    breakage: {
      response: (e, a) => {
        const body = bodyOf(e);
        // Exactly the did-mismatch request: a 32-byte key whose did:key is not the agent_did sent.
        const key =
          typeof body.agent_pubkey_b64 === "string" ? Buffer.from(body.agent_pubkey_b64, "base64url") : undefined;
        const mismatch =
          isPath("/v1/link/start")(e) && key?.length === 32 && encodeDidKey(key) !== body.agent_did && a.status === 400;
        return mismatch
          ? {
              status: 200,
              headers: a.headers,
              body: JSON.stringify({ req_id: "lr_fake", link_url: "x", poll_url: "x", expires_in: 1800 }),
            }
          : undefined;
      },
    },
  },
  {
    id: "attestor.link.start.callback-not-loopback",
    how: "the error without its message",
    breakage: {
      response: (e, a) =>
        isPath("/v1/link/start")(e) && bodyOf(e).callback_url !== undefined
          ? editJson(a, (b) => {
              b.error = { code: "invalid_request" };
            })
          : undefined,
    },
  },
  {
    id: "attestor.link.start.label-too-long",
    how: "another code for a long label",
    breakage: {
      response: (e, a) =>
        isPath("/v1/link/start")(e) && String(bodyOf(e).agent_label ?? "").length > 80
          ? editJson(a, errorCode("label_too_long"))
          : undefined,
    },
  },
  {
    id: "attestor.link.start.valid",
    how: "expires_in 600",
    breakage: {
      response: (e, a) =>
        isPath("/v1/link/start")(e) && a.status === 200
          ? editJson(a, (b) => {
              b.expires_in = 600;
            })
          : undefined,
    },
  },
  {
    id: "attestor.link.poll.unknown",
    how: "410 link_request_expired for an unknown request",
    breakage: {
      response: (e, a) =>
        isPath("/v1/link/poll")(e) && a.status === 404
          ? { ...editJson(a, errorCode("link_request_expired")), status: 410 }
          : undefined,
    },
  },
  {
    id: "attestor.token.unsigned",
    how: "400 for an unsigned mint",
    breakage: {
      response: (e, a) =>
        isPath("/v1/token")(e) && e.headers.signature === undefined ? { ...a, status: 400 } : undefined,
    },
  },
  {
    id: "attestor.token.unlinked",
    how: "another code for a key with no binding",
    breakage: {
      response: (e, a) =>
        isPath("/v1/token")(e) && a.body.includes('"unauthorized"') ? editJson(a, errorCode("no_binding")) : undefined,
    },
  },
  {
    id: "attestor.token.replay",
    how: "a replay answered unauthorized (as if the nonce were not checked)",
    breakage: {
      response: (e, a) =>
        isPath("/v1/token")(e) && a.body.includes('"replayed_nonce"')
          ? editJson(a, errorCode("unauthorized"))
          : undefined,
    },
  },
  {
    id: "attestor.token.mint",
    how: "expires_at one second off the JWT's exp",
    breakage: {
      response: (e, a) =>
        isPath("/v1/token")(e) && a.status === 200
          ? editJson(a, (b) => {
              b.expires_at = (b.expires_at as number) + 1;
            })
          : undefined,
    },
  },
  {
    id: "attestor.token.jwt",
    how: "a JWT whose signature does not verify",
    breakage: {
      response: (e, a) =>
        isPath("/v1/token")(e) && a.status === 200
          ? editJson(a, (b) => {
              const jwt = b.jwt as string;
              const [header, payload, signature] = jwt.split(".") as [string, string, string];
              const flipped = signature[5] === "A" ? "B" : "A";
              b.jwt = `${header}.${payload}.${signature.slice(0, 5)}${flipped}${signature.slice(6)}`;
            })
          : undefined,
    },
  },
  {
    id: "attestor.token.claims",
    how: "a token living an hour, validly re-signed by a key the stand-in publishes",
    breakage: {
      async response(e, a) {
        if (isPath("/.well-known/jwks.json")(e)) return withStandInKey(a);
        if (!isPath("/v1/token")(e) || a.status !== 200) return undefined;
        const body = JSON.parse(a.body) as Record<string, unknown>;
        const claims = decodeJwt(body.jwt as string);
        const exp = (claims.iat as number) + 3600;
        body.jwt = await standInJwt({ ...claims, exp });
        body.expires_at = exp;
        return { ...a, body: JSON.stringify(body) };
      },
    },
  },
  {
    id: "attestor.token.grant-claims",
    how: "an attestation whose scope comes without its grant_id, validly re-signed",
    breakage: {
      async response(e, a) {
        if (isPath("/.well-known/jwks.json")(e)) return withStandInKey(a);
        if (!isPath("/v1/token")(e) || a.status !== 200) return undefined;
        const body = JSON.parse(a.body) as Record<string, unknown>;
        const { grant_id: _dropped, ...claims } = decodeJwt(body.jwt as string);
        body.jwt = await standInJwt(claims);
        return { ...a, body: JSON.stringify(body) };
      },
    },
  },
  {
    id: "attestor.grants.listing",
    how: "a spend limit listed without its currency",
    breakage: {
      response: (e, a) =>
        isPath("/v1/grants")(e) && a.status === 200
          ? editJson(a, (b) => {
              const [grant] = b.grants as { authorization_details: Record<string, unknown>[] }[];
              delete grant?.authorization_details[0]?.currency;
            })
          : undefined,
    },
  },
  {
    id: "attestor.approvals.refusals",
    how: "an approval request with a 201-character reason accepted",
    breakage: {
      response: (e, a) =>
        isPath("/v1/approvals")(e) && String(bodyOf(e).reason ?? "").length > 200
          ? {
              status: 201,
              headers: a.headers,
              body: JSON.stringify({
                approval_id: "apr_fake",
                approval_url: "https://trust.invalid/approvals/apr_fake",
                status: "pending",
                expires_at: new Date().toISOString(),
                interval: 3,
              }),
            }
          : undefined,
    },
  },
  {
    id: "attestor.oauth.scope-within-grant",
    how: "a JWT-bearer token carrying whatever scope was asked",
    breakage: {
      async response(e) {
        if (!isPath("/oidc/token")(e)) return undefined;
        const scope = new URLSearchParams(e.body).get("scope") ?? "";
        const iat = Math.floor(Date.now() / 1000);
        const token = await standInJwt({ aud: "https://notes.example", scope, iat, exp: iat + 600 }, "at+jwt");
        return {
          status: 200,
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ access_token: token, token_type: "Bearer", expires_in: 600, scope }),
        };
      },
    },
  },
];

suite("each attestor probe fails against a stand-in that breaks its rule, and no other does", () => {
  let attestor: Attestor;
  let standIn: StandIn;
  let agentPem: string;
  before(async () => {
    // The attestor's {trust_url} is the stand-in's URL: what it signs for is what the probes use.
    const port = await freePort();
    standIn = await startStandIn(`http://127.0.0.1:${port}`);
    attestor = await startAttestor({ port, publicUrl: standIn.url });
    const agent = await attestor.linkAgent();
    await attestor.grant(agent.did, AUD, GRANT);
    agentPem = agent.pem;
  });
  after(async () => {
    await standIn.close();
    await attestor.close();
  });

  test("the table covers every attestor probe", () => {
    assert.deepEqual(BREAKAGES.map((b) => b.id).sort(), [...ids].sort());
  });

  test("through a faithful stand-in every probe passes", async () => {
    standIn.breakWith(undefined);
    const { results } = await run(attestorProbes, standIn.url, { write: true, agentKeyPem: agentPem, aud: AUD });
    assert.equal(results.filter((r) => r.status !== "pass").length, 0, describe(results));
  });

  for (const { id, how, breakage } of BREAKAGES) {
    test(`${id} fails on ${how}`, async () => {
      standIn.breakWith(breakage);
      const { results } = await run(attestorProbes, standIn.url, { write: true, agentKeyPem: agentPem, aud: AUD });
      assert.deepEqual(
        results.filter((r) => r.status !== "pass").map((r) => `${r.id}: ${r.status}`),
        [`${id}: fail`],
        describe(results),
      );
      const failed = results.find((r) => r.id === id);
      assert.ok(failed?.exchange, "the failure shows what was sent and what came back");
      assert.match(failed.exchange.url, /^http:\/\/127\.0\.0\.1:\d+\//);
      assert.ok(failed.exchange.status > 0);
      // A minted token never appears whole in a report (they end up in CI logs).
      assert.doesNotMatch(failed.exchange.bodyExcerpt, /eyJ[\w-]*\.[\w-]*\.[\w-]{20,}/);
    });
  }

  test("a token exceeding its grant is reported with the scope it must not carry", async () => {
    const breakage = BREAKAGES.find((b) => b.id === "attestor.oauth.scope-within-grant")?.breakage;
    standIn.breakWith(breakage);
    const r = await run(attestorProbes, standIn.url, { agentKeyPem: agentPem, aud: AUD });
    const failed = r.byId("attestor.oauth.scope-within-grant");
    assert.equal(failed.status, "fail");
    assert.equal(
      failed.message,
      `the token response grants ${NOT_GRANTED}, which no service grants: scope "notes:read purchase ${NOT_GRANTED}"`,
    );
    // The assertion sent is shown without its signature too.
    assert.doesNotMatch(failed.exchange?.requestBody ?? "", /eyJ[\w-]*\.[\w-]*\.[\w-]{20,}/);
  });
});
