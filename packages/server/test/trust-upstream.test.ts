import assert from "node:assert/strict";
import { generateKeyPairSync, sign } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { createServer, type Server } from "node:https";
import { after, before, describe, test } from "node:test";
import { signRequest } from "@proto/protocol";
import { createTestCA, hasRawControlCharacter, hostileRedirects, type TestFetch, testFetch } from "@proto/testkit";
import { hashToken } from "../src/platform/tokens.js";
import { buildTrustApp, type TrustApp } from "../src/trust/app.js";
import { readTrustConfig } from "../src/trust/config.js";
import type { OutboxMailer } from "../src/trust/mail.js";
import type { UpstreamFetch } from "../src/trust/web/upstream.js";
import { field } from "./support/browser-session.js";
import { dropRedisPrefix, type HttpResult, httpRequest, listenLocal, quietLog } from "./support/http.js";
import {
  createTestDatabase,
  reportSkippedVariants,
  STORE_VARIANTS,
  type StoreVariant,
  type TestDatabase,
  uniquePrefix,
} from "./support/stores.js";
import {
  type Agent,
  newAgent,
  RELAXED_RATE_LIMITS,
  TEST_KEY_ENCRYPTION_KEY,
  TEST_PSEUDONYM_KEY,
  trustTestEnv,
} from "./support/trust.js";

reportSkippedVariants();

const CLIENT_ID = "proto-trust-test";
const CLIENT_SECRET = "a-client-secret-for-the-test-provider-0123456789";
const IDP_NAME = "Test IdP";
const email = (label: string) => `${label}-${Math.random().toString(36).slice(2)}@mail.test`;
const login = (label: string) => `${label}-${Math.random().toString(36).slice(2)}`;

// ---------------------------------------------------------------------------------------------
// A real OpenID provider (oidc-provider, with its development login and consent pages) on HTTPS
// under a test CA, at https://idp.test:PORT pinned to 127.0.0.1.

interface OidcProviderInstance {
  callback(): (req: IncomingMessage, res: ServerResponse) => void;
}
type OidcProviderClass = new (issuer: string, configuration: Record<string, unknown>) => OidcProviderInstance;

interface Upstream {
  issuer: string;
  fetch: TestFetch;
  /** While true, every request answers 503 (the provider is down). */
  down: boolean;
  close(): Promise<void>;
}

