import type { Kysely } from "kysely";
import type { Clock } from "../../platform/clock.js";
import { randomToken } from "../../platform/tokens.js";
import type { TrustSchema } from "../migrations.js";
import { upsertVerification } from "../store.js";
import type { PaymentEvent, PaymentProvider } from "./provider.js";

export const PAYMENT_METHOD = "payment";

/** What a verified completion led to. Only `recorded` changes anything. */
export type CompletionOutcome =
  /** A `payment` verification was recorded for the person who started the attempt. */
  | "recorded"
  /** The attempt was already completed: a redelivery, acknowledged and ignored. */
  | "duplicate"
  /** No attempt with that reference from this provider (another environment, or a stale one). */
  | "unknown_reference"
  /** The attempt exists but the provider's id differs from the one it answered at start. */
  | "mismatch";

export interface PaymentVerificationsDeps {
  db: Kysely<TrustSchema>;
  clock: Clock;
  provider: PaymentProvider;
}

/**
 * The attestor's side of payment verification, whatever the provider: each attempt gets a random
 * reference (the provider never sees the internal human id), and a signed completion for it
 * records the verification exactly once.
 */
export class PaymentVerifications {
  readonly #deps: PaymentVerificationsDeps;

  constructor(deps: PaymentVerificationsDeps) {
    this.#deps = deps;
  }

  get provider(): PaymentProvider {
    return this.#deps.provider;
  }

  /** Opens an attempt for `humanId`; answers the provider page to send the person to. */
  async start(humanId: string, urls: { returnUrl: string; cancelUrl: string }): Promise<string> {
    const { db, clock, provider } = this.#deps;
    const reference = randomToken("pva_", 18);
    await db
      .insertInto("trust_payment_attempts")
      .values({
        reference,
        human_id: humanId,
        provider: provider.name,
        provider_reference: null,
        created_at: clock.now(),
        completed_at: null,
      })
      .execute();
    const started = await provider.startVerification({ reference, ...urls });
    // Stored before the person sees the provider's page, hence before any completion can arrive.
    await db
      .updateTable("trust_payment_attempts")
      .set({ provider_reference: started.providerReference })
      .where("reference", "=", reference)
      .execute();
    return started.redirectUrl;
  }

  /** A completion read from a verified webhook; idempotent under redelivery and concurrency. */
  async complete(event: PaymentEvent): Promise<CompletionOutcome> {
    const { db, clock, provider } = this.#deps;
    return db.transaction().execute(async (trx) => {
      const attempt = await trx
        .selectFrom("trust_payment_attempts")
        .selectAll()
        .where("reference", "=", event.reference)
        .where("provider", "=", provider.name)
        .executeTakeFirst();
      if (attempt === undefined) return "unknown_reference";
      if (attempt.provider_reference !== event.providerReference) return "mismatch";
      if (attempt.completed_at !== null) return "duplicate";
      const now = clock.now();
      // One atomic step decides which of two concurrent deliveries records the verification.
      const claimed = await trx
        .updateTable("trust_payment_attempts")
        .set({ completed_at: now })
        .where("reference", "=", attempt.reference)
        .where("completed_at", "is", null)
        .executeTakeFirst();
      if (Number(claimed.numUpdatedRows) !== 1) return "duplicate";
      // The subject is the provider's id of the attempt, never anything about the card.
      await upsertVerification(trx, attempt.human_id, PAYMENT_METHOD, paymentSubject(provider, event), now);
      return "recorded";
    });
  }
}

export function paymentSubject(provider: PaymentProvider, event: PaymentEvent): string {
  return `${provider.name}:${event.providerReference}`;
}
