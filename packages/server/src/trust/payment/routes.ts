import type {} from "@fastify/csrf-protection";
import type { FastifyInstance } from "fastify";
import { invalidRequest } from "../../platform/errors.js";
import { html } from "../../platform/html.js";
import { BODY_LIMIT_BYTES, rateLimitHook } from "../../platform/http.js";
import { type RateLimiter, type RateLimitRule, rateLimitKey } from "../../platform/rate-limit.js";
import { sendMessage, sendPage } from "../web/layout.js";
import type { SessionManager } from "../web/session.js";
import { PaymentApiError, WebhookRejected } from "./provider.js";
import type { PaymentVerifications } from "./service.js";

export const WEBHOOK_PATH = "/webhooks/payment";
export const START_PATH = "/account/payment/start";
export const RETURN_PATH = "/account/payment/return";

export interface PaymentLimits {
  /** Webhook deliveries per client IP (checked before anything is read or verified). */
  webhookPerIp: RateLimitRule;
  /** Started attempts per person: each one is a call to the paid API. */
  startPerHuman: RateLimitRule;
}

export const DEFAULT_PAYMENT_LIMITS: PaymentLimits = {
  webhookPerIp: { name: "trust.payment_webhook", limit: 600, windowSeconds: 60 },
  startPerHuman: { name: "trust.payment_start", limit: 10, windowSeconds: 3600 },
};

export interface PaymentRoutesDeps {
  verifications: PaymentVerifications;
  limiter: RateLimiter;
  limits: PaymentLimits;
}

/**
 * `POST /webhooks/payment`: the provider's signed notification. Not a form, so no CSRF token; it
 * is verified over its exact body bytes, so this scope keeps them raw. Errors are the JSON envelope.
 */
export async function paymentWebhookRoutes(app: FastifyInstance, deps: PaymentRoutesDeps): Promise<void> {
  const { verifications, limiter, limits } = deps;
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", { parseAs: "buffer", bodyLimit: BODY_LIMIT_BYTES }, (_request, body, done) =>
    done(null, body),
  );
  app.post(WEBHOOK_PATH, { onRequest: rateLimitHook(limiter, limits.webhookPerIp) }, async (request) => {
    const body = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
    let event: ReturnType<typeof verifications.provider.verifyWebhook>;
    try {
      event = verifications.provider.verifyWebhook(body, request.headers);
    } catch (error) {
      if (error instanceof WebhookRejected) throw invalidRequest(error.message);
      throw error;
    }
    // Other event types are acknowledged, so the provider does not retry them.
    if (event === undefined) return { received: true };
    const outcome = await verifications.complete(event);
    if (outcome === "unknown_reference" || outcome === "mismatch") {
      request.log.warn({ outcome }, "a signed payment completion matched no open attempt; ignored");
    }
    return { received: true };
  });
}

export interface PaymentPagesDeps extends PaymentRoutesDeps {
  sessions: SessionManager;
  publicUrl: string;
}

/**
 * The person's side: the account page button posts here (CSRF-protected, signed-in only) and is
 * sent on to the provider's page, which brings them back to the return page. Registered inside
 * the human pages' scope, whose form parsing, CSRF protection and error pages it uses.
 */
export async function paymentPages(app: FastifyInstance, deps: PaymentPagesDeps): Promise<void> {
  const { verifications, sessions, limiter, limits, publicUrl } = deps;

  app.post(START_PATH, { preHandler: app.csrfProtection }, async (request, reply) => {
    const session = await sessions.current(request);
    if (session === undefined) return reply.redirect("/signin?next=%2Faccount", 303);
    const limit = await limiter.hit(limits.startPerHuman, rateLimitKey("human", session.humanId));
    if (!limit.allowed) {
      reply.header("retry-after", String(limit.retryAfterSeconds));
      return sendMessage(
        reply,
        429,
        "Too many attempts",
        `You started several payment verifications recently. Please wait ${Math.ceil(limit.retryAfterSeconds / 60)} minutes and try again.`,
      );
    }
    let redirectUrl: string;
    try {
      redirectUrl = await verifications.start(session.humanId, {
        returnUrl: `${publicUrl}${RETURN_PATH}`,
        cancelUrl: `${publicUrl}/account`,
      });
    } catch (error) {
      if (!(error instanceof PaymentApiError)) throw error;
      request.log.error({ err: error }, "payment verification could not be started");
      return sendMessage(
        reply,
        502,
        "The payment provider is not available",
        "Nothing was charged. Please try again in a few minutes.",
        html`<p><a href="/account">Back to your account</a></p>`,
      );
    }
    return reply.header("cache-control", "no-store").redirect(redirectUrl, 303);
  });

  app.get(RETURN_PATH, async (request, reply) => {
    const session = await sessions.current(request);
    return sendPage(reply, {
      title: "Payment verification",
      signedIn: session === undefined ? undefined : { csrf: reply.generateCsrf() },
      body: html`<h1>Payment verification</h1>
<p>Thank you. Your payment verification will appear on your account once the payment provider confirms it,
usually within a minute.</p>
<p><a href="/account">Go to your account</a></p>`,
    });
  });
}
