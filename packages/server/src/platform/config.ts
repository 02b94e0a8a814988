import { parseResolveOverrides } from "@proto/protocol";
import { type Env, EnvReader } from "./env.js";
import { parseTrustedProxies } from "./proxy-trust.js";

export const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** Settings both services share. */
export interface PlatformConfig {
  production: boolean;
  logLevel: LogLevel;
  redisUrl: string | undefined;
  /** `TRUSTED_PROXIES`: the only peers whose `X-Forwarded-For` is read (see proxy-trust.ts). */
  trustedProxies: string[];
  /** `TRUSTED_PROXY_HOPS`: 0, or at most this many listed proxies are walked through. */
  trustedProxyHops: number;
  /** `PROTO_TEST_HOOKS=1`: the `/__test/*` routes exist (never in production). */
  testHooks: boolean;
  fetch: { allowPrivate: boolean; resolve: ReadonlyMap<string, string> };
  /** `METRICS_TOKEN`: the bearer secret of `GET /metrics`; unset, the route does not exist. */
  metricsToken: string | undefined;
  /**
   * `SHUTDOWN_DELAY_SECONDS`: how long `/readyz` answers 503 before the server stops listening,
   * so load balancers take the replica out while it still serves what they send.
   */
  shutdownDelaySeconds: number;
}

/** Shortest bearer secret accepted for the operator routes (`/metrics`, the directory's admin API). */
export const MIN_OPERATOR_TOKEN_LENGTH = 16;

/**
 * An operator's bearer secret: unset, or 16 to 512 printable ASCII characters without spaces
 * (what an `Authorization: Bearer` header can carry). Problems never quote the value.
 */
export function readOperatorToken(reader: EnvReader, name: string): string | undefined {
  const value = reader.string(name);
  if (value === undefined) return undefined;
  if (value.length < MIN_OPERATOR_TOKEN_LENGTH) {
    reader.problem(`${name} must be at least ${MIN_OPERATOR_TOKEN_LENGTH} characters`);
  } else if (!/^[\x21-\x7e]{1,512}$/.test(value)) {
    reader.problem(`${name} must be at most 512 printable ASCII characters, without spaces`);
  }
  return value;
}

/**
 * `NODE_ENV` names production in any case and with surrounding spaces: `Production` must not
 * quietly skip every production refusal (and start the test hooks).
 */
export function isProductionEnv(value: string | undefined): boolean {
  return value?.trim().toLowerCase() === "production";
}

export function readPlatformConfig(reader: EnvReader): PlatformConfig {
  const production = isProductionEnv(reader.string("NODE_ENV"));
  const testHooks = reader.flag("PROTO_TEST_HOOKS");
  const allowPrivate = reader.flag("PROTO_FETCH_ALLOW_PRIVATE");
  let resolve: ReadonlyMap<string, string> = new Map();
  try {
    resolve = parseResolveOverrides(reader.string("PROTO_FETCH_RESOLVE"));
  } catch (error) {
    reader.problem(`PROTO_FETCH_RESOLVE: ${error instanceof Error ? error.message : String(error)}`);
  }
  if (production) {
    if (testHooks) reader.problem("PROTO_TEST_HOOKS must not be set when NODE_ENV=production");
    if (allowPrivate) reader.problem("PROTO_FETCH_ALLOW_PRIVATE must not be set when NODE_ENV=production");
    if (resolve.size > 0) reader.problem("PROTO_FETCH_RESOLVE must not be set when NODE_ENV=production");
  }
  let trustedProxies: string[] = [];
  try {
    trustedProxies = parseTrustedProxies(reader.string("TRUSTED_PROXIES"));
  } catch (error) {
    reader.problem(`TRUSTED_PROXIES: ${error instanceof Error ? error.message : String(error)}`);
  }
  const trustedProxyHops = reader.integer("TRUSTED_PROXY_HOPS", 0, 0, 16);
  // A hop count alone trusts whichever peer connects, a client included, to name its own address.
  if (trustedProxyHops > 0 && reader.string("TRUSTED_PROXIES") === undefined) {
    reader.problem(
      "TRUSTED_PROXY_HOPS needs TRUSTED_PROXIES (the proxies' addresses or CIDRs): without it any client could choose its address with X-Forwarded-For",
    );
  }
  const redisUrl = reader.string("REDIS_URL");
  if (redisUrl !== undefined && !/^rediss?:\/\//.test(redisUrl)) {
    reader.problem("REDIS_URL must start with redis:// or rediss://");
  }
  return {
    production,
    logLevel: reader.oneOf("LOG_LEVEL", LOG_LEVELS, "info"),
    redisUrl,
    trustedProxies,
    trustedProxyHops,
    testHooks,
    fetch: { allowPrivate, resolve },
    metricsToken: readOperatorToken(reader, "METRICS_TOKEN"),
    shutdownDelaySeconds: reader.integer("SHUTDOWN_DELAY_SECONDS", 0, 0, 300),
  };
}

/**
 * A database URL: `sqlite:PATH`, `sqlite::memory:` or `postgres://...`. In production an
 * in-memory database is refused: every restart would lose the data (and the attestor its keys).
 */
export function readDatabaseUrl(reader: EnvReader, name: string, fallback: string, production = false): string {
  const value = reader.string(name) ?? fallback;
  if (!/^(sqlite:.+|postgres(ql)?:\/\/.+)$/.test(value)) {
    reader.problem(`${name} must be sqlite:PATH, sqlite::memory: or postgres://... (got ${JSON.stringify(value)})`);
    return fallback;
  }
  if (production && value === "sqlite::memory:") {
    reader.problem(
      `${name} must not be sqlite::memory: when NODE_ENV=production (the data would not survive a restart)`,
    );
  }
  return value;
}

export function envReader(env: Env = process.env): EnvReader {
  return new EnvReader(env);
}
