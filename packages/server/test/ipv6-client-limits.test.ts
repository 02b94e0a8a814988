import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { HttpResult } from "./support/http.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";
import { RELAXED_RATE_LIMITS, startTrustHarness, type TrustHarness } from "./support/trust.js";

/**
 * Per-address limits count an IPv6 client by its /64: one host usually holds a whole /64, and
 * counting each of its 2^64 addresses on its own would give it as many budgets.
 */

reportSkippedVariants();

for (const variant of STORE_VARIANTS) {
  describe(`per-address limits and IPv6 (${variant.name})`, { timeout: 60_000 }, () => {
    let h: TrustHarness;
    before(async () => {
      h = await startTrustHarness(variant, {
        env: {
          // One registration per address an hour, so a second one shows whose budget it came from.
          TRUST_RATE_LIMITS: `${RELAXED_RATE_LIMITS},oauth_register=1/3600`,
          // Tests speak from other client addresses through X-Forwarded-For.
          TRUSTED_PROXIES: "127.0.0.1",
        },
      });
    });
    after(() => h?.close());

    /** A registration the attestor refuses (400) once it has counted it against `address`. */
    const registerFrom = (address: string): Promise<HttpResult> =>
      h.request("POST", "/oidc/register", {
        body: { redirect_uris: ["http://evil.test/cb"] },
        headers: { "x-forwarded-for": address },
      });

    test("two addresses in one IPv6 /64 share one budget; the next /64 has its own", async () => {
      const first = await registerFrom("2001:db8:1:2::a");
      assert.equal(first.status, 400, first.text);
      assert.equal(first.json.error, "invalid_redirect_uri");

      const neighbour = await registerFrom("2001:db8:1:2:ffff:ffff:ffff:ffff");
      assert.equal(neighbour.status, 429, neighbour.text);
      assert.equal(neighbour.json.error, "slow_down");
      assert.match(neighbour.headers.get("retry-after") ?? "", /^\d+$/);

      const elsewhere = await registerFrom("2001:db8:1:3::a");
      assert.equal(elsewhere.status, 400, elsewhere.text);
      assert.equal(elsewhere.json.error, "invalid_redirect_uri");
    });
  });
}
