import assert from "node:assert/strict";
import { createHmac, sign } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { after, before, describe, test } from "node:test";
import { signRequest } from "@proto/protocol";
import { createTestCA, type HttpsHost, startHttpsHost, type TestFetch, testFetch } from "@proto/testkit";
import { buildTrustApp, type TrustApp } from "../src/trust/app.js";
import { readTrustConfig } from "../src/trust/config.js";
import type { PaymentLimits } from "../src/trust/payment/routes.js";
import { Browserless, field, type PageAnswer } from "./support/browser-session.js";
import { dropRedisPrefix, type HttpResult, httpRequest, listenLocal, parseJsonBody, quietLog } from "./support/http.js";
import type { StoreVariant, TestDatabase } from "./support/stores.js";
import { createTestDatabase, reportSkippedVariants, STORE_VARIANTS, uniquePrefix } from "./support/stores.js";
import {
  type Agent,
  assertError,
  assertRetryAfter,
  newAgent,
  RELAXED_RATE_LIMITS,
  TEST_KEY_ENCRYPTION_KEY,
  TEST_PSEUDONYM_KEY,
  trustTestEnv,
} from "./support/trust.js";

reportSkippedVariants();

const PUBLIC_URL = "https://trust.test";
const API_KEY = "sk_test_standin_0123456789";
const WEBHOOK_SECRET = "whsec_standin_0123456789abcdef";
/** Lowered so the limits can be met in a few requests; high enough for every other test's traffic. */
const LIMITS: PaymentLimits = {
  webhookPerIp: { name: "trust.payment_webhook", limit: 100, windowSeconds: 60 },
  startPerHuman: { name: "trust.payment_start", limit: 3, windowSeconds: 3600 },
};
const email = (label: string) => `${label}-${Math.random().toString(36).slice(2)}@mail.test`;

// ---------------------------------------------------------------------------------------------
// The local stand-in of the paid API: a real HTTPS server under a test CA.

interface CheckoutSession {
  id: string;
  url: string;
  form: URLSearchParams;
  authorization: string | undefined;
  idempotencyKey: string | undefined;
}

interface Delivery {
  status: number;
  json: { error?: { code: string; message: string }; received?: boolean } | undefined;
  text: string;
  /** The exact bytes and header sent, to deliver again. */
  body: string;
  signature: string;
}

interface StandIn {
  host: HttpsHost;
  fetch: TestFetch;
  sessions: CheckoutSession[];
  /** Makes the next session request fail with this HTTP status. */
  failNext(status: number): void;
  /** The person finished the checkout: the provider signs and delivers `checkout.session.completed`. */
  complete(session: CheckoutSession, options?: SignOptions): Promise<Delivery>;
  deliver(event: unknown, options?: SignOptions): Promise<Delivery>;
  deliverRaw(body: string, signature: string | undefined): Promise<Delivery>;
  close(): Promise<void>;
}

interface SignOptions {
  /** Seconds added to the attestor's clock for `t` (negative: in the past). */
  skew?: number;
  secret?: string;
  /** Pretty-printed on purpose by default: the attestor must verify the bytes as sent. */
  body?: string;
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}

