import { createSafeFetcher } from "@proto/protocol";
import type { FastifyInstance } from "fastify";
import type { Clock } from "../platform/clock.js";
import { changeCounter, type Database, openDatabase } from "../platform/database.js";
import { drainDelay, registerHealthRoutes } from "../platform/health.js";
import { createHttpServer } from "../platform/http.js";
import { registerMetricsRoute, ServiceMetrics } from "../platform/metrics.js";
import { registerOpenApi } from "../platform/openapi.js";
import { createPlatformParts } from "../platform/shared.js";
import { registerClockHook } from "../platform/test-hooks.js";
import type { DirectoryConfig } from "./config.js";
import { type ListingChanges, PostgresListingFeed, SqliteListingChanges } from "./listing-changes.js";
import { instrumentListingFeed, instrumentMirror, instrumentRevalidation } from "./metrics.js";
import { type DirectorySchema, directoryMigrations } from "./migrations.js";
import { DirectoryMirror, type MirrorFetch, registerMirrorSyncHook, registerReadOnlyGuard } from "./mirror.js";
import { directoryPages } from "./pages/plugin.js";
import { DIRECTORY_OPENAPI, directoryRoutes } from "./routes.js";
import { DirectoryService } from "./service.js";

export interface DirectoryApp {
  app: FastifyInstance;
  service: DirectoryService;
  /** In mirror mode (`DIRECTORY_MIRROR_OF`): the sync, and its `status()` for metrics. */
  mirror: DirectoryMirror | undefined;
  /** Stops the scheduler, drains requests, closes the stores. */
  close(): Promise<void>;
}

export interface DirectoryAppOptions {
  /** Where logs go (tests keep them quiet); standard output by default. */
  logStream?: NodeJS.WritableStream;
  clock?: Clock;
  /** Extra trusted CAs for outbound fetches (NODE_EXTRA_CA_CERTS works too). */
  fetchCa?: string;
  /** Redis key prefix (default `proto:dir:`). */
  redisPrefix?: string;
  /** What mirror mode fetches the upstream with (tests count and break requests); `fetch` by default. */
  mirrorFetch?: MirrorFetch;
}

