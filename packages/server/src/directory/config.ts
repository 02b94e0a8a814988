import { type PlatformConfig, readDatabaseUrl, readPlatformConfig } from "../platform/config.js";
import type { Env, EnvReader } from "../platform/env.js";
import { EnvReader as Reader } from "../platform/env.js";
import { DEFAULT_DIRECTORY_SETTINGS, type DirectorySettings } from "./settings.js";

export interface DirectoryConfig {
  platform: PlatformConfig;
  publicUrl: string;
  databaseUrl: string;
  adminToken: string | undefined;
  settings: DirectorySettings;
}

const RATE_LIMIT_NAMES = ["challenge", "create", "write", "read", "sitemap"] as const;

/** `DIRECTORY_RATE_LIMITS="read=6000/60,create=100/60"`: count per window seconds, by scope. */
function readRateLimits(reader: EnvReader): DirectorySettings["rateLimits"] {
  const limits = { ...DEFAULT_DIRECTORY_SETTINGS.rateLimits };
  const value = reader.string("DIRECTORY_RATE_LIMITS");
  if (value === undefined) return limits;
  for (const entry of value.split(",")) {
    const match = /^\s*([a-z]+)\s*=\s*(\d+)\s*\/\s*(\d+)\s*$/.exec(entry);
    const name = match?.[1] as (typeof RATE_LIMIT_NAMES)[number] | undefined;
    if (match === null || name === undefined || !RATE_LIMIT_NAMES.includes(name) || Number(match[3]) < 1) {
      reader.problem(
        `DIRECTORY_RATE_LIMITS entries are scope=count/seconds with scope one of ${RATE_LIMIT_NAMES.join(", ")} (got ${JSON.stringify(entry)})`,
      );
      continue;
    }
    limits[name] = { ...limits[name], limit: Number(match[2]), windowSeconds: Number(match[3]) };
  }
  return limits;
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
    rateLimits: readRateLimits(reader),
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