async function startStandIn(attestor: () => { url: string; nowUnix(): Promise<number> }): Promise<StandIn> {
  const ca = await createTestCA();
  const host = await startHttpsHost({ ca, hostnames: ["pay.test"] });
  const sessions: CheckoutSession[] = [];
  let failStatus: number | undefined;
  let counter = 0;

  host.route("/v1/checkout/sessions", async (req, res) => {
    const text = await readBody(req);
    if (req.method !== "POST") return json(res, 405, { error: { message: "POST only" } });
    if (req.headers.authorization !== `Bearer ${API_KEY}`) {
      return json(res, 401, { error: { type: "invalid_request_error", message: "Invalid API key" } });
    }
    if (failStatus !== undefined) {
      const status = failStatus;
      failStatus = undefined;
      return json(res, status, { error: { message: "stand-in failure" } });
    }
    if (!String(req.headers["content-type"]).startsWith("application/x-www-form-urlencoded")) {
      return json(res, 400, { error: { message: "form-encoded bodies only" } });
    }
    const form = new URLSearchParams(text);
    for (const field of ["mode", "client_reference_id", "success_url", "cancel_url"]) {
      if (!form.get(field)) return json(res, 400, { error: { message: `missing ${field}` } });
    }
    counter += 1;
    const id = `cs_test_${counter}_${Math.random().toString(36).slice(2, 10)}`;
    const session: CheckoutSession = {
      id,
      url: `${host.origin()}/pay/${id}`,
      form,
      authorization: req.headers.authorization,
      idempotencyKey: req.headers["idempotency-key"] as string | undefined,
    };
    sessions.push(session);
    return json(res, 200, { id, object: "checkout.session", url: session.url });
  });

  async function deliverRaw(body: string, signature: string | undefined): Promise<Delivery> {
    const headers: Record<string, string> = { "content-type": "application/json; charset=utf-8" };
    if (signature !== undefined) headers["proto-payment-signature"] = signature;
    const response = await fetch(`${attestor().url}/webhooks/payment`, { method: "POST", headers, body });
    const text = await response.text();
    const parsed = parseJsonBody(text) as Delivery["json"];
    return { status: response.status, json: parsed, text, body, signature: signature ?? "" };
  }

  async function deliver(event: unknown, options: SignOptions = {}): Promise<Delivery> {
    const body = options.body ?? JSON.stringify(event, null, 2);
    const t = (await attestor().nowUnix()) + (options.skew ?? 0);
    const v1 = createHmac("sha256", options.secret ?? WEBHOOK_SECRET)
      .update(`${t}.${body}`)
      .digest("hex");
    return deliverRaw(body, `t=${t},v1=${v1}`);
  }

  const standIn: StandIn = {
    host,
    fetch: testFetch(ca, { resolve: host.resolveEntries() }),
    sessions,
    failNext(status) {
      failStatus = status;
    },
    complete(session, options) {
      return deliver(
        {
          id: `evt_${Math.random().toString(36).slice(2)}`,
          object: "event",
          type: "checkout.session.completed",
          data: {
            object: {
              id: session.id,
              object: "checkout.session",
              mode: "setup",
              status: "complete",
              client_reference_id: session.form.get("client_reference_id"),
              customer: `cus_${session.id.slice(-8)}`,
            },
          },
        },
        options,
      );
    },
    deliver,
    deliverRaw,
    async close() {
      await standIn.fetch.close();
      await host.close();
    },
  };
  return standIn;
}

// ---------------------------------------------------------------------------------------------
// The attestor, configured for the stand-in, and a browser with cookies.

