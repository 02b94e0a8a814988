import type { FastifyInstance } from "fastify";
import type { Kysely } from "kysely";
import type { Clock } from "../../platform/clock.js";
import type { RateLimiter } from "../../platform/rate-limit.js";
import type { TrustSchema } from "../migrations.js";
import type { SessionManager } from "../web/session.js";
import { CheckoutProvider } from "./checkout.js";
import type { PaymentConfig } from "./config.js";
import type { PaymentFetch } from "./provider.js";
import {
  DEFAULT_PAYMENT_LIMITS,
  type PaymentLimits,
  paymentPages,
  paymentWebhookRoutes,
  START_PATH,
} from "./routes.js";
import { PaymentVerifications } from "./service.js";

export interface PaymentWiringDeps {
  db: Kysely<TrustSchema>;
  clock: Clock;
  limiter: RateLimiter;
  sessions: SessionManager;
  publicUrl: string;
  /** Tests only: a fetch that trusts their CA. Production uses the global fetch. */
  fetch?: PaymentFetch | undefined;
  limits?: PaymentLimits | undefined;
}

export interface PaymentWiring {
  verifications: PaymentVerifications;
  /** The button on the account page. */
  accountAction: { label: string; path: string };
  /** Registered inside the human pages' scope (forms, CSRF, HTML error pages). */
  pages(app: FastifyInstance): Promise<void>;
  /** Registered on the app itself (raw body, JSON error envelope). */
  webhook(app: FastifyInstance): Promise<void>;
}

/** Payment verification as configured, or undefined when `TRUST_PAYMENT_*` is not set. */
export function paymentWiring(config: PaymentConfig | undefined, deps: PaymentWiringDeps): PaymentWiring | undefined {
  if (config === undefined) return undefined;
  const provider = new CheckoutProvider({
    apiUrl: config.apiUrl,
    apiKey: config.apiKey,
    webhookSecret: config.webhookSecret,
    clock: deps.clock,
    ...(deps.fetch === undefined ? {} : { fetch: deps.fetch }),
  });
  const verifications = new PaymentVerifications({ db: deps.db, clock: deps.clock, provider });
  const routeDeps = { verifications, limiter: deps.limiter, limits: deps.limits ?? DEFAULT_PAYMENT_LIMITS };
  return {
    verifications,
    accountAction: { label: "Verify with a payment", path: START_PATH },
    async pages(app) {
      await app.register(paymentPages, { ...routeDeps, sessions: deps.sessions, publicUrl: deps.publicUrl });
    },
    async webhook(app) {
      await app.register(paymentWebhookRoutes, routeDeps);
    },
  };
}

/**
 * A pages plugin followed, in its own scope, by `extra` (so `extra` shares the CSRF protection,
 * form parsing and error pages the base plugin sets up there).
 */
export function withExtraPages<T>(
  base: (app: FastifyInstance, options: T) => Promise<void>,
  extra: ((app: FastifyInstance) => Promise<void>) | undefined,
): (app: FastifyInstance, options: T) => Promise<void> {
  if (extra === undefined) return base;
  return async (app, options) => {
    await base(app, options);
    await extra(app);
  };
}
