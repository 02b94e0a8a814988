import type { EnvReader } from "../../platform/env.js";

/** Payment verification through the Checkout-style provider; absent when it is not configured. */
export interface PaymentConfig {
  /** `TRUST_PAYMENT_API_URL`, without a trailing slash. */
  apiUrl: string;
  /** `TRUST_PAYMENT_API_KEY`: a secret, never logged. */
  apiKey: string;
  /** `TRUST_PAYMENT_WEBHOOK_SECRET`: a secret, never logged. */
  webhookSecret: string;
}

const NAMES = ["TRUST_PAYMENT_API_URL", "TRUST_PAYMENT_API_KEY", "TRUST_PAYMENT_WEBHOOK_SECRET"] as const;
const MIN_SECRET_LENGTH = 16;

/**
 * All three variables or none. Problems name the variable and never quote a secret's value.
 */
export function readPaymentConfig(reader: EnvReader, production: boolean): PaymentConfig | undefined {
  const missing = NAMES.filter((name) => reader.string(name) === undefined);
  if (missing.length === NAMES.length) return undefined;
  if (missing.length > 0) {
    reader.problem(`payment verification needs ${NAMES.join(", ")} together; missing ${missing.join(", ")}`);
    return undefined;
  }
  const before = reader.problems.length;
  const apiUrl = reader.baseUrl("TRUST_PAYMENT_API_URL", "https://invalid.invalid");
  if (reader.problems.length === before && production && !apiUrl.startsWith("https://")) {
    reader.problem("TRUST_PAYMENT_API_URL must be https when NODE_ENV=production");
  }
  const apiKey = reader.string("TRUST_PAYMENT_API_KEY") ?? "";
  if (/[\s\p{Cc}]/u.test(apiKey) || apiKey.length > 1024) {
    reader.problem("TRUST_PAYMENT_API_KEY must be one token of at most 1024 characters, without spaces");
  }
  const webhookSecret = reader.string("TRUST_PAYMENT_WEBHOOK_SECRET") ?? "";
  if (webhookSecret.length < MIN_SECRET_LENGTH) {
    reader.problem(`TRUST_PAYMENT_WEBHOOK_SECRET must be at least ${MIN_SECRET_LENGTH} characters`);
  }
  return reader.problems.length === before ? { apiUrl, apiKey, webhookSecret } : undefined;
}