async function startUpstream(redirectUris: string[]): Promise<Upstream> {
  const ca = await createTestCA();
  const cert = await ca.issue(["idp.test"]);
  // oidc-provider ships no type declarations: loaded by name, typed by the little used here.
  const moduleName = "oidc-provider";
  const { default: Provider } = (await import(moduleName)) as { default: OidcProviderClass };
  const signingKey = generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey.export({ format: "jwk" });
  let handler: ((req: IncomingMessage, res: ServerResponse) => void) | undefined;
  const state = { down: false };
  const server: Server = createServer({ key: cert.keyPem, cert: cert.certPem }, (req, res) => {
    if (state.down || handler === undefined) {
      res.writeHead(503, { "content-type": "text/plain" }).end("down for maintenance");
      return;
    }
    handler(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no address");
  const issuer = `https://idp.test:${address.port}`;
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: CLIENT_ID,
        client_secret: CLIENT_SECRET,
        redirect_uris: redirectUris,
        grant_types: ["authorization_code"],
        response_types: ["code"],
        token_endpoint_auth_method: "client_secret_basic",
      },
    ],
    pkce: { required: () => true },
    // The subject is the login typed on the development login page: the same login, the same sub.
    findAccount: async (_ctx: unknown, id: string) => ({ accountId: id, claims: async () => ({ sub: id }) }),
    jwks: { keys: [signingKey] },
    cookies: { keys: ["a-cookie-signing-key-for-the-test-provider"] },
    features: { devInteractions: { enabled: true } },
    ttl: { AuthorizationCode: 60, Interaction: 600, Session: 3600, Grant: 3600, AccessToken: 600, IdToken: 600 },
  });
  handler = provider.callback();
  const fetch = testFetch(ca, { resolve: { "idp.test": "127.0.0.1" } });
  return {
    issuer,
    fetch,
    get down() {
      return state.down;
    },
    set down(value: boolean) {
      state.down = value;
    },
    async close() {
      await fetch.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

// ---------------------------------------------------------------------------------------------
// The attestor, built with the test-only fetch that trusts the provider's test CA.

interface Attestor {
  publicUrl: string;
  url: string;
  app: TrustApp;
  json(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<HttpResult>;
  nowUnix(): Promise<number>;
  advance(seconds: number): Promise<void>;
  close(): Promise<void>;
}

async function startAttestor(
  variant: StoreVariant,
  publicUrl: string,
  upstream: Upstream,
  extraEnv: Record<string, string> = {},
): Promise<Attestor> {
  const database: TestDatabase = await createTestDatabase(variant.engine);
  const redisPrefix = uniquePrefix("trust-upstream");
  const env: Record<string, string> = {
    ...trustTestEnv(variant, database.url, publicUrl),
    TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS,
    TRUST_UPSTREAM_OIDC_ISSUER: upstream.issuer,
    TRUST_UPSTREAM_OIDC_CLIENT_ID: CLIENT_ID,
    TRUST_UPSTREAM_OIDC_CLIENT_SECRET: CLIENT_SECRET,
    TRUST_UPSTREAM_OIDC_NAME: IDP_NAME,
    ...extraEnv,
  };
  const app = await buildTrustApp(readTrustConfig(env), {
    logStream: quietLog(),
    redisPrefix,
    upstreamFetch: upstream.fetch as unknown as UpstreamFetch,
  });
  const url = await listenLocal(app.app);
  const attestor: Attestor = {
    publicUrl,
    url,
    app,
    json(method, path, body, headers = {}) {
      return httpRequest(url, method, path, typeof body === "string" ? { rawBody: body, headers } : { body, headers });
    },
    async nowUnix() {
      return (await attestor.json("POST", "/__test/clock", {})).json.now_unix as number;
    },
    async advance(seconds) {
      const answer = await attestor.json("POST", "/__test/clock", { advance_seconds: seconds });
      assert.equal(answer.status, 200, answer.text);
    },
    async close() {
      await app.close();
      await database.drop();
      if (variant.redis) await dropRedisPrefix(redisPrefix);
    },
  };
  return attestor;
}

// ---------------------------------------------------------------------------------------------
// A browser: one cookie jar per origin (paths honoured), redirects followed by hand. The
// attestor's public https origin is mapped to where it listens.

interface Page {
  status: number;
  url: string;
  location: string | undefined;
  text: string;
  setCookies: string[];
}

interface Cookie {
  name: string;
  value: string;
  path: string;
}

class Browser {
  readonly jars = new Map<string, Map<string, Cookie>>();

  constructor(
    readonly attestor: Attestor,
    readonly upstream: Upstream,
  ) {}

  jar(origin: string): Map<string, Cookie> {
    let jar = this.jars.get(origin);
    if (jar === undefined) {
      jar = new Map();
      this.jars.set(origin, jar);
    }
    return jar;
  }

  cookie(origin: string, name: string): string | undefined {
    for (const cookie of this.jar(origin).values()) if (cookie.name === name) return cookie.value;
    return undefined;
  }

  setCookie(origin: string, name: string, value: string): void {
    this.jar(origin).set(`/\0${name}`, { name, value, path: "/" });
  }

  async get(url: string): Promise<Page> {
    return this.request("GET", url);
  }

  async post(url: string, form: Record<string, string>): Promise<Page> {
    return this.request("POST", url, form);
  }

  async request(method: string, url: string, form?: Record<string, string>): Promise<Page> {
    const target = new URL(url, this.attestor.publicUrl);
    const jar = this.jar(target.origin);
    const cookies = [...jar.values()]
      .filter(
        (c) => target.pathname === c.path || target.pathname.startsWith(c.path.endsWith("/") ? c.path : `${c.path}/`),
      )
      .map((c) => `${c.name}=${c.value}`);
    const headers: Record<string, string> = {};
    if (cookies.length > 0) headers.cookie = cookies.join("; ");
    if (form !== undefined) headers["content-type"] = "application/x-www-form-urlencoded";
    const init = {
      method,
      headers,
      redirect: "manual" as const,
      ...(form === undefined ? {} : { body: new URLSearchParams(form).toString() }),
    };
    const toAttestor = target.origin === this.attestor.publicUrl;
    const response = toAttestor
      ? await fetch(`${this.attestor.url}${target.pathname}${target.search}`, init)
      : await this.upstream.fetch(target.href, init);
    const setCookies = response.headers.getSetCookie();
    for (const line of setCookies) this.#store(jar, line);
    const location = response.headers.get("location") ?? undefined;
    return { status: response.status, url: target.href, location, text: await response.text(), setCookies };
  }

  #store(jar: Map<string, Cookie>, line: string): void {
    const [pair = "", ...attributes] = line.split(";").map((part) => part.trim());
    const eq = pair.indexOf("=");
    const name = pair.slice(0, eq);
    const value = pair.slice(eq + 1);
    let path = "/";
    let gone = value === "";
    for (const attribute of attributes) {
      const [key = "", val = ""] = attribute.split("=");
      if (key.toLowerCase() === "path") path = val;
      if (key.toLowerCase() === "max-age" && Number(val) <= 0) gone = true;
      if (key.toLowerCase() === "expires" && Date.parse(val) <= Date.now()) gone = true;
    }
    if (gone) jar.delete(`${path}\0${name}`);
    else jar.set(`${path}\0${name}`, { name, value, path });
  }
}

/** Follows the provider's redirects and fills its login and consent pages until it answers the attestor. */
async function throughUpstream(
  browser: Browser,
  authorizeUrl: string,
  who: string,
  options: { abort?: boolean } = {},
): Promise<string> {
  let url = authorizeUrl;
  for (let step = 0; step < 16; step++) {
    if (url.startsWith(`${browser.attestor.publicUrl}/`)) return url;
    const page = await browser.get(url);
    if (page.status >= 300 && page.status < 400 && page.location) {
      url = new URL(page.location, url).href;
      continue;
    }
    assert.equal(page.status, 200, `provider page ${url}: ${page.status} ${page.text.slice(0, 300)}`);
    if (options.abort) {
      url = new URL(`${new URL(url).pathname}/abort`, url).href;
      continue;
    }
    const action = /<form[^>]*action="([^"]+)"/.exec(page.text)?.[1];
    assert.ok(action, "no form on the provider page");
    const target = new URL(action.replace(/&amp;/g, "&"), url).href;
    let answer: Page;
    if (page.text.includes('name="prompt" value="login"')) {
      answer = await browser.post(target, { prompt: "login", login: who, password: "any" });
    } else if (page.text.includes('name="prompt" value="consent"')) {
      answer = await browser.post(target, { prompt: "consent" });
    } else {
      throw new Error(`unexpected provider page: ${page.text.slice(0, 300)}`);
    }
    assert.ok(answer.location, `provider form answered ${answer.status}`);
    url = new URL(answer.location, target).href;
  }
  throw new Error("the provider never answered the attestor");
}

