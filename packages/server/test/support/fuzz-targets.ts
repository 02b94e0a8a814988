/**
 * The directory and the attestor as fuzz targets (see @proto/testkit/fuzz): real servers over
 * HTTP on a test store, every route read from the Fastify instance, and what the fuzzer needs to
 * get past the first checks (a listed site, a linked agent, a signed-in session, a registered
 * OpenID client, payment and upstream sign-in configured against local stand-ins).
 */
import { createHmac, sign as signBytes } from "node:crypto";
import { signRequest } from "@proto/protocol";
import { createTestCA, field, type HttpsHost, startHttpsHost, testFetch } from "@proto/testkit";
import { type FuzzRequest, type FuzzTarget, kindByPath, type RouteKind, routesOf } from "@proto/testkit/fuzz";
import { buildTrustApp } from "../../src/trust/app.js";
import { readTrustConfig } from "../../src/trust/config.js";
import type { PaymentFetch } from "../../src/trust/payment/provider.js";
import type { UpstreamFetch } from "../../src/trust/web/upstream.js";
import { Browserless } from "./browser-session.js";
import { ADMIN_TOKEN, startDirectoryHarness } from "./directory.js";
import { dropRedisPrefix, httpRequest, listenLocal, quietLog } from "./http.js";
import { createTestDatabase, type StoreVariant, uniquePrefix } from "./stores.js";
import { newAgent, RELAXED_RATE_LIMITS, trustTestEnv } from "./trust.js";

export interface RunningTarget extends FuzzTarget {
  close(): Promise<void>;
}

export interface TargetOptions {
  /** Raise the rate limits so requests reach the handlers (default), or keep the defaults. */
  limits?: "raised" | "default";
}

