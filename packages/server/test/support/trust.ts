import { generateKeyPairSync, type KeyObject, sign } from "node:crypto";
import { Writable } from "node:stream";
import { encodeDidKey, rawPublicKey, signRequest } from "@proto/protocol";
import { Redis } from "ioredis";
import { buildTrustApp, type TrustApp } from "../../src/trust/app.js";
import { readTrustConfig } from "../../src/trust/config.js";
import type { HttpResult, RequestOptions } from "./directory.js";
import { createTestDatabase, REDIS_URL, type StoreVariant, type TestDatabase, uniquePrefix } from "./stores.js";

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

export interface TrustHarness {
  url: string;
  /** `{trust_url}` as configured: what agents sign for. */
  publicUrl: string;
  variant: StoreVariant;
  app: TrustApp;
  request(method: string, path: string, options?: RequestOptions): Promise<HttpResult>;
  advance(seconds: number): Promise<void>;
  /** A link started, confirmed through the test hook as `email`, and polled: the agent can mint. */
  link(agent?: Agent, email?: string): Promise<{ agent: Agent; bindingId: string; reqId: string }>;
  startLink(agent: Agent, extra?: Record<string, unknown>): Promise<HttpResult>;
  poll(agent: Agent, reqId: string): Promise<HttpResult>;
  /** A signed `POST /v1/token`; `tweak` may alter what is sent after signing. */
  mint(agent: Agent, aud: string, options?: MintOptions): Promise<HttpResult>;
  hook(path: string, body: Record<string, unknown>): Promise<HttpResult>;
  close(): Promise<void>;
}

export interface MintOptions {
  body?: string;
  url?: string;
  created?: number;
  expires?: number;
  nonce?: string;
  headers?: Record<string, string>;
  unsigned?: boolean;
}

const quiet = () =>
  new Writable({
    write(_chunk, _encoding, done) {
      done();
    },
  });

export async function startTrustHarness(
  variant: StoreVariant,
  options: { env?: Record<string, string> } = {},
): Promise<TrustHarness> {
  const database: TestDatabase = await createTestDatabase(variant.engine);
  const redisPrefix = uniquePrefix("trust");
  const publicUrl = "https://trust.test";
  const env: Record<string, string> = {
    PROTO_TEST_HOOKS: "1",
    TRUST_PUBLIC_URL: publicUrl,
    TRUST_DATABASE_URL: database.url,
    TRUST_KEY_ENCRYPTION_KEY: Buffer.alloc(32, 7).toString("base64url"),
    TRUST_PSEUDONYM_KEY: Buffer.alloc(32, 9).toString("base64url"),
    LOG_LEVEL: "warn",
    ...(variant.redis && REDIS_URL ? { REDIS_URL } : {}),
    ...options.env,
  };
  const app = await buildTrustApp(readTrustConfig(env), { logStream: quiet(), redisPrefix });
  await app.app.listen({ port: 0, host: "127.0.0.1" });
  const address = app.app.server.address();
  if (address === null || typeof address === "string") throw new Error("no address");
  const url = `http://127.0.0.1:${address.port}`;

  const harness: TrustHarness = {
    url,
    publicUrl,
    variant,
    app,
    async request(method, path, options = {}) {
      const headers: Record<string, string> = { ...options.headers };
      let body: string | Buffer | undefined;
      if (options.rawBody !== undefined) body = options.rawBody;
      else if (options.body !== undefined) body = JSON.stringify(options.body);
      if (body !== undefined && headers["content-type"] === undefined) headers["content-type"] = "application/json";
      if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
      const response = await fetch(`${url}${path}`, { method, headers, ...(body === undefined ? {} : { body }) });
      const text = await response.text();
      let json: unknown;
      try {
        json = text.length > 0 ? JSON.parse(text) : undefined;
      } catch {
        json = undefined;
      }
      return { status: response.status, headers: response.headers, text, json } as HttpResult;
    },
    async advance(seconds) {
      const result = await harness.request("POST", "/__test/clock", { body: { advance_seconds: seconds } });
      if (result.status !== 200) throw new Error(`clock hook answered ${result.status}`);
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
      return harness.request("POST", "/v1/token", { rawBody: body, headers });
    },
    async close() {
      await app.close();
      await database.drop();
      if (variant.redis && REDIS_URL) {
        const redis = new Redis(REDIS_URL);
        const keys = await redis.keys(`${redisPrefix}*`);
        if (keys.length > 0) await redis.del(...keys);
        redis.disconnect();
      }
    },
  };
  return harness;
}
