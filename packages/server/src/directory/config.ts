import { type PlatformConfig, readDatabaseUrl, readPlatformConfig } from "../platform/config.js";
import { type Env, EnvReader as Reader, readLimitOverrides } from "../platform/env.js";
import { DEFAULT_DIRECTORY_SETTINGS, type DirectorySettings } from "./settings.js";

export interface DirectoryConfig {
  platform: PlatformConfig;
  publicUrl: string;
  databaseUrl: string;
  adminToken: string | undefined;
  settings: DirectorySettings;
}

export function readDirectoryConfig(env: Env = process.env, platform?: PlatformConfig): DirectoryConfig {
  const reader = new Reader(env);
  const base = platform ?? readPlatformConfig(reader);
  const defaults = DEFAULT_DIRECTORY_SETTINGS;
  const publicUrl = reader.baseUrl("DIRECTORY_PUBLIC_URL", "http://localhost:8080");
  if (base.production && !publicUrl.startsWith("https://")) {
    reader.problem("DIRECTORY_PUBLIC_URL must be https when NODE_ENV=production");
  }
  const adminToken = reader.string("DIRECTORY_ADMIN_TOKEN");
  if (adminToken !== undefined && adminToken.length < 16) {
    reader.problem("DIRECTORY_ADMIN_TOKEN must be at least 16 characters");
  }
  const settings: DirectorySettings = {
    challengeTtlSeconds: reader.integer("DIRECTORY_CHALLENGE_TTL_SECONDS", defaults.challengeTtlSeconds, 60, 86400),
    sessionTtlSeconds: reader.integer("DIRECTORY_SESSION_TTL_SECONDS", defaults.sessionTtlSeconds, 60, 90 * 86400),
    hostChallengeCap: {
      limit: reader.integer("DIRECTORY_HOST_CHALLENGE_LIMIT", defaults.hostChallengeCap.limit, 1, 100000),
      windowSeconds: defaults.hostChallengeCap.windowSeconds,
    },
    revalidation: {
      intervalSeconds: reader.integer(
        "DIRECTORY_REVALIDATE_INTERVAL_SECONDS",
        defaults.revalidation.intervalSeconds,
        60,
        30 * 86400,
      ),
      staleAfterFailures: reader.integer(
        "DIRECTORY_STALE_AFTER_FAILURES",
        defaults.revalidation.staleAfterFailures,
        1,
        1000,
      ),
      deleteAfterStaleSeconds:
        reader.integer(
          "DIRECTORY_DELETE_AFTER_STALE_DAYS",
          defaults.revalidation.deleteAfterStaleSeconds / 86400,
          1,
          3650,
        ) * 86400,
      concurrency: reader.integer("DIRECTORY_REVALIDATE_CONCURRENCY", defaults.revalidation.concurrency, 1, 256),
      tickSeconds: reader.integer("DIRECTORY_REVALIDATE_TICK_SECONDS", defaults.revalidation.tickSeconds, 0, 86400),
    },
    rateLimits: readLimitOverrides(reader, "DIRECTORY_RATE_LIMITS", DEFAULT_DIRECTORY_SETTINGS.rateLimits),
  };
  const config: DirectoryConfig = {
    platform: base,
    publicUrl,
    databaseUrl: readDatabaseUrl(reader, "DIRECTORY_DATABASE_URL", "sqlite:./data/directory.db"),
    adminToken,
    settings,
  };
  reader.finish();
  return config;
}
