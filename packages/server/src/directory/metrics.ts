import { Counter, Gauge } from "prom-client";
import type { ServiceMetrics } from "../platform/metrics.js";
import type { PostgresListingFeed } from "./listing-changes.js";
import type { DirectoryMirror, MirrorStatus } from "./mirror.js";
import type { DirectoryService } from "./service.js";

/**
 * Revalidation outcomes on the directory's registry. Every pass goes through
 * `service.revalidateDue()` (the scheduler, `POST /admin/revalidate`, the test hook), so that one
 * method is wrapped and counts what each pass returns.
 */
export function instrumentRevalidation(service: DirectoryService, metrics: ServiceMetrics): void {
  const registers = [metrics.registry];
  const checks = new Counter({
    name: "proto_directory_revalidations_total",
    help: "Listings re-fetched by revalidation, by outcome (succeeded, failed).",
    labelNames: ["outcome"],
    registers,
  });
  const transitions = new Counter({
    name: "proto_directory_revalidation_transitions_total",
    help: "Listings revalidation moved to another status (stale after repeated failures, deleted after staying stale).",
    labelNames: ["status"],
    registers,
  });
  const passes = new Counter({
    name: "proto_directory_revalidation_passes_total",
    help: "Revalidation passes, by result (completed, failed: the pass itself threw).",
    labelNames: ["result"],
    registers,
  });
  const lastPass = new Gauge({
    name: "proto_directory_revalidation_last_pass_timestamp_seconds",
    help: "Unix time the last revalidation pass completed.",
    registers,
  });
  for (const outcome of ["succeeded", "failed"]) checks.inc({ outcome }, 0);
  for (const status of ["stale", "deleted"]) transitions.inc({ status }, 0);
  for (const result of ["completed", "failed"]) passes.inc({ result }, 0);

  const revalidateDue = service.revalidateDue.bind(service);
  service.revalidateDue = async () => {
    try {
      const counts = await revalidateDue();
      checks.inc({ outcome: "succeeded" }, counts.succeeded);
      checks.inc({ outcome: "failed" }, counts.failed);
      transitions.inc({ status: "stale" }, counts.became_stale);
      transitions.inc({ status: "deleted" }, counts.deleted);
      passes.inc({ result: "completed" });
      lastPass.set(Date.now() / 1000);
      return counts;
    } catch (error) {
      passes.inc({ result: "failed" });
      throw error;
    }
  };
}

/** Mirror mode's sync state on the directory's registry, read from `mirror.status()` at every scrape. */
export function instrumentMirror(mirror: Pick<DirectoryMirror, "status">, metrics: ServiceMetrics): void {
  const registers = [metrics.registry];
  new Gauge({
    name: "proto_directory_mirror_ready",
    help: "1 once a first complete pass from the upstream has ended (the mirror serves), else 0.",
    registers,
    collect() {
      this.set(mirror.status().ready ? 1 : 0);
    },
  });
  new Gauge({
    name: "proto_directory_mirror_lag_seconds",
    help: "Seconds since the start of the last complete pass: every upstream change older than this is mirrored. NaN before the first.",
    registers,
    collect() {
      this.set(mirror.status().lagSeconds ?? Number.NaN);
    },
  });
  new Gauge({
    name: "proto_directory_mirror_consecutive_failures",
    help: "Failed passes in a row (0 after a successful one).",
    registers,
    collect() {
      this.set(mirror.status().consecutiveFailures);
    },
  });
  const totals: [string, string, keyof MirrorStatus["totals"]][] = [
    ["proto_directory_mirror_passes_total", "Mirror passes run by this process.", "passes"],
    ["proto_directory_mirror_failed_passes_total", "Mirror passes that failed in this process.", "failedPasses"],
    ["proto_directory_mirror_listings_applied_total", "Upstream listings applied by this process.", "listingsApplied"],
  ];
  for (const [name, help, field] of totals) {
    new Counter({
      name,
      help,
      registers,
      collect() {
        this.reset();
        this.inc(mirror.status().totals[field]);
      },
    });
  }
}

/** PostgreSQL: whether the read cache hears of other replicas' writes (see listing-changes.ts). */
export function instrumentListingFeed(feed: Pick<PostgresListingFeed, "version">, metrics: ServiceMetrics): void {
  new Gauge({
    name: "proto_directory_listing_feed_up",
    help: "1 while this replica hears of other writers' listing changes (PostgreSQL LISTEN) and caches single-listing reads; 0 while it reads every listing from the database.",
    registers: [metrics.registry],
    collect() {
      this.set(feed.version() === undefined ? 0 : 1);
    },
  });
}
