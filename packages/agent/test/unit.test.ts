/** Unit tests: the token cache (injectable clock), the key store and its permissions, the HTTP layer. */
import assert from "node:assert/strict";
import { chmodSync, existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { encodeBase64url, signRequest } from "@proto/protocol";
import {
  AgentIdentity,
  AgentStore,
  AttestorClient,
  AttestorError,
  type CachedToken,
  HttpClient,
  KeyStoreError,
  NetworkError,
  TokenCache,
} from "../src/index.js";
import { tempHome } from "./support/env.js";

const T0 = 1_800_000_000_000; // ms

function token(overrides: Partial<CachedToken> = {}): CachedToken {
  return {
    attestor_url: "https://trust.example",
    agent_did: "did:key:z6MkAgent",
    aud: "did:web:svc.example",
    jwt: "a.b.c",
    expires_at: T0 / 1000 + 900,
    verification: "email",
    minted_at: T0 / 1000,
    ...overrides,
  };
}

describe("token cache", () => {
  test("hands a token out only while it has more than 60 s left", () => {
    let now = T0;
    const cache = new TokenCache({ now: () => now });
    const t = token();
    cache.set(t);
    const get = () => cache.get(t.attestor_url, t.agent_did, t.aud);
    assert.equal(get()?.jwt, "a.b.c");
    now = (t.expires_at - 61) * 1000;
    assert.equal(get()?.jwt, "a.b.c");
    now = (t.expires_at - 60) * 1000 - 1;
    assert.equal(get()?.jwt, "a.b.c", "60.001 s left");
    now = (t.expires_at - 60) * 1000;
    assert.equal(get(), undefined, "exactly 60 s left: never");
    now = (t.expires_at - 30) * 1000;
    assert.equal(get(), undefined);
    now = (t.expires_at + 10) * 1000;
    assert.equal(get(), undefined);
  });

  test("is per audience, per agent, per attestor", () => {
    const cache = new TokenCache({ now: () => T0 });
    cache.set(token({ aud: "did:web:a.example", jwt: "A" }));
    cache.set(token({ aud: "did:web:b.example", jwt: "B" }));
    assert.equal(cache.get("https://trust.example", "did:key:z6MkAgent", "did:web:a.example")?.jwt, "A");
    assert.equal(cache.get("https://trust.example", "did:key:z6MkAgent", "did:web:b.example")?.jwt, "B");
    assert.equal(cache.get("https://trust.example", "did:key:z6MkOther", "did:web:a.example"), undefined);
    assert.equal(cache.get("https://other.example", "did:key:z6MkAgent", "did:web:a.example"), undefined);
    cache.delete("https://trust.example", "did:key:z6MkAgent", "did:web:a.example");
    assert.equal(cache.get("https://trust.example", "did:key:z6MkAgent", "did:web:a.example"), undefined);
    assert.equal(cache.list().length, 1);
  });

  test("refuses a margin under 60 s; drops expired entries when written; persists", () => {
    assert.throws(() => new TokenCache({ marginSeconds: 30 }), RangeError);
    let saved: CachedToken[] = [token({ aud: "did:web:old.example", expires_at: T0 / 1000 - 1 })];
    const persistence = { load: () => saved, save: (tokens: CachedToken[]) => (saved = tokens) };
    const cache = new TokenCache({ now: () => T0, persistence });
    cache.set(token());
    assert.deepEqual(
      saved.map((t) => t.aud),
      ["did:web:svc.example"],
    );
    const reloaded = new TokenCache({ now: () => T0, persistence });
    assert.equal(reloaded.get("https://trust.example", "did:key:z6MkAgent", "did:web:svc.example")?.jwt, "a.b.c");
  });

  test("AttestorClient.token mints again once the cached token is within 60 s of exp", async () => {
    let now = T0;
    const identity = AgentIdentity.generate();
    const mints: string[] = [];
    const fakeFetch = (async (input: string | URL | Request, init?: RequestInit) => {
      assert.equal(String(input), "https://trust.example/v1/token");
      const body = JSON.parse(String(init?.body)) as { aud: string };
      mints.push(body.aud);
      const iat = Math.floor(now / 1000);
      return Response.json({
        jwt: `jwt-${mints.length}`,
        expires_at: iat + 300,
        verification: "email",
        binding_expires_at: iat + 90 * 86400,
      });
    }) as typeof fetch;
    const client = new AttestorClient({ url: "https://trust.example/", identity, fetch: fakeFetch, now: () => now });
    assert.equal(client.url, "https://trust.example");
    const first = await client.token("did:web:svc.example");
    assert.deepEqual([first.jwt, first.cached], ["jwt-1", false]);
    now += 239_000; // 61 s left
    const second = await client.token("did:web:svc.example");
    assert.deepEqual([second.jwt, second.cached], ["jwt-1", true]);
    now += 1_000; // 60 s left
    const third = await client.token("did:web:svc.example");
    assert.deepEqual([third.jwt, third.cached], ["jwt-2", false]);
    assert.equal((await client.token("did:web:svc.example", { fresh: true })).jwt, "jwt-3");
    assert.equal(client.binding()?.binding_expires_at, Math.floor(now / 1000) + 90 * 86400);
  });

  test("a binding_revoked mint drops the cache and records the state; errors carry status and Retry-After", async () => {
    const identity = AgentIdentity.generate();
    let answer: Response = Response.json({
      jwt: "j",
      expires_at: T0 / 1000 + 900,
      verification: "email",
      binding_expires_at: 1,
    });
    const client = new AttestorClient({
      url: "https://trust.example",
      identity,
      fetch: (async () => answer) as typeof fetch,
      now: () => T0,
    });
    await client.token("did:web:svc.example");
    answer = Response.json(
      { error: { code: "binding_revoked", message: "the person revoked this binding" } },
      { status: 403 },
    );
    await assert.rejects(client.mint("did:web:svc.example"), (error: unknown) => {
      assert.ok(error instanceof AttestorError);
      assert.deepEqual([error.code, error.status, error.kind], ["binding_revoked", 403, "auth"]);
      return true;
    });
    assert.equal(client.tokenCache.get(client.url, identity.did, "did:web:svc.example"), undefined);
    assert.equal(client.binding()?.state, "revoked");
    answer = Response.json(
      { error: { code: "rate_limited", message: "slow down" } },
      { status: 429, headers: { "retry-after": "17" } },
    );
    await assert.rejects(client.mint("did:web:svc.example"), (error: unknown) => {
      assert.ok(error instanceof AttestorError);
      assert.deepEqual([error.code, error.status, error.retryAfter, error.kind], ["rate_limited", 429, 17, "server"]);
      return true;
    });
  });

  test("the mint request is signed over exactly {trust_url}/v1/token", async () => {
    const identity = AgentIdentity.fromSeed(new Uint8Array(32).fill(3));
    let seen: Headers | undefined;
    const client = new AttestorClient({
      url: "https://trust.example/base/",
      identity,
      now: () => T0,
      fetch: (async (_input: string | URL | Request, init?: RequestInit) => {
        seen = new Headers(init?.headers);
        return Response.json({ jwt: "j", expires_at: T0 / 1000 + 900, verification: "email" });
      }) as typeof fetch,
    });
    await client.mint("did:web:svc.example");
    const nonce = /nonce="([^"]+)"/.exec(seen?.get("signature-input") ?? "")?.[1] ?? "";
    const expected = signRequest(
      { method: "POST", url: "https://trust.example/base/v1/token", body: '{"aud":"did:web:svc.example"}' },
      { keyid: identity.did, privateKey: identity.privateKey, now: () => T0, nonce },
    );
    assert.equal(seen?.get("signature"), expected.headers.signature);
    assert.equal(seen?.get("content-digest"), expected.headers["content-digest"]);
  });
});