/** Which routes answer what, by path (the services' content types; the spec sends `/oidc/*` OAuth errors). */
export const SERVER_ROUTE_KINDS: [RegExp, RouteKind][] = [
  [/^\/oidc\/(token|register)$/, "oauth"],
  [/^\/(v1|admin|webhooks|schemas|__test)\//, "api"],
  [/^\/\.well-known\//, "api"],
  [/^\/(healthz|readyz|metrics|openapi\.json|docs\/json)$/, "api"],
  [/^\/(assets|docs)(\/|$)/, "asset"],
  [/^\/sitemap\.xml$/, "asset"],
];

/**
 * The attestor's start page and its fallback for unknown paths answer a browser with a page and
 * any other client with the API's index (`/`) or its not-found envelope.
 */
const ATTESTOR_ROUTE_KINDS: [RegExp, RouteKind][] = [[/^\/\*?$/, "dual"]];

/** The directory's `/` answers a browser with its browse page and any other client with the API's index. */
const DIRECTORY_ROUTE_KINDS: [RegExp, RouteKind][] = [[/^\/$/, "dual"]];

const METRICS_TOKEN = "metrics-token-for-the-fuzzer-0123";
const DIRECTORY_RAISED_LIMITS =
  "challenge=1000000/60,create=1000000/60,write=1000000/60,read=1000000/60,sitemap=1000000/60,pages=1000000/60";
const TRUST_RAISED_LIMITS = `${RELAXED_RATE_LIMITS},read=1000000/60`.replace(/100000\//g, "1000000/");

/** Test hooks exist only with PROTO_TEST_HOOKS: they are not what a client can reach in production. */
const fuzzable = (routes: { method: string; url: string }[]) =>
  routes.filter((route) => !route.url.startsWith("/__test/"));

/**
 * The servers run behind one trusted proxy hop, so a normal request after the run can come from a
 * client address of its own: the fuzz may have spent 127.0.0.1's default limits.
 */
const PROXY_HOPS = { TRUSTED_PROXIES: "127.0.0.1", TRUSTED_PROXY_HOPS: "1" };
const freshClient = () => `198.51.100.${Math.floor(Math.random() * 254) + 1}`;

/** A normal request, checked: undefined when it answered `status`. */
async function expectStatus(
  url: string,
  method: string,
  path: string,
  status: number,
  options: Parameters<typeof httpRequest>[3] = {},
): Promise<string | undefined> {
  try {
    const result = await httpRequest(url, method, path, options);
    return result.status === status
      ? undefined
      : `${method} ${path} answered ${result.status}: ${result.text.slice(0, 200)}`;
  } catch (error) {
    return `${method} ${path} failed: ${error instanceof Error ? error.message : String(error)}`;
  }
}

export async function startDirectoryTarget(variant: StoreVariant, options: TargetOptions = {}): Promise<RunningTarget> {
  const h = await startDirectoryHarness(variant, {
    sites: 2,
    env: {
      ...PROXY_HOPS,
      METRICS_TOKEN,
      ...(options.limits === "default" ? {} : { DIRECTORY_RATE_LIMITS: DIRECTORY_RAISED_LIMITS }),
    },
  });
  const { site, token, did } = await h.register(undefined, { title: "Fuzz target", tags: ["fuzz"] });
  const challenge = await h.request("POST", "/v1/listings/challenge", {
    body: { discovery_url: h.site().discoveryUrl },
  });
  await h.app.app.ready();
  return {
    name: `directory (${variant.name}${options.limits === "default" ? ", default limits" : ""})`,
    url: h.url,
    routes: fuzzable(routesOf(h.app.app)),
    kindOf: kindByPath([...DIRECTORY_ROUTE_KINDS, ...SERVER_ROUTE_KINDS]),
    redirectOrigins: ["https://directory.test"],
    vocabulary: {
      params: { did: [did, "did:web:unknown.example"] },
      fields: {
        search: ["fuzz"],
        tag: ["fuzz"],
        cursor: ["eyJ4IjoxfQ"],
        limit: ["10"],
        status: ["active"],
        updated_since: ["2020-01-01T00:00:00Z"],
        include_deleted: ["true"],
        page: ["1"],
        discovery_url: [site.discoveryUrl],
        challenge_token: [challenge.json?.challenge_token ?? "x"],
        title: ["A title"],
        description: ["A description"],
        tags: ["fuzz"],
        did: [did],
      },
      examples: {
        "GET /v1/listings": { query: { search: "fuzz", tag: "fuzz", limit: "10" } },
        "GET /": { query: { search: "fuzz", tag: "fuzz" } },
        "POST /v1/listings/challenge": { body: { discovery_url: site.discoveryUrl } },
        "POST /v1/listings": {
          body: { discovery_url: site.discoveryUrl, challenge_token: challenge.json?.challenge_token ?? "x" },
        },
        "PATCH /v1/listings/:did": { body: { title: "Renamed" }, headers: { authorization: `Bearer ${token}` } },
        "DELETE /v1/listings/:did": { headers: { authorization: `Bearer ${token}` } },
        "POST /admin/revalidate": { body: { did }, headers: { authorization: `Bearer ${ADMIN_TOKEN}` } },
        "GET /metrics": { headers: { authorization: `Bearer ${METRICS_TOKEN}` } },
        "GET /sitemap.xml": { query: { page: "1" } },
      },
      cookies: [],
    },
    async normal() {
      const headers = { "x-forwarded-for": freshClient() };
      return (
        (await expectStatus(h.url, "GET", `/v1/listings/${encodeURIComponent(did)}`, 200, { headers })) ??
        (await expectStatus(h.url, "GET", "/v1/listings?limit=5", 200, { headers }))
      );
    },
    close: () => h.close(),
  };
}

const OIDC_CLIENT = "did:web:service.fuzz";
const OIDC_REDIRECT = "https://service.fuzz/callback";
const WEBHOOK_SECRET = "whsec_fuzz_standin_0123456789abcdef";
const PUBLIC_URL = "https://trust.test";

/** The paid API and the upstream OpenID provider, as far as a fuzzed request can reach them. */
async function startStandIns(): Promise<{
  host: HttpsHost;
  fetch: ReturnType<typeof testFetch>;
  caPem: string;
  serviceDid: string;
}> {
  const ca = await createTestCA();
  const host = await startHttpsHost({ ca, hostnames: ["idp.test", "pay.test", "notes.test"] });
  // A service declaring permissions, so approval requests reach past the service's document.
  const serviceDid = `did:web:${new URL(host.origin("notes.test")).host.replace(":", "%3A")}`;
  host.route("/.well-known/proto", {
    body: {
      proto_version: "0.1",
      service_did: serviceDid,
      permissions: {
        "notes:read": { description: "Read your notes", default: true },
        "notes:delete": { description: "Delete your notes", phishing_resistant: true },
        purchase: { description: "Pay to pin notes", currency: "EUR" },
      },
    },
  });
  const issuer = host.origin("idp.test");
  host.route("/.well-known/openid-configuration", {
    body: {
      issuer,
      authorization_endpoint: `${issuer}/auth`,
      token_endpoint: `${issuer}/token`,
      jwks_uri: `${issuer}/jwks`,
      response_types_supported: ["code"],
      subject_types_supported: ["public"],
      id_token_signing_alg_values_supported: ["RS256"],
      code_challenge_methods_supported: ["S256"],
    },
  });
  host.route("/jwks", { body: { keys: [] } });
  let sessions = 0;
  host.route("/v1/checkout/sessions", (_req, res) => {
    sessions += 1;
    const id = `cs_fuzz_${sessions}`;
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ id, object: "checkout.session", url: `${host.origin("pay.test")}/pay/${id}` }));
  });
  return { host, fetch: testFetch(ca, { resolve: host.resolveEntries() }), caPem: ca.certPem, serviceDid };
}