interface Attestor {
  url: string;
  app: TrustApp;
  nowUnix(): Promise<number>;
  request(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<HttpResult>;
  close(): Promise<void>;
}

function paymentEnv(database: TestDatabase, variant: StoreVariant, apiUrl: string): Record<string, string> {
  return {
    ...trustTestEnv(variant, database.url, PUBLIC_URL),
    TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS,
    TRUST_PAYMENT_API_URL: apiUrl,
    TRUST_PAYMENT_API_KEY: API_KEY,
    TRUST_PAYMENT_WEBHOOK_SECRET: WEBHOOK_SECRET,
  };
}

async function startAttestor(variant: StoreVariant, standIn: StandIn): Promise<Attestor> {
  const database = await createTestDatabase(variant.engine);
  const config = readTrustConfig(paymentEnv(database, variant, standIn.host.origin()));
  const redisPrefix = uniquePrefix("trust-payment");
  const app = await buildTrustApp(config, {
    logStream: quietLog(),
    redisPrefix,
    paymentFetch: standIn.fetch,
    paymentLimits: LIMITS,
  });
  const url = await listenLocal(app.app);
  const attestor: Attestor = {
    url,
    app,
    request(method, path, body, headers = {}) {
      return httpRequest(url, method, path, typeof body === "string" ? { rawBody: body, headers } : { body, headers });
    },
    async nowUnix() {
      const clock = await attestor.request("POST", "/__test/clock", {});
      return clock.json.now_unix as number;
    },
    async close() {
      await app.close();
      await database.drop();
      if (variant.redis) await dropRedisPrefix(redisPrefix);
    },
  };
  return attestor;
}

/** The real e-mail flow: ask for a link, read it from the development outbox, open it, confirm. */
async function signIn(attestor: Attestor, address: string): Promise<Browserless> {
  const browser = new Browserless(attestor.url);
  const form = await browser.get("/signin?next=%2Faccount");
  assert.equal(form.status, 200);
  const asked = await browser.post("/signin/email", {
    _csrf: field(form.text, "_csrf"),
    email: address,
    next: "/account",
  });
  assert.equal(asked.status, 200, asked.text);
  const outbox = await browser.get("/dev/outbox");
  const mail = outbox.text
    .split('<section class="card">')
    .find((section) => section.includes(`<strong>To:</strong> ${address}<br>`));
  const link = mail && /https:\/\/trust\.test(\/signin\/email\/verify\?token=[A-Za-z0-9_-]+)/.exec(mail)?.[1];
  assert.ok(link, "no sign-in mail in the outbox");
  const confirm = await browser.get(link);
  assert.equal(confirm.status, 200, confirm.text);
  const token = new URL(link, PUBLIC_URL).searchParams.get("token") ?? "";
  const signedIn = await browser.post("/signin/email/verify", { _csrf: field(confirm.text, "_csrf"), token });
  assert.equal(signedIn.status, 303, signedIn.text);
  assert.equal(signedIn.location, "/account");
  return browser;
}

/** The account page button: answers the redirect and the session the stand-in opened for it. */
async function startPayment(
  browser: Browserless,
  standIn: StandIn,
): Promise<{ page: PageAnswer; session: CheckoutSession }> {
  const account = await browser.get("/account");
  assert.equal(account.status, 200);
  const count = standIn.sessions.length;
  const page = await browser.post("/account/payment/start", { _csrf: field(account.text, "_csrf") });
  assert.equal(page.status, 303, page.text);
  assert.equal(standIn.sessions.length, count + 1);
  const session = standIn.sessions.at(-1) as CheckoutSession;
  assert.equal(page.location, session.url);
  return { page, session };
}

function methodsOn(account: PageAnswer): string[] {
  const list = /<h2>Verification<\/h2>([\s\S]*?)<h2>/.exec(account.text)?.[1] ?? "";
  return [...list.matchAll(/<li><strong>([^<]+)<\/strong>/g)].map((m) => m[1] as string);
}

async function linkAgent(attestor: Attestor, browser: Browserless, agent: Agent): Promise<string> {
  const started = await attestor.request("POST", "/v1/link/start", {
    agent_did: agent.did,
    agent_pubkey_b64: agent.publicKeyB64,
    agent_label: "payment test agent",
  });
  assert.equal(started.status, 200, started.text);
  const reqId = started.json.req_id as string;
  const linkPage = await browser.get(`/link?req=${encodeURIComponent(reqId)}`);
  assert.equal(linkPage.status, 200, linkPage.text);
  const confirmed = await browser.post("/link/confirm", { _csrf: field(linkPage.text, "_csrf"), req: reqId });
  assert.equal(confirmed.status, 200, confirmed.text);
  const sig = sign(null, Buffer.from(reqId, "utf8"), agent.privateKey).toString("base64url");
  const polled = await attestor.request("POST", "/v1/link/poll", { req_id: reqId, sig_b64: sig });
  assert.equal(polled.json.state, "confirmed", polled.text);
  return polled.json.binding_id as string;
}

async function mint(attestor: Attestor, agent: Agent, aud: string): Promise<HttpResult> {
  const body = JSON.stringify({ aud });
  const signed = signRequest(
    { method: "POST", url: `${PUBLIC_URL}/v1/token`, body },
    { keyid: agent.did, privateKey: agent.privateKey, created: await attestor.nowUnix() },
  );
  return attestor.request("POST", "/v1/token", body, { "content-type": "application/json", ...signed.headers });
}

function claims(jwt: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(jwt.split(".")[1] ?? "", "base64url").toString("utf8"));
}

