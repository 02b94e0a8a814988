import assert from "node:assert/strict";
import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject, sign } from "node:crypto";
import { after, before, beforeEach, describe, it } from "node:test";
import { createTestCA, type HttpsHost, startHttpsHost, type TestCA } from "@proto/testkit";
import { encodeBase64url } from "../src/base64url.js";
import { rawPublicKey } from "../src/ed25519.js";
import { createSafeFetcher, parseResolveOverrides, type SafeFetcher } from "../src/safe-fetch.js";
import { checkDirectorySignatures } from "../src/web-bot-auth/directory-signature.js";
import {
  directoryUrlFor,
  jwkThumbprint,
  KEY_DIRECTORY_MEDIA_TYPE,
  KEY_DIRECTORY_PATH,
  KeyDirectoryClient,
  KeyDirectoryError,
  type KeyDirectoryFailure,
  type KeyDirectoryOptions,
} from "../src/web-bot-auth/key-directory.js";

// RFC 9421 App. B.1.4 `test-key-ed25519`, the key of the Web Bot Auth test vectors.
const TEST_KEY_PRIVATE = createPrivateKey(
  "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF\n-----END PRIVATE KEY-----\n",
);
const TEST_KEY_PUBLIC = createPublicKey(
  "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAJrQLj5P/89iXES9+vFgrIy29clF9CC/oPPsw3c5D0bs=\n-----END PUBLIC KEY-----\n",
);
const TEST_KEY_THUMBPRINT = "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";
const TEST_KEY_X = "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs";

// draft-ietf-webbotauth-httpsig-protocol-01, test vector "signed directory response".
const VECTOR = {
  body: `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"${TEST_KEY_THUMBPRINT}","x":"${TEST_KEY_X}","use":"sig"}]}`,
  contentDigest: "sha-256=:CADMT2aBdV/rqQr/NIru64ERQkCobVvllA4V0fLFDu0=:",
  signatureInput: `binding=("@authority";req "content-digest");created=1735689600;expires=4889289600;keyid="${TEST_KEY_THUMBPRINT}";tag="http-message-signatures-directory"`,
  signature: "binding=:l6P8R67tm3kujAxbHWio7ll01qrEZ0dKD/WWlGhNYEmTnFZM8Wt0VQ9zqGfvo7T/UMkBxsigzChM1Gpz7gOVBg==:",
  base: [
    '"@authority";req: signature-agent.test',
    '"content-digest": sha-256=:CADMT2aBdV/rqQr/NIru64ERQkCobVvllA4V0fLFDu0=:',
    `"@signature-params": ("@authority";req "content-digest");created=1735689600;expires=4889289600;keyid="${TEST_KEY_THUMBPRINT}";tag="http-message-signatures-directory"`,
  ].join("\n"),
};

/** 1 Jan 2025 00:01:40 UTC: just after the vector's `created`. */
const START_MS = 1_735_689_700_000;
const DIRECTORY_HOST = "agent.test";

type Jwk = Record<string, unknown>;

function ed25519Jwk(publicKey: KeyObject, extra: Jwk = {}): Jwk {
  return { kty: "OKP", crv: "Ed25519", x: encodeBase64url(rawPublicKey(publicKey)), ...extra };
}

function newKey(): { publicKey: KeyObject; privateKey: KeyObject; thumbprint: string } {
  const pair = generateKeyPairSync("ed25519");
  return { ...pair, thumbprint: jwkThumbprint(pair.publicKey) };
}

function sameKey(a: KeyObject | undefined, b: KeyObject): boolean {
  return a?.equals(b) === true;
}

interface DirectorySignatureSpec {
  authority: string;
  key?: KeyObject;
  keyid?: string;
  created?: number;
  expires?: number;
  components?: string;
  /** Signs this body instead of the one served, to forge a Content-Digest mismatch. */
  signedBody?: string;
}

/** Headers of a signed directory response, the base written out as the draft's vector spells it. */
function signDirectory(body: string, spec: DirectorySignatureSpec): Record<string, string> {
  const digestOf = (text: string) => `sha-256=:${createHash("sha256").update(text).digest("base64")}:`;
  const params =
    `${spec.components ?? '("@authority";req "content-digest")'};created=${spec.created ?? 1735689600};` +
    `expires=${spec.expires ?? 4889289600};keyid="${spec.keyid ?? TEST_KEY_THUMBPRINT}";` +
    `tag="http-message-signatures-directory"`;
  const digest = digestOf(spec.signedBody ?? body);
  const base = `"@authority";req: ${spec.authority}\n"content-digest": ${digest}\n"@signature-params": ${params}`;
  const signature = sign(null, Buffer.from(base), spec.key ?? TEST_KEY_PRIVATE).toString("base64");
  return { "content-digest": digest, "signature-input": `binding=${params}`, signature: `binding=:${signature}:` };
}