/**
 * The real e-mail sign-in, through the development outbox, asking to go to `next` afterwards:
 * the browser's cookies, the account page's CSRF token, and where the sign-in sent it.
 */
async function signIn(url: string, next = "/account"): Promise<{ cookies: string[]; csrf: string; location: string }> {
  // A client address of its own (one trusted proxy hop): sign-in mails are limited per address.
  const browser = new Browserless(url, { "x-forwarded-for": freshClient() });
  const form = await browser.get("/signin");
  const email = `fuzz-${Math.random().toString(36).slice(2)}@mail.test`;
  const sent = await browser.post("/signin/email", { _csrf: field(form.text, "_csrf"), email, next });
  // A control character in a form field is refused outright: no mail, no redirect anywhere.
  if (sent.status === 400 && next !== "/account") return { cookies: [], csrf: "", location: "/signin/email" };
  const outbox = await browser.get("/dev/outbox");
  const mail = outbox.text.split('<section class="card">').find((section) => section.includes(email));
  const link = mail && /https:\/\/trust\.test(\/signin\/email\/verify\?token=[A-Za-z0-9_-]+)/.exec(mail)?.[1];
  if (!link) throw new Error("no sign-in mail in the outbox");
  const confirm = await browser.get(link);
  const token = new URL(link, PUBLIC_URL).searchParams.get("token") ?? "";
  const signedIn = await browser.post("/signin/email/verify", { _csrf: field(confirm.text, "_csrf"), token });
  if (signedIn.status !== 303) throw new Error(`sign-in answered ${signedIn.status}`);
  const account = await browser.get("/account");
  return {
    cookies: [...browser.cookies].map(([name, value]) => `${name}=${value}`),
    csrf: field(account.text, "_csrf"),
    location: signedIn.location ?? "",
  };
}

/** Where a sign-in may not send anyone, however `next` is written (a browser drops tabs and newlines). */
// Raw control characters are refused outright (400) in a query; in a form field they reach the
// redirect check, which is what this probe exercises.
const HOSTILE_NEXT = ["/\t/evil.example", "/%09/evil.example", "//evil.example", "/\\evil.example", "/\n/evil.example"];

/** Signs in with each hostile `next`; answers the ones that leave the attestor's origin. */
async function openRedirects(url: string): Promise<string[]> {
  const problems: string[] = [];
  for (const next of HOSTILE_NEXT) {
    const { location } = await signIn(url, next);
    const landing = new URL(location, PUBLIC_URL);
    if (landing.origin !== PUBLIC_URL) {
      problems.push(
        `sign-in with next=${JSON.stringify(next)} redirects to ${JSON.stringify(location)} (${landing.origin})`,
      );
    }
  }
  return problems;
}