// ---------------------------------------------------------------------------------------------

for (const variant of STORE_VARIANTS) {
  describe(`payment verification (${variant.name})`, () => {
    let standIn: StandIn;
    let h: Attestor;
    before(async () => {
      standIn = await startStandIn(() => h);
      h = await startAttestor(variant, standIn);
    });
    after(async () => {
      await h.close();
      await standIn.close();
    });

    test("a signed-in person verifies with a payment and their agent mints with verification payment", async () => {
      const address = email("payer");
      const browser = await signIn(h, address);
      const agent = newAgent();
      await linkAgent(h, browser, agent);
      const aud = "did:web:service.example";
      const beforePayment = await mint(h, agent, aud);
      assert.equal(beforePayment.status, 200, beforePayment.text);
      assert.equal(beforePayment.json.verification, "email");

      const account = await browser.get("/account");
      assert.deepEqual(methodsOn(account), ["E-mail address"]);
      assert.match(account.text, /<form method="post" action="\/account\/payment\/start">/);
      assert.match(account.text, /Verify with a payment/);

      const { session } = await startPayment(browser, standIn);
      // The paid API got the key, a setup-mode session and an opaque reference, not the human id.
      assert.equal(session.authorization, `Bearer ${API_KEY}`);
      assert.equal(session.form.get("mode"), "setup");
      assert.equal(session.form.get("success_url"), `${PUBLIC_URL}/account/payment/return`);
      assert.equal(session.form.get("cancel_url"), `${PUBLIC_URL}/account`);
      const reference = session.form.get("client_reference_id") ?? "";
      assert.match(reference, /^pva_[A-Za-z0-9_-]{20,}$/);
      assert.doesNotMatch(reference, /hum_/);
      assert.equal(session.idempotencyKey, reference);
      assert.equal(standIn.host.requests.at(-1)?.servername, "pay.test");

      // Back from the provider, before its webhook: nothing recorded yet.
      const back = await browser.get("/account/payment/return");
      assert.equal(back.status, 200);
      assert.match(back.text, /will appear on your account once the payment provider confirms it/);
      assert.deepEqual(methodsOn(await browser.get("/account")), ["E-mail address"]);

      const delivery = await standIn.complete(session);
      assert.equal(delivery.status, 200, delivery.text);
      assert.deepEqual(delivery.json, { received: true });

      const paid = await browser.get("/account");
      assert.deepEqual(methodsOn(paid), ["E-mail address", "Payment"]);
      // Neither the provider's ids nor anything else about the payment is shown.
      assert.doesNotMatch(paid.text, new RegExp(session.id));

      // The strongest method on file wins, for an agent linked before and one linked after.
      const minted = await mint(h, agent, aud);
      assert.equal(minted.status, 200, minted.text);
      assert.equal(minted.json.verification, "payment");
      assert.equal(claims(minted.json.jwt).verification, "payment");
      assert.doesNotMatch(JSON.stringify(claims(minted.json.jwt)), /cs_test|cus_|pva_/);
      const second = newAgent();
      await linkAgent(h, browser, second);
      assert.equal((await mint(h, second, aud)).json.verification, "payment");
    });

    test("a bad or missing signature is 400 invalid_request and records nothing", async () => {
      const browser = await signIn(h, email("badsig"));
      const { session } = await startPayment(browser, standIn);

      const wrongSecret = await standIn.complete(session, { secret: "whsec_someone_else_entirely" });
      assert.equal(wrongSecret.status, 400, wrongSecret.text);
      assert.deepEqual(Object.keys(wrongSecret.json ?? {}), ["error"]);
      assert.equal(wrongSecret.json?.error?.code, "invalid_request");

      const raw = JSON.stringify({
        type: "checkout.session.completed",
        data: { object: { id: session.id, client_reference_id: session.form.get("client_reference_id") } },
      });
      const t = await h.nowUnix();
      const hmac = (input: string) => createHmac("sha256", WEBHOOK_SECRET).update(input).digest("hex");
      const good = hmac(`${t}.${raw}`);
      const cases: [string, string | undefined][] = [
        ["no header", undefined],
        ["empty", ""],
        ["no v1", `t=${t}`],
        ["no t", `v1=${good}`],
        ["not hex", `t=${t},v1=${"z".repeat(64)}`],
        ["short", `t=${t},v1=${good.slice(0, 32)}`],
        ["other timestamp", `t=${t + 1},v1=${good}`],
        ["flipped bit", `t=${t},v1=${good.slice(0, -1)}${good.endsWith("0") ? "1" : "0"}`],
        ["another body", `t=${t},v1=${hmac(`${t}.${raw} `)}`],
        ["no separator", `t=${t},v1=${hmac(`${t}${raw}`)}`],
      ];
      for (const [label, header] of cases) {
        const result = await standIn.deliverRaw(raw, header);
        assert.equal(result.status, 400, `${label}: ${result.text}`);
        assert.equal(result.json?.error?.code, "invalid_request", label);
      }
      // The body altered after signing.
      const altered = await standIn.deliverRaw(raw.replace("completed", "completed "), `t=${t},v1=${good}`);
      assert.equal(altered.status, 400);
      assert.deepEqual(methodsOn(await browser.get("/account")), ["E-mail address"]);

      // One matching v1 among several (a secret rotation) is enough.
      const rotated = await standIn.deliverRaw(raw, `t=${t},v1=${"0".repeat(64)},v1=${good}`);
      assert.equal(rotated.status, 200, rotated.text);
      assert.deepEqual(methodsOn(await browser.get("/account")), ["E-mail address", "Payment"]);
    });

    test("a delivery signed more than 5 minutes away from the attestor's clock is refused", async () => {
      const browser = await signIn(h, email("stale"));
      const { session } = await startPayment(browser, standIn);
      for (const skew of [-301, -3600, 301]) {
        const result = await standIn.complete(session, { skew });
        assert.equal(result.status, 400, `skew ${skew}: ${result.text}`);
        assert.equal(result.json?.error?.code, "invalid_request");
        assert.match(result.json?.error?.message ?? "", /300 seconds/);
      }
      assert.deepEqual(methodsOn(await browser.get("/account")), ["E-mail address"]);
      // Within the tolerance it counts.
      const late = await standIn.complete(session, { skew: -290 });
      assert.equal(late.status, 200, late.text);
      assert.deepEqual(methodsOn(await browser.get("/account")), ["E-mail address", "Payment"]);
    });

    test("a replayed valid delivery is acknowledged and changes nothing", async () => {
      const address = email("replay");
      const browser = await signIn(h, address);
      const agent = newAgent();
      await linkAgent(h, browser, agent);
      const { session } = await startPayment(browser, standIn);
      const first = await standIn.complete(session);
      assert.equal(first.status, 200, first.text);
      const again = await standIn.deliverRaw(first.body, first.signature);
      assert.equal(again.status, 200, again.text);
      assert.deepEqual(again.json, { received: true });
      const redelivered = await standIn.complete(session);
      assert.equal(redelivered.status, 200);
      assert.deepEqual(methodsOn(await browser.get("/account")), ["E-mail address", "Payment"]);

      // Two deliveries at once: both acknowledged, one verification.
      const other = await signIn(h, email("concurrent"));
      const { session: otherSession } = await startPayment(other, standIn);
      const both = await Promise.all([standIn.complete(otherSession), standIn.complete(otherSession)]);
      assert.deepEqual(
        both.map((d) => d.status),
        [200, 200],
      );
      assert.deepEqual(methodsOn(await other.get("/account")), ["E-mail address", "Payment"]);

      // After the person's verifications are withdrawn, a redelivery does not bring payment back.
      const cleared = await h.request("POST", "/__test/humans/clear-verifications", { email: address });
      assert.equal(cleared.status, 200, cleared.text);
      assertError(await mint(h, agent, "did:web:service.example"), 403, "verification_required");
      assert.equal((await standIn.deliverRaw(first.body, first.signature)).status, 200);
      assertError(await mint(h, agent, "did:web:service.example"), 403, "verification_required");
    });

    test("other event types, unknown references and foreign sessions are acknowledged and ignored", async () => {
      const browser = await signIn(h, email("ignored"));
      const { session } = await startPayment(browser, standIn);
      const reference = session.form.get("client_reference_id");
      const ignored = [
        { type: "checkout.session.expired", data: { object: { id: session.id, client_reference_id: reference } } },
        { type: "customer.created", data: { object: { id: "cus_1" } } },
        {
          type: "checkout.session.completed",
          data: { object: { id: session.id, client_reference_id: "pva_unknownreference000000" } },
        },
        // A session the attestor never opened for this reference.
        { type: "checkout.session.completed", data: { object: { id: "cs_other", client_reference_id: reference } } },
      ];
      for (const event of ignored) {
        const result = await standIn.deliver(event);
        assert.equal(result.status, 200, result.text);
        assert.deepEqual(result.json, { received: true });
      }
      assert.deepEqual(methodsOn(await browser.get("/account")), ["E-mail address"]);
      // A signed completion without the ids it needs is a malformed request.
      const malformed = await standIn.deliver({ type: "checkout.session.completed", data: { object: {} } });
      assert.equal(malformed.status, 400);
      assert.equal(malformed.json?.error?.code, "invalid_request");
      const notJson = await standIn.deliver(undefined, { body: "not json" });
      assert.equal(notJson.status, 400);
      const tooLarge = await standIn.deliver(undefined, {
        body: JSON.stringify({ type: "x", pad: "a".repeat(70_000) }),
      });
      assert.equal(tooLarge.status, 413);
      assert.equal(tooLarge.json?.error?.code, "payload_too_large");
    });

    test("without a session, starting redirects to sign-in and calls nobody", async () => {
      const browser = new Browserless(h.url);
      const signin = await browser.get("/signin");
      const count = standIn.sessions.length;
      const page = await browser.post("/account/payment/start", { _csrf: field(signin.text, "_csrf") });
      assert.equal(page.status, 303);
      assert.equal(page.location, "/signin?next=%2Faccount");
      assert.equal(standIn.sessions.length, count);
    });

    test("without the CSRF field, starting is a 403 page and calls nobody", async () => {
      const browser = await signIn(h, email("csrf"));
      const count = standIn.sessions.length;
      for (const form of [{}, { _csrf: "forged-token" }] as Record<string, string>[]) {
        const page = await browser.post("/account/payment/start", form);
        assert.equal(page.status, 403, page.text);
        assert.match(page.text, /<h1>This form has expired<\/h1>/);
      }
      assert.equal(standIn.sessions.length, count);
    });

    test("a failing payment API is a 502 page, and the person can try again", async () => {
      const browser = await signIn(h, email("apidown"));
      standIn.failNext(500);
      const account = await browser.get("/account");
      const page = await browser.post("/account/payment/start", { _csrf: field(account.text, "_csrf") });
      assert.equal(page.status, 502, page.text);
      assert.match(page.text, /The payment provider is not available/);
      assert.doesNotMatch(page.text, new RegExp(API_KEY));
      const { session } = await startPayment(browser, standIn);
      assert.equal((await standIn.complete(session)).status, 200);
      assert.deepEqual(methodsOn(await browser.get("/account")), ["E-mail address", "Payment"]);
    });

    test("starting is limited per person; the webhook per address", async () => {
      const browser = await signIn(h, email("limits"));
      for (let i = 0; i < LIMITS.startPerHuman.limit; i++) await startPayment(browser, standIn);
      const count = standIn.sessions.length;
      const account = await browser.get("/account");
      const refused = await browser.post("/account/payment/start", { _csrf: field(account.text, "_csrf") });
      assert.equal(refused.status, 429, refused.text);
      assert.match(refused.text, /Too many attempts/);
      assert.equal(standIn.sessions.length, count);
      // Another person is not affected.
      await startPayment(await signIn(h, email("limits2")), standIn);

      // Start of a fresh window, so the count below cannot straddle two.
      const now = await h.nowUnix();
      await h.request("POST", "/__test/clock", { advance_seconds: 60 - (now % 60) + 1 });
      for (let sent = 0; sent < LIMITS.webhookPerIp.limit; sent += 25) {
        const results = await Promise.all(Array.from({ length: 25 }, () => standIn.deliverRaw("{}", undefined)));
        assert.deepEqual(new Set(results.map((r) => r.status)), new Set([400]));
      }
      const result = await h.request("POST", "/webhooks/payment", "{}");
      assertError(result, 429, "rate_limited");
      assertRetryAfter(result, 1, 60);
    });
  });
}