async function failure(promise: Promise<unknown>, kind: KeyDirectoryFailure): Promise<KeyDirectoryError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof KeyDirectoryError, `expected a KeyDirectoryError, got ${String(error)}`);
    assert.equal(error.kind, kind, `expected ${kind}, got ${error.kind}: ${error.message}`);
    return error;
  }
  assert.fail(`expected the key directory to fail with ${kind}`);
}

describe("jwkThumbprint", () => {
  it("is the RFC 8037 thumbprint of the RFC 9421 test key", () => {
    assert.equal(jwkThumbprint(TEST_KEY_PUBLIC), TEST_KEY_THUMBPRINT);
    assert.equal(jwkThumbprint(TEST_KEY_PRIVATE), TEST_KEY_THUMBPRINT);
  });

  it("refuses keys that are not Ed25519", () => {
    assert.throws(() => jwkThumbprint(generateKeyPairSync("x25519").publicKey), TypeError);
  });
});

describe("directoryUrlFor", () => {
  it("reads a bare origin as its well-known directory (-00 and agents in the wild)", () => {
    assert.equal(directoryUrlFor("https://chatgpt.com"), `https://chatgpt.com${KEY_DIRECTORY_PATH}`);
    assert.equal(directoryUrlFor("https://Bot.Example:443/"), `https://bot.example${KEY_DIRECTORY_PATH}`);
  });

  it("takes any other https URL as the JWK Set itself (-01), without query or fragment", () => {
    assert.equal(directoryUrlFor("https://signature-agent.test/jwks.json"), "https://signature-agent.test/jwks.json");
    assert.equal(directoryUrlFor("https://a.test:8443/keys?v=2#x"), "https://a.test:8443/keys");
  });

  const refused = [
    "http://signature-agent.test",
    "http://signature-agent.test/.well-known/http-message-signatures-directory",
    "ftp://a.test/",
    "https:a.test",
    '"https://a.test"',
    " https://a.test",
    "https://user:pw@a.test/",
    "https://a.test/\u00e9",
    "not a url",
    `https://a.test/${"x".repeat(2048)}`,
  ];
  for (const value of refused) {
    it(`refuses ${JSON.stringify(value.slice(0, 60))}`, () => {
      assert.throws(
        () => directoryUrlFor(value),
        (error: unknown) => {
          return error instanceof KeyDirectoryError && error.kind === "malformed";
        },
      );
    });
  }
});

describe("signed directory response: the draft's vector", () => {
  const url = `https://signature-agent.test${KEY_DIRECTORY_PATH}`;
  const headers = {
    "content-type": KEY_DIRECTORY_MEDIA_TYPE,
    "content-digest": VECTOR.contentDigest,
    "signature-input": VECTOR.signatureInput,
    signature: VECTOR.signature,
  };
  const keys = new Map([[TEST_KEY_THUMBPRINT, TEST_KEY_PUBLIC]]);
  const nowSeconds = START_MS / 1000;

  it("reproduces the vector's Content-Digest and signature from its base", () => {
    assert.equal(`sha-256=:${createHash("sha256").update(VECTOR.body).digest("base64")}:`, VECTOR.contentDigest);
    const signature = sign(null, Buffer.from(VECTOR.base), TEST_KEY_PRIVATE).toString("base64");
    assert.equal(`binding=:${signature}:`, VECTOR.signature);
  });

  it("verifies the vector", () => {
    const response = { url, headers, body: Buffer.from(VECTOR.body) };
    assert.equal(checkDirectorySignatures(response, keys, nowSeconds), "signed");
  });

  it("fails the vector for another authority, another body, or before it was created", () => {
    const body = Buffer.from(VECTOR.body);
    const otherHost = { url: `https://other.test${KEY_DIRECTORY_PATH}`, headers, body };
    const otherPort = { url: `https://signature-agent.test:8443${KEY_DIRECTORY_PATH}`, headers, body };
    const otherBody = { url, headers, body: Buffer.from(`${VECTOR.body} `) };
    for (const response of [otherHost, otherPort, otherBody]) {
      assert.throws(() => checkDirectorySignatures(response, keys, nowSeconds), { kind: "bad_signature" });
    }
    assert.throws(() => checkDirectorySignatures({ url, headers, body }, keys, 1735689600 - 61), {
      kind: "bad_signature",
    });
  });
});

