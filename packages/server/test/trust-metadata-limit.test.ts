/**
 * The OpenID configuration and its RFC 8414 twin are read endpoints like the key set: the contract
 * puts every read endpoint of the attestor under one per-address limit (600 a minute by default).
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";
import { assertError, RELAXED_RATE_LIMITS, startTrustHarness, type TrustHarness } from "./support/trust.js";

reportSkippedVariants();

for (const variant of STORE_VARIANTS) {
  describe(`attestor metadata under the read limit (${variant.name})`, () => {
    let h: TrustHarness;
    before(async () => {
      h = await startTrustHarness(variant, { env: { TRUST_RATE_LIMITS: `${RELAXED_RATE_LIMITS},read=4/60` } });
    });
    after(() => h?.close());

    test("both metadata documents and the key set spend one read budget; past it, 429 in the envelope", async () => {
      await h.advance(60);
      for (const path of [
        "/.well-known/openid-configuration",
        "/.well-known/oauth-authorization-server",
        "/.well-known/jwks.json",
        "/.well-known/openid-configuration",
      ]) {
        const answer = await h.request("GET", path);
        assert.equal(answer.status, 200, `${path}: ${answer.text}`);
      }
      for (const path of ["/.well-known/openid-configuration", "/.well-known/oauth-authorization-server"]) {
        const refused = await h.request("GET", path);
        assertError(refused, 429, "rate_limited");
        assert.match(refused.headers.get("retry-after") ?? "", /^[1-9][0-9]*$/);
      }
      await h.advance(60);
      assert.equal((await h.request("GET", "/.well-known/openid-configuration")).status, 200);
    });
  });
}
