/**
 * Issue 8, scale-out: three directory replicas and two attestor replicas as separate processes on
 * loopback, one PostgreSQL database and one Redis. Traffic is spread across the replicas; every
 * check is what a client sees (status codes, bodies, counts). Time moves through `/__test/clock`
 * on every replica at once; nothing sleeps through a lifetime.
 *
 * Runs only with TEST_POSTGRES_URL and TEST_REDIS_URL (both needed for more than one replica).
 */
import assert from "node:assert/strict";
import { createHash, sign } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { after, before, describe, test } from "node:test";
import { signRequest } from "@proto/protocol";
import { DISCOVERY_PATH } from "@proto/testkit";
import { createLocalJWKSet, decodeProtectedHeader, jwtVerify } from "jose";
import { Browserless, field, type PageAnswer } from "./support/browser-session.js";
import { within } from "./support/eventually.js";
import type { HttpResult } from "./support/http.js";
import {
  type Cluster,
  freshGet,
  REPLICAS_SKIP_REASON,
  type Replica,
  type Site,
  startCluster,
  TRUST_PUBLIC_URL,
} from "./support/replicas.js";
import { magicLinkOf } from "./support/smtp.js";
import { type Agent, newAgent } from "./support/trust.js";

if (REPLICAS_SKIP_REASON !== undefined) process.stdout.write(`# ${REPLICAS_SKIP_REASON}\n`);

const SERVICE_DID = "did:web:rp.example";
const REDIRECT_URI = "http://127.0.0.1:9/oidc/callback";
const AUD = "did:web:svc.test";
const DAY = 86400;
/** The directory replicas take this long to drain after SIGTERM (readyz answers 503 meanwhile). */
const SHUTDOWN_DELAY_SECONDS = 3;

// ---- clients ------------------------------------------------------------------------------