describe("KeyDirectoryClient over real HTTPS", () => {
  let ca: TestCA;
  let host: HttpsHost;
  let fetcher: SafeFetcher;
  let now = START_MS;
  const wellKnown = () => `${host.origin(DIRECTORY_HOST)}${KEY_DIRECTORY_PATH}`;
  const fetchesOf = (path: string) => host.requests.filter((request) => request.path === path).length;

  before(async () => {
    ca = await createTestCA();
    host = await startHttpsHost({ ca, hostnames: [DIRECTORY_HOST, "signature-agent.test"] });
    fetcher = createSafeFetcher({
      allowPrivate: true,
      resolve: parseResolveOverrides(host.resolveEntries()),
      ca: ca.certPem,
      lookup: async () => assert.fail("DNS must not be consulted for a pinned name"),
    });
  });

  after(async () => {
    await host.close();
  });

  beforeEach(() => {
    host.reset();
    now = START_MS;
  });

  function client(options: Partial<KeyDirectoryOptions> = {}): KeyDirectoryClient {
    return new KeyDirectoryClient({ fetcher, now: () => now, ...options });
  }

  function serve(
    keys: unknown[] | string,
    options: { path?: string; contentType?: string; headers?: Record<string, string>; status?: number } = {},
  ): string {
    const body = typeof keys === "string" ? keys : JSON.stringify({ keys });
    host.route(options.path ?? KEY_DIRECTORY_PATH, {
      status: options.status ?? 200,
      body,
      headers: { "content-type": options.contentType ?? KEY_DIRECTORY_MEDIA_TYPE, ...options.headers },
    });
    return body;
  }

  describe("a good directory", () => {
    it("returns its Ed25519 keys by thumbprint, asking for the directory media type", async () => {
      const a = newKey();
      serve([ed25519Jwk(a.publicKey, { kid: a.thumbprint, use: "sig" }), ed25519Jwk(TEST_KEY_PUBLIC)]);
      const keys = await client().keys(wellKnown());
      assert.deepEqual([...keys.keys()].sort(), [a.thumbprint, TEST_KEY_THUMBPRINT].sort());
      assert.ok(sameKey(keys.get(a.thumbprint), a.publicKey));
      const [request] = host.requests;
      assert.equal(host.requests.length, 1);
      assert.equal(request?.method, "GET");
      assert.match(request?.headers.accept ?? "", /^application\/http-message-signatures-directory\+json,/);
      assert.match(request?.headers.accept ?? "", /application\/jwk-set\+json;q=0\.\d/);
      assert.match(request?.headers.accept ?? "", /application\/json;q=0\.\d/);
    });

    it("resolves a key with lookup, and a bare-origin Signature-Agent names the same directory", async () => {
      const a = newKey();
      serve([ed25519Jwk(a.publicKey)]);
      const directory = client();
      const url = directoryUrlFor(host.origin(DIRECTORY_HOST));
      assert.equal(url, wellKnown());
      assert.ok(sameKey(await directory.lookup(url, a.thumbprint), a.publicKey));
      assert.ok(sameKey(await directory.lookup(wellKnown(), a.thumbprint), a.publicKey));
      assert.equal(host.requests.length, 1);
    });

    it("accepts a JWK Set or JSON media type away from the well-known path, with any kid", async () => {
      const a = newKey();
      const b = newKey();
      serve([ed25519Jwk(a.publicKey, { kid: "2025-rotation" })], {
        path: "/jwks.json",
        contentType: "application/jwk-set+json",
      });
      serve([ed25519Jwk(b.publicKey)], { path: "/keys", contentType: "application/json; charset=utf-8" });
      const directory = client();
      const origin = host.origin(DIRECTORY_HOST);
      assert.ok(sameKey(await directory.lookup(`${origin}/jwks.json`, a.thumbprint), a.publicKey));
      assert.ok(sameKey(await directory.lookup(`${origin}/keys`, b.thumbprint), b.publicKey));
    });
  });

  describe("responses it refuses", () => {
    it("refuses a wrong media type at the well-known path", async () => {
      serve([ed25519Jwk(newKey().publicKey)], { contentType: "application/json" });
      await failure(client().keys(wellKnown()), "media_type");
      serve([ed25519Jwk(newKey().publicKey)], { contentType: "text/html" });
      await failure(client().keys(wellKnown()), "media_type");
      serve([ed25519Jwk(newKey().publicKey)], { path: "/jwks.json", contentType: "text/plain" });
      await failure(client().keys(`${host.origin(DIRECTORY_HOST)}/jwks.json`), "media_type");
    });

    it("does not follow a redirect, and never requests its target", async () => {
      serve([ed25519Jwk(newKey().publicKey)]);
      host.misbehave(KEY_DIRECTORY_PATH, "redirect");
      await failure(client().keys(wellKnown()), "redirect");
      assert.deepEqual(
        host.requests.map((request) => request.path),
        [KEY_DIRECTORY_PATH],
      );
    });

    it("refuses an oversized body, streamed or declared", async () => {
      serve([ed25519Jwk(newKey().publicKey)]);
      host.misbehave(KEY_DIRECTORY_PATH, "oversized");
      await failure(client().keys(wellKnown()), "too_large");
      const padded = JSON.stringify({ keys: [ed25519Jwk(newKey().publicKey)], padding: "x".repeat(2048) });
      serve(padded);
      await failure(client({ maxBytes: 1024 }).keys(wellKnown()), "too_large");
    });

    it("refuses any status but 200", async () => {
      serve([ed25519Jwk(newKey().publicKey)], { status: 203 });
      await failure(client().keys(wellKnown()), "http_status");
      serve("", { status: 204 });
      await failure(client().keys(wellKnown()), "http_status");
    });

    it("refuses bodies that are not a JSON object with a keys array, or list too many keys", async () => {
      for (const body of ["not json", "[]", '{"keys":{}}', "null", '{"key":[]}', "\u00ff"]) {
        serve(body);
        await failure(client().keys(wellKnown()), "malformed");
      }
      serve(Array.from({ length: 3 }, () => ed25519Jwk(newKey().publicKey)));
      await failure(client({ maxKeys: 2 }).keys(wellKnown()), "malformed");
    });

    it("refuses http URLs without sending anything", async () => {
      serve([ed25519Jwk(newKey().publicKey)]);
      const insecure = `http://${DIRECTORY_HOST}:${host.port}${KEY_DIRECTORY_PATH}`;
      await failure(client().keys(insecure), "malformed");
      await failure(client().lookup(insecure, TEST_KEY_THUMBPRINT), "malformed");
      assert.equal(host.requests.length, 0);
    });

    it("reports an unreachable host as unreachable", async () => {
      const gone = `https://unpinned.test:${host.port}${KEY_DIRECTORY_PATH}`;
      const noDns = createSafeFetcher({
        allowPrivate: false,
        resolve: new Map(),
        lookup: async () => [{ address: "127.0.0.1", family: 4 }],
      });
      await failure(new KeyDirectoryClient({ fetcher: noDns, now: () => now }).keys(gone), "unreachable");
      assert.equal(host.requests.length, 0);
    });
  });

  describe("keys it ignores", () => {
    it("ignores a key whose kid is not its thumbprint at the well-known path", async () => {
      const a = newKey();
      const b = newKey();
      serve([ed25519Jwk(a.publicKey, { kid: "key-1" }), ed25519Jwk(b.publicKey, { kid: b.thumbprint })]);
      const keys = await client().keys(wellKnown());
      assert.deepEqual([...keys.keys()], [b.thumbprint]);
    });

    it("ignores keys that are not Ed25519 signing keys, and malformed entries", async () => {
      const good = newKey();
      const rsa = generateKeyPairSync("rsa", { modulusLength: 2048 }).publicKey.export({ format: "jwk" });
      const ec = generateKeyPairSync("ec", { namedCurve: "P-256" }).publicKey.export({ format: "jwk" });
      const x25519 = generateKeyPairSync("x25519").publicKey.export({ format: "jwk" });
      const privateJwk = generateKeyPairSync("ed25519").privateKey.export({ format: "jwk" });
      const x = encodeBase64url(rawPublicKey(newKey().publicKey));
      serve([
        rsa,
        ec,
        x25519,
        privateJwk,
        { kty: "oct", k: "c2VjcmV0" },
        { kty: "OKP", crv: "Ed448", x },
        { kty: "OKP", crv: "Ed25519" },
        { kty: "OKP", crv: "Ed25519", x: x.slice(0, -2) },
        { kty: "OKP", crv: "Ed25519", x: `${x}=` },
        { kty: "OKP", crv: "Ed25519", x, use: "enc" },
        { kty: "OKP", crv: "Ed25519", x, alg: "RS256" },
        { kty: "OKP", crv: "Ed25519", x, kid: 7 },
        { kty: "OKP", crv: "Ed25519", x, nbf: "soon" },
        "a string",
        null,
        [x],
        ed25519Jwk(good.publicKey, { alg: "ed25519" }),
      ]);
      const keys = await client().keys(wellKnown());
      assert.deepEqual([...keys.keys()], [good.thumbprint]);
    });

    it("honours nbf and exp on a key, as the clock moves, without refetching", async () => {
      const expired = newKey();
      const current = newKey();
      const later = newKey();
      const nowSeconds = START_MS / 1000;
      serve([
        ed25519Jwk(expired.publicKey, { exp: nowSeconds - 1 }),
        ed25519Jwk(current.publicKey, { nbf: nowSeconds - 10, exp: nowSeconds + 100 }),
        ed25519Jwk(later.publicKey, { nbf: nowSeconds + 50 }),
      ]);
      const directory = client();
      assert.deepEqual([...(await directory.keys(wellKnown())).keys()], [current.thumbprint]);
      now += 50_000;
      assert.deepEqual(
        [...(await directory.keys(wellKnown())).keys()].sort(),
        [current.thumbprint, later.thumbprint].sort(),
      );
      now += 50_000;
      assert.deepEqual([...(await directory.keys(wellKnown())).keys()], [later.thumbprint]);
      assert.equal(host.requests.length, 1);
    });
  });

  describe("failures", () => {
    it("caches a 500 as a failure for failureCacheSeconds, clamped to 300", async () => {
      host.misbehave(KEY_DIRECTORY_PATH, "status-500");
      const directory = client({ failureCacheSeconds: 3600 });
      const first = await failure(directory.keys(wellKnown()), "http_status");
      assert.equal(first.retryAfterSeconds, 300);
      serve([ed25519Jwk(newKey().publicKey)]);
      now += 299_000;
      const cached = await failure(directory.keys(wellKnown()), "http_status");
      assert.equal(cached.retryAfterSeconds, 1);
      assert.equal(
        await directory.lookup(wellKnown(), TEST_KEY_THUMBPRINT).catch((e: KeyDirectoryError) => e.kind),
        "http_status",
      );
      assert.equal(host.requests.length, 1);
      now += 1_000;
      assert.equal((await directory.keys(wellKnown())).size, 1);
      assert.equal(host.requests.length, 2);
    });

    it("caches a failure for the configured time when shorter", async () => {
      host.misbehave(KEY_DIRECTORY_PATH, "status-500");
      const directory = client({ failureCacheSeconds: 30 });
      await failure(directory.keys(wellKnown()), "http_status");
      now += 29_000;
      await failure(directory.keys(wellKnown()), "http_status");
      assert.equal(host.requests.length, 1);
      now += 1_000;
      await failure(directory.keys(wellKnown()), "http_status");
      assert.equal(host.requests.length, 2);
    });

    it("keeps serving good keys through failed refetches, for one more default max-age", async () => {
      const a = newKey();
      serve([ed25519Jwk(a.publicKey)], { headers: { "cache-control": "max-age=100" } });
      const directory = client({ defaultMaxAgeSeconds: 600, failureCacheSeconds: 60 });
      assert.ok(sameKey(await directory.lookup(wellKnown(), a.thumbprint), a.publicKey));

      host.misbehave(KEY_DIRECTORY_PATH, "status-500");
      now = START_MS + 101_000; // stale: refetch fails, the good keys stay
      assert.ok(sameKey(await directory.lookup(wellKnown(), a.thumbprint), a.publicKey));
      assert.equal(host.requests.length, 2);
      now = START_MS + 150_000; // failure cached: no fetch
      assert.ok((await directory.keys(wellKnown())).has(a.thumbprint));
      assert.equal(host.requests.length, 2);
      now = START_MS + 161_000; // failure expired: another failed refetch, keys still served
      assert.ok((await directory.keys(wellKnown())).has(a.thumbprint));
      assert.equal(host.requests.length, 3);

      now = START_MS + 700_000; // max-age 100 + default 600 have passed
      await failure(directory.keys(wellKnown()), "http_status");
      assert.equal(host.requests.length, 4);

      serve([ed25519Jwk(a.publicKey)]);
      now = START_MS + 760_000; // the host recovered once the failure expired
      assert.ok((await directory.keys(wellKnown())).has(a.thumbprint));
      assert.equal(host.requests.length, 5);
    });

    it("does not refetch for an unknown keyid while a failure is cached", async () => {
      const a = newKey();
      serve([ed25519Jwk(a.publicKey)], { headers: { "cache-control": "max-age=100" } });
      const directory = client({ failureCacheSeconds: 300 });
      await directory.keys(wellKnown());
      host.misbehave(KEY_DIRECTORY_PATH, "status-500");
      now = START_MS + 101_000;
      assert.equal(await directory.lookup(wellKnown(), TEST_KEY_THUMBPRINT), undefined);
      assert.equal(host.requests.length, 2);
      now = START_MS + 300_000; // a minute past the failed fetch, but its failure is still cached
      assert.equal(await directory.lookup(wellKnown(), TEST_KEY_THUMBPRINT), undefined);
      assert.ok(sameKey(await directory.lookup(wellKnown(), a.thumbprint), a.publicKey));
      assert.equal(host.requests.length, 2);
      now = START_MS + 401_000;
      assert.equal(await directory.lookup(wellKnown(), TEST_KEY_THUMBPRINT), undefined);
      assert.equal(host.requests.length, 3);
    });

    it("replaces the keys on a successful refetch that lacks one (key removal)", async () => {
      const a = newKey();
      const b = newKey();
      serve([ed25519Jwk(a.publicKey), ed25519Jwk(b.publicKey)], { headers: { "cache-control": "max-age=100" } });
      const directory = client();
      assert.equal((await directory.keys(wellKnown())).size, 2);
      serve([ed25519Jwk(b.publicKey)]);
      now += 100_000;
      assert.deepEqual([...(await directory.keys(wellKnown())).keys()], [b.thumbprint]);
      assert.equal(await directory.lookup(wellKnown(), a.thumbprint), undefined);
    });
  });

  describe("HTTP caching", () => {
    async function refetchedAfter(
      headers: Record<string, string>,
      options: Partial<KeyDirectoryOptions>,
      secondsFresh: number,
    ): Promise<void> {
      host.reset();
      now = START_MS;
      serve([ed25519Jwk(newKey().publicKey)], { headers });
      const directory = client(options);
      await directory.keys(wellKnown());
      now = START_MS + (secondsFresh - 1) * 1000;
      await directory.keys(wellKnown());
      assert.equal(host.requests.length, 1, `${JSON.stringify(headers)}: refetched before ${secondsFresh} s`);
      now = START_MS + secondsFresh * 1000;
      await directory.keys(wellKnown());
      assert.equal(host.requests.length, 2, `${JSON.stringify(headers)}: not refetched at ${secondsFresh} s`);
    }

    it("honours max-age", async () => {
      await refetchedAfter({ "cache-control": "public, max-age=120" }, {}, 120);
      await refetchedAfter({ "cache-control": 'max-age="7200"' }, {}, 7200);
    });

    it("caps max-age at maxAgeCapSeconds", async () => {
      await refetchedAfter({ "cache-control": "max-age=31536000" }, {}, 86_400);
      await refetchedAfter({ "cache-control": "max-age=5000" }, { maxAgeCapSeconds: 1000 }, 1000);
    });

    it("uses defaultMaxAgeSeconds without caching headers, capped too", async () => {
      await refetchedAfter({}, {}, 3600);
      await refetchedAfter({}, { defaultMaxAgeSeconds: 900 }, 900);
      await refetchedAfter({}, { defaultMaxAgeSeconds: 900, maxAgeCapSeconds: 300 }, 300);
    });

    it("reads Expires against Date, and subtracts Age", async () => {
      const date = new Date(Date.UTC(2025, 0, 1, 12));
      const expires = new Date(date.getTime() + 500_000);
      await refetchedAfter({ date: date.toUTCString(), expires: expires.toUTCString() }, {}, 500);
      await refetchedAfter({ "cache-control": "max-age=300", age: "100" }, {}, 200);
    });

    it("still keeps no-store, no-cache and past Expires for a minute, so requests cannot drive fetches", async () => {
      await refetchedAfter({ "cache-control": "no-store" }, {}, 60);
      await refetchedAfter({ "cache-control": "no-cache, max-age=600" }, {}, 60);
      await refetchedAfter({ expires: "0" }, {}, 60);
    });
  });

  describe("fetch discipline", () => {
    it("coalesces parallel look-ups of one directory into one request", async () => {
      const a = newKey();
      serve([ed25519Jwk(a.publicKey)]);
      const directory = client();
      const [found, unknown, all] = await Promise.all([
        Promise.all(Array.from({ length: 20 }, () => directory.lookup(wellKnown(), a.thumbprint))),
        Promise.all(Array.from({ length: 20 }, () => directory.lookup(wellKnown(), TEST_KEY_THUMBPRINT))),
        Promise.all(Array.from({ length: 20 }, () => directory.keys(wellKnown()))),
      ]);
      assert.ok(found.every((key) => sameKey(key, a.publicKey)));
      assert.ok(unknown.every((key) => key === undefined));
      assert.ok(all.every((keys) => keys.size === 1));
      assert.equal(fetchesOf(KEY_DIRECTORY_PATH), 1);
    });

    it("coalesces parallel failures too", async () => {
      host.misbehave(KEY_DIRECTORY_PATH, "status-500");
      const directory = client();
      const kinds = await Promise.all(
        Array.from({ length: 10 }, () =>
          directory.keys(wellKnown()).then(
            () => "ok",
            (e: KeyDirectoryError) => e.kind,
          ),
        ),
      );
      assert.deepEqual(new Set(kinds), new Set(["http_status"]));
      assert.equal(host.requests.length, 1);
    });

    it("refetches for an unknown keyid at most once a minute per directory", async () => {
      const a = newKey();
      const rotated = newKey();
      serve([ed25519Jwk(a.publicKey)]);
      const directory = client();
      assert.ok(sameKey(await directory.lookup(wellKnown(), a.thumbprint), a.publicKey));

      const forged = Array.from({ length: 50 }, () =>
        encodeBase64url(createHash("sha256").update(String(Math.random())).digest()),
      );
      now += 30_000;
      for (const thumbprint of forged) assert.equal(await directory.lookup(wellKnown(), thumbprint), undefined);
      assert.equal(host.requests.length, 1, "no refetch within a minute of the last fetch");

      serve([ed25519Jwk(a.publicKey), ed25519Jwk(rotated.publicKey)]);
      now += 30_000;
      const results = await Promise.all([
        directory.lookup(wellKnown(), rotated.thumbprint),
        directory.lookup(wellKnown(), rotated.thumbprint),
        ...forged.map((thumbprint) => directory.lookup(wellKnown(), thumbprint)),
      ]);
      assert.ok(sameKey(results[0], rotated.publicKey), "the rotated key is found by the one refetch");
      assert.ok(sameKey(results[1], rotated.publicKey), "a concurrent look-up waits for that refetch");
      assert.ok(results.slice(2).every((key) => key === undefined));
      assert.equal(host.requests.length, 2);

      now += 59_000;
      for (const thumbprint of forged) assert.equal(await directory.lookup(wellKnown(), thumbprint), undefined);
      assert.equal(host.requests.length, 2);
      now += 1_000;
      assert.equal(await directory.lookup(wellKnown(), forged[0] ?? ""), undefined);
      assert.equal(host.requests.length, 3);
    });

    it("keeps the cooldown per directory", async () => {
      serve([ed25519Jwk(newKey().publicKey)], { path: "/one", contentType: "application/json" });
      serve([ed25519Jwk(newKey().publicKey)], { path: "/two", contentType: "application/json" });
      const directory = client();
      const origin = host.origin(DIRECTORY_HOST);
      await directory.keys(`${origin}/one`);
      now += 60_000;
      assert.equal(await directory.lookup(`${origin}/one`, TEST_KEY_THUMBPRINT), undefined);
      assert.equal(await directory.lookup(`${origin}/two`, TEST_KEY_THUMBPRINT), undefined);
      assert.equal(await directory.lookup(`${origin}/two`, TEST_KEY_THUMBPRINT), undefined);
      assert.equal(fetchesOf("/one"), 2);
      assert.equal(fetchesOf("/two"), 1);
    });

    it("keeps at most maxEntries directories, least recently used evicted", async () => {
      for (const path of ["/a", "/b", "/c"]) {
        serve([ed25519Jwk(newKey().publicKey)], { path, contentType: "application/json" });
      }
      const origin = host.origin(DIRECTORY_HOST);
      const directory = client({ maxEntries: 2 });
      await directory.keys(`${origin}/a`);
      await directory.keys(`${origin}/b`);
      await directory.keys(`${origin}/a`);
      await directory.keys(`${origin}/c`); // evicts /b, the least recently used
      await directory.keys(`${origin}/a`);
      assert.equal(fetchesOf("/a"), 1);
      await directory.keys(`${origin}/b`);
      assert.equal(fetchesOf("/b"), 2);
    });

    it("caches one directory under one URL whatever query or fragment names it", async () => {
      serve([ed25519Jwk(newKey().publicKey)]);
      const directory = client();
      await directory.keys(`${wellKnown()}?a=1`);
      await directory.keys(`${wellKnown()}#frag`);
      await directory.keys(wellKnown().replace(DIRECTORY_HOST, DIRECTORY_HOST.toUpperCase()));
      assert.deepEqual(
        host.requests.map((request) => request.path),
        [KEY_DIRECTORY_PATH],
      );
    });
  });

  describe("signed directory responses", () => {
    const signedUrl = () => `${host.origin("signature-agent.test")}${KEY_DIRECTORY_PATH}`;
    const authority = () => `signature-agent.test:${host.port}`;

    function serveSigned(body: string, spec: Partial<DirectorySignatureSpec> = {}): void {
      host.route(KEY_DIRECTORY_PATH, {
        body,
        headers: {
          "content-type": KEY_DIRECTORY_MEDIA_TYPE,
          ...signDirectory(body, { authority: authority(), ...spec }),
        },
      });
    }

    it("accepts the vector's directory signed for this authority", async () => {
      serveSigned(VECTOR.body);
      const keys = await client({ requireSignedResponse: true }).keys(signedUrl());
      assert.ok(sameKey(keys.get(TEST_KEY_THUMBPRINT), TEST_KEY_PUBLIC));
    });

    it("accepts one signature per key", async () => {
      const b = newKey();
      const body = JSON.stringify({ keys: [ed25519Jwk(TEST_KEY_PUBLIC), ed25519Jwk(b.publicKey)] });
      const first = signDirectory(body, { authority: authority() });
      const second = signDirectory(body, { authority: authority(), key: b.privateKey, keyid: b.thumbprint });
      host.route(KEY_DIRECTORY_PATH, {
        body,
        headers: {
          "content-type": KEY_DIRECTORY_MEDIA_TYPE,
          "content-digest": first["content-digest"] ?? "",
          "signature-input": `${first["signature-input"]}, ${second["signature-input"]?.replace("binding=", "binding1=")}`,
          signature: `${first.signature}, ${second.signature?.replace("binding=", "binding1=")}`,
        },
      });
      assert.equal((await client({ requireSignedResponse: true }).keys(signedUrl())).size, 2);
    });

    const forgeries: [string, Partial<DirectorySignatureSpec> | ((headers: Record<string, string>) => void)][] = [
      ["a signature for another authority", { authority: "signature-agent.test" }],
      ["a signature by a key not in the directory", { key: newKey().privateKey }],
      ["a keyid not in the directory", { keyid: newKey().thumbprint }],
      ["a Content-Digest of another body", { signedBody: '{"keys":[]}' }],
      ["created in the future", { created: START_MS / 1000 + 120 }],
      ["an expired signature", { created: 1735689000, expires: 1735689600 - 61 }],
      ["covering only the authority", { components: '("@authority";req)' }],
      ["covering the authority without req", { components: '("@authority" "content-digest")' }],
      [
        "altered signature bytes",
        (headers) => {
          const signature = headers.signature ?? "";
          const i = "binding=:".length + 10;
          headers.signature = `${signature.slice(0, i)}${signature[i] === "A" ? "B" : "A"}${signature.slice(i + 1)}`;
        },
      ],
      [
        "a tagged input without its signature",
        (headers) => {
          headers.signature = headers.signature?.replace("binding=", "other=") ?? "";
        },
      ],
      [
        "a Signature-Input that does not parse",
        (headers) => {
          headers["signature-input"] = "binding=(";
        },
      ],
    ];
    for (const [name, forge] of forgeries) {
      it(`refuses ${name} as bad_signature`, async () => {
        if (typeof forge === "function") {
          const headers = signDirectory(VECTOR.body, { authority: authority() });
          forge(headers);
          host.route(KEY_DIRECTORY_PATH, {
            body: VECTOR.body,
            headers: { "content-type": KEY_DIRECTORY_MEDIA_TYPE, ...headers },
          });
        } else serveSigned(VECTOR.body, forge);
        await failure(client().keys(signedUrl()), "bad_signature");
      });
    }

    it("accepts an unsigned directory unless signatures are required", async () => {
      serve([ed25519Jwk(TEST_KEY_PUBLIC)]);
      assert.equal((await client().keys(signedUrl())).size, 1);
      await failure(client({ requireSignedResponse: true }).keys(signedUrl()), "unsigned");
    });

    it("counts signatures with another tag as no directory signature", async () => {
      const headers = signDirectory(VECTOR.body, { authority: authority() });
      host.route(KEY_DIRECTORY_PATH, {
        body: VECTOR.body,
        headers: {
          "content-type": KEY_DIRECTORY_MEDIA_TYPE,
          ...headers,
          "signature-input":
            headers["signature-input"]?.replace('tag="http-message-signatures-directory"', 'tag="other"') ?? "",
        },
      });
      assert.equal((await client().keys(signedUrl())).size, 1);
      await failure(client({ requireSignedResponse: true }).keys(signedUrl()), "unsigned");
    });
  });
});

