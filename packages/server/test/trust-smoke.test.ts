import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createAttestationVerifier } from "@proto/protocol";
import { STORE_VARIANTS } from "./support/stores.js";
import { startTrustHarness, type TrustHarness } from "./support/trust.js";

for (const variant of STORE_VARIANTS) {
  describe(`attestor happy path (${variant.name})`, () => {
    let h: TrustHarness;
    before(async () => {
      h = await startTrustHarness(variant);
    });
    after(() => h.close());

    test("link, poll, mint, verify against the live key set", async () => {
      const { agent, bindingId } = await h.link();
      assert.match(bindingId, /^bnd_/);
      const minted = await h.mint(agent, "did:web:svc.example");
      assert.equal(minted.status, 200, minted.text);
      assert.equal(minted.json.verification, "email");
      const jwks = await h.request("GET", "/.well-known/jwks.json");
      assert.equal(jwks.headers.get("cache-control"), "public, max-age=300, stale-while-revalidate=900");
      const now = (await h.request("POST", "/__test/clock", { body: {} })).json.now_unix as number;
      const verifier = createAttestationVerifier({ keySet: jwks.json, now: () => now * 1000 });
      const result = await verifier.verify(minted.json.jwt, { audience: "did:web:svc.example", agentDid: agent.did });
      assert.equal(result.verification, "email");
      assert.equal(result.expiresAt, minted.json.expires_at);
      const again = await h.mint(agent, "did:web:svc.example");
      assert.equal(again.status, 200);
      const replay = await h.mint(agent, "did:web:svc.example", { nonce: "fixed" });
      assert.equal(replay.status, 200);
      const replayed = await h.mint(agent, "did:web:svc.example", { nonce: "fixed" });
      assert.equal(replayed.status, 401);
      assert.equal(replayed.json.error.code, "replayed_nonce");
    });
  });
}