/** `/signin/oidc/start` up to the provider's answer: the callback URL, not yet opened. */
async function startSignin(browser: Browser, who: string, next?: string): Promise<{ callback: string; start: Page }> {
  const path = next === undefined ? "/signin/oidc/start" : `/signin/oidc/start?next=${encodeURIComponent(next)}`;
  const start = await browser.get(path);
  assert.equal(start.status, 303, start.text);
  const location = start.location ?? "";
  assert.ok(location.startsWith(`${browser.upstream.issuer}/`), location);
  return { callback: await throughUpstream(browser, location, who), start };
}

/** A whole upstream sign-in; answers the callback's page. */
async function signInUpstream(browser: Browser, who: string, next?: string): Promise<Page> {
  const { callback } = await startSignin(browser, who, next);
  return browser.get(callback);
}

function sessionCookieName(attestor: Attestor): string {
  return attestor.app.sessions.cookieName;
}

function assertNoSession(attestor: Attestor, page: Page): void {
  const name = sessionCookieName(attestor);
  assert.ok(
    !page.setCookies.some((line) => line.startsWith(`${name}=`) && !line.startsWith(`${name}=;`)),
    page.setCookies.join("\n"),
  );
}

/** An error page: HTML, the given status, a heading, and nothing of the server's insides. */
function assertErrorPage(page: Page, status: number, heading: RegExp): void {
  assert.equal(page.status, status, page.text.slice(0, 500));
  assert.match(page.text, /^<!doctype html>/);
  assert.match(page.text, heading);
  assert.doesNotMatch(page.text, /\bat [\w.<>]+ \(|node_modules|Error:|stack/i);
}

async function signInByEmail(browser: Browser, address: string): Promise<void> {
  const form = await browser.get("/signin");
  assert.equal(form.status, 200);
  const sent = await browser.post("/signin/email", {
    _csrf: field(form.text, "_csrf"),
    email: address,
    next: "/account",
  });
  assert.equal(sent.status, 200, sent.text);
  const mailer = browser.attestor.app.mailer as OutboxMailer;
  const mail = [...mailer.entries].reverse().find((m) => m.to === address);
  assert.ok(mail, "no sign-in mail");
  const link = /https:\/\/\S+\/signin\/email\/verify\?token=\S+/.exec(mail.text)?.[0];
  assert.ok(link);
  const confirm = await browser.get(link);
  const token = /name="token" value="([^"]+)"/.exec(confirm.text)?.[1];
  assert.ok(token);
  const done = await browser.post("/signin/email/verify", { _csrf: field(confirm.text, "_csrf"), token });
  assert.equal(done.status, 303, done.text);
}

