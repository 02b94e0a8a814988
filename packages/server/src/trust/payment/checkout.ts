import { createHmac, timingSafeEqual } from "node:crypto";
import type { Clock } from "../../platform/clock.js";
import {
  PaymentApiError,
  type PaymentEvent,
  type PaymentFetch,
  type PaymentProvider,
  type Started,
  type StartInput,
  type WebhookHeaders,
  WebhookRejected,
} from "./provider.js";

export const SIGNATURE_HEADER = "proto-payment-signature";
export const COMPLETED_EVENT = "checkout.session.completed";
/** A delivery signed longer ago (or further ahead) than this is refused as stale. */
export const SIGNATURE_TOLERANCE_SECONDS = 300;
const DEFAULT_TIMEOUT_MS = 10_000;
const DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024;
const MAX_ID_LENGTH = 255;

export interface CheckoutProviderOptions {
  /** Base URL of the paid API, without a trailing slash (`TRUST_PAYMENT_API_URL`). */
  apiUrl: string;
  apiKey: string;
  webhookSecret: string;
  /** The app clock: the signature tolerance is measured against it. */
  clock: Clock;
  fetch?: PaymentFetch;
  timeoutMs?: number;
  maxResponseBytes?: number;
}

/** `t=<unix>,v1=<hex>[,v1=<hex>...]`: the timestamp and every v1 signature (several during a secret rotation). */
export function parseSignatureHeader(value: string): { timestamp: number; signatures: string[] } | undefined {
  let timestamp: number | undefined;
  const signatures: string[] = [];
  for (const part of value.split(",")) {
    const at = part.indexOf("=");
    if (at < 0) continue;
    const key = part.slice(0, at).trim();
    const item = part.slice(at + 1).trim();
    if (key === "t") {
      if (!/^\d{1,12}$/.test(item) || timestamp !== undefined) return undefined;
      timestamp = Number(item);
    } else if (key === "v1" && /^[0-9a-fA-F]{64}$/.test(item)) {
      signatures.push(item.toLowerCase());
    }
  }
  return timestamp === undefined || signatures.length === 0 ? undefined : { timestamp, signatures };
}

/** HMAC-SHA256 over `<t>.<raw body>`, in hex. */
export function webhookSignature(secret: string, timestamp: number, rawBody: Buffer): string {
  return createHmac("sha256", secret).update(`${timestamp}.`, "utf8").update(rawBody).digest("hex");
}

function headerValue(headers: WebhookHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? (value.length === 1 ? value[0] : undefined) : value;
}

const isId = (value: unknown): value is string =>
  typeof value === "string" && value.length > 0 && value.length <= MAX_ID_LENGTH && /^[\x21-\x7e]+$/.test(value);

async function readCapped(body: AsyncIterable<Uint8Array> | null, maxBytes: number): Promise<Buffer> {
  if (body === null) return Buffer.alloc(0);
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of body) {
    total += chunk.byteLength;
    if (total > maxBytes) throw new PaymentApiError(`the payment API answer is larger than ${maxBytes} bytes`);
    chunks.push(Buffer.from(chunk));
  }
  return Buffer.concat(chunks, total);
}

/**
 * A provider for a Stripe-Checkout-style API: `POST /v1/checkout/sessions` in `setup` mode (the
 * person saves a payment method on the provider's page; nothing is charged) and a signed
 * `checkout.session.completed` webhook.
 */
export class CheckoutProvider implements PaymentProvider {
  readonly name = "checkout";
  readonly #options: CheckoutProviderOptions;
  readonly #fetch: PaymentFetch;

  constructor(options: CheckoutProviderOptions) {
    this.#options = options;
    this.#fetch = options.fetch ?? (fetch as unknown as PaymentFetch);
  }

