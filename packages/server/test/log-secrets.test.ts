import assert from "node:assert/strict";
import { connect } from "node:net";
import { Writable } from "node:stream";
import { after, before, describe, test } from "node:test";
import * as client from "openid-client";
import type { OutboxMailer } from "../src/trust/mail.js";
import { Browserless, field } from "./support/browser-session.js";
import { STORE_VARIANTS } from "./support/stores.js";
import { freePort, newAgent, RELAXED_RATE_LIMITS, startTrustHarness, type TrustHarness } from "./support/trust.js";

/**
 * Issue 13: logs carry no secret, even at `LOG_LEVEL=trace`. The attestor runs an e-mail sign-in,
 * a link confirmation, a mint, an OpenID authorization code flow and a few refused requests
 * while every log line is captured; none of the secrets involved may appear in them.
 */

const RP = "did:web:rp.example";
const REDIRECT_URI = "http://127.0.0.1:9/oidc/callback";

class Capture extends Writable {
  text = "";
  override _write(chunk: Buffer, _encoding: string, done: () => void): void {
    this.text += chunk.toString("utf8");
    done();
  }
}

const variant = STORE_VARIANTS[0];
assert.ok(variant);

describe("no secrets in logs", { timeout: 60_000 }, () => {
  const logs = new Capture();
  let h: TrustHarness;
  before(async () => {
    const port = await freePort();
    h = await startTrustHarness(variant, {
      port,
      logStream: logs,
      env: {
        LOG_LEVEL: "trace",
        TRUST_PUBLIC_URL: `http://127.0.0.1:${port}`,
        TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS,
        TRUST_OIDC_CLIENTS: JSON.stringify([{ client_id: RP, service_did: RP, redirect_uris: [REDIRECT_URI] }]),
      },
    });
  });
  after(() => h?.close());

  test("sign-in, link, mint, OpenID code flow and refused requests log none of their secrets", async () => {
    const secrets: Record<string, string> = {};
    const b = new Browserless(h.url);

    // E-mail sign-in: the magic-link token, CSRF cookie and tokens, the session cookie.
    const signin = await b.get("/signin?next=%2Faccount");
    const csrf = field(signin.text, "_csrf");
    secrets.signinCsrf = csrf;
    const email = `log-${Math.random().toString(36).slice(2)}@mail.test`;
    const sent = await b.post("/signin/email", { _csrf: csrf, next: "/account", email });
    assert.equal(sent.status, 200, sent.text);
    const mail = (h.app.mailer as OutboxMailer).entries.find((m) => m.to === email);
    const link = /\/signin\/email\/verify\?token=(\S+)/.exec(mail?.text ?? "");
    assert.ok(link?.[1]);
    secrets.magicLink = decodeURIComponent(link[1]);
    assert.match(secrets.magicLink, /^ml_/);
    const verify = await b.get(`/signin/email/verify?token=${link[1]}`);
    assert.equal(verify.status, 200, verify.text);
    secrets.verifyCsrf = field(verify.text, "_csrf");
    const signedIn = await b.post("/signin/email/verify", { _csrf: secrets.verifyCsrf, token: secrets.magicLink });
    assert.equal(signedIn.status, 303, signedIn.text);
    secrets.session = b.cookie("proto_session") ?? "";
    // Signing in drops the CSRF secret; the next page sets a new one.
    assert.equal((await b.get("/account")).status, 200);
    secrets.csrfCookie = b.cookie("proto_csrf") ?? "";
    assert.ok(secrets.session.length > 20 && secrets.csrfCookie.length > 10);

    // Link confirmation: the request id travels in the page's query and the form.
    const agent = newAgent();
    const started = await h.startLink(agent, { agent_label: "log agent" });
    assert.equal(started.status, 200, started.text);
    const reqId: string = started.json.req_id;
    secrets.reqId = reqId;
    const confirmPage = await b.get(`/link?req=${encodeURIComponent(reqId)}`);
    assert.equal(confirmPage.status, 200, confirmPage.text);
    secrets.linkCsrf = field(confirmPage.text, "_csrf");
    const confirmed = await b.post("/link/confirm", { _csrf: secrets.linkCsrf, req: reqId });
    assert.equal(confirmed.status, 200, confirmed.text);
    assert.equal((await h.poll(agent, reqId)).status, 200);

    // A mint: the request signature and the attestation.
    const minted = await h.mint(agent, RP);
    assert.equal(minted.status, 200, minted.text);
    secrets.attestation = minted.json.jwt;

    // The OpenID authorization code flow: the code, the verifier, the tokens.
    const verifier = client.randomPKCECodeVerifier();
    secrets.codeVerifier = verifier;
    const query = new URLSearchParams({
      client_id: RP,
      redirect_uri: REDIRECT_URI,
      response_type: "code",
      scope: "openid",
      code_challenge: await client.calculatePKCECodeChallenge(verifier),
      code_challenge_method: "S256",
      state: "state-secret-0123456789",
      nonce: "nonce-secret-0123456789",
    });
    // The first sign-in to this service asks; Allow posts the request back with the answer.
    const asked = await b.get(`/oidc/authorize?${query}`);
    assert.equal(asked.status, 200, asked.text);
    const authorized = await b.post("/oidc/consent", {
      ...Object.fromEntries(query),
      _csrf: field(asked.text, "_csrf"),
      decision: "allow",
    });
    assert.equal(authorized.status, 302, authorized.text);
    secrets.code = new URL(authorized.location ?? "").searchParams.get("code") ?? "";
    assert.ok(secrets.code.length > 20);
    const tokens = await b.post("/oidc/token", {
      grant_type: "authorization_code",
      code: secrets.code,
      code_verifier: verifier,
      client_id: RP,
      redirect_uri: REDIRECT_URI,
    });
    assert.equal(tokens.status, 200, tokens.text);
    secrets.idToken = tokens.json.id_token;
    secrets.accessToken = tokens.json.access_token;
    // The code again: refused, and logged as refused without the code.
    assert.equal((await b.post("/oidc/token", { grant_type: "authorization_code", code: secrets.code })).status, 400);

    // Credentials in headers, on a request that fails and on one the parser refuses.
    secrets.bearer = "bearer-secret-0123456789abcdef";
    const revoke = await h.request("DELETE", "/v1/bindings/nope?token=ml_query_secret_0123456789", {
      headers: { authorization: `Bearer ${secrets.bearer}`, cookie: `proto_session=${secrets.session}` },
    });
    assert.equal(revoke.status, 404, revoke.text);
    secrets.queryToken = "ml_query_secret_0123456789";
    await refusedByParser(h.url, `Cookie: proto_session=${secrets.session}\r\nX-Big: ${"b".repeat(20_000)}\r\n`);

    // The attestor's signing key.
    const jwk = h.app.keys.signingKey().privateKey.export({ format: "jwk" });
    assert.ok(jwk.d);
    secrets.signingKey = jwk.d;
    secrets.state = "state-secret-0123456789";
    secrets.nonce = "nonce-secret-0123456789";

    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.ok(logs.text.length > 0, "trace logs were written");
    for (const [name, secret] of Object.entries(secrets)) {
      assert.ok(secret.length >= 16, `${name} is a real secret`);
      assert.equal(logs.text.includes(secret), false, `the logs contain ${name}`);
      assert.equal(logs.text.includes(encodeURIComponent(secret)), false, `the logs contain ${name}, encoded`);
    }
    assert.match(logs.text, /\/signin\/email\/verify\?token=\[redacted\]/, "the access log keeps paths");
  });
});

/** Sends headers node's parser refuses (431) and waits for the connection to close. */
function refusedByParser(baseUrl: string, headers: string): Promise<void> {
  const { hostname, port } = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    socket.on("error", reject);
    socket.on("data", () => {});
    socket.on("close", () => resolve());
    socket.write(`GET /account HTTP/1.1\r\nHost: a\r\n${headers}\r\n`);
  });
}
