/**
 * The write side of the listing directory (spec directory.md, decisions "Directory" and "Both
 * services"), black-box: real HTTP against the directory, real HTTPS sites with a test CA, and
 * every assertion on what a client or a site sees.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { createServer } from "node:net";
import { after, before, describe, test } from "node:test";
import { encodeDidKey } from "@proto/protocol";
import {
  createTestCA,
  DISCOVERY_PATH,
  type HttpsHost,
  PROOF_PATH,
  type Sentinel,
  startHttpsHost,
  startSentinel,
} from "@proto/testkit";
import {
  type DirectoryHarness,
  didPath,
  type HttpResult,
  type Site,
  startDirectoryHarness,
} from "./support/directory.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";

reportSkippedVariants();

type H = DirectoryHarness;

const CHALLENGE_TOKEN = /^ch_[A-Za-z0-9_-]{22}$/;
const SESSION_TOKEN = /^sess_[A-Za-z0-9_-]+$/;
const RFC3339_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;
const CHALLENGE_TTL_MS = 30 * 60 * 1000;
const SESSION_TTL_S = 7 * 24 * 3600;
const LISTING_KEYS = [
  "_meta",
  "description",
  "discovery_doc",
  "discovery_url",
  "fetched_at",
  "first_listed_at",
  "service_did",
  "status",
  "tags",
  "title",
  "updated_at",
];
/** Every rate limit raised out of reach, for the suites that are not about rate limits. */
const NO_RATE_LIMITS = "challenge=1000000/60,create=1000000/60,write=1000000/60,read=1000000/60,sitemap=1000000/60";

// ---- helpers ---------------------------------------------------------------------------------

/** The error envelope, as a client checks it: status, JSON type, `{error:{code,message[,details]}}`. */
function assertError(res: HttpResult, status: number, code: string, note = ""): void {
  const where = `${note ? `${note}: ` : ""}${res.status} ${res.text.slice(0, 300)}`;
  assert.equal(res.status, status, where);
  assert.match(res.headers.get("content-type") ?? "", /^application\/json/, where);
  assert.ok(res.json !== null && typeof res.json === "object", where);
  assert.deepEqual(Object.keys(res.json), ["error"], where);
  const error = res.json.error;
  assert.equal(error.code, code, where);
  assert.equal(typeof error.message, "string", where);
  assert.ok(error.message.length > 0, where);
  for (const key of Object.keys(error)) assert.ok(["code", "message", "details"].includes(key), where);
  if ("details" in error) assert.ok(error.details !== null && typeof error.details === "object", where);
}

/** 429 `rate_limited` with a whole-second `Retry-After` of at least 1 (and at most `max`). */
function assertRateLimited(res: HttpResult, max: number, note = ""): void {
  assertError(res, 429, "rate_limited", note);
  const retryAfter = res.headers.get("retry-after") ?? "";
  assert.match(retryAfter, /^\d+$/, `${note}: Retry-After ${retryAfter}`);
  assert.ok(Number(retryAfter) >= 1 && Number(retryAfter) <= max, `${note}: Retry-After ${retryAfter}`);
}

function assertOk(res: HttpResult, status: number, note = ""): void {
  assert.equal(res.status, status, `${note ? `${note}: ` : ""}${res.status} ${res.text.slice(0, 300)}`);
}

/** The directory's clock (milliseconds), read through the test hook. */
async function directoryNow(h: H): Promise<number> {
  const res = await h.request("POST", "/__test/clock", { body: {} });
  assertOk(res, 200);
  return Date.parse(res.json.now);
}

/**
 * Moves the clock to just past the start of a fixed window, so a burst of requests cannot straddle
 * two windows because real time passed.
 */
async function freshWindow(h: H, windowSeconds = 60): Promise<void> {
  const now = await directoryNow(h);
  const windowMs = windowSeconds * 1000;
  await h.advance((windowMs - (now % windowMs)) / 1000);
}

const requestChallenge = (h: H, discoveryUrl: unknown) =>
  h.request("POST", "/v1/listings/challenge", { body: { discovery_url: discoveryUrl } });

async function issue(h: H, discoveryUrl: string): Promise<string> {
  const res = await requestChallenge(h, discoveryUrl);
  assertOk(res, 200, `challenge for ${discoveryUrl}`);
  return res.json.challenge_token;
}

const submit = (h: H, body: unknown) => h.request("POST", "/v1/listings", { body });

/** Challenge, publish the proof (and `doc`, or the site's valid document), submit; the raw answer. */
async function list(
  h: H,
  site: Site,
  extra: Record<string, unknown> = {},
  doc: unknown = site.document(),
): Promise<HttpResult> {
  const token = await issue(h, site.discoveryUrl);
  site.serveProof(token);
  site.serveDiscovery(doc);
  return submit(h, { discovery_url: site.discoveryUrl, challenge_token: token, ...extra });
}

/** `list` that must create the listing: its DID and session token. */
async function listed(
  h: H,
  site: Site,
  extra: Record<string, unknown> = {},
  doc: unknown = site.document(),
): Promise<{ did: string; token: string }> {
  const res = await list(h, site, extra, doc);
  assertOk(res, 201, `listing ${site.hostname}`);
  return { did: res.json.service_did, token: res.json.session_token };
}

async function getListing(h: H, did: string): Promise<HttpResult> {
  const res = await h.request("GET", didPath(did));
  assertOk(res, 200, `GET ${did}`);
  return res;
}

const portOf = (site: Site) => site.authority.split(":")[1]!;

const newDidKey = () => encodeDidKey(new Uint8Array(randomBytes(32)));

/** A proof handler answering with a fixed status, type and body. */
const respond =
  (status: number, headers: Record<string, string>, body: string | Buffer = "") =>
  (_req: IncomingMessage, res: ServerResponse) => {
    res.writeHead(status, headers);
    res.end(body);
  };

