/**
 * Payment verification is a pluggable provider (decisions.md, "Trust attestor" §6). A provider
 * knows one paid API: how to send a person to its hosted page and how to read its signed
 * webhooks. It never sees the attestor's internal human id, only an opaque reference the attestor
 * made up for that one attempt, and nothing of the card reaches the attestor.
 */

export interface StartInput {
  /** Opaque, random, one per attempt; the provider hands it back in the completion webhook. */
  reference: string;
  /** Where the provider sends the person after a completed checkout. */
  returnUrl: string;
  /** Where the provider sends the person who gives up. */
  cancelUrl: string;
}

export interface Started {
  /** The provider's hosted page the person is redirected to. */
  redirectUrl: string;
  /** The provider's id for this attempt (e.g. the checkout session id). */
  providerReference: string;
}

/** A completed verification, read from a webhook whose signature checked out. */
export interface PaymentEvent {
  /** The `reference` of `startVerification`. */
  reference: string;
  /** The provider's id for the attempt; must match what `startVerification` answered. */
  providerReference: string;
}

export type WebhookHeaders = Record<string, string | string[] | undefined>;

export interface PaymentProvider {
  /** Short and stable: it prefixes the verification subject (`<name>:<providerReference>`). */
  readonly name: string;
  /** Throws `PaymentApiError` when the paid API cannot be reached or answers nonsense. */
  startVerification(input: StartInput): Promise<Started>;
  /**
   * Checks a webhook delivery over its exact body bytes. Answers the completed verification, or
   * undefined for an event the attestor does not act on; throws `WebhookRejected` when the
   * signature is missing, wrong or stale, or the signed event is malformed.
   */
  verifyWebhook(rawBody: Buffer, headers: WebhookHeaders): PaymentEvent | undefined;
}

/** The paid API failed; the message is safe to log (no key, no response body). */
export class PaymentApiError extends Error {
  override readonly name = "PaymentApiError";
}

/** A webhook delivery that is not acted on; the message says why and carries no secret. */
export class WebhookRejected extends Error {
  override readonly name = "WebhookRejected";
}

/** The part of `fetch` the providers use, so tests can hand in one that trusts a test CA. */
export type PaymentFetch = (
  url: string,
  init: { method: string; headers: Record<string, string>; body: string; signal: AbortSignal; redirect: "manual" },
) => Promise<{
  status: number;
  headers: { get(name: string): string | null };
  body: AsyncIterable<Uint8Array> | null;
}>;