  async startVerification(input: StartInput): Promise<Started> {
    const form = new URLSearchParams({
      mode: "setup",
      client_reference_id: input.reference,
      success_url: input.returnUrl,
      cancel_url: input.cancelUrl,
    });
    const maxBytes = this.#options.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
    const signal = AbortSignal.timeout(this.#options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    let status: number;
    let body: Buffer;
    try {
      const response = await this.#fetch(`${this.#options.apiUrl}/v1/checkout/sessions`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${this.#options.apiKey}`,
          "content-type": "application/x-www-form-urlencoded",
          accept: "application/json",
          // A retried start of the same attempt never opens a second session.
          "idempotency-key": input.reference,
        },
        body: form.toString(),
        signal,
        redirect: "manual",
      });
      status = response.status;
      const declared = Number(response.headers.get("content-length"));
      if (Number.isFinite(declared) && declared > maxBytes) {
        throw new PaymentApiError(`the payment API answer is larger than ${maxBytes} bytes`);
      }
      body = await readCapped(response.body, maxBytes);
    } catch (error) {
      if (error instanceof PaymentApiError) throw error;
      // Only the kind of failure: fetch errors can quote the URL, never the key, but stay terse.
      const reason = signal.aborted ? "did not answer in time" : "could not be reached";
      throw new PaymentApiError(`the payment API ${reason}`, { cause: error });
    }
    if (status < 200 || status >= 300) throw new PaymentApiError(`the payment API answered HTTP ${status}`);
    let parsed: unknown;
    try {
      parsed = JSON.parse(body.toString("utf8"));
    } catch {
      throw new PaymentApiError("the payment API answer is not JSON");
    }
    const { id, url } = (parsed ?? {}) as { id?: unknown; url?: unknown };
    if (!isId(id) || typeof url !== "string" || !this.#acceptableRedirect(url)) {
      throw new PaymentApiError("the payment API answer lacks a session id or a usable checkout URL");
    }
    return { redirectUrl: url, providerReference: id };
  }

  /** https only, unless the API itself is plain http (a local stand-in in development). */
  #acceptableRedirect(value: string): boolean {
    let url: URL;
    try {
      url = new URL(value);
    } catch {
      return false;
    }
    const allowed = this.#options.apiUrl.startsWith("http://") ? ["https:", "http:"] : ["https:"];
    return allowed.includes(url.protocol) && url.username === "" && url.password === "" && value.length <= 4096;
  }

  verifyWebhook(rawBody: Buffer, headers: WebhookHeaders): PaymentEvent | undefined {
    const header = headerValue(headers, SIGNATURE_HEADER);
    const parsed = header === undefined ? undefined : parseSignatureHeader(header);
    if (parsed === undefined) {
      throw new WebhookRejected(`the ${SIGNATURE_HEADER} header is missing or not t=<unix>,v1=<hex>`);
    }
    const expected = Buffer.from(webhookSignature(this.#options.webhookSecret, parsed.timestamp, rawBody), "hex");
    const matches = parsed.signatures.filter((s) => timingSafeEqual(Buffer.from(s, "hex"), expected));
    if (matches.length === 0) throw new WebhookRejected("the webhook signature does not verify");
    const now = Math.floor(this.#options.clock.now() / 1000);
    if (Math.abs(now - parsed.timestamp) > SIGNATURE_TOLERANCE_SECONDS) {
      throw new WebhookRejected(
        `the webhook signature timestamp is more than ${SIGNATURE_TOLERANCE_SECONDS} seconds from now`,
      );
    }
    let event: unknown;
    try {
      event = JSON.parse(rawBody.toString("utf8"));
    } catch {
      throw new WebhookRejected("the webhook body is not JSON");
    }
    const type = (event as { type?: unknown } | null)?.type;
    if (typeof type !== "string") throw new WebhookRejected("the webhook event has no type");
    if (type !== COMPLETED_EVENT) return undefined;
    const object = (event as { data?: { object?: { id?: unknown; client_reference_id?: unknown } } }).data?.object;
    if (!isId(object?.id) || !isId(object?.client_reference_id)) {
      throw new WebhookRejected(`the ${COMPLETED_EVENT} event lacks data.object.id or client_reference_id`);
    }
    return { reference: object.client_reference_id, providerReference: object.id };
  }
}