describe("key store", () => {
  test("creates the key 0600 in a 0700 home and loads it back", () => {
    const store = new AgentStore(tempHome());
    const identity = store.createIdentity();
    assert.equal(statSync(store.keyPath).mode & 0o777, 0o600);
    assert.equal(statSync(store.home).mode & 0o777, 0o700);
    assert.equal(store.loadIdentity().did, identity.did);
    assert.throws(
      () => store.createIdentity(),
      (e: unknown) => e instanceof KeyStoreError && e.code === "key_exists",
    );
    assert.equal(store.initIdentity().created, false);
  });

  test("refuses a key file readable or writable by group or others", () => {
    const store = new AgentStore(tempHome());
    store.createIdentity();
    for (const mode of [0o644, 0o640, 0o604, 0o620, 0o660]) {
      chmodSync(store.keyPath, mode);
      assert.throws(
        () => store.loadIdentity(),
        (error: unknown) =>
          error instanceof KeyStoreError &&
          error.code === "unsafe_permissions" &&
          error.kind === "keystore" &&
          error.message.includes(`mode 0${mode.toString(8)}`) &&
          error.message.includes(`chmod 600 ${store.keyPath}`),
      );
    }
    chmodSync(store.keyPath, 0o400);
    assert.ok(store.loadIdentity().did.startsWith("did:key:"));
  });

  test("refuses a missing, corrupt or inconsistent key file", () => {
    const store = new AgentStore(tempHome());
    assert.throws(
      () => store.loadIdentity(),
      (e: unknown) => e instanceof KeyStoreError && e.code === "no_key",
    );
    const identity = store.createIdentity();
    const file = JSON.parse(readFileSync(store.keyPath, "utf8"));
    writeFileSync(store.keyPath, JSON.stringify({ ...file, did_key: AgentIdentity.generate().did }), { mode: 0o600 });
    assert.throws(
      () => store.loadIdentity(),
      (e: unknown) => e instanceof KeyStoreError && e.code === "invalid_key_file",
    );
    writeFileSync(store.keyPath, "{", { mode: 0o600 });
    assert.throws(
      () => store.loadIdentity(),
      (e: unknown) => e instanceof KeyStoreError && e.code === "invalid_key_file",
    );
    writeFileSync(store.keyPath, JSON.stringify(file), { mode: 0o600 });
    assert.equal(store.loadIdentity().did, identity.did);
  });

  test("rotation archives the old key (0600) and drops its cached tokens", () => {
    const store = new AgentStore(tempHome());
    const old = store.createIdentity();
    store.writeTokens([token({ agent_did: old.did }), token({ agent_did: "did:key:z6MkSomeoneElse" })]);
    const { previous, current, archivedTo } = store.rotateIdentity();
    assert.equal(previous.did, old.did);
    assert.notEqual(current.did, old.did);
    assert.equal(store.loadIdentity().did, current.did);
    assert.equal(statSync(archivedTo).mode & 0o777, 0o600);
    assert.equal(statSync(store.archiveDir).mode & 0o777, 0o700);
    assert.deepEqual(
      store.archivedIdentities().map((i) => i.did),
      [old.did],
    );
    assert.deepEqual(
      store.readTokens().map((t) => t.agent_did),
      ["did:key:z6MkSomeoneElse"],
    );
  });

  test("exports: public by default, the private key only when asked; JSON never leaks it", () => {
    const identity = AgentIdentity.fromSeed(new Uint8Array(32).fill(1));
    const exported = identity.exportPublic();
    assert.deepEqual(Object.keys(exported).sort(), [
      "algorithm",
      "created_at",
      "did",
      "jwk",
      "public_key_b64",
      "public_key_multibase",
    ]);
    assert.equal(exported.jwk.x, exported.public_key_b64);
    assert.equal(JSON.stringify(identity).includes("private"), false);
    const secret = identity.exportPrivate();
    assert.equal(secret.private_key_b64, encodeBase64url(new Uint8Array(32).fill(1)));
    assert.match(secret.private_key_pem, /^-----BEGIN PRIVATE KEY-----/);
  });

  test("session tokens and configuration are written 0600, one file per listing", () => {
    const store = new AgentStore(tempHome());
    const path = store.saveSession({
      directory_url: "https://dir.example",
      service_did: "did:web:svc.example",
      session_token: "sess_x",
      expires_at: "2030-01-01T00:00:00.000Z",
      saved_at: "2029-01-01T00:00:00.000Z",
    });
    assert.equal(statSync(path).mode & 0o777, 0o600);
    assert.equal(statSync(join(store.home, "sessions")).mode & 0o777, 0o700);
    assert.equal(store.getSession("https://dir.example", "did:web:svc.example")?.session_token, "sess_x");
    assert.equal(store.getSession("https://other.example", "did:web:svc.example"), undefined);
    store.deleteSession("https://dir.example", "did:web:svc.example");
    assert.equal(existsSync(path), false);
    store.updateConfig({ attestor_url: "https://trust.example" });
    assert.equal(statSync(join(store.home, "config.json")).mode & 0o777, 0o600);
  });
});

