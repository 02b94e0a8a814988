import { type PlatformConfig, readDatabaseUrl, readPlatformConfig } from "../platform/config.js";
import { type Env, EnvReader, readLimitOverrides } from "../platform/env.js";
import { type OidcClient, parseOidcClients } from "./oidc/clients.js";
import { type PaymentConfig, readPaymentConfig } from "./payment/config.js";
import { dataDirectory, readTrustSecrets, type TrustSecrets } from "./secrets.js";
import {
  DEFAULT_TRUST_SETTINGS,
  MAX_ATTESTATION_TTL_SECONDS,
  type TrustSettings,
  WBA_DIRECTORY_MAX_KEYS_LIMIT,
} from "./settings.js";
import { readUpstreamOidcConfig, type UpstreamOidcConfig } from "./web/upstream.js";

export interface TrustConfig {
  platform: PlatformConfig;
  /** `{trust_url}`: the exact origin agents sign `/v1/token` for. */
  publicUrl: string;
  databaseUrl: string;
  secrets: TrustSecrets;
  settings: TrustSettings;
  /** Relying parties of the OpenID provider. */
  oidcClients: OidcClient[];
  /** `SMTP_URL`; without it (development only) mail goes to the outbox at `/dev/outbox`. */
  smtpUrl: string | undefined;
  mailFrom: string;
  sessionTtlSeconds: number;
  /** Cookies are `Secure` everywhere except development over plain http. */
  secureCookies: boolean;
  /** `TRUST_LINK_REQUIRES_PASSKEY`: a link is confirmed only by a person signed in with a passkey. */
  linkRequiresPasskey: boolean;
  /** `TRUST_PAYMENT_*`: payment verification, when all three are set. */
  payment: PaymentConfig | undefined;
  /** `TRUST_UPSTREAM_OIDC_*`: sign-in with an upstream OpenID provider, when issuer, id and secret are set. */
  upstreamOidc: UpstreamOidcConfig | undefined;
}

/** Rate-limit scopes an operator names in `TRUST_RATE_LIMITS`. */
function readRateLimits(reader: EnvReader, dailyLimit: number): TrustSettings["rateLimits"] {
  const defaults = DEFAULT_TRUST_SETTINGS.rateLimits;
  const scoped = readLimitOverrides(reader, "TRUST_RATE_LIMITS", {
    link_start: defaults.linkStart,
    link_start_agent: defaults.linkStartPerAgent,
    link_poll: defaults.linkPoll,
    token: defaults.token,
    read: defaults.read,
    oauth_register: defaults.oauthRegister,
    oauth_authorize: defaults.oauthAuthorize,
    oauth_client_fetch: defaults.oauthClientFetch,
    approval: defaults.approval,
    approval_person: defaults.approvalPerPerson,
    approval_poll: defaults.approvalPoll,
    service_fetch: defaults.serviceFetch,
  });
  return {
    linkStart: scoped.link_start,
    linkStartPerAgent: scoped.link_start_agent,
    linkPoll: scoped.link_poll,
    token: scoped.token,
    read: scoped.read,
    oauthRegister: scoped.oauth_register,
    oauthAuthorize: scoped.oauth_authorize,
    oauthClientFetch: scoped.oauth_client_fetch,
    approval: scoped.approval,
    approvalPerPerson: scoped.approval_person,
    approvalPoll: scoped.approval_poll,
    serviceFetch: scoped.service_fetch,
    tokenPerBinding: { ...defaults.tokenPerBinding, limit: dailyLimit },
  };
}