describe("the draft's signed directory vector, served byte for byte on port 443", () => {
  let ca: TestCA;
  let host: HttpsHost | undefined;
  let skipReason: string | undefined;

  before(async () => {
    ca = await createTestCA();
    // A loopback address of its own, so port 443 cannot clash with another test run.
    const address = `127.${1 + Math.floor(Math.random() * 250)}.${Math.floor(Math.random() * 250)}.${1 + Math.floor(Math.random() * 250)}`;
    try {
      host = await startHttpsHost({ ca, hostnames: ["signature-agent.test"], port: 443, address });
    } catch (error) {
      skipReason = `cannot listen on ${address}:443 (${(error as NodeJS.ErrnoException).code ?? String(error)}); the vector is still checked above without the network`;
    }
  });

  after(async () => {
    await host?.close();
  });

  it("verifies the vector's exact response to GET https://signature-agent.test/.well-known/…", async (t) => {
    if (host === undefined) {
      t.diagnostic(skipReason ?? "no host");
      t.skip(skipReason);
      return;
    }
    host.route(KEY_DIRECTORY_PATH, {
      body: VECTOR.body,
      headers: {
        "content-type": KEY_DIRECTORY_MEDIA_TYPE,
        "content-digest": VECTOR.contentDigest,
        "signature-input": VECTOR.signatureInput,
        signature: VECTOR.signature,
      },
    });
    const fetcher = createSafeFetcher({
      allowPrivate: true,
      resolve: parseResolveOverrides(host.resolveEntries()),
      ca: ca.certPem,
    });
    const directory = new KeyDirectoryClient({ fetcher, now: () => START_MS, requireSignedResponse: true });
    const url = directoryUrlFor("https://signature-agent.test");
    assert.ok(sameKey(await directory.lookup(url, TEST_KEY_THUMBPRINT), TEST_KEY_PUBLIC));
    assert.equal(host.requests[0]?.headers.host, "signature-agent.test");

    // The same bytes one second before `created` (less the 60 s skew) are refused.
    const early = new KeyDirectoryClient({ fetcher, now: () => (1735689600 - 61) * 1000 });
    await failure(early.keys(url), "bad_signature");
  });
});
