import { type PlatformConfig, readDatabaseUrl, readOperatorToken, readPlatformConfig } from "../platform/config.js";
import { type Env, EnvReader as Reader, readLimitOverrides } from "../platform/env.js";
import { DEFAULT_MIRROR_SETTINGS, type MirrorSettings } from "./mirror.js";
import { DEFAULT_DIRECTORY_SETTINGS, type DirectorySettings } from "./settings.js";

export interface DirectoryConfig {
  platform: PlatformConfig;
  publicUrl: string;
  databaseUrl: string;
  /**
   * PostgreSQL: where the read cache's LISTEN connection goes, when not to `databaseUrl` (a
   * transaction pooler such as PgBouncer cannot carry LISTEN: point this at PostgreSQL itself).
   */
  listenDatabaseUrl: string | undefined;
  adminToken: string | undefined;
  settings: DirectorySettings;
  /** Mirror mode: a read-only copy of the directory at `DIRECTORY_MIRROR_OF`. */
  mirror: MirrorSettings | undefined;
}

/**
 * `DIRECTORY_MIRROR_OF` (`--mirror-of`) and its tuning: the upstream's registry URL (its API is
 * under `/v1`; a trailing `/v1` is accepted and dropped). Https in production.
 */
function readMirrorSettings(reader: Reader, platform: PlatformConfig, publicUrl: string): MirrorSettings | undefined {
  const raw = reader.string("DIRECTORY_MIRROR_OF");
  if (raw === undefined) return undefined;
  const upstream = reader.baseUrl("DIRECTORY_MIRROR_OF", raw).replace(/\/v1$/, "");
  if (platform.production && !upstream.startsWith("https://")) {
    reader.problem("DIRECTORY_MIRROR_OF must be https when NODE_ENV=production");
  }
  if (upstream === publicUrl) reader.problem("DIRECTORY_MIRROR_OF names this directory's own DIRECTORY_PUBLIC_URL");
  const defaults = DEFAULT_MIRROR_SETTINGS;
  const pollSeconds = reader.integer("DIRECTORY_MIRROR_POLL_SECONDS", defaults.pollSeconds, 0, 86400);
  if (pollSeconds === 0 && !platform.testHooks) {
    reader.problem("DIRECTORY_MIRROR_POLL_SECONDS=0 (sync only through the test hook) needs PROTO_TEST_HOOKS=1");
  }
  return {
    upstream,
    pollSeconds,
    pageSize: reader.integer("DIRECTORY_MIRROR_PAGE_SIZE", defaults.pageSize, 1, 100),
    timeoutSeconds: reader.integer("DIRECTORY_MIRROR_TIMEOUT_SECONDS", defaults.timeoutSeconds, 1, 600),
    maxBackoffSeconds: reader.integer("DIRECTORY_MIRROR_MAX_BACKOFF_SECONDS", defaults.maxBackoffSeconds, 5, 86400),
    lookbackSeconds: reader.integer("DIRECTORY_MIRROR_LOOKBACK_SECONDS", defaults.lookbackSeconds, 0, 86400),
    maxPageBytes: defaults.maxPageBytes,
  };
}

export function readDirectoryConfig(env: Env = process.env, platform?: PlatformConfig): DirectoryConfig {
  const reader = new Reader(env);
  const base = platform ?? readPlatformConfig(reader);
  const defaults = DEFAULT_DIRECTORY_SETTINGS;
  const publicUrl = reader.baseUrl("DIRECTORY_PUBLIC_URL", "http://localhost:8080");
  if (base.production && !publicUrl.startsWith("https://")) {
    reader.problem("DIRECTORY_PUBLIC_URL must be https when NODE_ENV=production");
  }
  const adminToken = readOperatorToken(reader, "DIRECTORY_ADMIN_TOKEN");
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
    readCacheBytes:
      reader.integer("DIRECTORY_READ_CACHE_MB", defaults.readCacheBytes / (1024 * 1024), 0, 16384) * 1024 * 1024,
    rateLimits: readLimitOverrides(reader, "DIRECTORY_RATE_LIMITS", DEFAULT_DIRECTORY_SETTINGS.rateLimits),
  };
  const databaseUrl = readDatabaseUrl(reader, "DIRECTORY_DATABASE_URL", "sqlite:./data/directory.db", base.production);
  const listenDatabaseUrl = reader.string("DIRECTORY_LISTEN_DATABASE_URL");
  if (listenDatabaseUrl !== undefined && !/^postgres(ql)?:\/\/.+/.test(listenDatabaseUrl)) {
    reader.problem("DIRECTORY_LISTEN_DATABASE_URL must be postgres://...");
  } else if (listenDatabaseUrl !== undefined && databaseUrl.startsWith("sqlite:")) {
    reader.problem("DIRECTORY_LISTEN_DATABASE_URL needs a PostgreSQL DIRECTORY_DATABASE_URL");
  }
  const config: DirectoryConfig = {
    platform: base,
    publicUrl,
    databaseUrl,
    listenDatabaseUrl,
    adminToken,
    settings,
    mirror: readMirrorSettings(reader, base, publicUrl),
  };
  reader.finish();
  return config;
}