let ipCounter = 0;
/** A client address of its own (sent as X-Forwarded-For), so each client has its own counters. */
function newIp(): string {
  const n = ++ipCounter;
  return `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;
}

const didPath = (did: string) => `/v1/listings/${encodeURIComponent(did)}`;

function pollBody(agent: Agent, reqId: string): { req_id: string; sig_b64: string } {
  return { req_id: reqId, sig_b64: sign(null, Buffer.from(reqId, "utf8"), agent.privateKey).toString("base64url") };
}

/** A signed `POST /v1/token` for `{trust_url}/v1/token`, created at the attestors' clock. */
function signedMint(agent: Agent, nowUnix: number, aud = AUD): { rawBody: string; headers: Record<string, string> } {
  const body = JSON.stringify({ aud });
  const signed = signRequest(
    { method: "POST", url: `${TRUST_PUBLIC_URL}/v1/token`, body },
    { keyid: agent.did, privateKey: agent.privateKey, created: nowUnix },
  );
  return { rawBody: body, headers: { "content-type": "application/json", ...signed.headers } };
}

/** Asserts an error envelope with `code`. */
function assertError(result: HttpResult, status: number, code: string, context = ""): void {
  assert.equal(result.status, status, `${context} ${result.text}`);
  assert.equal(result.json?.error?.code, code, `${context} ${result.text}`);
}

/** Counts statuses: `{ "200": 3, "409": 2 }`. */
function statusCounts(results: HttpResult[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const r of results) counts[r.status] = (counts[r.status] ?? 0) + 1;
  return counts;
}

/** One person's browser: a cookie jar that any replica may be asked with (redirects not followed). */
class Browser {
  readonly #session = new Browserless("", { "x-forwarded-for": newIp() });

  /** `target` on `replica`; an absolute URL (a mailed link) is opened on `replica` too. */
  send(replica: Replica, method: string, target: string, form?: Record<string, string>): Promise<PageAnswer> {
    const url = new URL(target, replica.url);
    return this.#session.send(method, `${replica.url}${url.pathname}${url.search}`, { form });
  }
}

interface Registered {
  token: string;
  did: string;
}

// ---- the suite ----------------------------------------------------------------------------

describe("multi-replica: 3 directories, 2 attestors, one PostgreSQL, one Redis", {
  skip: REPLICAS_SKIP_REASON ?? false,
  timeout: 180_000,
}, () => {
  let cluster: Cluster;
  let D: Replica[];
  let T: Replica[];
  /** Every site handed out to this suite (revalidation counts their fetches). */
  const sites: Site[] = [];
  const newSite = (): Site => {
    const site = cluster.site();
    sites.push(site);
    return site;
  };

  before(async () => {
    cluster = await startCluster({
      directories: 3,
      attestors: 2,
      sites: 48,
      oidcClients: [{ client_id: SERVICE_DID, service_did: SERVICE_DID, redirect_uris: [REDIRECT_URI] }],
      directoryEnv: { SHUTDOWN_DELAY_SECONDS: String(SHUTDOWN_DELAY_SECONDS) },
    });
    D = cluster.directories;
    T = cluster.attestors;
  });

  after(async () => {
    await cluster?.close();
  });

  /** Wraps a test body so a failure carries every replica's output. */
  const withLogs = (run: () => Promise<void>) => async () => {
    try {
      await run();
    } catch (error) {
      if (error instanceof Error) error.message = `${error.message}\n\n${cluster.logs()}`;
      throw error;
    }
  };

  /** Challenge on one replica, proof, submit on another: a listed site and its session token. */
  async function register(
    site: Site,
    challengeOn: Replica,
    submitOn: Replica,
    extra: Record<string, unknown> = {},
  ): Promise<Registered> {
    const ip = newIp();
    const challenge = await challengeOn.request("POST", "/v1/listings/challenge", {
      ip,
      body: { discovery_url: site.discoveryUrl },
    });
    assert.equal(challenge.status, 200, challenge.text);
    site.serveProof(challenge.json.challenge_token);
    site.serveDiscovery(site.document());
    const created = await submitOn.request("POST", "/v1/listings", {
      ip,
      body: { discovery_url: site.discoveryUrl, challenge_token: challenge.json.challenge_token, ...extra },
    });
    assert.equal(created.status, 201, created.text);
    assert.equal(created.json.service_did, site.did);
    return { token: created.json.session_token, did: site.did };
  }

  /**
   * The listing as every directory replica answers it, once they all answer the same: each
   * replica caches single-listing reads, and a change reaches every replica within a second.
   */
  async function readEverywhere(did: string): Promise<HttpResult> {
    let reads: HttpResult[] = [];
    const same = () => reads.every((read) => read.status === reads[0]!.status && read.text === reads[0]!.text);
    await within(1000, `every replica answers ${did} alike`, async () => {
      const ip = newIp();
      reads = await Promise.all(D.map((d) => d.request("GET", didPath(did), { ip })));
      return same();
    }).catch(() => undefined);
    for (const [i, read] of reads.entries()) {
      assert.equal(read.status, reads[0]!.status, `${D[i]!.name} ${did}: ${read.text}`);
      assert.deepEqual(read.json, reads[0]!.json, `${D[i]!.name} answers ${did} like ${D[0]!.name}`);
    }
    return reads[0]!;
  }

  async function keySet(
    replica: Replica,
  ): Promise<{ kids: string[]; keys: Record<string, unknown>[]; maxAge: number }> {
    const result = await replica.request("GET", "/.well-known/jwks.json", { ip: newIp() });
    assert.equal(result.status, 200, result.text);
    const maxAge = Number(/max-age=(\d+)/.exec(result.headers.get("cache-control") ?? "")?.[1]);
    const keys = result.json.keys as Record<string, unknown>[];
    return { keys, kids: keys.map((k) => k.kid as string).sort(), maxAge };
  }

  async function attestorNowUnix(): Promise<number> {
    return Math.floor((await T[0]!.nowMs()) / 1000);
  }

  /** An agent linked through the test hook (start on one attestor, confirm and poll on the other). */
  async function linkedAgent(): Promise<Agent> {
    const agent = newAgent();
    const ip = newIp();
    const started = await T[0]!.request("POST", "/v1/link/start", {
      ip,
      body: { agent_did: agent.did, agent_pubkey_b64: agent.publicKeyB64 },
    });
    assert.equal(started.status, 200, started.text);
    const reqId = started.json.req_id as string;
    await T[1]!.hook("/__test/link/confirm", { req_id: reqId, email: `hook-${reqId}@mail.test` });
    const polled = await T[1]!.request("POST", "/v1/link/poll", { ip, body: pollBody(agent, reqId) });
    assert.equal(polled.status, 200, polled.text);
    assert.equal(polled.json.state, "confirmed");
    return agent;
  }

  /** Verifies an attestation against the key set one replica serves, at the attestors' clock. */
  async function verifyAttestation(jwt: string, keysFrom: Replica): Promise<string> {
    const { keys } = await keySet(keysFrom);
    const nowMs = await T[0]!.nowMs();
    const { payload, protectedHeader } = await jwtVerify(jwt, createLocalJWKSet({ keys }), {
      issuer: "proto-trust",
      audience: AUD,
      currentDate: new Date(nowMs),
    });
    assert.equal(payload.verification, "email");
    return protectedHeader.kid as string;
  }

  // ---- start-up ---------------------------------------------------------------------------

  test(
    "every replica is ready, and the attestors started together created one signing key between them",
    withLogs(async () => {
      for (const replica of [...D, ...T]) {
        const ready = await replica.request("GET", "/readyz");
        assert.equal(ready.status, 200, `${replica.name}: ${ready.text}`);
      }
      const sets = await Promise.all(T.map(keySet));
      assert.equal(sets[0]!.kids.length, 1, `one key, not one per replica: ${sets[0]!.kids}`);
      assert.deepEqual(sets[1]!.kids, sets[0]!.kids, "both attestors publish the same key set");
    }),
  );

  // ---- directory: state lives in the database ---------------------------------------------

  test(
    "a listing registered, updated and withdrawn through three different directory replicas",
    withLogs(async () => {
      const site = newSite();
      const { token, did } = await register(site, D[0]!, D[1]!, { title: "First title" });
      const ip = newIp();

      const patched = await D[2]!.request("PATCH", didPath(did), {
        ip,
        token,
        body: { title: "Updated on replica 2", tags: ["replicas"] },
      });
      assert.equal(patched.status, 200, patched.text);
      assert.equal(patched.json.title, "Updated on replica 2");
      const read = await readEverywhere(did);
      assert.deepEqual(read.json, patched.json, "every replica reads what replica 2 wrote");

      for (const d of D) {
        const listed = await d.request("GET", "/v1/listings?tag=replicas", { ip });
        assert.equal(listed.status, 200, listed.text);
        assert.deepEqual(
          listed.json.listings.map((l: { service_did: string }) => l.service_did),
          [did],
          `${d.name} lists it`,
        );
      }

      const withdrawn = await D[0]!.request("DELETE", didPath(did), { ip, token });
      assert.equal(withdrawn.status, 204, withdrawn.text);
      assertError(await D[1]!.request("PATCH", didPath(did), { ip, token, body: { title: "x" } }), 404, "not_found");
      assert.equal((await readEverywhere(did)).json.status, "deleted");
    }),
  );

  test(
    "a challenge is consumed once, whichever replicas the concurrent submissions reach",
    withLogs(async () => {
      const site = newSite();
      const ip = newIp();
      const challenge = await D[0]!.request("POST", "/v1/listings/challenge", {
        ip,
        body: { discovery_url: site.discoveryUrl },
      });
      assert.equal(challenge.status, 200, challenge.text);
      site.serveProof(challenge.json.challenge_token);
      site.serveDiscovery(site.document());
      const body = { discovery_url: site.discoveryUrl, challenge_token: challenge.json.challenge_token };
      const results = await Promise.all(
        [...D, ...D].map((d) => d.request("POST", "/v1/listings", { ip: newIp(), body })),
      );
      const created = results.filter((r) => r.status === 201);
      assert.equal(
        created.length,
        1,
        `exactly one submission lists the site: ${JSON.stringify(statusCounts(results))}`,
      );
      for (const r of results) {
        if (r.status === 201) continue;
        assert.ok(
          (r.status === 409 && r.json?.error?.code === "challenge_already_used") ||
            (r.status === 400 && r.json?.error?.code === "invalid_challenge"),
          `the others are refused: ${r.status} ${r.text}`,
        );
      }
      assert.equal(site.hits.proof, 1, "the proof was fetched once: the challenge was consumed before any fetch");
      const patched = await D[2]!.request("PATCH", didPath(site.did), {
        ip,
        token: created[0]!.json.session_token,
        body: { title: "Won the race" },
      });
      assert.equal(patched.status, 200, patched.text);
    }),
  );

  test(
    "the per-host challenge cap holds across replicas issuing at the same moment",
    withLogs(async () => {
      const site = newSite();
      const results = await Promise.all(
        Array.from({ length: 24 }, (_, i) =>
          D[i % D.length]!.request("POST", "/v1/listings/challenge", {
            ip: newIp(),
            body: { discovery_url: site.discoveryUrl },
          }),
        ),
      );
      const counts = statusCounts(results);
      assert.deepEqual(counts, { 200: 10, 429: 14 }, "10 active challenges per host per hour, cluster-wide");
      for (const r of results.filter((x) => x.status === 429)) {
        assertError(r, 429, "rate_limited");
        assert.match(r.headers.get("retry-after") ?? "", /^\d+$/);
      }
    }),
  );

  // ---- rate limits ------------------------------------------------------------------------

  test(
    "every rate limit holds across replicas (within one request of the limit)",
    withLogs(async () => {
      await cluster.alignTo("directory", 60);
      await cluster.alignTo("trust", 60);

      interface Scope {
        name: string;
        limit: number;
        count: number;
        send(i: number): Promise<HttpResult>;
        /** The answer a request gets when the limit lets it through. */
        passed(r: HttpResult): boolean;
      }
      const dirIp = { challenge: newIp(), create: newIp(), write: newIp() };
      const trustIp = { start: newIp(), poll: newIp(), token: newIp() };
      const busyAgent = newAgent();
      const scopes: Scope[] = [
        {
          name: "dir.challenge (30/60 per IP)",
          limit: 30,
          count: 36,
          send: (i) =>
            D[i % 3]!.request("POST", "/v1/listings/challenge", {
              ip: dirIp.challenge,
              body: { discovery_url: `https://limit${i}.example/.well-known/proto` },
            }),
          passed: (r) => r.status === 200,
        },
        {
          name: "dir.create (10/60 per IP)",
          limit: 10,
          count: 16,
          send: (i) =>
            D[i % 3]!.request("POST", "/v1/listings", {
              ip: dirIp.create,
              body: {
                discovery_url: "https://nobody.example/.well-known/proto",
                challenge_token: `ch_${String(i).padStart(22, "A")}`,
              },
            }),
          passed: (r) => r.status === 400 && r.json?.error?.code === "invalid_challenge",
        },
        {
          name: "dir.write (30/60 per IP)",
          limit: 30,
          count: 36,
          send: (i) =>
            D[i % 3]!.request("PATCH", didPath("did:web:nobody.example"), {
              ip: dirIp.write,
              token: "sess_not-a-session",
              body: { title: "x" },
            }),
          passed: (r) => r.status === 401,
        },
        {
          name: "trust.link_start (30/60 per IP)",
          limit: 30,
          count: 36,
          send: (i) => {
            const agent = newAgent();
            return T[i % 2]!.request("POST", "/v1/link/start", {
              ip: trustIp.start,
              body: { agent_did: agent.did, agent_pubkey_b64: agent.publicKeyB64 },
            });
          },
          passed: (r) => r.status === 200,
        },
        {
          name: "trust.link_start_agent (20/3600 per agent DID)",
          limit: 20,
          count: 26,
          send: (i) =>
            T[i % 2]!.request("POST", "/v1/link/start", {
              ip: newIp(),
              body: { agent_did: busyAgent.did, agent_pubkey_b64: busyAgent.publicKeyB64 },
            }),
          passed: (r) => r.status === 200,
        },
        {
          name: "trust.link_poll (60/60 per IP)",
          limit: 60,
          count: 66,
          send: (i) =>
            T[i % 2]!.request("POST", "/v1/link/poll", {
              ip: trustIp.poll,
              body: { req_id: "lr_unknown", sig_b64: "AAAA" },
            }),
          passed: (r) => r.status === 404,
        },
        {
          name: "trust.token (60/60 per IP)",
          limit: 60,
          count: 66,
          send: (i) =>
            T[i % 2]!.request("POST", "/v1/token", {
              ip: trustIp.token,
              rawBody: JSON.stringify({ aud: AUD }),
              headers: { "content-type": "application/json" },
            }),
          passed: (r) => r.status === 401,
        },
      ];
      for (const scope of scopes) {
        const results = await Promise.all(Array.from({ length: scope.count }, (_, i) => scope.send(i)));
        const limited = results.filter((r) => r.status === 429);
        const passed = results.filter((r) => scope.passed(r));
        assert.equal(
          passed.length + limited.length,
          results.length,
          `${scope.name}: every answer is the normal one or 429: ${JSON.stringify(statusCounts(results))} ${
            results.find((r) => r.status !== 429 && !scope.passed(r))?.text
          }`,
        );
        assert.ok(
          passed.length >= scope.limit && passed.length <= scope.limit + 1,
          `${scope.name}: ${passed.length} of ${scope.count} let through across replicas`,
        );
        for (const r of limited) {
          assertError(r, 429, "rate_limited", scope.name);
          assert.match(r.headers.get("retry-after") ?? "", /^\d+$/);
        }
      }
    }),
  );

  // ---- attestor: sessions, link requests, OIDC codes, nonces ------------------------------

  let person: Browser;
  /** The agent linked by the browser test (later tests fall back to one linked through the hook). */
  let linked: Agent | undefined;

  test(
    "a person signs in on one attestor and confirms a link on the other; the confirmation is delivered once",
    withLogs(async () => {
      person = new Browser();
      const email = `person-${Date.now()}@mail.test`;
      // Sign-in mail asked from trust-0...
      const page = await person.send(T[0]!, "GET", "/signin");
      assert.equal(page.status, 200, page.text);
      const asked = await person.send(T[0]!, "POST", "/signin/email", {
        _csrf: field(page.text, "_csrf"),
        next: field(page.text, "next"),
        email,
      });
      assert.equal(asked.status, 200, asked.text);
      const link = new URL(magicLinkOf(await cluster.smtp.nextMailTo(email)));
      assert.equal(link.origin, TRUST_PUBLIC_URL);
      // ...opened and used on trust-1.
      const verify = await person.send(T[1]!, "GET", `${link.pathname}${link.search}`);
      assert.equal(verify.status, 200, verify.text);
      const signedIn = await person.send(T[1]!, "POST", "/signin/email/verify", {
        _csrf: field(verify.text, "_csrf"),
        token: field(verify.text, "token"),
      });
      assert.equal(signedIn.status, 303, signedIn.text);
      const account = await person.send(T[0]!, "GET", "/account");
      assert.equal(account.status, 200, `trust-0 knows the session trust-1 opened: ${account.text}`);

      // The agent starts on trust-0; the person opens the link page on trust-1.
      const agent = newAgent();
      const agentIp = newIp();
      const started = await T[0]!.request("POST", "/v1/link/start", {
        ip: agentIp,
        body: { agent_did: agent.did, agent_pubkey_b64: agent.publicKeyB64, agent_label: "replica agent" },
      });
      assert.equal(started.status, 200, started.text);
      const reqId = started.json.req_id as string;
      const before = await T[1]!.request("POST", "/v1/link/poll", { ip: agentIp, body: pollBody(agent, reqId) });
      assert.deepEqual(before.json, { state: "pending", phase: "awaiting_signin" });

      const linkPage = await person.send(T[1]!, "GET", `/link?req=${reqId}`);
      assert.equal(linkPage.status, 200, linkPage.text);
      const opened = await T[0]!.request("POST", "/v1/link/poll", { ip: agentIp, body: pollBody(agent, reqId) });
      assert.deepEqual(
        opened.json,
        { state: "pending", phase: "awaiting_confirm" },
        "trust-0 sees the page was opened",
      );

      const confirmed = await person.send(T[0]!, "POST", "/link/confirm", {
        _csrf: field(linkPage.text, "_csrf"),
        req: reqId,
      });
      assert.equal(confirmed.status, 200, confirmed.text);
      assert.match(confirmed.text, /Agent linked/);

      // Six polls at once, three on each attestor: one delivers the binding.
      const polls = await Promise.all(
        [...T, ...T, ...T].map((t) =>
          t.request("POST", "/v1/link/poll", { ip: agentIp, body: pollBody(agent, reqId) }),
        ),
      );
      const delivered = polls.filter((p) => p.status === 200);
      assert.equal(delivered.length, 1, `delivered once: ${JSON.stringify(statusCounts(polls))}`);
      assert.equal(delivered[0]!.json.state, "confirmed");
      assert.match(delivered[0]!.json.binding_id, /^bnd_/);
      for (const p of polls.filter((x) => x.status !== 200)) assertError(p, 410, "link_request_expired");

      // The binding works on both attestors.
      const now = await attestorNowUnix();
      for (const t of T) {
        const minted = await t.request("POST", "/v1/token", { ip: newIp(), ...signedMint(agent, now) });
        assert.equal(minted.status, 200, `${t.name}: ${minted.text}`);
        await verifyAttestation(minted.json.jwt, T[0] === t ? T[1]! : T[0]!);
      }
      linked = agent;
    }),
  );

  test(
    "a service suspended on one attestor is refused by both; restored on the other, both mint again",
    withLogs(async () => {
      assert.ok(person && linked, "the previous test linked an agent to the person");
      const agent = linked;
      const OTHER = "did:web:other.test";
      const mintEverywhere = async (aud: string) => {
        const now = await attestorNowUnix();
        return Promise.all(
          T.map((t) => t.request("POST", "/v1/token", { ip: newIp(), ...signedMint(agent, now, aud) })),
        );
      };
      for (const minted of await mintEverywhere(OTHER)) assert.equal(minted.status, 200, minted.text);

      /** The form the account page on `replica` shows for AUD: its action and CSRF token. */
      const formFor = async (replica: Replica, action: "suspend" | "restore") => {
        const page = await person.send(replica, "GET", "/account");
        assert.equal(page.status, 200, page.text);
        const forms = [...page.text.matchAll(/<form method="post" action="([^"]+)">([\s\S]*?)<\/form>/g)];
        const form = forms.find((f) => f[1]?.endsWith(`/services/${action}`) && f[2]?.includes(`value="${AUD}"`));
        assert.ok(form, `${replica.name} offers to ${action} ${AUD}`);
        return { action: form[1] as string, csrf: field(page.text, "_csrf") };
      };

      const suspend = await formFor(T[1]!, "suspend");
      const suspended = await person.send(T[1]!, "POST", suspend.action, { _csrf: suspend.csrf, aud: AUD });
      assert.equal(suspended.status, 303, suspended.text);
      for (const refused of await mintEverywhere(AUD)) assertError(refused, 403, "service_suspended");
      for (const minted of await mintEverywhere(OTHER)) assert.equal(minted.status, 200, minted.text);

      // trust-0 shows it suspended, and restores it.
      const restore = await formFor(T[0]!, "restore");
      const restored = await person.send(T[0]!, "POST", restore.action, { _csrf: restore.csrf, aud: AUD });
      assert.equal(restored.status, 303, restored.text);
      for (const minted of await mintEverywhere(AUD)) assert.equal(minted.status, 200, minted.text);
    }),
  );

  test(
    "an authorization code issued by one attestor is redeemed once, whichever attestors are asked",
    withLogs(async () => {
      assert.ok(person, "the previous test signed the person in");
      const verifier = Buffer.alloc(32, 3).toString("base64url");
      const challenge = createHash("sha256").update(verifier).digest("base64url");
      const query = new URLSearchParams({
        client_id: SERVICE_DID,
        redirect_uri: REDIRECT_URI,
        response_type: "code",
        scope: "openid",
        code_challenge: challenge,
        code_challenge_method: "S256",
        state: "st-1",
        nonce: "n-1",
      });
      // Asked on one attestor, answered on another: the answer and the code live in the shared store.
      const asked = await person.send(T[0]!, "GET", `/oidc/authorize?${query}`);
      assert.equal(asked.status, 200, asked.text);
      const csrf = /name="_csrf" value="([^"]+)"/.exec(asked.text)?.[1] ?? "";
      const authorized = await person.send(T[1]!, "POST", "/oidc/consent", {
        ...Object.fromEntries(query),
        _csrf: csrf,
        decision: "allow",
      });
      assert.ok([302, 303].includes(authorized.status), `${authorized.status} ${authorized.text}`);
      const back = new URL(authorized.location ?? "");
      assert.equal(`${back.origin}${back.pathname}`, REDIRECT_URI);
      assert.equal(back.searchParams.get("state"), "st-1");
      const code = back.searchParams.get("code");
      assert.ok(code, authorized.location);

      const form = {
        grant_type: "authorization_code",
        code,
        code_verifier: verifier,
        client_id: SERVICE_DID,
        redirect_uri: REDIRECT_URI,
      };
      const redemptions = await Promise.all(
        [...T, ...T].map((t) => t.request("POST", "/oidc/token", { ip: newIp(), body: form })),
      );
      const granted = redemptions.filter((r) => r.status === 200);
      assert.equal(granted.length, 1, `redeemed once: ${JSON.stringify(statusCounts(redemptions))}`);
      for (const r of redemptions.filter((x) => x.status !== 200)) {
        assert.equal(r.status, 400, r.text);
        assert.equal(r.json?.error, "invalid_grant", r.text);
      }
      const idToken = granted[0]!.json.id_token as string;
      const nowMs = await T[0]!.nowMs();
      for (const t of T) {
        const { keys } = await keySet(t);
        const { payload } = await jwtVerify(idToken, createLocalJWKSet({ keys }), {
          issuer: TRUST_PUBLIC_URL,
          audience: SERVICE_DID,
          currentDate: new Date(nowMs),
        });
        assert.equal(payload.nonce, "n-1");
        assert.equal(typeof payload.sub, "string");
      }
    }),
  );

  test(
    "a signed token request is accepted once: its nonce is shared by every attestor",
    withLogs(async () => {
      const agent = linked ?? (await linkedAgent());
      const request = signedMint(agent, await attestorNowUnix());
      const results = await Promise.all(
        [...T, ...T].map((t) => t.request("POST", "/v1/token", { ip: newIp(), ...request })),
      );
      const accepted = results.filter((r) => r.status === 200);
      assert.equal(accepted.length, 1, `accepted once: ${JSON.stringify(statusCounts(results))}`);
      for (const r of results.filter((x) => x.status !== 200)) assertError(r, 401, "replayed_nonce");
    }),
  );

  // ---- revalidation -----------------------------------------------------------------------

  test(
    "revalidation is leased: three replicas revalidating at once fetch each listing once per cycle",
    withLogs(async () => {
      for (let i = 0; i < 9; i++) await register(newSite(), D[i % 3]!, D[(i + 1) % 3]!);
      const listed: { did: string }[] = [];
      let cursor: string | null = null;
      do {
        const page: HttpResult = await D[0]!.request(
          "GET",
          `/v1/listings?limit=100${cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`}`,
          { ip: newIp() },
        );
        assert.equal(page.status, 200, page.text);
        listed.push(...page.json.listings.map((l: { service_did: string }) => ({ did: l.service_did })));
        cursor = page.json.next_cursor;
      } while (cursor !== null);
      assert.ok(listed.length >= 10, `listings to revalidate: ${listed.length}`);

      const discoveryFetches = new Map<string, number>();
      const documents = new Map<string, Record<string, unknown>>();
      const counting = (did: string) => (_req: IncomingMessage, res: ServerResponse) => {
        discoveryFetches.set(did, (discoveryFetches.get(did) ?? 0) + 1);
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify(documents.get(did)));
      };
      for (const site of sites) {
        documents.set(site.did, site.document());
        site.setHandler(DISCOVERY_PATH, counting(site.did));
      }
      const live = listed.map((l) => l.did).filter((did) => documents.has(did));
      assert.equal(live.length, listed.length, "every listed site is one of this suite's");

      for (let cycle = 1; cycle <= 2; cycle++) {
        discoveryFetches.clear();
        await cluster.advance("directory", DAY + 60);
        const passes = await Promise.all(D.map((d) => d.hook("/__test/revalidate")));
        const fetched = Object.fromEntries(live.map((did) => [did, discoveryFetches.get(did) ?? 0]));
        assert.deepEqual(
          fetched,
          Object.fromEntries(live.map((did) => [did, 1])),
          `cycle ${cycle}: each listing's discovery document fetched once, by one of the three replicas`,
        );
        const checked = passes.reduce((sum, p) => sum + (p.json.checked as number), 0);
        const succeeded = passes.reduce((sum, p) => sum + (p.json.succeeded as number), 0);
        assert.equal(
          checked,
          live.length,
          `cycle ${cycle}: the three passes checked ${live.length} listings between them`,
        );
        assert.equal(succeeded, live.length, `cycle ${cycle}: every check succeeded`);
        // A pass right after finds nothing due, on any replica.
        const again = await Promise.all(D.map((d) => d.hook("/__test/revalidate")));
        for (const p of again) assert.equal(p.json.checked, 0);
      }
    }),
  );

  test(
    "a replica killed while it holds a revalidation lease strands nothing: another takes the listing once the lease ends",
    withLogs(async () => {
      const site = newSite();
      await register(site, D[0]!, D[2]!);
      const document = site.document();
      let arrived!: () => void;
      const arrival = new Promise<void>((resolve) => {
        arrived = resolve;
      });
      let fetches = 0;
      // The first revalidation fetch never gets an answer: its pass holds the lease until it dies.
      site.setHandler(DISCOVERY_PATH, (_req, res) => {
        fetches++;
        if (fetches === 1) {
          arrived();
          return;
        }
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify(document));
      });

      await cluster.advance("directory", DAY + 60);
      const victim = D[1]!;
      const pass = victim.hook("/__test/revalidate").catch((error: unknown) => error);
      await arrival;
      assert.ok(victim.kill("SIGKILL"));
      assert.equal((await victim.exited).signal, "SIGKILL");
      assert.ok((await pass) instanceof Error, "the killed replica's pass never answers");

      // Within the lease (10 minutes) no other replica touches the listing...
      await D[0]!.hook("/__test/revalidate");
      assert.equal(fetches, 1, "the leased listing is not fetched again while its lease runs");
      assert.equal((await D[2]!.request("GET", didPath(site.did), { ip: newIp() })).json.status, "active");

      // ...and once it has run out, the next pass anywhere takes it, exactly once.
      await cluster.advance("directory", 10 * 60 + 1);
      const passes = await Promise.all([D[0]!, D[2]!].map((d) => d.hook("/__test/revalidate")));
      assert.equal(fetches, 2, "the stranded listing is revalidated once after the lease ran out");
      assert.ok(passes.reduce((sum, p) => sum + (p.json.succeeded as number), 0) >= 1);
      const again = await Promise.all([D[0]!, D[2]!].map((d) => d.hook("/__test/revalidate")));
      for (const p of again) assert.equal(p.json.checked, 0, "nothing is left due");
      assert.equal((await D[0]!.request("GET", didPath(site.did), { ip: newIp() })).json.status, "active");

      await cluster.restart(victim);
      assert.equal((await readEverywhere(site.did)).json.status, "active");
    }),
  );

  // ---- key rotation -----------------------------------------------------------------------

  test(
    "key rotation runs once cluster-wide, every replica serves the new key set within its cache lifetime, and the new key signs everywhere",
    withLogs(async () => {
      const initial = await keySet(T[0]!);
      const agent = linked ?? (await linkedAgent());

      const rotations = await Promise.all([...T, ...T].map((t) => t.hook("/__test/keys/rotate")));
      const rotatedKids = new Set(rotations.map((r) => r.json.kid as string));
      assert.equal(rotatedKids.size, 1, `every concurrent rotation answers the same new key: ${[...rotatedKids]}`);
      const [newKid] = rotatedKids;
      for (const t of T) {
        const set = await keySet(t);
        const added = set.kids.filter((k) => !initial.kids.includes(k));
        assert.deepEqual(added, [newKid], `${t.name}: exactly one new key in the key set`);
      }

      // Not signing before the lead time; signing on every replica after it.
      let now = await attestorNowUnix();
      for (const t of T) {
        const minted = await t.request("POST", "/v1/token", { ip: newIp(), ...signedMint(agent, now) });
        assert.equal(minted.status, 200, minted.text);
        assert.notEqual(decodeProtectedHeader(minted.json.jwt).kid, newKid, `${t.name} does not sign with it yet`);
      }
      const signsFrom = Date.parse(rotations[0]!.json.signs_from as string);
      await cluster.advance("trust", Math.ceil((signsFrom - (await T[0]!.nowMs())) / 1000) + 1);
      now = await attestorNowUnix();
      for (const t of T) {
        const minted = await t.request("POST", "/v1/token", { ip: newIp(), ...signedMint(agent, now) });
        assert.equal(minted.status, 200, minted.text);
        assert.equal(decodeProtectedHeader(minted.json.jwt).kid, newKid, `${t.name} signs with the new key`);
        assert.equal(await verifyAttestation(minted.json.jwt, T[0] === t ? T[1]! : T[0]!), newKid);
      }

      // A rotation on trust-0 alone reaches trust-1 within the key set's cache lifetime.
      const second = await T[0]!.hook("/__test/keys/rotate");
      const secondKid = second.json.kid as string;
      assert.ok(!initial.kids.includes(secondKid) && secondKid !== newKid);
      const { maxAge } = await keySet(T[1]!);
      assert.equal(maxAge, 300);
      await cluster.advance("trust", maxAge);
      const onOther = await keySet(T[1]!);
      assert.ok(onOther.kids.includes(secondKid), `trust-1 serves ${secondKid} after ${maxAge} s: ${onOther.kids}`);
      assert.deepEqual(onOther.kids, (await keySet(T[0]!)).kids, "both attestors serve the same key set");
    }),
  );

  // ---- graceful shutdown ------------------------------------------------------------------

  test(
    "after SIGTERM a directory replica answers /readyz with 503 while a request in flight still completes",
    withLogs(async () => {
      const victim = D[2]!;
      const site = newSite();
      const ip = newIp();
      const challenge = await D[0]!.request("POST", "/v1/listings/challenge", {
        ip,
        body: { discovery_url: site.discoveryUrl },
      });
      assert.equal(challenge.status, 200, challenge.text);
      site.serveProof(challenge.json.challenge_token);
      // The discovery document is held back until the test lets it go: the submission stays in flight.
      let arrived!: () => void;
      const arrival = new Promise<void>((resolve) => {
        arrived = resolve;
      });
      let release!: () => void;
      const released = new Promise<void>((resolve) => {
        release = resolve;
      });
      site.setHandler(DISCOVERY_PATH, (_req, res) => {
        arrived();
        void released.then(() => {
          res.writeHead(200, { "content-type": "application/json" });
          res.end(JSON.stringify(site.document()));
        });
      });
      const inFlight = victim.request("POST", "/v1/listings", {
        ip,
        body: { discovery_url: site.discoveryUrl, challenge_token: challenge.json.challenge_token },
      });
      try {
        await arrival;
        assert.ok(victim.kill("SIGTERM"));

        const deadline = Date.now() + 10_000;
        let readiness: { status: number; text: string } | undefined;
        for (;;) {
          try {
            readiness = await freshGet(`${victim.url}/readyz`);
          } catch (error) {
            assert.fail(`${victim.name} stopped answering before /readyz said 503: ${String(error)}`);
          }
          if (readiness.status === 503 || Date.now() > deadline) break;
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
        assert.equal(readiness.status, 503, readiness.text);
        assert.equal(JSON.parse(readiness.text).error.code, "unavailable");
      } finally {
        release();
      }
      const answer = await inFlight;
      assert.equal(answer.status, 201, `the request in flight completes: ${answer.text}`);
      const exit = await victim.exited;
      assert.deepEqual(exit, { code: 0, signal: null }, "a drained replica exits 0");
      assert.equal((await D[0]!.request("GET", didPath(site.did))).json.status, "active");
      const patched = await D[1]!.request("PATCH", didPath(site.did), {
        ip,
        token: answer.json.session_token,
        body: { title: "Registered during shutdown" },
      });
      assert.equal(patched.status, 200, patched.text);

      await cluster.restart(victim);
    }),
  );

  // ---- SIGKILL under write load -----------------------------------------------------------

  test(
    "a directory replica killed with SIGKILL mid-load: every acknowledged write is present, nothing is half-done",
    withLogs(async () => {
      const victim = D[1]!;
      const writers = 6;
      const rounds = 12;
      const patchTargets: Registered[] = [];
      for (let i = 0; i < writers; i++) patchTargets.push(await register(newSite(), D[0]!, D[2]!));
      const deleteTargets: Registered[] = [];
      for (let i = 0; i < 3; i++) deleteTargets.push(await register(newSite(), D[2]!, D[0]!));
      const createSites = Array.from({ length: 6 }, () => newSite());
      for (const site of createSites) site.serveDiscovery(site.document());

      type Outcome = "ack" | "error" | "refused";
      let acknowledged = 0;
      let killed = false;
      let acksAfterKill = 0;
      let errors = 0;
      const KILL_AFTER = 20;
      /** One write; a 2xx is an acknowledgement, a lost connection an error. */
      const write = async (
        replica: Replica,
        method: string,
        path: string,
        options: Parameters<Replica["request"]>[2],
        ok: number[],
      ): Promise<{ outcome: Outcome; result?: HttpResult }> => {
        let result: HttpResult;
        try {
          result = await replica.request(method, path, { ip: newIp(), ...options });
        } catch {
          errors++;
          return { outcome: "error" };
        }
        if (!ok.includes(result.status)) return { outcome: "refused", result };
        acknowledged++;
        if (killed) acksAfterKill++;
        if (!killed && acknowledged >= KILL_AFTER) {
          killed = true;
          victim.kill("SIGKILL");
        }
        return { outcome: "ack", result };
      };

      const content = (w: number, r: number) => ({
        title: `writer ${w} round ${r}`,
        description: `description of writer ${w} at round ${r}`,
        tags: [`w${w}`, `r${r}`],
      });
      const patchLog: { round: number; outcome: Outcome; result?: HttpResult }[][] = patchTargets.map(() => []);
      const patchWorker = async (w: number) => {
        const target = patchTargets[w]!;
        for (let r = 1; r <= rounds; r++) {
          const replica = D[(w + r) % 3]!;
          const answer = await write(
            replica,
            "PATCH",
            didPath(target.did),
            { token: target.token, body: content(w, r) },
            [200],
          );
          patchLog[w]!.push({ round: r, ...answer });
        }
      };

      const creates: { site: Site; outcome: Outcome; token?: string; stage: string }[] = [];
      const createWorker = async () => {
        for (const [k, site] of createSites.entries()) {
          const ip = newIp();
          let challenge: HttpResult;
          try {
            challenge = await D[k % 3]!.request("POST", "/v1/listings/challenge", {
              ip,
              body: { discovery_url: site.discoveryUrl },
            });
          } catch {
            creates.push({ site, outcome: "error", stage: "challenge" });
            continue;
          }
          if (challenge.status !== 200) {
            creates.push({ site, outcome: "refused", stage: `challenge ${challenge.status}` });
            continue;
          }
          site.serveProof(challenge.json.challenge_token);
          const answer = await write(
            D[(k + 1) % 3]!,
            "POST",
            "/v1/listings",
            { body: { discovery_url: site.discoveryUrl, challenge_token: challenge.json.challenge_token } },
            [201],
          );
          creates.push({
            site,
            outcome: answer.outcome,
            stage: "submit",
            ...(answer.result?.status === 201 ? { token: answer.result.json.session_token as string } : {}),
          });
        }
      };

      const deletes: { did: string; token: string; outcome: Outcome }[] = [];
      const deleteWorker = async () => {
        for (const [k, target] of deleteTargets.entries()) {
          // A few writes first, so the withdrawals fall among the others.
          for (let r = 0; r < 3; r++) {
            await write(
              D[(k + r) % 3]!,
              "PATCH",
              didPath(target.did),
              { token: target.token, body: { title: `d${r}` } },
              [200],
            );
          }
          const answer = await write(D[(k + 2) % 3]!, "DELETE", didPath(target.did), { token: target.token }, [204]);
          deletes.push({ did: target.did, token: target.token, outcome: answer.outcome });
        }
      };

      await Promise.all([...Array.from({ length: writers }, (_, w) => patchWorker(w)), createWorker(), deleteWorker()]);
      assert.ok(killed, `the replica was killed during the load (${acknowledged} writes acknowledged)`);
      const exit = await victim.exited;
      assert.equal(exit.signal, "SIGKILL");
      assert.ok(errors > 0, "some writes reached the killed replica and got no answer");
      assert.ok(acksAfterKill > 0, "the other replicas kept acknowledging writes");

      await cluster.restart(victim);

      // Updates: each listing holds its last acknowledged write (or a later one whose answer was
      // lost), whole, and reads the same on every replica; its session still works.
      for (const [w, target] of patchTargets.entries()) {
        const log = patchLog[w]!;
        for (const entry of log) {
          assert.notEqual(entry.outcome, "refused", `writer ${w} round ${entry.round}: ${entry.result?.text}`);
        }
        const lastAck = Math.max(0, ...log.filter((e) => e.outcome === "ack").map((e) => e.round));
        const possible = new Set([
          lastAck,
          ...log.filter((e) => e.outcome === "error" && e.round > lastAck).map((e) => e.round),
        ]);
        const read = await readEverywhere(target.did);
        assert.equal(read.status, 200, read.text);
        const match = /^writer (\d+) round (\d+)$/.exec(read.json.title);
        assert.ok(match, `writer ${w}: ${read.text}`);
        const round = Number(match[2]);
        assert.equal(Number(match[1]), w);
        assert.ok(possible.has(round), `writer ${w}: round ${round} is visible, acknowledged up to ${lastAck}`);
        const expected = content(w, round);
        assert.equal(read.json.description, expected.description, "title and description of one write");
        assert.deepEqual(read.json.tags, expected.tags, "title and tags of one write");
        assert.equal(read.json.status, "active");
        if (lastAck > 0) {
          const acked = log.find((e) => e.round === lastAck)?.result?.json;
          if (round === lastAck) assert.deepEqual(read.json, acked, "the acknowledged listing is the one stored");
        }
        const after = await victim.request("PATCH", didPath(target.did), {
          ip: newIp(),
          token: target.token,
          body: { description: "after the restart" },
        });
        assert.equal(after.status, 200, `writer ${w}'s session works on the restarted replica: ${after.text}`);
      }

      // Creations: acknowledged ones are listed with a working session; unanswered ones are
      // either absent or complete.
      assert.equal(creates.length, createSites.length);
      for (const create of creates) {
        const read = await readEverywhere(create.site.did);
        if (create.outcome === "ack") {
          assert.equal(read.status, 200, `${create.site.did} was acknowledged: ${read.text}`);
          assert.equal(read.json.status, "active");
          assert.deepEqual(read.json.discovery_doc, create.site.document());
          const patched = await victim.request("PATCH", didPath(create.site.did), {
            ip: newIp(),
            token: create.token!,
            body: { title: "created under load" },
          });
          assert.equal(patched.status, 200, patched.text);
        } else {
          assert.notEqual(create.outcome, "refused", `${create.site.did}: ${create.stage}`);
          assert.ok(read.status === 404 || read.status === 200, read.text);
          if (read.status === 200) {
            assert.equal(read.json.status, "active");
            assert.deepEqual(read.json.discovery_doc, create.site.document(), "a listing is complete or absent");
          }
        }
      }

      // Withdrawals: acknowledged ones are deleted with their session revoked; unanswered ones
      // happened entirely or not at all.
      assert.equal(deletes.length, deleteTargets.length);
      for (const withdrawal of deletes) {
        assert.notEqual(withdrawal.outcome, "refused");
        const read = await readEverywhere(withdrawal.did);
        const probe = await D[0]!.request("PATCH", didPath(withdrawal.did), {
          ip: newIp(),
          token: withdrawal.token,
          body: { title: "probe" },
        });
        if (withdrawal.outcome === "ack" || read.json.status === "deleted") {
          assert.equal(read.json.status, "deleted", `${withdrawal.did} was withdrawn`);
          assertError(probe, 404, "not_found", "a withdrawn listing's session is gone with it");
        } else {
          assert.equal(read.json.status, "active");
          assert.equal(probe.status, 200, `a withdrawal that did not happen left the session working: ${probe.text}`);
        }
      }

      // Every replica lists the same listings, deleted ones included.
      const everywhere = await Promise.all(
        D.map(async (d) => {
          const dids: string[] = [];
          let cursor: string | null = null;
          do {
            const page: HttpResult = await d.request(
              "GET",
              `/v1/listings?include_deleted=true&limit=100${cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`}`,
              { ip: newIp() },
            );
            assert.equal(page.status, 200, page.text);
            dids.push(...page.json.listings.map((l: { service_did: string }) => l.service_did));
            cursor = page.json.next_cursor;
          } while (cursor !== null);
          return dids.sort();
        }),
      );
      assert.deepEqual(everywhere[1], everywhere[0]);
      assert.deepEqual(everywhere[2], everywhere[0]);
    }),
  );
});