export function readTrustConfig(env: Env = process.env, platform?: PlatformConfig): TrustConfig {
  const reader = new EnvReader(env);
  const base = platform ?? readPlatformConfig(reader);
  const defaults = DEFAULT_TRUST_SETTINGS;
  const publicUrl = reader.baseUrl("TRUST_PUBLIC_URL", "http://localhost:8081");
  if (base.production && !publicUrl.startsWith("https://")) {
    reader.problem("TRUST_PUBLIC_URL must be https when NODE_ENV=production");
  }
  const databaseUrl = readDatabaseUrl(reader, "TRUST_DATABASE_URL", "sqlite:./data/trust.db", base.production);
  const dailyLimit = reader.integer("TRUST_PER_BINDING_DAILY_TOKEN_LIMIT", 10_000, 1, 100_000_000);
  const settings: TrustSettings = {
    linkTtlSeconds: reader.integer("TRUST_LINK_TTL_SECONDS", defaults.linkTtlSeconds, 60, 86400),
    bindingInactivitySeconds:
      reader.integer("TRUST_BINDING_INACTIVITY_DAYS", defaults.bindingInactivitySeconds / 86400, 1, 3650) * 86400,
    attestationTtlSeconds: reader.integer(
      "TRUST_ATTESTATION_TTL_SECONDS",
      defaults.attestationTtlSeconds,
      60,
      MAX_ATTESTATION_TTL_SECONDS,
    ),
    keyPublishLeadSeconds: reader.integer("TRUST_KEY_PUBLISH_LEAD_SECONDS", defaults.keyPublishLeadSeconds, 900, 86400),
    keyRotationSeconds: reader.integer("TRUST_KEY_ROTATION_DAYS", defaults.keyRotationSeconds / 86400, 1, 3650) * 86400,
    keyRefreshSeconds: defaults.keyRefreshSeconds,
    wbaDirectoryMaxKeys: reader.integer(
      "TRUST_WBA_DIRECTORY_MAX_KEYS",
      defaults.wbaDirectoryMaxKeys,
      1,
      WBA_DIRECTORY_MAX_KEYS_LIMIT,
    ),
    rateLimits: readRateLimits(reader, dailyLimit),
    clientMetadata: {
      maxConcurrentFetches: reader.integer(
        "TRUST_OAUTH_CLIENT_FETCH_CONCURRENCY",
        defaults.clientMetadata.maxConcurrentFetches,
        1,
        10_000,
      ),
      failureCacheSeconds: reader.integer(
        "TRUST_OAUTH_CLIENT_FAILURE_CACHE_SECONDS",
        defaults.clientMetadata.failureCacheSeconds,
        1,
        3600,
      ),
    },
  };
  const problemsBefore = reader.problems.length;
  const secrets = readTrustSecrets(reader, base.production, dataDirectory(databaseUrl));
  // One value for both would make a leak of either a leak of both: they are kept apart on purpose.
  if (
    reader.problems.length === problemsBefore &&
    reader.string("TRUST_KEY_ENCRYPTION_KEY") !== undefined &&
    reader.string("TRUST_PSEUDONYM_KEY") !== undefined &&
    secrets.keyEncryptionKey.equals(secrets.pseudonymKey)
  ) {
    reader.problem("TRUST_KEY_ENCRYPTION_KEY and TRUST_PSEUDONYM_KEY must be different keys");
  }
  const oidc = parseOidcClients(reader.string("TRUST_OIDC_CLIENTS"), base.production);
  for (const problem of oidc.problems) reader.problem(problem);
  const smtpUrl = reader.string("SMTP_URL");
  if (smtpUrl !== undefined && !/^smtps?:\/\//.test(smtpUrl))
    reader.problem("SMTP_URL must start with smtp:// or smtps://");
  if (base.production && smtpUrl === undefined)
    reader.problem("SMTP_URL is required when NODE_ENV=production (sign-in mail)");
  const config: TrustConfig = {
    platform: base,
    publicUrl,
    databaseUrl,
    secrets,
    settings,
    oidcClients: oidc.clients,
    smtpUrl,
    mailFrom: reader.string("MAIL_FROM") ?? "proto trust <no-reply@localhost>",
    sessionTtlSeconds: reader.integer("TRUST_SESSION_TTL_SECONDS", 14 * 86400, 300, 365 * 86400),
    secureCookies: base.production || publicUrl.startsWith("https://"),
    linkRequiresPasskey: reader.flag("TRUST_LINK_REQUIRES_PASSKEY"),
    payment: readPaymentConfig(reader, base.production),
    upstreamOidc: readUpstreamOidcConfig(reader),
  };
  reader.finish();
  return config;
}
