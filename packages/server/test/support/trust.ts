import assert from "node:assert/strict";
import { generateKeyPairSync, type KeyObject, sign } from "node:crypto";
import { createServer } from "node:net";
import { encodeDidKey, rawPublicKey, signRequest } from "@proto/protocol";
import { buildTrustApp, type TrustApp } from "../../src/trust/app.js";
import { readTrustConfig } from "../../src/trust/config.js";
import { dropRedisPrefix, type HttpResult, httpRequest, listenLocal, quietLog, type RequestOptions } from "./http.js";
import { createTestDatabase, REDIS_URL, type StoreVariant, type TestDatabase, uniquePrefix } from "./stores.js";

/** The key-encryption key every harness is configured with (tests read sealed rows with it). */
export const TEST_KEY_ENCRYPTION_KEY = Buffer.alloc(32, 7);
export const TEST_PSEUDONYM_KEY = Buffer.alloc(32, 9);

/**
 * `TRUST_RATE_LIMITS` high enough that suites not about limits never meet one (every request of
 * a suite comes from 127.0.0.1); the limiter stays on.
 */
export const RELAXED_RATE_LIMITS =
  "link_start=100000/60,link_start_agent=100000/3600,link_poll=100000/60,token=100000/60";

/** Asserts the attestor's error envelope: status, code, a message, JSON, nothing else at the top. */
export function assertError(result: HttpResult, status: number, code: string): void {
  assert.equal(result.status, status, result.text);
  assert.match(result.headers.get("content-type") ?? "", /^application\/json/);
  assert.deepEqual(Object.keys(result.json), ["error"], result.text);
  assert.equal(result.json.error.code, code, result.text);
  assert.equal(typeof result.json.error.message, "string");
  assert.ok(result.json.error.message.length > 0);
}

/** `Retry-After` is present and a whole number of seconds within [min, max]. */
export function assertRetryAfter(result: HttpResult, min: number, max: number): number {
  const value = result.headers.get("retry-after");
  assert.match(value ?? "", /^\d+$/, `Retry-After ${value}`);
  const seconds = Number(value);
  assert.ok(seconds >= min && seconds <= max, `Retry-After ${seconds} not within [${min}, ${max}]`);
  return seconds;
}

/** A port nobody listens on right now (for a server whose public URL must be known before it starts). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === "string") throw new Error("no address");
  return address.port;
}

export interface Agent {
  did: string;
  privateKey: KeyObject;
  publicKeyB64: string;
}

export function newAgent(): Agent {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const raw = rawPublicKey(publicKey);
  return { did: encodeDidKey(raw), privateKey, publicKeyB64: Buffer.from(raw).toString("base64url") };
}

/**
 * The environment every in-process test attestor starts from: test hooks, its public URL and
 * database, the test keys, warnings-only logs, and Redis when the variant has it.
 */
export function trustTestEnv(variant: StoreVariant, databaseUrl: string, publicUrl: string): Record<string, string> {
  return {
    PROTO_TEST_HOOKS: "1",
    TRUST_PUBLIC_URL: publicUrl,
    TRUST_DATABASE_URL: databaseUrl,
    TRUST_KEY_ENCRYPTION_KEY: TEST_KEY_ENCRYPTION_KEY.toString("base64url"),
    TRUST_PSEUDONYM_KEY: TEST_PSEUDONYM_KEY.toString("base64url"),
    LOG_LEVEL: "warn",
    ...(variant.redis && REDIS_URL ? { REDIS_URL } : {}),
  };
}

export interface TrustHarness {
  url: string;
  /** `{trust_url}` as configured: what agents sign for. */
  publicUrl: string;
  variant: StoreVariant;
  /** The attestor's database URL (`sqlite:PATH` or `postgres://...`), for tests that read it directly. */
  databaseUrl: string;
  app: TrustApp;
  request(method: string, path: string, options?: RequestOptions): Promise<HttpResult>;
  advance(seconds: number): Promise<void>;
  /** The attestor's clock, in milliseconds since the epoch. */
  nowMs(): Promise<number>;
  /** Moves the clock to one second past the start of the next fixed window of `seconds` (rate limits). */
  alignTo(seconds: number): Promise<void>;
  /** A link started, confirmed through the test hook as `email`, and polled: the agent can mint. */
  link(agent?: Agent, email?: string): Promise<{ agent: Agent; bindingId: string; reqId: string }>;
  startLink(agent: Agent, extra?: Record<string, unknown>): Promise<HttpResult>;
  poll(agent: Agent, reqId: string): Promise<HttpResult>;
  /** A signed `POST /v1/token`; `tweak` may alter what is sent after signing. */
  mint(agent: Agent, aud: string, options?: MintOptions): Promise<HttpResult>;
  /**
   * A request the agent signs (RFC 9421, as a mint is) for `{trust_url}{path}`: the agent-facing
   * routes of bounded authority (`GET /v1/grants`, `POST /v1/approvals`...).
   */
  signed(agent: Agent, method: string, path: string, body?: unknown): Promise<HttpResult>;
  hook(path: string, body: Record<string, unknown>): Promise<HttpResult>;
  close(): Promise<void>;
}

export interface MintOptions {
  /** The body that is signed (and sent, unless `sentBody` says otherwise). */
  body?: string;
  /** Sent instead of the signed body: a body altered after signing. */
  sentBody?: string;
  url?: string;
  /** The path the request is sent to (default `/v1/token`); the signature is for `url` still. */
  path?: string;
  created?: number;
  expires?: number;
  nonce?: string;
  headers?: Record<string, string>;
  unsigned?: boolean;
}

