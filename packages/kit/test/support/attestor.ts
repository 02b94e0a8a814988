import { randomUUID, sign } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { signRequest } from "@proto/protocol";
import { buildTrustApp, readTrustConfig } from "@proto/server";
import { SignJWT } from "jose";
import { type Agent, freePort, newAgent, type TestClock } from "./env.js";

type TrustApp = Awaited<ReturnType<typeof buildTrustApp>>;

const JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer";

interface OutboxEntry {
  to: string;
  subject: string;
  text: string;
}

export interface Answer {
  status: number;
  headers: Headers;
  text: string;
  // biome-ignore lint/suspicious/noExplicitAny: response bodies of many shapes, asserted field by field
  json: any;
}

/** A response as tests read it: status, headers, text, and the JSON body when there is one. */
export async function answer(response: Response): Promise<Answer> {
  const text = await response.text();
  let json: unknown;
  try {
    json = text.length > 0 ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: response.status, headers: response.headers, text, json };
}

const quiet = () =>
  new Writable({
    write(_chunk, _encoding, done) {
      done();
    },
  });

/**
 * OUR attestor (packages/server), in process, on the suite's clock: agents link through
 * `/__test/link/confirm` and mint with a signed `POST /v1/token`; it is also the OpenID provider.
 */
export class TestAttestor {
  private constructor(
    readonly url: string,
    readonly trust: TrustApp,
    private readonly clock: TestClock,
    private readonly dir: string,
  ) {}

  static async start(
    clock: TestClock,
    oidcClients: { client_id: string; service_did: string; redirect_uris: string[] }[],
    /** `localhost` for passkeys: WebAuthn's relying-party ID must be a domain, not an address. */
    hostname = "127.0.0.1",
    options: {
      /**
       * The CA of services on this machine whose discovery documents it reads (an OAuth scope is
       * a service's declared permission): it trusts the CA and fetches from loopback addresses.
       */
      servicesCa?: string;
    } = {},
  ) {
    const port = await freePort();
    const url = `http://${hostname}:${port}`;
    const dir = mkdtempSync(join(tmpdir(), "proto-kit-attestor-"));
    const env = {
      PROTO_TEST_HOOKS: "1",
      TRUST_PUBLIC_URL: url,
      TRUST_DATABASE_URL: `sqlite:${join(dir, "trust.db")}`,
      TRUST_KEY_ENCRYPTION_KEY: Buffer.alloc(32, 7).toString("base64url"),
      TRUST_PSEUDONYM_KEY: Buffer.alloc(32, 9).toString("base64url"),
      TRUST_RATE_LIMITS: "link_start=100000/60,link_start_agent=100000/3600,link_poll=100000/60,token=100000/60",
      TRUST_OIDC_CLIENTS: JSON.stringify(oidcClients),
      LOG_LEVEL: "warn",
      ...(options.servicesCa === undefined ? {} : { PROTO_FETCH_ALLOW_PRIVATE: "1" }),
    };
    const trust = await buildTrustApp(readTrustConfig(env), {
      clock,
      logStream: quiet(),
      ...(options.servicesCa === undefined ? {} : { fetchCa: options.servicesCa }),
    });
    await trust.app.listen({ port, host: "127.0.0.1" });
    return new TestAttestor(url, trust, clock, dir);
  }

  async request(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Answer> {
    const init: RequestInit = { method, headers: { ...headers } };
    if (body !== undefined) {
      init.body = typeof body === "string" ? body : JSON.stringify(body);
      (init.headers as Record<string, string>)["content-type"] ??= "application/json";
    }
    return answer(await fetch(`${this.url}${path}`, init));
  }

  /** Link start, confirmation as `email` through the test hook, poll: the agent can mint. */
  async link(agent: Agent = newAgent(), email: string): Promise<Agent> {
    const started = await this.request("POST", "/v1/link/start", {
      agent_did: agent.did,
      agent_pubkey_b64: agent.publicKeyB64,
      agent_label: "kit test agent",
    });
    if (started.status !== 200) throw new Error(`link start: ${started.text}`);
    const reqId = started.json.req_id as string;
    const confirmed = await this.request("POST", "/__test/link/confirm", { req_id: reqId, email });
    if (confirmed.status !== 200) throw new Error(`confirm: ${confirmed.text}`);
    const sig = sign(null, Buffer.from(reqId, "utf8"), agent.privateKey).toString("base64url");
    const polled = await this.request("POST", "/v1/link/poll", { req_id: reqId, sig_b64: sig });
    if (polled.status !== 200 || polled.json.state !== "confirmed") throw new Error(`poll: ${polled.text}`);
    return agent;
  }

  /** A signed `POST /v1/token` for `aud`: the attestation JWT. */
  async mint(agent: Agent, aud: string): Promise<string> {
    const body = JSON.stringify({ aud });
    const signed = signRequest(
      { method: "POST", url: `${this.url}/v1/token`, body },
      { keyid: agent.did, privateKey: agent.privateKey, created: this.clock.nowSeconds() },
    );
    const minted = await this.request("POST", "/v1/token", body, { ...signed.headers });
    if (minted.status !== 200) throw new Error(`mint: ${minted.text}`);
    return minted.json.jwt as string;
  }

  /**
   * An access token for `agent` by the JWT-bearer grant (RFC 7523), for `resource` with `scope`
   * (none when undefined): the token endpoint's answer, as it came.
   */
  async jwtBearer(agent: Agent, resource: string, scope?: string): Promise<Answer> {
    const now = this.clock.nowSeconds();
    const assertion = await new SignJWT({ jti: randomUUID() })
      .setProtectedHeader({ alg: "EdDSA" })
      .setIssuer(agent.did)
      .setSubject(agent.did)
      .setAudience(`${this.url}/oidc/token`)
      .setIssuedAt(now)
      .setExpirationTime(now + 120)
      .sign(agent.privateKey);
    const form: Record<string, string> = { grant_type: JWT_BEARER, assertion, resource };
    if (scope !== undefined) form.scope = scope;
    return this.request("POST", "/oidc/token", new URLSearchParams(form).toString(), {
      "content-type": "application/x-www-form-urlencoded",
    });
  }

  /** The newest sign-in link mailed to `email` (the development outbox). */
  magicLink(email: string): string {
    const entries = (this.trust.mailer as unknown as { entries: OutboxEntry[] }).entries;
    const mail = entries.find((m) => m.to === email);
    if (mail === undefined) throw new Error(`no mail to ${email}`);
    const link = /https?:\/\/\S+\/signin\/email\/verify\?token=\S+/.exec(mail.text)?.[0];
    if (link === undefined) throw new Error(`no link in ${mail.text}`);
    return link;
  }

  async close(): Promise<void> {
    await this.trust.close();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