describe("payment configuration", () => {
  const base = {
    TRUST_PUBLIC_URL: PUBLIC_URL,
    TRUST_DATABASE_URL: "sqlite::memory:",
    TRUST_KEY_ENCRYPTION_KEY: TEST_KEY_ENCRYPTION_KEY.toString("base64url"),
    TRUST_PSEUDONYM_KEY: TEST_PSEUDONYM_KEY.toString("base64url"),
  };
  const full = {
    TRUST_PAYMENT_API_URL: "https://api.pay.example/",
    TRUST_PAYMENT_API_KEY: API_KEY,
    TRUST_PAYMENT_WEBHOOK_SECRET: WEBHOOK_SECRET,
  };
  const problems = (env: Record<string, string>): string => {
    try {
      readTrustConfig({ ...base, ...env });
    } catch (error) {
      return (error as Error).message;
    }
    return "";
  };

  test("none of the variables: no payment verification; all three: configured", () => {
    assert.equal(readTrustConfig(base).payment, undefined);
    assert.deepEqual(readTrustConfig({ ...base, ...full }).payment, {
      apiUrl: "https://api.pay.example",
      apiKey: API_KEY,
      webhookSecret: WEBHOOK_SECRET,
    });
  });

  test("some but not all is refused, naming what is missing and never quoting a secret", () => {
    const message = problems({ TRUST_PAYMENT_API_URL: full.TRUST_PAYMENT_API_URL, TRUST_PAYMENT_API_KEY: API_KEY });
    assert.match(message, /TRUST_PAYMENT_API_URL, TRUST_PAYMENT_API_KEY, TRUST_PAYMENT_WEBHOOK_SECRET together/);
    assert.match(message, /missing TRUST_PAYMENT_WEBHOOK_SECRET/);
    assert.doesNotMatch(message, new RegExp(API_KEY));
  });

  test("bad values are refused with clear messages", () => {
    const short = problems({ ...full, TRUST_PAYMENT_WEBHOOK_SECRET: "short-secret" });
    assert.match(short, /TRUST_PAYMENT_WEBHOOK_SECRET must be at least 16 characters/);
    assert.doesNotMatch(short, /short-secret/);
    const key = problems({ ...full, TRUST_PAYMENT_API_KEY: "sk with spaces" });
    assert.match(key, /TRUST_PAYMENT_API_KEY must be one token/);
    assert.doesNotMatch(key, /sk with spaces/);
    assert.match(
      problems({ ...full, TRUST_PAYMENT_API_URL: "ftp://x" }),
      /TRUST_PAYMENT_API_URL must be an http\(s\) URL/,
    );
    const production = problems({
      ...full,
      NODE_ENV: "production",
      SMTP_URL: "smtp://mail.example",
      TRUST_PAYMENT_API_URL: "http://api.pay.example",
    });
    assert.match(production, /TRUST_PAYMENT_API_URL must be https when NODE_ENV=production/);
  });
});