/** A TCP port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === "string") throw new Error("no port");
  return address.port;
}

// ---- suites ----------------------------------------------------------------------------------

for (const variant of STORE_VARIANTS) {
  describe(`directory writes (${variant.name})`, () => {
    let h: H;
    let deadPort: number;
    /** An HTTPS host whose certificate comes from a CA the directory does not trust. */
    let untrusted: HttpsHost;

    before(async () => {
      deadPort = await closedPort();
      untrusted = await startHttpsHost({ ca: await createTestCA(), hostnames: ["untrusted.test"] });
      h = await startDirectoryHarness(variant, {
        sites: 96,
        env: { DIRECTORY_RATE_LIMITS: NO_RATE_LIMITS },
        extraResolve: [`dead.test:${deadPort}:127.0.0.1`, `untrusted.test:${untrusted.port}:127.0.0.1`],
      });
    });
    after(async () => {
      await h?.close();
      await untrusted?.close();
    });

    describe("POST /v1/listings/challenge", () => {
      test("issues a ch_ token, the proof URL of the host and a 30-minute expiry", async () => {
        const site = h.site();
        const before = await directoryNow(h);
        const res = await requestChallenge(h, site.discoveryUrl);
        const after = await directoryNow(h);
        assertOk(res, 200);
        assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
        assert.deepEqual(Object.keys(res.json).sort(), ["challenge_token", "expires_at", "proof_url"]);
        assert.match(res.json.challenge_token, CHALLENGE_TOKEN);
        assert.equal(res.json.proof_url, `https://${site.authority}/.well-known/proto-registry-proof`);
        assert.match(res.json.expires_at, RFC3339_UTC);
        const expires = Date.parse(res.json.expires_at);
        assert.ok(expires >= before + CHALLENGE_TTL_MS && expires <= after + CHALLENGE_TTL_MS, res.json.expires_at);

        const second = await requestChallenge(h, site.discoveryUrl);
        assertOk(second, 200);
        assert.match(second.json.challenge_token, CHALLENGE_TOKEN);
        assert.notEqual(second.json.challenge_token, res.json.challenge_token);
      });

      test("rejects a discovery URL that is not exactly https://{host[:port]}/.well-known/proto", async () => {
        const bad = [
          "http://bad1.test/.well-known/proto",
          "ftp://bad1.test/.well-known/proto",
          "https://user@bad1.test/.well-known/proto",
          "https://user:secret@bad1.test/.well-known/proto",
          "https://:secret@bad1.test/.well-known/proto",
          "https://bad1.test/.well-known/proto?a=1",
          "https://bad1.test/.well-known/proto?",
          "https://bad1.test/.well-known/proto#frag",
          "https://bad1.test/.well-known/proto#",
          "https://bad1.test/.well-known/proto/",
          "https://bad1.test/.well-known/proto/x",
          "https://bad1.test/.well-known/protox",
          "https://bad1.test/.well-known/proto-registry-proof",
          "https://bad1.test/.WELL-KNOWN/proto",
          "https://bad1.test/x/.well-known/proto",
          "https://bad1.test/",
          "https://bad1.test",
          "/.well-known/proto",
          "bad1.test/.well-known/proto",
          "not a url",
          "",
        ];
        for (const url of bad) assertError(await requestChallenge(h, url), 400, "invalid_request", url);
      });

      test("compares the host case-insensitively and keeps a port", async () => {
        const site = h.site();
        const upper = `HTTPS://${site.hostname.toUpperCase()}:${portOf(site)}/.well-known/proto`;
        const res = await requestChallenge(h, upper);
        assertOk(res, 200);
        assert.equal(res.json.proof_url, `https://${site.authority}/.well-known/proto-registry-proof`);

        // Issued for the upper-case spelling, submitted with the lower-case one: the same URL.
        site.serveProof(res.json.challenge_token);
        site.serveDiscovery(site.document());
        const created = await submit(h, {
          discovery_url: site.discoveryUrl,
          challenge_token: res.json.challenge_token,
        });
        assertOk(created, 201);
        assert.equal((await getListing(h, site.did)).json.discovery_url, site.discoveryUrl);

        const withPort = await requestChallenge(h, "https://ported.test:8443/.well-known/proto");
        assertOk(withPort, 200);
        assert.equal(withPort.json.proof_url, "https://ported.test:8443/.well-known/proto-registry-proof");
        // 443 is https's own port: the same host as no port at all.
        const defaultPort = await requestChallenge(h, "https://ported.test:443/.well-known/proto");
        assertOk(defaultPort, 200);
        assert.equal(defaultPort.json.proof_url, "https://ported.test/.well-known/proto-registry-proof");
      });

      test("missing or non-string discovery_url is invalid_request", async () => {
        const url = "https://typed.test/.well-known/proto";
        const bodies: unknown[] = [
          {},
          { discovery_url: null },
          { discovery_url: 42 },
          { discovery_url: true },
          { discovery_url: [url] },
          { discovery_url: { url } },
          { url },
          [],
          [{ discovery_url: url }],
          null,
          url,
          7,
        ];
        for (const body of bodies) {
          assertError(
            await h.request("POST", "/v1/listings/challenge", { rawBody: JSON.stringify(body) }),
            400,
            "invalid_request",
            JSON.stringify(body),
          );
        }
        assertError(await h.request("POST", "/v1/listings/challenge"), 400, "invalid_request", "no body");
      });
    });

    describe("POST /v1/listings", () => {
      test("creates a listing: 201 with a sess_ token for the DID, valid 7 days", async () => {
        const site = h.site();
        const token = await issue(h, site.discoveryUrl);
        site.serveProof(token);
        site.serveDiscovery(site.document());
        const before = await directoryNow(h);
        const res = await submit(h, {
          discovery_url: site.discoveryUrl,
          challenge_token: token,
          title: "Created",
          description: "A service",
          tags: ["a", "b"],
        });
        const after = await directoryNow(h);
        assertOk(res, 201);
        assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
        assert.deepEqual(Object.keys(res.json).sort(), ["expires_at", "service_did", "session_token"]);
        assert.equal(res.json.service_did, site.did);
        assert.match(res.json.session_token, SESSION_TOKEN);
        assert.match(res.json.expires_at, RFC3339_UTC);
        const expires = Date.parse(res.json.expires_at);
        assert.ok(expires >= before + SESSION_TTL_S * 1000 && expires <= after + SESSION_TTL_S * 1000);

        const read = await getListing(h, site.did);
        assert.deepEqual(Object.keys(read.json).sort(), LISTING_KEYS);
        assert.equal(read.json.status, "active");
        assert.equal(read.json.title, "Created");
        assert.equal(read.json.description, "A service");
        assert.deepEqual(read.json.tags, ["a", "b"]);
        assert.equal(read.json.discovery_url, site.discoveryUrl);
        assert.deepEqual(read.json.discovery_doc, site.document());
        assert.deepEqual(read.json._meta, {});
        for (const key of ["fetched_at", "first_listed_at", "updated_at"]) assert.match(read.json[key], RFC3339_UTC);
        // The proof and the document were each fetched once.
        assert.deepEqual(site.hits, { proof: 1, discovery: 1 });
      });

      test("endpoints as absolute https URLs (the upstream SDK's defaults), one on another host, and a claim page path: listed as published, shown as such", async () => {
        const site = h.site();
        const base = `https://${site.authority}`;
        const doc = site.document({
          endpoints: {
            accounts: `${base}/proto/v1/accounts`,
            owner_invitation: `${base}/proto/v1/accounts/me/owner-invitation`,
            claim_page: "/claim",
            claim_completion: "https://api.elsewhere.test/proto/v1/claim",
            key_rotation: "/proto/v1/accounts/me/keys/rotate",
          },
          features: ["key_rotation"],
        });
        const { did } = await listed(h, site, { title: "Upstream style" }, doc);
        assert.deepEqual((await getListing(h, did)).json.discovery_doc, doc);

        const page = await h.request("GET", `/listings/${encodeURIComponent(did)}`);
        assert.equal(page.status, 200);
        assert.match(page.headers.get("content-type") ?? "", /^text\/html/);
        const section = page.text.slice(page.text.indexOf('id="d-endpoints"'), page.text.indexOf('id="d-features"'));
        const row = (label: string) => new RegExp(`<dt>${label}</dt><dd>(.*?)</dd>`).exec(section)?.[1];
        // Signed endpoints are text as published (agents POST to them; a link would only GET).
        assert.equal(row("Accounts"), `<code>${base}/proto/v1/accounts</code>`);
        assert.equal(row("Owner invitation"), `<code>${base}/proto/v1/accounts/me/owner-invitation</code>`);
        assert.equal(row("Key rotation"), "<code>/proto/v1/accounts/me/keys/rotate</code>");
        assert.equal(
          row("Claim completion"),
          '<code>https://api.elsewhere.test/proto/v1/claim</code> <span class="muted other-host">on another host, api.elsewhere.test</span>',
        );
        // The claim page, for people, is a link: a path resolved against the discovery host.
        assert.equal(row("Claim page"), `<a href="${base}/claim" rel="noopener noreferrer nofollow">/claim</a>`);
        assert.ok(section.includes("or a full address, which may name another host"), section);
      });

      test("discovery_invalid names an absolute endpoint that is not https, carries credentials or a fragment", async () => {
        const site = h.site();
        const base = `https://${site.authority}`;
        const cases: [string, string, string][] = [
          ["accounts", `http://${site.authority}/proto/v1/accounts`, "or an absolute https URL"],
          ["owner_invitation", `https://user:secret@${site.authority}/invite`, "no user name or password"],
          ["claim_completion", `${base}/claim#done`, "no fragment"],
          ["key_rotation", "//api.elsewhere.test/rotate", 'one leading "/"'],
          ["accounts", `https://${site.hostname}:99999/proto/v1/accounts`, "must be a valid URL"],
        ];
        for (const [key, value, reason] of cases) {
          const doc = site.document({ endpoints: { ...(site.document().endpoints as object), [key]: value } });
          const res = await list(h, site, {}, doc);
          assertError(res, 400, "discovery_invalid", value);
          const errors = res.json.error.details.errors as { path: string; message: string }[];
          assert.equal(errors.length, 1, res.text);
          assert.equal(errors[0]?.path, `/endpoints/${key}`, res.text);
          assert.ok(errors[0]?.message.startsWith(`endpoints.${key}: `), res.text);
          assert.ok(errors[0]?.message.includes(reason), res.text);
        }
        assert.equal((await h.request("GET", didPath(site.did))).status, 404);
      });

      test("without title, description and tags: null, null and []", async () => {
        const { did } = await listed(h, h.site());
        const read = await getListing(h, did);
        assert.equal(read.json.title, null);
        assert.equal(read.json.description, null);
        assert.deepEqual(read.json.tags, []);
      });

      test("accepts a proof served as text/plain with parameters, and an unknown discovery field", async () => {
        for (const contentType of ["text/plain; charset=utf-8", "Text/Plain;charset=US-ASCII"]) {
          const site = h.site();
          const token = await issue(h, site.discoveryUrl);
          site.setHandler(PROOF_PATH, respond(200, { "content-type": contentType }, token));
          site.serveDiscovery(site.document({ future_field: { anything: true } }));
          assertOk(await submit(h, { discovery_url: site.discoveryUrl, challenge_token: token }), 201, contentType);
        }
      });

      test("accepts did:web spellings that name the discovery host", async () => {
        const spellings = [
          (s: Site) => `did:web:${s.hostname.toUpperCase()}%3A${portOf(s)}`,
          (s: Site) => `did:web:${s.hostname}%3a${portOf(s)}`,
          (s: Site) => `did:web:${s.hostname}%3A${portOf(s)}:users:alice`,
        ];
        for (const spell of spellings) {
          const site = h.site();
          const did = spell(site);
          const res = await list(h, site, {}, site.document({ service_did: did }));
          assertOk(res, 201, did);
          assert.equal(res.json.service_did, did);
          assert.equal((await getListing(h, did)).json.service_did, did);
        }
      });

      test("invalid_challenge: unknown, expired, already used", async () => {
        const site = h.site();
        site.serveDiscovery(site.document());
        for (const token of [`ch_${randomBytes(16).toString("base64url")}`, "nope", "ch_"]) {
          assertError(
            await submit(h, { discovery_url: site.discoveryUrl, challenge_token: token }),
            400,
            "invalid_challenge",
            token,
          );
        }

        // Expired: 30 minutes and a second later.
        const expired = await issue(h, site.discoveryUrl);
        site.serveProof(expired);
        await h.advance(1801);
        assertError(
          await submit(h, { discovery_url: site.discoveryUrl, challenge_token: expired }),
          400,
          "invalid_challenge",
          "expired",
        );
        assert.equal(site.hits.proof, 0, "an expired challenge fetches nothing");

        // Still valid a little before its expiry.
        const late = await issue(h, site.discoveryUrl);
        site.serveProof(late);
        await h.advance(1790);
        assertOk(await submit(h, { discovery_url: site.discoveryUrl, challenge_token: late }), 201, "late");

        // Already used.
        assertError(
          await submit(h, { discovery_url: site.discoveryUrl, challenge_token: late }),
          400,
          "invalid_challenge",
          "used",
        );
      });

      test("proof_mismatch: the proof body is not exactly the token", async () => {
        const site = h.site();
        site.serveDiscovery(site.document());
        const other = await issue(h, site.discoveryUrl);
        const bodies = (t: string) => [
          other,
          `${t}\n`,
          `${t}\r\n`,
          ` ${t}`,
          `"${t}"`,
          JSON.stringify({ challenge_token: t }),
          t.slice(0, -1),
          `${t}${t}`,
          t.toUpperCase(),
          "",
        ];
        for (let i = 0; i < bodies("x").length; i++) {
          const token = await issue(h, site.discoveryUrl);
          const body = bodies(token)[i]!;
          site.setHandler(PROOF_PATH, respond(200, { "content-type": "text/plain" }, body));
          assertError(
            await submit(h, { discovery_url: site.discoveryUrl, challenge_token: token }),
            400,
            "proof_mismatch",
            JSON.stringify(body),
          );
        }
        assert.equal(site.hits.discovery, 0, "no document fetched after a bad proof");
        assert.equal((await h.request("GET", didPath(site.did))).status, 404);
      });

      test("proof_mismatch: the challenge was issued for another discovery URL", async () => {
        const [a, b] = [h.site(), h.site()];
        const token = await issue(h, a.discoveryUrl);
        a.serveProof(token);
        b.serveProof(token);
        b.serveDiscovery(b.document());
        assertError(await submit(h, { discovery_url: b.discoveryUrl, challenge_token: token }), 400, "proof_mismatch");
        assert.equal(b.hits.proof, 0);
        assert.equal((await h.request("GET", didPath(b.did))).status, 404);
      });

      test("proof_fetch_failed: missing, wrong type, error status, oversized, unreachable, bad TLS", async () => {
        const site = h.site();
        site.serveDiscovery(site.document());
        const cases: [string, (token: string) => (req: IncomingMessage, res: ServerResponse) => void][] = [
          ["404", (t) => respond(404, { "content-type": "text/plain" }, t)],
          ["text/html", (t) => respond(200, { "content-type": "text/html; charset=utf-8" }, t)],
          ["application/json", (t) => respond(200, { "content-type": "application/json" }, JSON.stringify(t))],
          ["application/octet-stream", (t) => respond(200, { "content-type": "application/octet-stream" }, t)],
          ["no content type", (t) => respond(200, {}, t)],
          ["text/plainx", (t) => respond(200, { "content-type": "text/plainx" }, t)],
          ["500", (t) => respond(500, { "content-type": "text/plain" }, t)],
          ["204", () => respond(204, { "content-type": "text/plain" })],
          ["201 with the token", (t) => respond(201, { "content-type": "text/plain" }, t)],
          ["oversized", () => respond(200, { "content-type": "text/plain" }, Buffer.alloc(70 * 1024, "a"))],
          [
            "oversized without content-length",
            () => (_req, res) => {
              res.writeHead(200, { "content-type": "text/plain" });
              for (let i = 0; i < 5; i++) res.write(Buffer.alloc(16 * 1024, "a"));
              res.end();
            },
          ],
        ];
        for (const [name, handler] of cases) {
          const token = await issue(h, site.discoveryUrl);
          site.setHandler(PROOF_PATH, handler(token));
          assertError(
            await submit(h, { discovery_url: site.discoveryUrl, challenge_token: token }),
            400,
            "proof_fetch_failed",
            name,
          );
        }
        assert.equal(site.hits.discovery, 0, "no document fetched after a failed proof");

        // Nothing listens there.
        const dead = `https://dead.test:${deadPort}/.well-known/proto`;
        assertError(
          await submit(h, { discovery_url: dead, challenge_token: await issue(h, dead) }),
          400,
          "proof_fetch_failed",
          "closed port",
        );
        // A name that does not resolve.
        const nowhere = "https://nowhere.invalid/.well-known/proto";
        assertError(
          await submit(h, { discovery_url: nowhere, challenge_token: await issue(h, nowhere) }),
          400,
          "proof_fetch_failed",
          "unresolvable",
        );
        // A certificate the directory does not trust: not a single HTTP request reaches the host.
        const impostor = `https://untrusted.test:${untrusted.port}/.well-known/proto`;
        const impostorToken = await issue(h, impostor);
        untrusted.serveProof(impostorToken);
        assertError(
          await submit(h, { discovery_url: impostor, challenge_token: impostorToken }),
          400,
          "proof_fetch_failed",
          "untrusted certificate",
        );
        assert.equal(untrusted.requests.length, 0);
      });

      test("proof_fetch_failed: redirects are not followed", async () => {
        const site = h.site();
        site.serveDiscovery(site.document());
        let followed = 0;
        for (const status of [301, 302, 303, 307, 308]) {
          const token = await issue(h, site.discoveryUrl);
          site.setHandler(PROOF_PATH, (req, res) => {
            if (req.url?.includes("moved")) {
              followed++;
              res.writeHead(200, { "content-type": "text/plain" });
              res.end(token);
              return;
            }
            res.writeHead(status, { location: `${site.proofUrl}?moved`, "content-type": "text/plain" });
            res.end(token);
          });
          assertError(
            await submit(h, { discovery_url: site.discoveryUrl, challenge_token: token }),
            400,
            "proof_fetch_failed",
            String(status),
          );
        }
        assert.equal(followed, 0);
      });

      test("proof_fetch_failed: a host that never answers (5 s timeout)", async () => {
        const site = h.site();
        site.serveDiscovery(site.document());
        const token = await issue(h, site.discoveryUrl);
        site.setHandler(PROOF_PATH, () => {});
        assertError(
          await submit(h, { discovery_url: site.discoveryUrl, challenge_token: token }),
          400,
          "proof_fetch_failed",
        );
      });

      test("discovery_fetch_failed: the document cannot be fetched", async () => {
        const site = h.site();
        const cases: [string, (req: IncomingMessage, res: ServerResponse) => void][] = [
          ["404", respond(404, { "content-type": "application/json" }, JSON.stringify(site.document()))],
          ["500", respond(500, { "content-type": "application/json" }, JSON.stringify(site.document()))],
          [
            "redirect",
            respond(302, { location: `https://${site.authority}/elsewhere`, "content-type": "application/json" }),
          ],
          ["oversized", respond(200, { "content-type": "application/json" }, Buffer.alloc(70 * 1024, " "))],
        ];
        for (const [name, handler] of cases) {
          const token = await issue(h, site.discoveryUrl);
          site.serveProof(token);
          site.setHandler(DISCOVERY_PATH, handler);
          assertError(
            await submit(h, { discovery_url: site.discoveryUrl, challenge_token: token }),
            400,
            "discovery_fetch_failed",
            name,
          );
        }
        assert.equal((await h.request("GET", didPath(site.did))).status, 404);
      });

      test("discovery_invalid: not JSON, or fails the schema (with details)", async () => {
        const site = h.site();
        for (const body of ["<html>not json</html>", "", "{", "\u00ff\u00fe"]) {
          const token = await issue(h, site.discoveryUrl);
          site.serveProof(token);
          site.serveDiscovery(body);
          assertError(
            await submit(h, { discovery_url: site.discoveryUrl, challenge_token: token }),
            400,
            "discovery_invalid",
            JSON.stringify(body),
          );
        }
        const invalid: Record<string, unknown>[] = [
          { endpoints: undefined },
          { service_did: "did:example:123" },
          { service_did: 7 },
          { signature_algorithms: [] },
          { signature_algorithms: ["rsa"] },
          { proto_version: undefined },
          {
            endpoints: {
              accounts: "/a",
              owner_invitation: "/b",
              claim_page: "not-a-uri-nor-a-path",
              claim_completion: "/c",
            },
          },
        ];
        for (const overrides of invalid) {
          const token = await issue(h, site.discoveryUrl);
          site.serveProof(token);
          // JSON.stringify drops the undefined members: a missing required field.
          site.serveDiscovery(site.document(overrides));
          const res = await submit(h, { discovery_url: site.discoveryUrl, challenge_token: token });
          assertError(res, 400, "discovery_invalid", JSON.stringify(overrides));
          const errors = res.json.error.details?.errors;
          assert.ok(Array.isArray(errors) && errors.length > 0, res.text);
          for (const e of errors) assert.equal(typeof e.message, "string", res.text);
        }
        for (const doc of [[site.document()], "null", "42", '"did:web:x"']) {
          const token = await issue(h, site.discoveryUrl);
          site.serveProof(token);
          site.serveDiscovery(doc);
          assertError(
            await submit(h, { discovery_url: site.discoveryUrl, challenge_token: token }),
            400,
            "discovery_invalid",
            JSON.stringify(doc),
          );
        }
        assert.equal((await h.request("GET", didPath(site.did))).status, 404);
      });

      test("discovery_did_mismatch: a did:web of another host, port or none", async () => {
        const [site, other] = [h.site(), h.site()];
        const port = portOf(site);
        const dids = [
          other.did,
          `did:web:${site.hostname}`,
          `did:web:${site.hostname}%3A${Number(port) + 1}`,
          `did:web:${site.hostname}%253A${port}`,
          `did:web:${other.hostname}%3A${port}:${site.hostname}`,
          `did:web:evil.test%3A${port}`,
        ];
        for (const did of dids) {
          const res = await list(h, site, {}, site.document({ service_did: did }));
          assertError(res, 400, "discovery_did_mismatch", did);
        }
        for (const did of [...dids, site.did]) assert.equal((await h.request("GET", didPath(did))).status, 404);
      });

      test("conflict: the DID is listed from another host", async () => {
        const [a, b] = [h.site(), h.site()];
        const did = newDidKey();
        const owner = await listed(h, a, { title: "Original" }, a.document({ service_did: did }));
        assert.equal(owner.did, did);

        const token = await issue(h, b.discoveryUrl);
        b.serveProof(token);
        b.serveDiscovery(b.document({ service_did: did }));
        assertError(await submit(h, { discovery_url: b.discoveryUrl, challenge_token: token }), 409, "conflict");
        // Burned like any submit that got past the challenge check.
        assertError(
          await submit(h, { discovery_url: b.discoveryUrl, challenge_token: token }),
          400,
          "invalid_challenge",
        );

        const read = await getListing(h, did);
        assert.equal(read.json.discovery_url, a.discoveryUrl);
        assert.equal(read.json.title, "Original");
        // The owner's session is untouched.
        assertOk(await h.request("PATCH", didPath(did), { token: owner.token, body: { title: "Still mine" } }), 200);
      });

      test("conflict: the host is listed under another DID", async () => {
        const site = h.site();
        const owner = await listed(h, site);
        const did = newDidKey();
        const res = await list(h, site, {}, site.document({ service_did: did }));
        assertError(res, 409, "conflict");
        assert.equal((await h.request("GET", didPath(did))).status, 404);
        assert.equal((await getListing(h, site.did)).json.status, "active");
        assertOk(await h.request("PATCH", didPath(site.did), { token: owner.token, body: { title: "Mine" } }), 200);
      });

      test("concurrent submits of one challenge: exactly one listing and one usable session", async () => {
        const site = h.site();
        const tag = `race-${randomBytes(4).toString("hex")}`;
        const token = await issue(h, site.discoveryUrl);
        site.serveProof(token);
        site.serveDiscovery(site.document());
        const body = { discovery_url: site.discoveryUrl, challenge_token: token, tags: [tag] };
        const results = await Promise.all(Array.from({ length: 10 }, () => submit(h, body)));

        const winners = results.filter((r) => r.status === 201);
        assert.equal(winners.length, 1, results.map((r) => r.status).join(","));
        for (const res of results) {
          if (res.status === 201) continue;
          if (res.status === 409) assertError(res, 409, "challenge_already_used");
          else assertError(res, 400, "invalid_challenge");
        }
        const session = winners[0]!.json.session_token;
        assertOk(await h.request("PATCH", didPath(site.did), { token: session, body: { title: "Winner" } }), 200);
        assert.equal(site.hits.proof, 1, "only the winner fetched the proof");

        const page = await h.request("GET", `/v1/listings?tag=${tag}`);
        assertOk(page, 200);
        assert.equal(page.json.listings.length, 1);
        assert.equal(page.json.listings[0].service_did, site.did);
        assert.equal(page.json.listings[0].title, "Winner");
      });

      test("missing or ill-typed fields and over-long values are invalid_request", async () => {
        const site = h.site();
        const token = await issue(h, site.discoveryUrl);
        site.serveProof(token);
        site.serveDiscovery(site.document());
        const base = { discovery_url: site.discoveryUrl, challenge_token: token };
        const bodies: unknown[] = [
          {},
          { discovery_url: site.discoveryUrl },
          { challenge_token: token },
          { ...base, discovery_url: null },
          { ...base, discovery_url: 1 },
          { ...base, challenge_token: null },
          { ...base, challenge_token: 12345 },
          { ...base, challenge_token: [token] },
          { ...base, title: 42 },
          { ...base, title: null },
          { ...base, tags: null },
          { ...base, title: "t".repeat(121) },
          { ...base, description: false },
          { ...base, description: "d".repeat(501) },
          { ...base, tags: "tag" },
          { ...base, tags: [7] },
          { ...base, tags: Array.from({ length: 21 }, (_, i) => `t${i}`) },
          { ...base, tags: ["t".repeat(41)] },
          [base],
          null,
        ];
        for (const body of bodies) {
          assertError(
            await h.request("POST", "/v1/listings", { rawBody: JSON.stringify(body) }),
            400,
            "invalid_request",
            JSON.stringify(body).slice(0, 120),
          );
        }
        // None of that touched the challenge.
        const res = await submit(h, {
          ...base,
          title: "t".repeat(120),
          description: "d".repeat(500),
          tags: Array.from({ length: 20 }, (_, i) => `${i}`.padEnd(40, "x")),
        });
        assertOk(res, 201);
      });
    });

    describe("submit processing order (decisions §2)", () => {
      test("a malformed body, a bad URL or another URL's challenge does not burn the challenge", async () => {
        const [site, other] = [h.site(), h.site()];
        const token = await issue(h, site.discoveryUrl);
        site.serveProof(token);
        site.serveDiscovery(site.document());
        const base = { discovery_url: site.discoveryUrl, challenge_token: token };

        assertError(
          await h.request("POST", "/v1/listings", { rawBody: `{"discovery_url":"${site.discoveryUrl}","challenge` }),
          400,
          "invalid_request",
          "malformed JSON",
        );
        assertError(await submit(h, { ...base, title: "x".repeat(121) }), 400, "invalid_request", "long title");
        assertError(await submit(h, { ...base, tags: ["x".repeat(41)] }), 400, "invalid_request", "long tag");
        assertError(
          await submit(h, { ...base, discovery_url: `${site.discoveryUrl}?x=1` }),
          400,
          "invalid_request",
          "query in URL",
        );
        assertError(
          await submit(h, { ...base, discovery_url: site.discoveryUrl.replace("https:", "http:") }),
          400,
          "invalid_request",
          "http URL",
        );
        assertError(await submit(h, { ...base, discovery_url: other.discoveryUrl }), 400, "proof_mismatch");
        assert.equal(site.hits.proof + other.hits.proof, 0, "nothing fetched");

        assertOk(await submit(h, base), 201);
      });

      test("a failed fetch or check burns the challenge", async () => {
        const site = h.site();
        const failures: [string, () => void, string][] = [
          ["no proof", () => site.setHandler(PROOF_PATH, respond(404, {})), "proof_fetch_failed"],
          ["wrong proof", () => site.serveProof("ch_wrong"), "proof_mismatch"],
          ["no document", () => site.setHandler(DISCOVERY_PATH, respond(404, {})), "discovery_fetch_failed"],
          ["bad document", () => site.serveDiscovery("nope"), "discovery_invalid"],
          [
            "wrong DID",
            () => site.serveDiscovery(site.document({ service_did: `did:web:${site.hostname}` })),
            "discovery_did_mismatch",
          ],
        ];
        for (const [name, breakIt, code] of failures) {
          const token = await issue(h, site.discoveryUrl);
          site.serveProof(token);
          site.serveDiscovery(site.document());
          breakIt();
          const body = { discovery_url: site.discoveryUrl, challenge_token: token };
          assertError(await submit(h, body), 400, code, name);
          // Everything repaired: the token is gone all the same.
          site.serveProof(token);
          site.serveDiscovery(site.document());
          assertError(await submit(h, body), 400, "invalid_challenge", `${name}, retried`);
        }
        assert.equal((await h.request("GET", didPath(site.did))).status, 404);
        // A fresh challenge works.
        assertOk(await list(h, site), 201);
      });
    });

    describe("re-registration", () => {
      test("same host again: 200, earlier sessions revoked, new session works", async () => {
        const site = h.site();
        const first = await listed(h, site, { title: "First", tags: ["one"] });
        const before = (await getListing(h, site.did)).json;
        await h.advance(5);

        const second = await list(h, site, {}, site.document({ features: ["attestation"] }));
        assertOk(second, 200);
        assert.deepEqual(Object.keys(second.json).sort(), ["expires_at", "service_did", "session_token"]);
        assert.equal(second.json.service_did, site.did);
        assert.match(second.json.session_token, SESSION_TOKEN);
        assert.notEqual(second.json.session_token, first.token);

        assertError(
          await h.request("PATCH", didPath(site.did), { token: first.token, body: { title: "Old" } }),
          401,
          "unauthorized",
        );
        assertError(await h.request("DELETE", didPath(site.did), { token: first.token }), 401, "unauthorized");
        const patched = await h.request("PATCH", didPath(site.did), {
          token: second.json.session_token,
          body: { title: "New" },
        });
        assertOk(patched, 200);

        const read = (await getListing(h, site.did)).json;
        assert.equal(read.status, "active");
        assert.equal(read.title, "New");
        assert.equal(read.first_listed_at, before.first_listed_at);
        assert.deepEqual(read.discovery_doc.features, ["attestation"]);
        assert.ok(Date.parse(read.fetched_at) > Date.parse(before.fetched_at));

        // A third time revokes the second session too.
        const third = await list(h, site);
        assertOk(third, 200);
        assertError(
          await h.request("PATCH", didPath(site.did), { token: second.json.session_token, body: { title: "x" } }),
          401,
          "unauthorized",
        );
        assertOk(
          await h.request("PATCH", didPath(site.did), { token: third.json.session_token, body: { title: "x" } }),
          200,
        );
      });

      test("after DELETE, the same host registers again: 200, active, first_listed_at kept", async () => {
        const site = h.site();
        const first = await listed(h, site, { title: "Before" });
        const original = (await getListing(h, site.did)).json;
        await h.advance(5);
        assertOk(await h.request("DELETE", didPath(site.did), { token: first.token }), 204);
        assert.equal((await getListing(h, site.did)).json.status, "deleted");
        await h.advance(5);

        const again = await list(h, site);
        assertOk(again, 200);
        const read = (await getListing(h, site.did)).json;
        assert.equal(read.status, "active");
        assert.equal(read.first_listed_at, original.first_listed_at);
        assert.ok(Date.parse(read.updated_at) > Date.parse(original.updated_at));
        assertOk(
          await h.request("PATCH", didPath(site.did), { token: again.json.session_token, body: { title: "After" } }),
          200,
        );
        assertError(
          await h.request("PATCH", didPath(site.did), { token: first.token, body: { title: "x" } }),
          401,
          "unauthorized",
        );
      });

      test("after DELETE, the same DID from a new host: 201; the old host is free again", async () => {
        const [a, b] = [h.site(), h.site()];
        const did = newDidKey();
        const first = await listed(h, a, {}, a.document({ service_did: did }));
        const original = (await getListing(h, did)).json;

        // While the listing is live, the new host is refused.
        assertError(await list(h, b, {}, b.document({ service_did: did })), 409, "conflict");

        await h.advance(5);
        assertOk(await h.request("DELETE", didPath(did), { token: first.token }), 204);
        const moved = await list(h, b, {}, b.document({ service_did: did }));
        assertOk(moved, 201);
        assert.equal(moved.json.service_did, did);

        const read = (await getListing(h, did)).json;
        assert.equal(read.status, "active");
        assert.equal(read.discovery_url, b.discoveryUrl);
        assert.equal(read.first_listed_at, original.first_listed_at);
        assertOk(
          await h.request("PATCH", didPath(did), { token: moved.json.session_token, body: { title: "Moved" } }),
          200,
        );

        // Host a is no longer held by anyone: it can list its own did:web.
        assertOk(await list(h, a), 201);
        // And a deleted listing's host can be taken by a new DID.
        const c = h.site();
        const old = await listed(h, c);
        assertOk(await h.request("DELETE", didPath(c.did), { token: old.token }), 204);
        assertOk(await list(h, c, {}, c.document({ service_did: newDidKey() })), 201);
        // ...after which the deleted DID of that host is refused: its host is held by another listing.
        assertError(await list(h, c), 409, "conflict");
      });
    });

    describe("sessions", () => {
      test("expire after 7 days", async () => {
        const site = h.site();
        const { did, token } = await listed(h, site);
        await h.advance(SESSION_TTL_S - 60);
        assertOk(await h.request("PATCH", didPath(did), { token, body: { title: "day 7" } }), 200);
        await h.advance(61);
        assertError(await h.request("PATCH", didPath(did), { token, body: { title: "late" } }), 401, "unauthorized");
        assertError(await h.request("DELETE", didPath(did), { token }), 401, "unauthorized");
        assert.equal((await getListing(h, did)).json.title, "day 7");
        // A new challenge from the host is the way back.
        const again = await list(h, site);
        assertOk(again, 200);
        assertOk(
          await h.request("PATCH", didPath(did), { token: again.json.session_token, body: { title: "back" } }),
          200,
        );
      });

      test("missing, malformed, unknown and foreign tokens", async () => {
        const mine = await listed(h, h.site(), { title: "Mine" });
        const theirs = await listed(h, h.site(), { title: "Theirs" });
        const path = didPath(mine.did);
        const patch = { title: "Hijacked" };

        for (const method of ["PATCH", "DELETE"]) {
          const body = method === "PATCH" ? { body: patch } : {};
          assertError(await h.request(method, path, body), 401, "unauthorized", `${method} without token`);
          for (const authorization of [
            "Bearer",
            "Bearer ",
            `Basic ${Buffer.from("a:b").toString("base64")}`,
            mine.token,
            `Bearer sess_${randomBytes(32).toString("base64url")}`,
            `Bearer ${mine.token}x`,
            `Bearer ${mine.token.slice(0, -1)}`,
            "Bearer garbage",
          ]) {
            assertError(
              await h.request(method, path, { ...body, headers: { authorization } }),
              401,
              "unauthorized",
              `${method} ${authorization.slice(0, 20)}`,
            );
          }
          assertError(await h.request(method, path, { ...body, token: theirs.token }), 403, "forbidden", method);
        }
        const read = (await getListing(h, mine.did)).json;
        assert.equal(read.status, "active");
        assert.equal(read.title, "Mine");
        // The owner's own token, with the scheme in any case, works.
        assertOk(
          await h.request("PATCH", path, { body: { title: "Ok" }, headers: { authorization: `bearer ${mine.token}` } }),
          200,
        );
      });

      test("DELETE revokes the listing's sessions; PATCH/DELETE on the deleted listing are 404", async () => {
        const site = h.site();
        const { did, token } = await listed(h, site);
        const deleted = await h.request("DELETE", didPath(did), { token });
        assertOk(deleted, 204);
        assert.equal(deleted.text, "");
        assert.equal((await getListing(h, did)).json.status, "deleted");

        assertError(await h.request("PATCH", didPath(did), { token, body: { title: "x" } }), 404, "not_found");
        assertError(await h.request("DELETE", didPath(did), { token }), 404, "not_found");
        const read = (await getListing(h, did)).json;
        assert.equal(read.status, "deleted");
        assert.equal(read.title, null);

        // Registered again: the session from before the deletion stays dead, the new one works.
        const again = await list(h, site);
        assertOk(again, 200);
        assertError(await h.request("PATCH", didPath(did), { token, body: { title: "x" } }), 401, "unauthorized");
        assertError(await h.request("DELETE", didPath(did), { token }), 401, "unauthorized");
        assertOk(await h.request("DELETE", didPath(did), { token: again.json.session_token }), 204);
      });
    });

    describe("PATCH /v1/listings/{service_did}", () => {
      test("rejects unknown fields, empty bodies and over-limit values", async () => {
        const { did, token } = await listed(h, h.site(), { title: "Kept", description: "Kept too", tags: ["k"] });
        const before = (await getListing(h, did)).json;
        const bodies: unknown[] = [
          {},
          { status: "deleted" },
          { title: "ok", extra: 1 },
          { discovery_url: "https://elsewhere.test/.well-known/proto" },
          { service_did: "did:web:elsewhere.test" },
          { _meta: {} },
          { title: "t".repeat(121) },
          { description: "d".repeat(501) },
          { tags: Array.from({ length: 21 }, (_, i) => `t${i}`) },
          { tags: ["t".repeat(41)] },
          { tags: "k" },
          { tags: null },
          { tags: [1] },
          { title: 5 },
          { title: false },
          { tags: [1, true] },
          { title: ["x"] },
          { description: {} },
          [],
          null,
          "title",
        ];
        for (const body of bodies) {
          assertError(
            await h.request("PATCH", didPath(did), { token, rawBody: JSON.stringify(body) }),
            400,
            "invalid_request",
            JSON.stringify(body).slice(0, 120),
          );
        }
        assert.deepEqual((await getListing(h, did)).json, before);

        // At the limits: accepted.
        const atLimits = {
          title: "t".repeat(120),
          description: "d".repeat(500),
          tags: Array.from({ length: 20 }, (_, i) => `${i}`.padEnd(40, "x")),
        };
        const res = await h.request("PATCH", didPath(did), { token, body: atLimits });
        assertOk(res, 200);
        assert.equal(res.json.title, atLimits.title);
        assert.equal(res.json.description, atLimits.description);
        assert.deepEqual(res.json.tags, atLimits.tags);
      });

      test("answers the full listing, equal to the next GET; null clears; updated_at advances", async () => {
        const { did, token } = await listed(h, h.site(), { title: "T", description: "D", tags: ["x", "y"] });
        const created = (await getListing(h, did)).json;
        await h.advance(2);

        const res = await h.request("PATCH", didPath(did), { token, body: { title: "T2" } });
        assertOk(res, 200);
        assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
        assert.deepEqual(Object.keys(res.json).sort(), LISTING_KEYS);
        assert.deepEqual(res.json, (await getListing(h, did)).json);
        assert.equal(res.json.title, "T2");
        assert.equal(res.json.description, "D");
        assert.deepEqual(res.json.tags, ["x", "y"]);
        assert.equal(res.json.first_listed_at, created.first_listed_at);
        assert.equal(res.json.fetched_at, created.fetched_at);
        assert.equal(res.json.discovery_url, created.discovery_url);
        assert.deepEqual(res.json.discovery_doc, created.discovery_doc);
        assert.equal(res.json.status, "active");
        assert.ok(Date.parse(res.json.updated_at) > Date.parse(created.updated_at));

        await h.advance(2);
        const cleared = await h.request("PATCH", didPath(did), { token, body: { title: null, description: null } });
        assertOk(cleared, 200);
        assert.equal(cleared.json.title, null);
        assert.equal(cleared.json.description, null);
        assert.ok(Date.parse(cleared.json.updated_at) > Date.parse(res.json.updated_at));
        assert.deepEqual(cleared.json, (await getListing(h, did)).json);

        const tagsOnly = await h.request("PATCH", didPath(did), { token, body: { tags: [] } });
        assertOk(tagsOnly, 200);
        assert.deepEqual(tagsOnly.json.tags, []);
        assert.equal(tagsOnly.json.title, null);
        assert.deepEqual(tagsOnly.json, (await getListing(h, did)).json);

        // The tag filter follows the update.
        await h.request("PATCH", didPath(did), { token, body: { tags: ["patched-tag-unique"] } });
        const page = await h.request("GET", "/v1/listings?tag=patched-tag-unique");
        assert.deepEqual(
          page.json.listings.map((l: { service_did: string }) => l.service_did),
          [did],
        );
      });
    });

    describe("DIDs in paths (decisions §10)", () => {
      test("encodeURIComponent(did) and the raw DID with only % escaped both work", async () => {
        const site = h.site();
        const { did, token } = await listed(h, site, { title: "Paths" });
        assert.match(did, /%3A/);
        const encoded = didPath(did);
        const raw = `/v1/listings/${did.replaceAll("%", "%25")}`;
        assert.notEqual(encoded, raw);

        const viaEncoded = await getListing(h, did);
        const viaRaw = await h.request("GET", raw);
        assertOk(viaRaw, 200);
        assert.deepEqual(viaRaw.json, viaEncoded.json);

        const p1 = await h.request("PATCH", raw, { token, body: { title: "Raw" } });
        assertOk(p1, 200);
        assert.equal(p1.json.service_did, did);
        const p2 = await h.request("PATCH", encoded, { token, body: { description: "Encoded" } });
        assertOk(p2, 200);
        assert.equal(p2.json.title, "Raw");
        assertOk(await h.request("DELETE", raw, { token }), 204);
        assert.equal((await h.request("GET", encoded)).json.status, "deleted");

        // The other spelling for DELETE, and a did:key, which has nothing to escape.
        const second = await listed(h, h.site());
        assertOk(await h.request("DELETE", didPath(second.did), { token: second.token }), 204);
        const keyDid = newDidKey();
        const third = h.site();
        const keyed = await listed(h, third, {}, third.document({ service_did: keyDid }));
        assertOk(await h.request("GET", `/v1/listings/${keyDid}`), 200);
        assertOk(await h.request("PATCH", `/v1/listings/${keyDid}`, { token: keyed.token, body: { title: "k" } }), 200);
        assertOk(await h.request("DELETE", `/v1/listings/${keyDid}`, { token: keyed.token }), 204);

        // Decoded once only: a doubly escaped DID is a different DID.
        assert.equal((await h.request("GET", `/v1/listings/${encodeURIComponent(raw.slice(13))}`)).status, 404);
      });
    });

    describe("transport (decisions 'Both services')", () => {
      test("bodies over 64 KiB are 413 payload_too_large; 64 KiB exactly is not", async () => {
        const { did, token } = await listed(h, h.site());
        const big = (bytes: number) => {
          const shell = JSON.stringify({ discovery_url: "https://big.test/.well-known/proto", pad: "" });
          return `${shell.slice(0, -2)}${"a".repeat(bytes - shell.length)}"}`;
        };
        assert.equal(Buffer.byteLength(big(65537)), 65537);
        for (const path of ["/v1/listings/challenge", "/v1/listings"]) {
          assertError(await h.request("POST", path, { rawBody: big(65537) }), 413, "payload_too_large", path);
          assertError(await h.request("POST", path, { rawBody: big(200 * 1024) }), 413, "payload_too_large", path);
        }
        assertError(
          await h.request("PATCH", didPath(did), { token, rawBody: big(65537) }),
          413,
          "payload_too_large",
          "PATCH",
        );
        assertOk(await h.request("POST", "/v1/listings/challenge", { rawBody: big(65536) }), 200, "64 KiB exactly");

        // Streamed without a Content-Length.
        const payload = new TextEncoder().encode(big(70 * 1024));
        const stream = new ReadableStream<Uint8Array>({
          start(controller) {
            controller.enqueue(payload);
            controller.close();
          },
        });
        const init = {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: stream,
          duplex: "half",
        } as RequestInit;
        const response = await fetch(`${h.url}/v1/listings`, init);
        const text = await response.text();
        assertError(
          { status: response.status, headers: response.headers, text, json: JSON.parse(text) },
          413,
          "payload_too_large",
          "chunked",
        );
      });

      test("malformed JSON and non-JSON content types are 400 invalid_request", async () => {
        const { did, token } = await listed(h, h.site());
        const targets: [string, string, string | undefined][] = [
          ["POST", "/v1/listings/challenge", undefined],
          ["POST", "/v1/listings", undefined],
          ["PATCH", didPath(did), token],
        ];
        for (const [method, path, auth] of targets) {
          const withToken = auth === undefined ? {} : { token: auth };
          for (const rawBody of ['{"discovery_url":', "{'a':1}", "nope", "{}}", '{"a":1,}']) {
            assertError(
              await h.request(method, path, { ...withToken, rawBody }),
              400,
              "invalid_request",
              `${method} ${path} ${rawBody}`,
            );
          }
          assertError(
            await h.request(method, path, {
              ...withToken,
              rawBody: "",
              headers: { "content-type": "application/json" },
            }),
            400,
            "invalid_request",
            `${method} ${path} empty`,
          );
          for (const contentType of ["text/plain", "application/x-www-form-urlencoded", "text/html"]) {
            assertError(
              await h.request(method, path, {
                ...withToken,
                rawBody: JSON.stringify({ discovery_url: "https://ct.test/.well-known/proto", title: "x" }),
                headers: { "content-type": contentType },
              }),
              400,
              "invalid_request",
              `${method} ${path} ${contentType}`,
            );
          }
        }
        // application/json with a charset is still JSON.
        assertOk(
          await h.request("POST", "/v1/listings/challenge", {
            rawBody: JSON.stringify({ discovery_url: "https://charset.test/.well-known/proto" }),
            headers: { "content-type": "application/json; charset=utf-8" },
          }),
          200,
        );
      });

      test("unknown routes and methods are 404 not_found in the envelope", async () => {
        const cases: [string, string][] = [
          ["GET", "/v1/nope"],
          ["POST", "/v1/listing"],
          ["POST", "/v1/listings/challenge/extra"],
          ["PUT", "/v1/listings/did:web:x.test"],
          ["POST", "/v1/listings/did:web:x.test"],
          ["GET", "/v2/listings"],
          ["DELETE", "/v1/listings"],
          // `GET /` is the browse page (issue 9); other methods there, and other paths, are not routes.
          ["POST", "/"],
          ["GET", "/nope"],
        ];
        for (const [method, path] of cases) {
          assertError(
            await h.request(method, path, method === "GET" ? {} : { body: {} }),
            404,
            "not_found",
            `${method} ${path}`,
          );
        }
      });
    });
  });

  describe(`directory write rate limits (${variant.name})`, () => {
    let h: H;
    before(async () => {
      h = await startDirectoryHarness(variant, { sites: 4 });
    });
    after(() => h?.close());

    test("POST /v1/listings/challenge: 30 per minute", async () => {
      await freshWindow(h);
      for (let i = 0; i < 30; i++) {
        assertOk(await requestChallenge(h, `https://rl-challenge-${i}.test/.well-known/proto`), 200, `#${i + 1}`);
      }
      const denied = await requestChallenge(h, "https://rl-challenge-x.test/.well-known/proto");
      assertRateLimited(denied, 60, "31st challenge");
      // Invalid requests spend the bucket too, and are refused before they are looked at.
      assertRateLimited(await requestChallenge(h, "http://x"), 60, "invalid, over the limit");
      await h.advance(60);
      assertOk(await requestChallenge(h, "https://rl-challenge-x.test/.well-known/proto"), 200, "next window");
    });

    test("POST /v1/listings: 10 per minute; a refused submit does not spend its challenge", async () => {
      const site = h.site();
      await freshWindow(h);
      const token = await issue(h, site.discoveryUrl);
      site.serveProof(token);
      site.serveDiscovery(site.document());
      for (let i = 0; i < 10; i++) {
        assertError(
          await submit(h, { discovery_url: site.discoveryUrl, challenge_token: `ch_unknown${i}` }),
          400,
          "invalid_challenge",
          `#${i + 1}`,
        );
      }
      const body = { discovery_url: site.discoveryUrl, challenge_token: token };
      assertRateLimited(await submit(h, body), 60, "11th submit");
      assert.equal(site.hits.proof, 0);
      await h.advance(60);
      assertOk(await submit(h, body), 201, "next window, same challenge");
    });

    test("PATCH and DELETE share 30 per minute", async () => {
      const { did, token } = await h.register();
      await freshWindow(h);
      for (let i = 0; i < 15; i++) {
        assertOk(await h.request("PATCH", didPath(did), { token, body: { title: `t${i}` } }), 200, `PATCH #${i + 1}`);
        assertError(await h.request("DELETE", didPath(did)), 401, "unauthorized", `DELETE #${i + 1}`);
      }
      assertRateLimited(await h.request("PATCH", didPath(did), { token, body: { title: "late" } }), 60, "PATCH");
      assertRateLimited(await h.request("DELETE", didPath(did), { token }), 60, "DELETE");
      assertRateLimited(await h.request("PATCH", didPath("did:web:none.test")), 60, "PATCH elsewhere");
      assert.equal((await getListing(h, did)).json.title, "t14");
      await h.advance(60);
      assertOk(await h.request("DELETE", didPath(did), { token }), 204, "next window");
    });

    test("reads: 600 per minute across list and single reads", async () => {
      const { did } = await h.register();
      await freshWindow(h);
      for (let i = 0; i < 600; i++) {
        const res = await h.request("GET", i % 2 === 0 ? "/v1/listings?limit=1" : didPath(did));
        if (res.status !== 200) assert.fail(`read #${i + 1}: ${res.status} ${res.text}`);
      }
      for (const path of ["/v1/listings", didPath(did)]) {
        const denied = await h.request("GET", path);
        assertRateLimited(denied, 60, path);
        // Reads allow any origin, refusals included, so a browser can see the 429.
        assert.equal(denied.headers.get("access-control-allow-origin"), "*");
      }
      // Reads and writes are separate buckets.
      assertOk(await requestChallenge(h, "https://rl-read.test/.well-known/proto"), 200);
      await h.advance(60);
      assertOk(await h.request("GET", didPath(did)), 200, "next window");
    });

    test("GET /sitemap.xml: 60 per minute", async () => {
      await freshWindow(h);
      for (let i = 0; i < 60; i++) {
        const res = await h.request("GET", "/sitemap.xml");
        assertOk(res, 200, `#${i + 1}`);
      }
      assertRateLimited(await h.request("GET", "/sitemap.xml"), 60, "61st");
      assertOk(await h.request("GET", "/v1/listings"), 200, "the read bucket is separate");
      await h.advance(60);
      assertOk(await h.request("GET", "/sitemap.xml"), 200, "next window");
    });

    test("10 active challenges per host and hour; consumed and expired ones stop counting", async () => {
      const site = h.site();
      await freshWindow(h);
      const tokens: string[] = [];
      for (let i = 0; i < 10; i++) tokens.push(await issue(h, site.discoveryUrl));
      const denied = await requestChallenge(h, site.discoveryUrl);
      assertRateLimited(denied, 3600, "11th for the host");
      // The host is compared case-insensitively.
      assertRateLimited(
        await requestChallenge(h, site.discoveryUrl.replace(site.hostname, site.hostname.toUpperCase())),
        3600,
      );
      // Other hosts are not affected.
      assertOk(await requestChallenge(h, "https://rl-other-host.test/.well-known/proto"), 200);

      // Consuming one (even by a failed submit) frees one place.
      assertError(
        await submit(h, { discovery_url: site.discoveryUrl, challenge_token: tokens[0] }),
        400,
        "proof_fetch_failed",
      );
      tokens.push(await issue(h, site.discoveryUrl));
      assertRateLimited(await requestChallenge(h, site.discoveryUrl), 3600, "full again");

      // Expired challenges do not count.
      await h.advance(1801);
      for (let i = 0; i < 10; i++)
        assertOk(await requestChallenge(h, site.discoveryUrl), 200, `after expiry #${i + 1}`);
      assertRateLimited(await requestChallenge(h, site.discoveryUrl), 3600, "full once more");
    });
  });

  describe(`directory outbound fetches without PROTO_FETCH_ALLOW_PRIVATE (${variant.name})`, () => {
    let h: H;
    let sentinel: Sentinel;
    before(async () => {
      sentinel = await startSentinel();
      h = await startDirectoryHarness(variant, {
        sites: 2,
        env: { PROTO_FETCH_ALLOW_PRIVATE: "0", DIRECTORY_RATE_LIMITS: NO_RATE_LIMITS },
        extraResolve: [
          `evil.test:${sentinel.port}:127.0.0.1`,
          `evil-zero.test:${sentinel.port}:0.0.0.0`,
          `evil-mapped.test:${sentinel.port}:[::ffff:127.0.0.1]`,
          `evil-private.test:${sentinel.port}:10.0.0.1`,
          `evil-metadata.test:${sentinel.port}:169.254.169.254`,
        ],
      });
    });
    after(async () => {
      await h?.close();
      await sentinel?.close();
    });

    test("a site pinned to loopback is proof_fetch_failed and is never contacted", async () => {
      const site = h.site();
      const res = await list(h, site);
      assertError(res, 400, "proof_fetch_failed");
      assert.ok(!res.json.error.message.includes("127.0.0.1"), res.json.error.message);
      assert.deepEqual(site.hits, { proof: 0, discovery: 0 });
      assert.equal((await h.request("GET", didPath(site.did))).status, 404);
    });

    test("names pinned to non-public addresses never reach the sentinel, and the address is not revealed", async () => {
      const cases: [string, string[]][] = [
        ["evil.test", ["127.0.0.1"]],
        ["evil-zero.test", ["0.0.0.0"]],
        ["evil-mapped.test", ["ffff", "127.0.0.1"]],
        ["evil-private.test", ["10.0.0.1"]],
        ["evil-metadata.test", ["169.254"]],
      ];
      for (const [name, secrets] of cases) {
        const url = `https://${name}:${sentinel.port}/.well-known/proto`;
        const res = await submit(h, { discovery_url: url, challenge_token: await issue(h, url) });
        assertError(res, 400, "proof_fetch_failed", name);
        for (const secret of secrets) assert.ok(!res.text.includes(secret), `${name}: ${res.text}`);
      }
      for (const url of [
        `https://127.0.0.1:${sentinel.port}/.well-known/proto`,
        `https://localhost:${sentinel.port}/.well-known/proto`,
        `https://[::ffff:7f00:1]:${sentinel.port}/.well-known/proto`,
      ]) {
        const res = await submit(h, { discovery_url: url, challenge_token: await issue(h, url) });
        assertError(res, 400, "proof_fetch_failed", url);
      }
      assert.equal(sentinel.hits, 0);
    });

    test("a name that does not resolve is answered exactly like one pinned to a private address", async () => {
      // `.invalid` never resolves (RFC 6761); evil-private.test is pinned to 10.0.0.1.
      const answers = [];
      for (const name of ["evil-private.test", "evil.test", "localhost", "nowhere.invalid"]) {
        const url = `https://${name}:${sentinel.port}/.well-known/proto`;
        const res = await submit(h, { discovery_url: url, challenge_token: await issue(h, url) });
        answers.push({ status: res.status, body: res.text.replaceAll(name, "NAME") });
      }
      const [first, ...rest] = answers;
      for (const answer of rest) assert.deepEqual(answer, first);
      assert.equal(first?.status, 400);
      assert.match(first?.body ?? "", /proof_fetch_failed/);
      assert.equal(sentinel.hits, 0);
    });
  });
}
