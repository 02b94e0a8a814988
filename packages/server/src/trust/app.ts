import { createSafeFetcher, DEFAULT_SKEW_SECONDS, MemoryNonceStore } from "@proto/protocol";
import type { FastifyInstance } from "fastify";
import type { Clock } from "../platform/clock.js";
import { type Database, openDatabase } from "../platform/database.js";
import { drainDelay, registerHealthRoutes } from "../platform/health.js";
import { createHttpServer } from "../platform/http.js";
import { registerMetricsRoute, ServiceMetrics } from "../platform/metrics.js";
import { registerOpenApi } from "../platform/openapi.js";
import type { RateLimitRule } from "../platform/rate-limit.js";
import { createPlatformParts, rateLimitPrefix } from "../platform/shared.js";
import { registerClockHook } from "../platform/test-hooks.js";
import { agentAuthorityRoutes } from "./authority/agent-routes.js";
import { tellPerson } from "./authority/approval-mail.js";
import { purgeApprovals } from "./authority/approvals.js";
import {
  DISCOVERY_FETCH_TIMEOUT_MS,
  MAX_DISCOVERY_DOCUMENT_BYTES,
  ServiceDeclarations,
} from "./authority/service-declarations.js";
import type { TrustConfig } from "./config.js";
import { KeyRing } from "./keys.js";
import { type Mailer, OutboxMailer, smtpMailer } from "./mail.js";
import { trustMetrics } from "./metrics.js";
import { type TrustSchema, trustMigrations } from "./migrations.js";
import { ClientRegistry, MAX_METADATA_DOCUMENT_BYTES, METADATA_FETCH_TIMEOUT_MS } from "./oidc/client-registry.js";
import { purgeSpentCodes } from "./oidc/codes.js";
import { purgeEndedGrants } from "./oidc/grants.js";
import { oidcProvider } from "./oidc/provider.js";
import { paymentWiring, withExtraPages } from "./payment/plugin.js";
import type { PaymentFetch } from "./payment/provider.js";
import type { PaymentLimits } from "./payment/routes.js";
import { countingLocally, ReplayStore } from "./replay-store.js";
import { TRUST_OPENAPI, trustRoutes } from "./routes.js";
import { TrustService } from "./service.js";
import { MAX_ATTESTATION_TTL_SECONDS } from "./settings.js";
import { registerTrustTestHooks } from "./test-hooks.js";
import { humanPages, registerCookies } from "./web/plugin.js";
import { SessionManager } from "./web/session.js";
import { type UpstreamFetch, upstreamWiring } from "./web/upstream.js";

export interface TrustApp {
  app: FastifyInstance;
  service: TrustService;
  keys: KeyRing;
  sessions: SessionManager;
  mailer: Mailer;
  close(): Promise<void>;
}

export interface TrustAppOptions {
  logStream?: NodeJS.WritableStream;
  clock?: Clock;
  /** Redis key prefix (default `proto:trust:`). */
  redisPrefix?: string;
  /** Tests only: the fetch payment verification calls its API with (e.g. trusting a test CA). */
  paymentFetch?: PaymentFetch;
  /** Tests only: payment verification's rate limits (defaults `DEFAULT_PAYMENT_LIMITS`). */
  paymentLimits?: PaymentLimits;
  /** Tests only: the fetch upstream OpenID sign-in reaches the provider with (e.g. trusting a test CA). */
  upstreamFetch?: UpstreamFetch;
  /** Tests only: a CA the fetches of client metadata documents trust (the test CA). */
  fetchCa?: string;
}