export async function startTrustTarget(variant: StoreVariant, options: TargetOptions = {}): Promise<RunningTarget> {
  const database = await createTestDatabase(variant.engine);
  const redisPrefix = uniquePrefix("trust-fuzz");
  const standIns = await startStandIns();
  const env: Record<string, string> = {
    ...trustTestEnv(variant, database.url, PUBLIC_URL),
    ...PROXY_HOPS,
    METRICS_TOKEN,
    ...(options.limits === "default" ? {} : { TRUST_RATE_LIMITS: TRUST_RAISED_LIMITS }),
    TRUST_OIDC_CLIENTS: JSON.stringify([
      { client_id: OIDC_CLIENT, service_did: OIDC_CLIENT, redirect_uris: [OIDC_REDIRECT] },
    ]),
    TRUST_PAYMENT_API_URL: standIns.host.origin("pay.test"),
    TRUST_PAYMENT_API_KEY: "sk_test_fuzz_0123456789",
    TRUST_PAYMENT_WEBHOOK_SECRET: WEBHOOK_SECRET,
    TRUST_UPSTREAM_OIDC_ISSUER: standIns.host.origin("idp.test"),
    TRUST_UPSTREAM_OIDC_CLIENT_ID: "trust-fuzz",
    TRUST_UPSTREAM_OIDC_CLIENT_SECRET: "a-client-secret-for-the-fuzzer-0123456789",
    PROTO_FETCH_ALLOW_PRIVATE: "1",
    PROTO_FETCH_RESOLVE: standIns.host.resolveEntries(),
  };
  const app = await buildTrustApp(readTrustConfig(env), {
    logStream: quietLog(),
    redisPrefix,
    paymentFetch: standIns.fetch as unknown as PaymentFetch,
    upstreamFetch: standIns.fetch as unknown as UpstreamFetch,
    fetchCa: standIns.caPem,
  });
  const url = await listenLocal(app.app);
  const request = (method: string, path: string, body?: unknown) => httpRequest(url, method, path, { body });

  // A linked agent (mints reach the token handler), and a link left pending (the link page has one to show).
  const agent = newAgent();
  const started = await request("POST", "/v1/link/start", {
    agent_did: agent.did,
    agent_pubkey_b64: agent.publicKeyB64,
    agent_label: "fuzz agent",
  });
  const reqId = started.json.req_id as string;
  await request("POST", "/__test/link/confirm", { req_id: reqId, email: "agent-owner@mail.test" });
  const proof = signBytes(null, Buffer.from(reqId, "utf8"), agent.privateKey).toString("base64url");
  const polled = await request("POST", "/v1/link/poll", { req_id: reqId, sig_b64: proof });
  const bindingId = polled.json.binding_id as string;
  const pending = newAgent();
  const pendingStart = await request("POST", "/v1/link/start", {
    agent_did: pending.did,
    agent_pubkey_b64: pending.publicKeyB64,
  });
  const pendingReq = pendingStart.json.req_id as string;
  const session = await signIn(url);

  const sign = async (fuzzed: FuzzRequest): Promise<[string, string][]> => {
    const body = fuzzed.body ?? Buffer.alloc(0);
    if (fuzzed.route.url === "/webhooks/payment") {
      const t = Math.floor(Date.now() / 1000);
      const v1 = createHmac("sha256", WEBHOOK_SECRET).update(`${t}.`).update(body).digest("hex");
      return [["proto-payment-signature", `t=${t},v1=${v1}`]];
    }
    const signed = signRequest(
      { method: fuzzed.method, url: `${PUBLIC_URL}${fuzzed.target}`, ...(fuzzed.body === undefined ? {} : { body }) },
      { keyid: agent.did, privateKey: agent.privateKey },
    );
    return Object.entries(signed.headers);
  };

  await app.app.ready();
  return {
    name: `attestor (${variant.name}${options.limits === "default" ? ", default limits" : ""})`,
    url,
    routes: fuzzable(routesOf(app.app)),
    kindOf: kindByPath([...ATTESTOR_ROUTE_KINDS, ...SERVER_ROUTE_KINDS]),
    signable: [
      "POST /v1/token",
      "POST /webhooks/payment",
      "GET /v1/grants",
      "POST /v1/approvals",
      "GET /v1/approvals/:approval_id",
    ],
    redirectOrigins: [PUBLIC_URL, OIDC_REDIRECT, standIns.host.origin("idp.test"), standIns.host.origin("pay.test")],
    sign,
    vocabulary: {
      params: { id: [bindingId], approval_id: ["apr_unknown"] },
      fields: {
        agent_did: [agent.did],
        agent_pubkey_b64: [agent.publicKeyB64],
        agent_label: ["an agent"],
        req_id: [reqId],
        req: [pendingReq],
        sig_b64: [proof],
        aud: ["did:web:service.example"],
        email: ["someone@mail.test"],
        next: ["/account"],
        token: ["a-token"],
        _csrf: [session.csrf],
        client_id: [OIDC_CLIENT],
        redirect_uri: [OIDC_REDIRECT],
        response_type: ["code"],
        scope: ["openid"],
        state: ["state-1"],
        nonce: ["nonce-1"],
        code_challenge: ["E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"],
        code_challenge_method: ["S256"],
        grant_type: ["authorization_code"],
        code: ["a-code"],
        code_verifier: ["dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"],
        session_id: ["cs_fuzz_1"],
        decision: ["allow", "deny"],
      },
      examples: {
        "POST /v1/link/start": {
          body: { agent_did: pending.did, agent_pubkey_b64: pending.publicKeyB64, agent_label: "an agent" },
        },
        "POST /v1/link/poll": { body: { req_id: reqId, sig_b64: proof } },
        "POST /v1/token": { body: { aud: "did:web:service.example" } },
        "POST /v1/approvals": {
          body: {
            aud: standIns.serviceDid,
            permissions: ["notes:delete"],
            spend_limits: [{ permission: "purchase", currency: "EUR", per_transaction: 50 }],
            reason: "Tidy up the notes you asked me to",
          },
        },
        "GET /link": { query: { req: pendingReq } },
        "POST /link/confirm": { body: { _csrf: session.csrf, req: pendingReq } },
        "POST /link/decline": { body: { _csrf: session.csrf, req: "unknown" } },
        "GET /signin": { query: { next: "/account" } },
        "GET /signin/oidc/start": { query: { next: "/account" } },
        "GET /signin/oidc/callback": { query: { state: "state-1", code: "a-code" } },
        "POST /signin/email": { body: { _csrf: session.csrf, email: "someone@mail.test", next: "/account" } },
        "GET /signin/email/verify": { query: { token: "a-token" } },
        "POST /signin/email/verify": { body: { _csrf: session.csrf, token: "a-token" } },
        "POST /account/payment/start": { body: { _csrf: session.csrf } },
        "GET /account/payment/return": { query: { session_id: "cs_fuzz_1" } },
        "POST /account/bindings/:id/revoke": { body: { _csrf: session.csrf } },
        "POST /account/bindings/:id/wba/publish": { body: { _csrf: session.csrf } },
        "POST /account/bindings/:id/wba/unpublish": { body: { _csrf: session.csrf } },
        "GET /oidc/authorize": {
          query: {
            client_id: OIDC_CLIENT,
            redirect_uri: OIDC_REDIRECT,
            response_type: "code",
            scope: "openid",
            state: "state-1",
            nonce: "nonce-1",
            code_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
            code_challenge_method: "S256",
          },
        },
        "POST /oidc/consent": {
          body: {
            _csrf: session.csrf,
            decision: "deny",
            client_id: OIDC_CLIENT,
            redirect_uri: OIDC_REDIRECT,
            response_type: "code",
            scope: "openid",
            state: "state-1",
            code_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
            code_challenge_method: "S256",
          },
        },
        "POST /account/connections/disconnect": { body: { _csrf: session.csrf, client_id: OIDC_CLIENT } },
        "POST /account/access/revoke": { body: { _csrf: session.csrf, grant_id: "grant-1" } },
        // The notices a button leaves behind, read from the query (repeated, broken, hostile).
        "GET /account": { query: { done: "access-revoked", grant: "grant-1" } },
        "POST /oidc/register": { body: { client_name: "Fuzz", redirect_uris: ["http://127.0.0.1:9/callback"] } },
        "POST /oidc/token": {
          encoding: "form",
          body: {
            grant_type: "authorization_code",
            client_id: OIDC_CLIENT,
            code: "a-code",
            redirect_uri: OIDC_REDIRECT,
            code_verifier: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk",
          },
        },
        "POST /webhooks/payment": {
          body: {
            id: "evt_fuzz",
            type: "checkout.session.completed",
            data: { object: { id: "cs_fuzz_1", client_reference_id: "ref", payment_status: "paid" } },
          },
        },
        "GET /metrics": { headers: { authorization: `Bearer ${METRICS_TOKEN}` } },
      },
      cookies: session.cookies,
    },
    probes: () => openRedirects(url),
    async normal() {
      const fresh = newAgent();
      const headers = { "x-forwarded-for": freshClient() };
      return (
        (await expectStatus(url, "GET", "/.well-known/jwks.json", 200, { headers })) ??
        (await expectStatus(url, "POST", "/v1/link/start", 200, {
          body: { agent_did: fresh.did, agent_pubkey_b64: fresh.publicKeyB64 },
          headers,
        }))
      );
    },
    async close() {
      await app.close();
      await standIns.fetch.close();
      await standIns.host.close();
      await database.drop();
      if (variant.redis) await dropRedisPrefix(redisPrefix);
    },
  };
}