export async function buildDirectoryApp(
  config: DirectoryConfig,
  options: DirectoryAppOptions = {},
): Promise<DirectoryApp> {
  const metrics = new ServiceMetrics("directory");
  let database: Database<DirectorySchema> | undefined;
  const parts = createPlatformParts(config.platform, {
    redisPrefix: options.redisPrefix ?? "proto:dir:",
    ...(options.clock ? { clock: options.clock } : {}),
    onRateLimited: (rule) => metrics.rateLimited(rule.name),
    databaseProbe: async () => (await database?.ping()) ?? false,
    redisRequired: false,
    // The public read limit only protects availability: counted ahead of Redis, in batches.
    batchedRateLimits: [config.settings.rateLimits.read],
  });
  metrics.watchDependencies(parts.dependencies);
  database = await openDatabase<DirectorySchema>(config.databaseUrl, {
    migrations: directoryMigrations,
    migrationTable: "directory_migrations",
    onConnectionError: (error) => parts.dependencies.failed("database", error),
  });
  await parts.redisReady();
  const fetcher = createSafeFetcher({
    allowPrivate: config.platform.fetch.allowPrivate,
    resolve: config.platform.fetch.resolve,
    ...(options.fetchCa ? { ca: options.fetchCa } : {}),
  });
  // Where the single-listing read cache hears of other writers: SQLite's change counter (a file
  // only: an in-memory store has no other writer and no reader connection), or, on PostgreSQL, a
  // LISTEN connection of its own.
  let changes: ListingChanges | undefined;
  let feed: PostgresListingFeed | undefined;
  if (config.settings.readCacheBytes > 0) {
    const counter = changeCounter(database.db);
    if (database.engine === "postgres") {
      feed = new PostgresListingFeed({
        url: config.listenDatabaseUrl ?? config.databaseUrl,
        onChange: (did) => service.listingsChanged(did),
        onStatus: (up, error) => {
          if (up) app.log.info("listing change feed is back: single-listing reads are cached again");
          else app.log.warn({ err: error }, "listing change feed lost: single-listing reads go to the database");
        },
      });
      changes = feed;
    } else if (counter !== undefined) {
      changes = new SqliteListingChanges(counter);
    }
  }
  const service = new DirectoryService({
    database,
    clock: parts.clock,
    fetcher,
    settings: config.settings,
    ...(changes ? { readCacheVersion: changes.version } : {}),
  });
  instrumentRevalidation(service, metrics);
  if (feed !== undefined) instrumentListingFeed(feed, metrics);
  const app = createHttpServer({
    logLevel: config.platform.logLevel,
    trustedProxies: config.platform.trustedProxies,
    trustedProxyHops: config.platform.trustedProxyHops,
    ...(options.logStream ? { logStream: options.logStream } : {}),
    metrics,
    onDependencyFailure: (dependency, error) => parts.dependencies.failed(dependency, error),
  });
  await feed?.start();
  await registerOpenApi(app, { ...DIRECTORY_OPENAPI, publicUrl: config.publicUrl });
  registerMetricsRoute(app, metrics, config.platform.metricsToken);
  let mirror: DirectoryMirror | undefined;
  if (config.mirror !== undefined) {
    mirror = new DirectoryMirror({
      database,
      clock: parts.clock,
      settings: config.mirror,
      revalidationIntervalSeconds: config.settings.revalidation.intervalSeconds,
      log: app.log,
      onListingsChanged: () => service.listingsChanged(),
      ...(options.mirrorFetch ? { fetch: options.mirrorFetch } : {}),
    });
    try {
      await mirror.open();
    } catch (error) {
      await changes?.close();
      await database.close();
      await parts.close();
      throw error;
    }
    instrumentMirror(mirror, metrics);
  }
  parts.dependencies.log = app.log;
  const readiness = {
    accepting: true,
    unavailable: () => parts.unavailable(),
    ...(mirror ? { extra: () => mirror.readiness() } : {}),
  };
  registerHealthRoutes(app, readiness);
  if (mirror) registerReadOnlyGuard(app, mirror.upstream);
  await app.register(directoryRoutes, {
    service,
    limiter: parts.limiter,
    settings: config.settings,
    publicUrl: config.publicUrl,
    adminToken: config.adminToken,
  });
  await app.register(directoryPages, {
    service,
    limiter: parts.limiter,
    settings: config.settings,
    publicUrl: config.publicUrl,
  });
  if (parts.testClock !== undefined) {
    registerClockHook(app, parts.testClock);
    if (mirror) registerMirrorSyncHook(app, mirror);
    else app.post("/__test/revalidate", async () => service.revalidateDue());
  }

  let timer: NodeJS.Timeout | undefined;
  const tick = config.settings.revalidation.tickSeconds;
  // A mirror takes the upstream's outcomes as they are: it revalidates nothing itself.
  mirror?.start();
  if (tick > 0 && mirror === undefined) {
    timer = setInterval(() => {
      service
        .revalidateDue()
        .then((counts) => {
          if (counts.checked > 0) app.log.info({ revalidation: counts }, "revalidation pass");
        })
        .catch((error: unknown) => app.log.error({ err: error }, "revalidation pass failed"));
      service.purgeExpired().catch((error: unknown) => app.log.error({ err: error }, "purge failed"));
    }, tick * 1000);
    timer.unref();
  }

  return {
    app,
    service,
    mirror,
    async close() {
      readiness.accepting = false;
      await drainDelay(config.platform.shutdownDelaySeconds);
      if (timer !== undefined) clearInterval(timer);
      // First, so a test hook waiting on a pass answers and draining does not wait on the upstream.
      await mirror?.stop();
      await app.close();
      await service.idle();
      await changes?.close();
      await database.close();
      await parts.close();
    },
  };
}