export async function buildTrustApp(config: TrustConfig, options: TrustAppOptions = {}): Promise<TrustApp> {
  const prefix = options.redisPrefix ?? "proto:trust:";
  const metrics = new ServiceMetrics("trust");
  const onRateLimited = (rule: RateLimitRule) => metrics.rateLimited(rule.name);
  let database: Database<TrustSchema> | undefined;
  const parts = createPlatformParts(config.platform, {
    redisPrefix: prefix,
    ...(options.clock ? { clock: options.clock } : {}),
    onRateLimited,
    databaseProbe: async () => (await database?.ping()) ?? false,
    redisRequired: true,
  });
  metrics.watchDependencies(parts.dependencies);
  database = await openDatabase<TrustSchema>(config.databaseUrl, {
    // Every attestor query is a lookup by key: prepared once per connection, planned once.
    prepareStatements: true,
    migrations: trustMigrations,
    migrationTable: "trust_migrations",
    onConnectionError: (error) => parts.dependencies.failed("database", error),
    // Hot reads are a few bindings and keys; what grows is link requests, written once and rarely
    // read again. Unmapped, they do not pile up in resident memory.
    sqliteReads: { writerCacheMiB: 16, readerCacheMiB: 8, mmap: false },
  });
  await parts.redisReady();
  const keys = new KeyRing({
    database,
    keyEncryptionKey: config.secrets.keyEncryptionKey,
    clock: parts.clock,
    publishLeadSeconds: config.settings.keyPublishLeadSeconds,
    rotationSeconds: config.settings.keyRotationSeconds,
    maxTokenLifetimeSeconds: MAX_ATTESTATION_TTL_SECONDS + 60,
    refreshSeconds: config.settings.keyRefreshSeconds,
  });
  await keys.start();
  const nonceStore =
    parts.redis === undefined
      ? new MemoryNonceStore({ now: () => parts.clock.now() })
      : new ReplayStore({
          redis: parts.redis,
          db: database.db,
          clock: parts.clock,
          keyPrefix: `${prefix}nonce:`,
          rateLimitPrefix: rateLimitPrefix(prefix),
          onAnswered: () => parts.dependencies.recovered("redis"),
          skewSeconds: DEFAULT_SKEW_SECONDS,
          onLoss: (epoch) =>
            app.log.warn(
              { refusedBefore: new Date(epoch * 1000).toISOString() },
              "Redis came back without its nonces: refusing signatures that could predate the loss",
            ),
        });
  const service = new TrustService({
    database,
    clock: parts.clock,
    keys,
    limiter: parts.limiter,
    nonceStore,
    countingNonces: (rule, key) =>
      nonceStore instanceof ReplayStore
        ? nonceStore.counting(rule, key, onRateLimited)
        : countingLocally(parts.limiter, nonceStore, rule, key),
    onRateLimited,
    pseudonymKey: config.secrets.pseudonymKey,
    publicUrl: config.publicUrl,
    settings: config.settings,
  });
  const app = createHttpServer({
    logLevel: config.platform.logLevel,
    trustedProxies: config.platform.trustedProxies,
    trustedProxyHops: config.platform.trustedProxyHops,
    ...(options.logStream ? { logStream: options.logStream } : {}),
    metrics,
    onDependencyFailure: (dependency, error) => parts.dependencies.failed(dependency, error),
  });
  await registerOpenApi(app, { ...TRUST_OPENAPI, publicUrl: config.publicUrl });
  registerMetricsRoute(app, metrics, config.platform.metricsToken);
  if (config.secrets.developmentFile !== undefined) {
    app.log.warn(
      { file: config.secrets.developmentFile },
      "TRUST_KEY_ENCRYPTION_KEY or TRUST_PSEUDONYM_KEY not set: using development secrets kept in the data directory",
    );
  }
  parts.dependencies.log = app.log;
  const readiness = { accepting: true, unavailable: () => parts.unavailable() };
  registerHealthRoutes(app, readiness);
  const sessions = new SessionManager({
    db: database.db,
    clock: parts.clock,
    secure: config.secureCookies,
    ttlSeconds: config.sessionTtlSeconds,
  });
  const mailer: Mailer =
    config.smtpUrl === undefined
      ? new OutboxMailer(() => app.log.info("a mail is waiting in the development outbox: open /dev/outbox"))
      : smtpMailer(config.smtpUrl, config.mailFrom);
  const payment = paymentWiring(config.payment, {
    db: database.db,
    clock: parts.clock,
    limiter: parts.limiter,
    sessions,
    publicUrl: config.publicUrl,
    fetch: options.paymentFetch,
    limits: options.paymentLimits,
  });
  const upstream = upstreamWiring(config.upstreamOidc, {
    service,
    sessions,
    limiter: parts.limiter,
    clock: parts.clock,
    publicUrl: config.publicUrl,
    keyEncryptionKey: config.secrets.keyEncryptionKey,
    fetch: options.upstreamFetch,
  });
  // Services' discovery documents, for their permissions: descriptions, defaults, passkey needs.
  const declarations = new ServiceDeclarations({
    clock: parts.clock,
    fetcher: createSafeFetcher({
      allowPrivate: config.platform.fetch.allowPrivate,
      resolve: config.platform.fetch.resolve,
      maxBytes: MAX_DISCOVERY_DOCUMENT_BYTES,
      timeoutMs: DISCOVERY_FETCH_TIMEOUT_MS,
      userAgent: "proto-trust/0.1 (service permissions)",
      ...(options.fetchCa ? { ca: options.fetchCa } : {}),
    }),
    bounds: {
      limiter: parts.limiter,
      perAddress: config.settings.rateLimits.serviceFetch,
      maxConcurrent: config.settings.clientMetadata.maxConcurrentFetches,
      failureCacheSeconds: config.settings.clientMetadata.failureCacheSeconds,
    },
  });
  await registerCookies(app);
  await app.register(trustRoutes, {
    service,
    keys,
    limiter: parts.limiter,
    settings: config.settings,
    publicUrl: config.publicUrl,
    humanOf: async (request) => (await sessions.current(request))?.humanId,
    mints: trustMetrics(metrics, keys, parts.clock),
  });
  await app.register(withExtraPages(withExtraPages(humanPages, payment?.pages), upstream?.pages), {
    service,
    sessions,
    mailer,
    limiter: parts.limiter,
    clock: parts.clock,
    publicUrl: config.publicUrl,
    oidcClients: config.oidcClients,
    declarations,
    linkRequiresPasskey: config.linkRequiresPasskey,
    signinOptions: () => (upstream === undefined ? [] : [upstream.signinOption]),
    accountActions: () => [
      ...(payment === undefined ? [] : [payment.accountAction]),
      ...(upstream === undefined ? [] : [upstream.accountAction]),
    ],
  });
  if (payment !== undefined) await payment.webhook(app);
  await app.register(agentAuthorityRoutes, {
    service,
    settings: config.settings,
    publicUrl: config.publicUrl,
    approvals: {
      db: database.db,
      clock: parts.clock,
      limiter: parts.limiter,
      rules: { perAgent: config.settings.rateLimits.approval, perPerson: config.settings.rateLimits.approvalPerPerson },
      declarations,
      production: config.platform.production,
      unreadableRetryAfterSeconds: config.settings.clientMetadata.failureCacheSeconds,
      notify: (approval, binding) =>
        tellPerson({ db: database.db, mailer, publicUrl: config.publicUrl }, approval, binding.agent_label).catch(
          (error: unknown) => app.log.error({ err: error }, "approval mail could not be sent"),
        ),
    },
  });
  const clients = new ClientRegistry({
    db: database.db,
    clock: parts.clock,
    registered: config.oidcClients,
    fetcher: createSafeFetcher({
      allowPrivate: config.platform.fetch.allowPrivate,
      resolve: config.platform.fetch.resolve,
      maxBytes: MAX_METADATA_DOCUMENT_BYTES,
      timeoutMs: METADATA_FETCH_TIMEOUT_MS,
      userAgent: "proto-trust/0.1 (client metadata)",
      ...(options.fetchCa ? { ca: options.fetchCa } : {}),
    }),
    bounds: {
      limiter: parts.limiter,
      perAddress: config.settings.rateLimits.oauthClientFetch,
      maxConcurrent: config.settings.clientMetadata.maxConcurrentFetches,
      failureCacheSeconds: config.settings.clientMetadata.failureCacheSeconds,
    },
  });
  await app.register(oidcProvider, {
    service,
    sessions,
    keys,
    clock: parts.clock,
    publicUrl: config.publicUrl,
    production: config.platform.production,
    clients,
    declarations,
    jtis: nonceStore,
    limiter: parts.limiter,
    settings: config.settings,
  });
  if (parts.testClock !== undefined) {
    registerClockHook(app, parts.testClock);
    registerTrustTestHooks(app, service, keys);
  }

  const timer = setInterval(() => {
    keys
      .rotateIfDue()
      .then((rotated) => {
        if (rotated) app.log.info("signing key rotation started");
      })
      .catch((error: unknown) => app.log.error({ err: error }, "key rotation failed"));
    service.purgeExpired().catch((error: unknown) => app.log.error({ err: error }, "purge failed"));
    const now = parts.clock.now();
    purgeApprovals(database.db, now).catch((error: unknown) => app.log.error({ err: error }, "approval purge failed"));
    Promise.all([purgeEndedGrants(database.db, now), purgeSpentCodes(database.db, now), clients.purgeIdle()]).catch(
      (error: unknown) => app.log.error({ err: error }, "OAuth purge failed"),
    );
  }, 60_000);
  timer.unref();

  return {
    app,
    service,
    keys,
    sessions,
    mailer,
    async close() {
      readiness.accepting = false;
      await drainDelay(config.platform.shutdownDelaySeconds);
      clearInterval(timer);
      await app.close();
      await database.close();
      await parts.close();
      mailer.close();
    },
  };
}