// ---------------------------------------------------------------------------------------------
// Agents: linked through the page flow with a browser's session, or through the test hook.

async function startLink(attestor: Attestor, agent: Agent): Promise<string> {
  const started = await attestor.json("POST", "/v1/link/start", {
    agent_did: agent.did,
    agent_pubkey_b64: agent.publicKeyB64,
    agent_label: `agent ${agent.did.slice(-6)}`,
  });
  assert.equal(started.status, 200, started.text);
  return started.json.req_id as string;
}

async function poll(attestor: Attestor, agent: Agent, reqId: string): Promise<void> {
  const sig = sign(null, Buffer.from(reqId, "utf8"), agent.privateKey).toString("base64url");
  const polled = await attestor.json("POST", "/v1/link/poll", { req_id: reqId, sig_b64: sig });
  assert.equal(polled.json?.state, "confirmed", polled.text);
}

async function linkWithBrowser(browser: Browser, agent: Agent = newAgent()): Promise<Agent> {
  const reqId = await startLink(browser.attestor, agent);
  const page = await browser.get(`/link?req=${encodeURIComponent(reqId)}`);
  assert.equal(page.status, 200, page.text);
  const confirmed = await browser.post("/link/confirm", { _csrf: field(page.text, "_csrf"), req: reqId });
  assert.equal(confirmed.status, 200, confirmed.text);
  await poll(browser.attestor, agent, reqId);
  return agent;
}

async function linkWithEmailHook(attestor: Attestor, address: string, agent: Agent = newAgent()): Promise<Agent> {
  const reqId = await startLink(attestor, agent);
  const confirmed = await attestor.json("POST", "/__test/link/confirm", { req_id: reqId, email: address });
  assert.equal(confirmed.status, 200, confirmed.text);
  await poll(attestor, agent, reqId);
  return agent;
}

async function mint(attestor: Attestor, agent: Agent, aud = "did:web:service.test"): Promise<HttpResult> {
  const body = JSON.stringify({ aud });
  const signed = signRequest(
    { method: "POST", url: `${attestor.publicUrl}/v1/token`, body },
    { keyid: agent.did, privateKey: agent.privateKey, created: await attestor.nowUnix() },
  );
  return attestor.json("POST", "/v1/token", body, { "content-type": "application/json", ...signed.headers });
}

// ---------------------------------------------------------------------------------------------