describe("HTTP layer", () => {
  const streaming = (size: number, declare: boolean) =>
    (async () =>
      new Response(
        new ReadableStream({
          start(controller) {
            for (let sent = 0; sent < size; sent += 1024) controller.enqueue(new Uint8Array(1024));
            controller.close();
          },
        }),
        { headers: declare ? { "content-length": String(size) } : {} },
      )) as typeof fetch;

  test("caps response bodies, declared or streamed", async () => {
    for (const declare of [true, false]) {
      const http = new HttpClient({ fetch: streaming(8192, declare), maxResponseBytes: 4096 });
      await assert.rejects(
        http.request("https://svc.example/x", { method: "GET" }),
        (e: unknown) => e instanceof NetworkError && e.code === "response_too_large",
      );
    }
    const http = new HttpClient({ fetch: streaming(4096, false), maxResponseBytes: 4096 });
    assert.equal((await http.request("https://svc.example/x", { method: "GET" })).body.length, 4096);
  });

  test("turns fetch failures into one-line network errors naming the host only", async () => {
    const refused = Object.assign(new TypeError("fetch failed"), {
      cause: Object.assign(new Error("connect ECONNREFUSED 10.1.2.3:443"), { code: "ECONNREFUSED" }),
    });
    const http = new HttpClient({
      fetch: (async () => {
        throw refused;
      }) as typeof fetch,
    });
    await assert.rejects(http.request("https://svc.example/secret?token=x", { method: "GET" }), (e: unknown) => {
      assert.ok(e instanceof NetworkError);
      assert.equal(e.message, "cannot reach https://svc.example: connection refused");
      return true;
    });
  });

  test("a TLS failure says why the certificate was refused; an untrusted one names NODE_EXTRA_CA_CERTS", async () => {
    const failing = (code: string) =>
      new HttpClient({
        fetch: (async () => {
          throw Object.assign(new TypeError("fetch failed"), {
            cause: Object.assign(new Error("certificate refused"), { code }),
          });
        }) as typeof fetch,
      });
    const messageFor = async (code: string) => {
      try {
        await failing(code).request("https://svc.example/x", { method: "GET" });
      } catch (error) {
        assert.ok(error instanceof NetworkError);
        assert.equal(error.code, "tls_error");
        return error.message;
      }
      assert.fail("no error");
    };
    for (const code of [
      "DEPTH_ZERO_SELF_SIGNED_CERT",
      "SELF_SIGNED_CERT_IN_CHAIN",
      "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
      "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
    ]) {
      assert.equal(
        await messageFor(code),
        `cannot reach https://svc.example: the server's TLS certificate is not trusted (${code}); if it comes from a development CA, point NODE_EXTRA_CA_CERTS at its PEM (npm run dev: data/dev-ca/ca.pem)`,
      );
    }
    assert.equal(
      await messageFor("CERT_HAS_EXPIRED"),
      "cannot reach https://svc.example: the server's TLS certificate has expired (CERT_HAS_EXPIRED)",
    );
    assert.equal(
      await messageFor("ERR_TLS_CERT_ALTNAME_INVALID"),
      "cannot reach https://svc.example: the server's TLS certificate does not name this host (ERR_TLS_CERT_ALTNAME_INVALID)",
    );
  });

  test("times out a request that never answers", async () => {
    const hang = ((_input: string | URL | Request, init?: RequestInit) =>
      new Promise((_resolve, reject) => {
        init?.signal?.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError")));
      })) as typeof fetch;
    const http = new HttpClient({ fetch: hang, timeoutMs: 50 });
    await assert.rejects(
      http.request("https://svc.example/x", { method: "GET" }),
      (e: unknown) => e instanceof NetworkError && e.code === "timeout" && e.message.includes("50 ms"),
    );
  });
});
