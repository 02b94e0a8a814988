import { VERIFICATION_METHODS } from "@proto/protocol";
import { Counter, Gauge } from "prom-client";
import type { Clock } from "../platform/clock.js";
import type { ServiceMetrics } from "../platform/metrics.js";
import type { KeyRing } from "./keys.js";

/** What the token route reports. */
export interface MintObserver {
  minted(verification: string): void;
}

/**
 * The attestor's own metrics on its registry: mints by verification method, and the key set's
 * age, read from the KeyRing at every scrape (reloaded first when the cached list is older than
 * the refresh period, so a rotation made by another replica shows).
 */
export function trustMetrics(metrics: ServiceMetrics, keys: KeyRing, clock: Clock): MintObserver {
  const registers = [metrics.registry];
  const mints = new Counter({
    name: "proto_trust_mints_total",
    help: "Attestations minted, by the verification method they carry.",
    labelNames: ["verification"],
    registers,
  });
  // Every method's series exists from the start, so rate() sees the first mint of each.
  for (const verification of VERIFICATION_METHODS) mints.inc({ verification }, 0);
  new Gauge({
    name: "proto_trust_key_set_age_seconds",
    help: "Seconds since the newest key of the published key set was published; grows past the rotation period when scheduled rotation stops.",
    registers,
    async collect() {
      await keys.fresh().catch(() => undefined);
      const newest = keys.newestPublishedAt();
      if (newest !== undefined) this.set(Math.max(0, (clock.now() - newest) / 1000));
    },
  });
  new Gauge({
    name: "proto_trust_published_keys",
    help: "Keys in the published key set (announced, signing, or retired but still verifying).",
    registers,
    collect() {
      this.set(keys.publicKeys().length);
    },
  });
  return { minted: (verification) => mints.inc({ verification }) };
}