describe("upstream OpenID configuration", () => {
  const base = {
    TRUST_DATABASE_URL: "sqlite::memory:",
    TRUST_KEY_ENCRYPTION_KEY: TEST_KEY_ENCRYPTION_KEY.toString("base64url"),
    TRUST_PSEUDONYM_KEY: TEST_PSEUDONYM_KEY.toString("base64url"),
  };
  const full = {
    TRUST_UPSTREAM_OIDC_ISSUER: "https://login.example.com",
    TRUST_UPSTREAM_OIDC_CLIENT_ID: "client-1",
    TRUST_UPSTREAM_OIDC_CLIENT_SECRET: "s3cret",
  };
  const problems = (env: Record<string, string>): string => {
    try {
      readTrustConfig({ ...base, ...env });
    } catch (error) {
      return (error as Error).message;
    }
    assert.fail("the configuration was accepted");
  };

  test("off when none is set", () => {
    assert.equal(readTrustConfig(base).upstreamOidc, undefined);
  });

  test("all three set: enabled, the issuer kept as written, the default button label", () => {
    assert.deepEqual(readTrustConfig({ ...base, ...full }).upstreamOidc, {
      issuer: "https://login.example.com",
      clientId: "client-1",
      clientSecret: "s3cret",
      name: "your identity provider",
    });
    const named = readTrustConfig({ ...base, ...full, TRUST_UPSTREAM_OIDC_NAME: "Example ID" }).upstreamOidc;
    assert.equal(named?.name, "Example ID");
    const withPath = readTrustConfig({ ...base, ...full, TRUST_UPSTREAM_OIDC_ISSUER: "https://idp.example/realms/a/" });
    assert.equal(withPath.upstreamOidc?.issuer, "https://idp.example/realms/a/");
  });

  test("all or none: each missing variable is named", () => {
    const onlyIssuer = problems({ TRUST_UPSTREAM_OIDC_ISSUER: full.TRUST_UPSTREAM_OIDC_ISSUER });
    assert.match(onlyIssuer, /all or none/);
    assert.match(onlyIssuer, /missing: TRUST_UPSTREAM_OIDC_CLIENT_ID, TRUST_UPSTREAM_OIDC_CLIENT_SECRET/);
    const noSecret = problems({ ...full, TRUST_UPSTREAM_OIDC_CLIENT_SECRET: "" });
    assert.match(noSecret, /missing: TRUST_UPSTREAM_OIDC_CLIENT_SECRET$/m);
    assert.doesNotMatch(noSecret, /missing: TRUST_UPSTREAM_OIDC_ISSUER/);
    const nameAlone = problems({ TRUST_UPSTREAM_OIDC_NAME: "Example ID" });
    assert.match(nameAlone, /TRUST_UPSTREAM_OIDC_NAME is set but upstream sign-in is off/);
  });

  test("the issuer must be an https URL without query, fragment or credentials", () => {
    for (const issuer of [
      "http://login.example.com",
      "login.example.com",
      "https://login.example.com/?tenant=1",
      "https://login.example.com/#x",
      "https://user:pw@login.example.com",
    ]) {
      assert.match(
        problems({ ...full, TRUST_UPSTREAM_OIDC_ISSUER: issuer }),
        /TRUST_UPSTREAM_OIDC_ISSUER must be the provider's https issuer URL/,
        issuer,
      );
    }
    assert.match(
      problems({ ...full, TRUST_UPSTREAM_OIDC_NAME: "x".repeat(61) }),
      /TRUST_UPSTREAM_OIDC_NAME is the button label: at most 60 characters/,
    );
  });

  test("every problem is reported at once", () => {
    const message = problems({ TRUST_UPSTREAM_OIDC_ISSUER: "http://x", TRUST_SESSION_TTL_SECONDS: "1" });
    assert.match(message, /all or none/);
    assert.match(message, /TRUST_SESSION_TTL_SECONDS/);
  });
});