export async function startTrustHarness(
  variant: StoreVariant,
  options: {
    env?: Record<string, string>;
    /** A database the caller owns (kept on close), e.g. to restart the attestor on the same data. */
    database?: TestDatabase;
    /** Redis keys shared with another harness (replicas of one deployment); dropped by every close. */
    redisPrefix?: string;
    /** The port to listen on (default: any free one); set it with `TRUST_PUBLIC_URL` = the real URL. */
    port?: number;
    /** Where the attestor logs (default: nowhere). */
    logStream?: NodeJS.WritableStream;
    /** A CA the attestor's outbound fetches trust (client metadata documents on a test host). */
    fetchCa?: string;
  } = {},
): Promise<TrustHarness> {
  const ownsDatabase = options.database === undefined;
  const database: TestDatabase = options.database ?? (await createTestDatabase(variant.engine));
  const redisPrefix = options.redisPrefix ?? uniquePrefix("trust");
  const publicUrl = options.env?.TRUST_PUBLIC_URL ?? "https://trust.test";
  const env = { ...trustTestEnv(variant, database.url, publicUrl), ...options.env };
  const app = await buildTrustApp(readTrustConfig(env), {
    logStream: options.logStream ?? quietLog(),
    redisPrefix,
    ...(options.fetchCa === undefined ? {} : { fetchCa: options.fetchCa }),
  });
  const url = await listenLocal(app.app, options.port);

  const harness: TrustHarness = {
    url,
    publicUrl,
    variant,
    databaseUrl: database.url,
    app,
    request: (method, path, options) => httpRequest(url, method, path, options),
    async advance(seconds) {
      const result = await harness.request("POST", "/__test/clock", { body: { advance_seconds: seconds } });
      if (result.status !== 200) throw new Error(`clock hook answered ${result.status}`);
    },
    async nowMs() {
      const result = await harness.request("POST", "/__test/clock", { body: {} });
      if (result.status !== 200) throw new Error(`clock hook answered ${result.status}`);
      return Date.parse(result.json.now as string);
    },
    async alignTo(seconds) {
      const now = await harness.nowMs();
      const windowMs = seconds * 1000;
      await harness.advance((windowMs - (now % windowMs) + 1000) / 1000);
    },
    hook(path, body) {
      return harness.request("POST", path, { body });
    },
    startLink(agent, extra = {}) {
      return harness.request("POST", "/v1/link/start", {
        body: { agent_did: agent.did, agent_pubkey_b64: agent.publicKeyB64, ...extra },
      });
    },
    poll(agent, reqId) {
      const sig = sign(null, Buffer.from(reqId, "utf8"), agent.privateKey).toString("base64url");
      return harness.request("POST", "/v1/link/poll", { body: { req_id: reqId, sig_b64: sig } });
    },
    async link(agent = newAgent(), email = `person-${Math.random().toString(36).slice(2)}@example.com`) {
      const started = await harness.startLink(agent, { agent_label: "test agent" });
      if (started.status !== 200) throw new Error(`link start failed: ${started.text}`);
      const reqId = started.json.req_id as string;
      const confirmed = await harness.hook("/__test/link/confirm", { req_id: reqId, email });
      if (confirmed.status !== 200) throw new Error(`confirm failed: ${confirmed.text}`);
      const polled = await harness.poll(agent, reqId);
      if (polled.status !== 200 || polled.json.state !== "confirmed") throw new Error(`poll failed: ${polled.text}`);
      return { agent, bindingId: polled.json.binding_id, reqId };
    },
    async mint(agent, aud, options = {}) {
      const body = options.body ?? JSON.stringify({ aud });
      const clockNow = (await harness.request("POST", "/__test/clock", { body: {} })).json.now_unix as number;
      const signed = signRequest(
        { method: "POST", url: options.url ?? `${publicUrl}/v1/token`, body },
        {
          keyid: agent.did,
          privateKey: agent.privateKey,
          created: options.created ?? clockNow,
          ...(options.expires === undefined ? {} : { expires: options.expires }),
          ...(options.nonce === undefined ? {} : { nonce: options.nonce }),
        },
      );
      const headers: Record<string, string> = {
        "content-type": "application/json",
        ...(options.unsigned ? {} : signed.headers),
        ...options.headers,
      };
      return harness.request("POST", options.path ?? "/v1/token", { rawBody: options.sentBody ?? body, headers });
    },
    async signed(agent, method, path, body) {
      const text = body === undefined ? undefined : JSON.stringify(body);
      const clockNow = (await harness.request("POST", "/__test/clock", { body: {} })).json.now_unix as number;
      const signedRequest = signRequest(
        { method, url: `${publicUrl}${path}`, ...(text === undefined ? {} : { body: text }) },
        { keyid: agent.did, privateKey: agent.privateKey, created: clockNow },
      );
      const headers: Record<string, string> = {
        ...(text === undefined ? {} : { "content-type": "application/json" }),
        ...signedRequest.headers,
      };
      return harness.request(method, path, { ...(text === undefined ? {} : { rawBody: text }), headers });
    },
    async close() {
      await app.close();
      if (ownsDatabase) await database.drop();
      if (variant.redis) await dropRedisPrefix(redisPrefix);
    },
  };
  return harness;
}
