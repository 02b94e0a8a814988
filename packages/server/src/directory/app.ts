import type { FastifyInstance } from "fastify";
import type { Clock } from "../platform/clock.js";
import { openDatabase } from "../platform/database.js";
import { registerHealthRoutes } from "../platform/health.js";
import { createHttpServer } from "../platform/http.js";
import { createSafeFetcher } from "../platform/safe-fetch.js";
import { createPlatformParts } from "../platform/shared.js";
import { registerClockHook } from "../platform/test-hooks.js";
import type { DirectoryConfig } from "./config.js";
import { type DirectorySchema, directoryMigrations } from "./migrations.js";
import { directoryRoutes } from "./routes.js";
import { DirectoryService } from "./service.js";

export interface DirectoryApp {
  app: FastifyInstance;
  service: DirectoryService;
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
}

export async function buildDirectoryApp(
  config: DirectoryConfig,
  options: DirectoryAppOptions = {},
): Promise<DirectoryApp> {
  const parts = createPlatformParts(config.platform, {
    redisPrefix: options.redisPrefix ?? "proto:dir:",
    ...(options.clock ? { clock: options.clock } : {}),
  });
  const database = await openDatabase<DirectorySchema>(config.databaseUrl, {
    migrations: directoryMigrations,
    migrationTable: "directory_migrations",
  });
  const fetcher = createSafeFetcher({
    allowPrivate: config.platform.fetch.allowPrivate,
    resolve: config.platform.fetch.resolve,
    ...(options.fetchCa ? { ca: options.fetchCa } : {}),
  });
  const service = new DirectoryService({ database, clock: parts.clock, fetcher, settings: config.settings });
  const app = createHttpServer({
    logLevel: config.platform.logLevel,
    trustedProxyHops: config.platform.trustedProxyHops,
    ...(options.logStream ? { logStream: options.logStream } : {}),
  });
  const readiness = { accepting: true, check: () => database.ping() };
  registerHealthRoutes(app, readiness);
  await app.register(directoryRoutes, {
    service,
    limiter: parts.limiter,
    settings: config.settings,
    publicUrl: config.publicUrl,
    adminToken: config.adminToken,
  });
  if (parts.testClock !== undefined) {
    registerClockHook(app, parts.testClock);
    app.post("/__test/revalidate", async () => service.revalidateDue());
  }

  let timer: NodeJS.Timeout | undefined;
  const tick = config.settings.revalidation.tickSeconds;
  if (tick > 0) {
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
    async close() {
      readiness.accepting = false;
      if (timer !== undefined) clearInterval(timer);
      await app.close();
      await service.idle();
      await database.close();
      await parts.close();
    },
  };
}