for (const variant of STORE_VARIANTS) {
  describe(`sign-in with an upstream OpenID provider (${variant.name})`, () => {
    const publicUrl = "https://trust.test";
    let upstream: Upstream;
    let attestor: Attestor;
    const browser = () => new Browser(attestor, upstream);

    before(async () => {
      upstream = await startUpstream([
        `${publicUrl}/signin/oidc/callback`,
        "https://trust-down.test/signin/oidc/callback",
      ]);
      attestor = await startAttestor(variant, publicUrl, upstream);
    });
    after(async () => {
      await attestor?.close();
      await upstream?.close();
    });

    test("the sign-in page offers the provider beside e-mail", async () => {
      const page = await browser().get("/signin?next=%2Faccount");
      assert.equal(page.status, 200);
      assert.match(
        page.text,
        /<a class="button secondary" href="\/signin\/oidc\/start\?next=%2Faccount">Sign in with Test IdP<\/a>/,
      );
      assert.match(page.text, /action="\/signin\/email"/);
    });

    test("first sign-in creates a person with an oauth verification and a session", async () => {
      const b = browser();
      const who = login("first");
      const { callback, start } = await startSignin(b, who);

      // Authorization Code + PKCE (S256) with a state and a nonce; only the state's hash is kept.
      const authorize = new URL(start.location as string);
      assert.equal(authorize.searchParams.get("response_type"), "code");
      assert.equal(authorize.searchParams.get("client_id"), CLIENT_ID);
      assert.equal(authorize.searchParams.get("redirect_uri"), `${publicUrl}/signin/oidc/callback`);
      assert.equal(authorize.searchParams.get("code_challenge_method"), "S256");
      assert.match(authorize.searchParams.get("code_challenge") ?? "", /^[A-Za-z0-9_-]{43}$/);
      const state = authorize.searchParams.get("state") ?? "";
      const nonce = authorize.searchParams.get("nonce") ?? "";
      assert.ok(state.length >= 43 && nonce.length >= 43);
      const db = attestor.app.service.database.db;
      const row = await db
        .selectFrom("trust_upstream_states")
        .selectAll()
        .where("state_hash", "=", hashToken(state))
        .executeTakeFirstOrThrow();
      assert.equal(row.nonce, nonce);
      assert.equal(row.next, "/account");
      assert.equal(row.used_at, null);
      assert.equal(row.expires_at - row.created_at, 600_000);
      assert.ok(!JSON.stringify(row).includes(state), "the state itself is not stored");

      const done = await b.get(callback);
      assert.equal(done.status, 303, done.text);
      assert.equal(done.location, "/account");
      assert.ok(b.cookie(publicUrl, sessionCookieName(attestor)), "a session cookie");

      const account = await b.get("/account");
      assert.equal(account.status, 200);
      assert.match(account.text, /Sign-in provider/);
      assert.doesNotMatch(account.text, /E-mail address/);
      assert.match(account.text, /Add sign-in with Test IdP/);

      const subject = JSON.stringify([upstream.issuer, who]);
      const verification = await db
        .selectFrom("trust_verifications")
        .selectAll()
        .where("method", "=", "oauth")
        .where("subject", "=", subject)
        .executeTakeFirstOrThrow();
      assert.equal(verification.revoked_at, null);
      const used = await db
        .selectFrom("trust_upstream_states")
        .select("used_at")
        .where("state_hash", "=", hashToken(state))
        .executeTakeFirstOrThrow();
      assert.notEqual(used.used_at, null);
      const session = await db
        .selectFrom("trust_sessions")
        .selectAll()
        .where("id_hash", "=", hashToken(b.cookie(publicUrl, sessionCookieName(attestor)) as string))
        .executeTakeFirstOrThrow();
      assert.equal(session.human_id, verification.human_id);
      assert.equal(session.auth_method, "oauth");
    });

    test("a second sign-in with the same upstream subject lands in the same person", async () => {
      const who = login("again");
      const first = browser();
      assert.equal((await signInUpstream(first, who)).status, 303);
      const agentA = await linkWithBrowser(first);
      const mintedA = await mint(attestor, agentA);
      assert.equal(mintedA.status, 200, mintedA.text);
      assert.equal(mintedA.json.verification, "oauth");

      // Another browser, signed in to the provider afresh: the same person, who sees agent A.
      const second = browser();
      assert.equal((await signInUpstream(second, who)).status, 303);
      const account = await second.get("/account");
      assert.equal(account.status, 200);
      assert.ok(account.text.includes(agentA.did), "agent A is on the account of the second sign-in");
      const agentB = await linkWithBrowser(second);
      const mintedB = await mint(attestor, agentB);
      assert.equal(mintedB.json.verification, "oauth");
      const subA = JSON.parse(Buffer.from(mintedA.json.jwt.split(".")[1], "base64url").toString("utf8")).sub_h;
      const subB = JSON.parse(Buffer.from(mintedB.json.jwt.split(".")[1], "base64url").toString("utf8")).sub_h;
      assert.equal(subA, subB, "one person: one pseudonym per audience");

      // Same provider browser session again (no login page this time): still the same person.
      assert.equal((await signInUpstream(first, who)).status, 303);
      assert.ok((await first.get("/account")).text.includes(agentB.did));

      // Contrast: an agent confirmed by an e-mail person is someone else.
      const agentC = await linkWithEmailHook(attestor, email("other"));
      const mintedC = await mint(attestor, agentC);
      assert.equal(mintedC.json.verification, "email");
      const subC = JSON.parse(Buffer.from(mintedC.json.jwt.split(".")[1], "base64url").toString("utf8")).sub_h;
      assert.notEqual(subC, subA);
      assert.ok(!(await second.get("/account")).text.includes(agentC.did));

      const db = attestor.app.service.database.db;
      const rows = await db
        .selectFrom("trust_verifications")
        .selectAll()
        .where("subject", "=", JSON.stringify([upstream.issuer, who]))
        .execute();
      assert.equal(rows.length, 1);
    });

    test("a replayed answer is refused, in the same browser and in another", async () => {
      const b = browser();
      const { callback } = await startSignin(b, login("replay"));
      const upstreamCookie = b.cookie(publicUrl, "__Host-proto_upstream");
      assert.ok(upstreamCookie, "the state is bound to the browser");
      assert.equal((await b.get(callback)).status, 303);

      // The same browser: the state cookie is gone with the first use.
      const again = await b.get(callback);
      assertErrorPage(again, 400, /did not start here/);
      assertNoSession(attestor, again);

      // A browser that kept the cookie: the stored state was consumed.
      const other = browser();
      other.setCookie(publicUrl, "__Host-proto_upstream", upstreamCookie);
      const replayed = await other.get(callback);
      assertErrorPage(replayed, 410, /This sign-in has expired/);
      assertNoSession(attestor, replayed);
      const account = await other.get("/account");
      assert.equal(account.status, 303);
      assert.match(account.location ?? "", /^\/signin/);
    });

    test("an answer for another browser, an unknown state or none is refused", async () => {
      // Someone else's answer (login CSRF): this browser never started it.
      const attacker = browser();
      const { callback } = await startSignin(attacker, login("attacker"));
      const victim = browser();
      const planted = await victim.get(callback);
      assertErrorPage(planted, 400, /did not start here/);
      assertNoSession(attestor, planted);

      // A well-formed state nobody issued, even with a matching cookie.
      const forged = `s.${"A".repeat(43)}`;
      const b = browser();
      b.setCookie(publicUrl, "__Host-proto_upstream", forged);
      const unknown = await b.get(`/signin/oidc/callback?code=abc&state=${forged}`);
      assertErrorPage(unknown, 410, /This sign-in has expired/);
      assertNoSession(attestor, unknown);

      for (const query of ["", "?code=abc", "?state=nonsense&code=abc", `?state=${"x".repeat(5000)}`]) {
        const page = await browser().get(`/signin/oidc/callback${query}`);
        assertErrorPage(page, 400, /did not start here/);
        assertNoSession(attestor, page);
      }
    });

    test("an answer after 10 minutes is refused", async () => {
      const b = browser();
      const { callback } = await startSignin(b, login("late"));
      await attestor.advance(601);
      const page = await b.get(callback);
      assertErrorPage(page, 410, /This sign-in has expired/);
      assert.match(page.text, /within 10 minutes/);
      assertNoSession(attestor, page);
    });

    test("a tampered code is refused and the state is spent", async () => {
      const b = browser();
      const { callback } = await startSignin(b, login("tamper"));
      const upstreamCookie = b.cookie(publicUrl, "__Host-proto_upstream") as string;
      const tampered = new URL(callback);
      const code = tampered.searchParams.get("code") ?? "";
      tampered.searchParams.set("code", `${code.slice(0, -2)}${code.endsWith("AA") ? "BB" : "AA"}`);
      const page = await b.get(tampered.href);
      assertErrorPage(page, 400, /Sign-in failed/);
      assertNoSession(attestor, page);

      // The genuine answer no longer works either: the attempt was single-use.
      b.setCookie(publicUrl, "__Host-proto_upstream", upstreamCookie);
      const genuine = await b.get(callback);
      assertErrorPage(genuine, 410, /This sign-in has expired/);
      assertNoSession(attestor, genuine);
    });

    test("cancelling at the provider shows a page, not a session", async () => {
      const b = browser();
      const start = await b.get("/signin/oidc/start");
      const callback = await throughUpstream(b, start.location as string, "nobody", { abort: true });
      assert.equal(new URL(callback).searchParams.get("error"), "access_denied");
      const page = await b.get(callback);
      assertErrorPage(page, 400, /Sign-in was not completed/);
      assert.match(page.text, /access_denied/);
      assertNoSession(attestor, page);
    });

    test("next stays on this site", async () => {
      const cases = [
        ...hostileRedirects(attestor.publicUrl).map(({ value }) => [value, "/account"] as const),
        ["/link?req=lr_abc", "/link?req=lr_abc"],
        [`${attestor.publicUrl}/link?req=lr_abc`, "/link?req=lr_abc"],
      ] as const;
      for (const [index, [next, expected]] of cases.entries()) {
        // More sign-ins than one address may start in a minute: a new window every ten.
        if (index % 10 === 0) await attestor.advance(61);
        if (hasRawControlCharacter(next)) {
          // Refused in the query string before any redirect logic, and sent nowhere.
          const refused = await browser().get(`/signin/oidc/start?next=${encodeURIComponent(next)}`);
          assert.equal(refused.status, 400, refused.text);
          assert.equal(refused.location, undefined);
          continue;
        }
        const page = await signInUpstream(browser(), login("next"), next);
        assert.equal(page.status, 303, page.text);
        assert.equal(page.location, expected, JSON.stringify(next));
      }
      await attestor.advance(61);
    });

    test("signing in rotates the CSRF secret: a form token from before is refused after", async () => {
      const b = browser();
      const early = await b.get("/signin");
      const earlyToken = field(early.text, "_csrf");
      assert.equal((await signInUpstream(b, login("rotated"))).status, 303);
      const stale = await b.post("/signout", { _csrf: earlyToken });
      assert.equal(stale.status, 403, stale.text);
      assert.match(stale.text, /This form has expired/);
      const account = await b.get("/account");
      assert.equal(account.status, 200, "the refused sign-out left the session");
      assert.equal((await b.post("/signout", { _csrf: field(account.text, "_csrf") })).status, 303);
    });

    test("from the account page it adds the provider to the signed-in person", async () => {
      const address = email("adder");
      const who = login("adder");
      const b = browser();
      await signInByEmail(b, address);
      const account = await b.get("/account");
      assert.match(account.text, /action="\/signin\/oidc\/add"/);
      const started = await b.post("/signin/oidc/add", { _csrf: field(account.text, "_csrf") });
      assert.equal(started.status, 303, started.text);
      const callback = await throughUpstream(b, started.location as string, who);
      const done = await b.get(callback);
      assert.equal(done.status, 303, done.text);
      assert.equal(done.location, "/account");
      const after = await b.get("/account");
      assert.match(after.text, /E-mail address/);
      assert.match(after.text, /Sign-in provider/);

      // Signing in with the provider elsewhere lands in this same person.
      const elsewhere = browser();
      assert.equal((await signInUpstream(elsewhere, who)).status, 303);
      const there = await elsewhere.get("/account");
      assert.ok(there.text.includes(address), "the e-mail person's account");
      const agent = await linkWithBrowser(elsewhere);
      assert.equal((await mint(attestor, agent)).json.verification, "oauth");
    });

    test("an identity that is already another person's is not added, nothing is merged", async () => {
      const taken = login("taken");
      const owner = browser();
      assert.equal((await signInUpstream(owner, taken)).status, 303);
      const db = attestor.app.service.database.db;
      const subject = JSON.stringify([upstream.issuer, taken]);
      const before = await db
        .selectFrom("trust_verifications")
        .selectAll()
        .where("subject", "=", subject)
        .executeTakeFirstOrThrow();

      const address = email("other-person");
      const b = browser();
      await signInByEmail(b, address);
      const account = await b.get("/account");
      const started = await b.post("/signin/oidc/add", { _csrf: field(account.text, "_csrf") });
      const page = await b.get(await throughUpstream(b, started.location as string, taken));
      assertErrorPage(page, 409, /already in use/);
      assert.match(page.text, /was not added/);

      const afterRow = await db
        .selectFrom("trust_verifications")
        .selectAll()
        .where("subject", "=", subject)
        .executeTakeFirstOrThrow();
      assert.equal(afterRow.human_id, before.human_id);
      const mine = await b.get("/account");
      assert.ok(mine.text.includes(address), "still signed in as the e-mail person");
      assert.doesNotMatch(mine.text, /Sign-in provider/);
    });

    test("an addition only goes to the person who asked for it", async () => {
      const b = browser();
      await signInByEmail(b, email("asker"));
      const account = await b.get("/account");
      const started = await b.post("/signin/oidc/add", { _csrf: field(account.text, "_csrf") });
      const callback = await throughUpstream(b, started.location as string, login("switch"));
      // Meanwhile this browser signed in as someone else.
      const someoneElse = email("someone-else");
      await signInByEmail(b, someoneElse);
      const page = await b.get(callback);
      assertErrorPage(page, 403, /Sign in again/);
      const mine = await b.get("/account");
      assert.ok(mine.text.includes(someoneElse));
      assert.doesNotMatch(mine.text, /Sign-in provider/);
    });

    test("the account action needs the form's CSRF token and a session", async () => {
      const b = browser();
      await signInByEmail(b, email("csrf"));
      const forged = await b.post("/signin/oidc/add", { _csrf: "forged" });
      assertErrorPage(forged, 403, /This form has expired/);
      const anonymous = browser();
      const form = await anonymous.get("/signin");
      const redirected = await anonymous.post("/signin/oidc/add", { _csrf: field(form.text, "_csrf") });
      assert.equal(redirected.status, 303);
      assert.equal(redirected.location, "/signin?next=%2Faccount");
    });

    test("while the provider is down the sign-in page still works; discovery is retried", async () => {
      const down = await startAttestor(variant, "https://trust-down.test", upstream);
      try {
        const b = new Browser(down, upstream);
        upstream.down = true;
        const signin = await b.get("/signin");
        assert.equal(signin.status, 200);
        assert.match(signin.text, /Sign in with Test IdP/);
        assert.match(signin.text, /E-mail me a sign-in link/);
        const failed = await b.get("/signin/oidc/start");
        assertErrorPage(failed, 502, /Test IdP cannot be reached/);
        assert.equal(failed.location, undefined);
        // E-mail sign-in is unaffected.
        await signInByEmail(b, email("while-down"));

        upstream.down = false;
        const start = await b.get("/signin/oidc/start");
        assert.equal(start.status, 303);
        assert.ok(start.location?.startsWith(`${upstream.issuer}/`));
      } finally {
        upstream.down = false;
        await down.close();
      }
    });
  });
}
