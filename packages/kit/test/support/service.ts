import assert from "node:assert/strict";
import { findProtoChallenge, signRequest } from "@proto/protocol";
import Fastify, { type FastifyInstance } from "fastify";
import { agentRoute, createService } from "../../src/fastify.js";
import { createKit, type Kit, type KitOptions } from "../../src/index.js";
import type { Answer } from "./attestor.js";
import type { Agent, TestClock } from "./env.js";

export interface TestService {
  origin: string;
  kit: Kit;
  app: FastifyInstance;
  /** An unsigned request to the service. */
  request(
    method: string,
    path: string,
    options?: { body?: unknown; rawBody?: string; headers?: Record<string, string> },
  ): Promise<Answer>;
  /** A request signed by `agent` (RFC 9421 over the public URL), optionally with an attestation. */
  signed(agent: Agent, method: string, path: string, options?: SignedOptions): Promise<Answer>;
  close(): Promise<void>;
}

export interface SignedOptions {
  /** The JSON body (serialised) or a raw string. */
  body?: unknown;
  rawBody?: string;
  /** Sent instead of the signed body (tampering). */
  sentBody?: string;
  attestation?: string;
  created?: number;
  expires?: number;
  nonce?: string;
  headers?: Record<string, string>;
  /** Replays exactly these headers (a captured signature). */
  replay?: Record<string, string>;
}

/** A Fastify app built on the kit, as a service would: the kit's plugin plus a guarded route of its own. */
export async function startService(options: KitOptions, clock: TestClock): Promise<TestService> {
  const kit = await createKit(options);
  const app = Fastify({ logger: false });
  await app.register(createService(kit));
  // The service's own routes: one guarded by the kit, one plain JSON route untouched by it.
  app.post("/api/notes", agentRoute(kit), async (request) => ({
    did: request.proto?.did,
    state: request.proto?.account.state,
    note: request.body,
  }));
  app.get("/api/whoami", agentRoute(kit), async (request) => ({ did: request.proto?.did }));
  // A route that also speaks a bearer scheme: its challenge is set before the kit answers.
  app.get(
    "/api/bearer-too",
    {
      onRequest: async (_request, reply) => {
        reply.header("www-authenticate", 'Bearer realm="notes", resource_metadata="https://notes.example/rm"');
      },
      ...agentRoute(kit),
    },
    async (request) => ({ did: request.proto?.did }),
  );
  // Optional authentication (upstream §5.8): anonymous callers welcome, signed ones recognised.
  app.get("/api/maybe", agentRoute(kit, { optional: true }), async (request) => ({ did: request.proto?.did ?? null }));
  app.post("/api/plain", async (request) => ({ echo: request.body }));
  await app.ready();
  const origin = new URL(options.publicUrl).origin;

  async function inject(
    method: string,
    path: string,
    headers: Record<string, string>,
    payload?: string,
  ): Promise<Answer> {
    const response = await app.inject({
      method: method as "GET",
      url: path,
      headers,
      ...(payload === undefined ? {} : { payload }),
    });
    const text = response.body;
    let json: unknown;
    try {
      json = text.length > 0 ? JSON.parse(text) : undefined;
    } catch {
      json = undefined;
    }
    const responseHeaders = new Headers();
    for (const [name, value] of Object.entries(response.headers)) {
      if (value === undefined) continue;
      if (Array.isArray(value)) for (const v of value) responseHeaders.append(name, v);
      else responseHeaders.set(name, String(value));
    }
    return { status: response.statusCode, headers: responseHeaders, text, json };
  }

  return {
    origin,
    kit,
    app,
    request(method, path, opts = {}) {
      const headers: Record<string, string> = { ...opts.headers };
      let payload: string | undefined;
      if (opts.rawBody !== undefined) payload = opts.rawBody;
      else if (opts.body !== undefined) payload = JSON.stringify(opts.body);
      if (payload !== undefined) headers["content-type"] ??= "application/json";
      return inject(method, path, headers, payload);
    },
    signed(agent, method, path, opts = {}) {
      const body = opts.rawBody ?? (opts.body === undefined ? undefined : JSON.stringify(opts.body));
      let headers: Record<string, string>;
      if (opts.replay !== undefined) {
        headers = { ...opts.replay };
      } else {
        const signed = signRequest(
          { method, url: `${origin}${path}`, body },
          {
            keyid: agent.did,
            privateKey: agent.privateKey,
            created: opts.created ?? clock.nowSeconds(),
            ...(opts.expires === undefined ? {} : { expires: opts.expires }),
            ...(opts.nonce === undefined ? {} : { nonce: opts.nonce }),
          },
        );
        headers = { ...signed.headers };
        if (body !== undefined) headers["content-type"] = "application/json";
        if (opts.attestation !== undefined) headers["proto-attestation"] = opts.attestation;
      }
      Object.assign(headers, opts.headers);
      return inject(method, path, headers, opts.sentBody ?? body);
    },
    async close() {
      await app.close();
      await kit.close();
    },
  };
}

/** The signature headers of a request, to replay them as they were. */
export function signedHeaders(agent: Agent, method: string, url: string, clock: TestClock, body?: string) {
  const signed = signRequest(
    { method, url, body },
    { keyid: agent.did, privateKey: agent.privateKey, created: clock.nowSeconds() },
  );
  return { ...signed.headers, ...(body === undefined ? {} : { "content-type": "application/json" }) };
}

/** Records every reserved code a suite reached, with its status. */
export class CodeLedger {
  readonly seen = new Map<string, Set<number>>();

  expect(answer: Answer, status: number, code: string): void {
    assert.equal(answer.status, status, `${code}: ${answer.text}`);
    assert.match(answer.headers.get("content-type") ?? "", /^application\/json/);
    assert.deepEqual(Object.keys(answer.json), ["error"], answer.text);
    const keys = Object.keys(answer.json.error).sort();
    // `details` only where the kit names something structured (upstream §9.2, §11.1).
    if (code === "attestation_required") {
      assert.deepEqual(keys, ["code", "details", "message"], answer.text);
      assert.equal(answer.json.error.details.attestation.header, "Proto-Attestation");
      assert.ok(Array.isArray(answer.json.error.details.attestation.accepted_attestors));
    } else {
      assert.deepEqual(keys, ["code", "message"], answer.text);
    }
    assert.equal(answer.json.error.code, code, answer.text);
    assert.equal(typeof answer.json.error.message, "string");
    assert.ok(answer.json.error.message.length > 0);
    if (status === 401) {
      // Upstream §5.7: every 401 carries the Proto challenge; `error` only names this code.
      const challenge = findProtoChallenge(answer.headers.get("www-authenticate"));
      assert.ok(challenge, `${code}: a 401 without the Proto challenge`);
      assert.match(challenge.discovery, /^https:\/\/[^/]+\/\.well-known\/proto$/);
      if (challenge.error !== undefined) assert.equal(challenge.error, code);
      if (code === "attestation_required" || code === "invalid_attestation") assert.ok(challenge.attestors);
      if (code === "owner_authentication_required") assert.match(challenge.ownerLogin ?? "", /\/signin$/);
    }
    this.record(code, status);
  }

  record(code: string, status: number): void {
    let statuses = this.seen.get(code);
    if (statuses === undefined) {
      statuses = new Set();
      this.seen.set(code, statuses);
    }
    statuses.add(status);
  }
}
