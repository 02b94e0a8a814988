import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  contentDigest,
  type DiscoveryDocument,
  fetchTargetUri,
  findProtoChallenge,
  isReservedErrorCode,
  ProtoError,
  parseWwwAuthenticate,
  RESERVED_ERRORS,
  randomNonce,
  signatureHeaderPair,
  signMessage,
  signRequest,
  validateDiscoveryDocument,
} from "@proto/protocol";
import { hostileRedirects } from "@proto/testkit";
import { decodeJwt } from "jose";
import { KIT_ERRORS, type KitStore, openKitStore } from "../src/index.js";
import { TestAttestor } from "./support/attestor.js";
import { Browser, field, link } from "./support/browser.js";
import {
  type TestClock as Clock,
  createTestDatabase,
  ENGINES,
  emailAddress,
  newAgent,
  reportSkippedEngines,
  TestClock,
  type TestDatabase,
} from "./support/env.js";
import { CodeLedger, startService, type TestService } from "./support/service.js";

/**
 * Issue 7, the kit end to end: a Fastify service built on the kit, agents signing with the protocol
 * library, attestations minted by our attestor (in process, on the suite's clock), and people
 * signing in at the attestor's OpenID provider by the e-mail flow. Every reserved code is reached
 * by a real request.
 */

reportSkippedEngines();

const MAIN = { origin: "https://notes.example", did: "did:web:notes.example" };
const FREE = { origin: "https://free.example", did: "did:web:free.example" };
const LIMITED = { origin: "https://limited.example", did: "did:web:limited.example" };
const EXTENDED = { origin: "https://extended.example", did: "did:web:extended.example" };
/** Registered at the attestor with another service_did: its id_tokens carry the wrong audience. */
const MISMATCH = { origin: "https://mismatch.example", did: "did:web:mismatch.example" };
const ME = "/proto/v1/accounts/me";
const ACCOUNTS = "/proto/v1/accounts";
const INVITE = "/proto/v1/accounts/me/owner-invitation";
const ROTATE = "/proto/v1/accounts/me/keys/rotate";
const CLAIM = "/proto/v1/claim";
const OWNER = "/proto/owner";
const REKEY = "/proto/v1/accounts/keys/rekey";
const REVOKE = "/proto/v1/accounts/keys/revoke";
const INVITATION_TTL = 3600;
/** An RFC 3339 time within a few seconds of `ms` (the suite's clock keeps ticking). */
function assertAbout(iso: string, ms: number): void {
  assert.match(iso, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  assert.ok(Math.abs(Date.parse(iso) - ms) < 5000, `${iso} is not about ${new Date(ms).toISOString()}`);
}

/** `POST {claim_completion}/<token>` (upstream §7.4). */
const claimPath = (token: string) => `${CLAIM}/${encodeURIComponent(token)}`;

for (const engine of ENGINES) {
  describe(`kit end to end (${engine})`, { timeout: 120_000 }, () => {
    let database: TestDatabase;
    let store: KitStore;
    let clock: Clock;
    let attestor: TestAttestor;
    let main: TestService;
    let free: TestService;
    let limited: TestService;
    let extended: TestService;
    let mismatch: TestService;
    let services: Map<string, TestService["app"]>;
    const ledger = new CodeLedger();
    /** The claim tokens of each agent's invitations, in order, as `onInvitation` hands them to the service. */
    const claimTokens = new Map<string, string[]>();
    const onInvitation = (event: { account: { agent_did: string }; token: string }) => {
      claimTokens.set(event.account.agent_did, [...(claimTokens.get(event.account.agent_did) ?? []), event.token]);
    };
    const tokensOf = (agent: { did: string }) => claimTokens.get(agent.did) ?? [];
    const tokenOf = (agent: { did: string }) => {
      const token = tokensOf(agent).at(-1);
      assert.ok(token, `no invitation for ${agent.did}`);
      return token;
    };

    before(async () => {
      database = await createTestDatabase(engine);
      store = await openKitStore(database.url);
      clock = new TestClock();
      attestor = await TestAttestor.start(clock, [
        { client_id: MAIN.did, service_did: MAIN.did, redirect_uris: [`${MAIN.origin}${OWNER}/callback`] },
        {
          client_id: MISMATCH.did,
          service_did: "did:web:someone-else.example",
          redirect_uris: [`${MISMATCH.origin}${OWNER}/callback`],
        },
      ]);
      const attestors = { "proto-trust": { url: attestor.url, allowHttp: true } };
      main = await startService(
        {
          publicUrl: MAIN.origin,
          discovery: {
            service_did: MAIN.did,
            recipient_types: ["email", "oidc"],
            features: ["attestation", "key_rotation", "attested_session"],
          },
          attestors,
          store,
          now: clock.now,
          invitationTtlSeconds: INVITATION_TTL,
          onInvitation,
          redirectOrigins: ["https://app.notes.example"],
          onError: (error) => {
            throw error;
          },
        },
        clock,
      );
      free = await startService(
        {
          publicUrl: FREE.origin,
          discovery: { service_did: FREE.did, billing: { unclaimed_mode: "free" } },
          implicitSignup: false,
          store,
          now: clock.now,
          onInvitation,
        },
        clock,
      );
      limited = await startService(
        {
          publicUrl: LIMITED.origin,
          discovery: {
            service_did: LIMITED.did,
            billing: { unclaimed_mode: "free" },
            limits: { unclaimed_rate_limit_per_hour: 3, unclaimed_ttl_seconds: 3600 },
          },
          store,
          now: clock.now,
          onInvitation,
        },
        clock,
      );
      extended = await startService(
        {
          publicUrl: EXTENDED.origin,
          discovery: { service_did: EXTENDED.did, features: ["attestation", "attested_session"] },
          attestors,
          attestedSession: { mode: "extended", seconds: 1800 },
          store,
          now: clock.now,
          onInvitation,
        },
        clock,
      );
      mismatch = await startService(
        {
          publicUrl: MISMATCH.origin,
          discovery: { service_did: MISMATCH.did },
          attestors,
          store,
          now: clock.now,
          onInvitation,
        },
        clock,
      );
      services = new Map([
        [MISMATCH.origin, mismatch.app],
        [MAIN.origin, main.app],
        [FREE.origin, free.app],
        [LIMITED.origin, limited.app],
        [EXTENDED.origin, extended.app],
      ]);
    });

    after(async () => {
      await main?.close();
      await free?.close();
      await limited?.close();
      await extended?.close();
      await mismatch?.close();
      await attestor?.close();
      await store?.close();
      await database?.drop();
    });

    /** An agent linked to `email` at the attestor, with a fresh attestation for `aud`. */
    async function attestedAgent(email = emailAddress("agent"), aud = MAIN.did) {
      const agent = await attestor.link(undefined, email);
      return { agent, email, jwt: await attestor.mint(agent, aud) };
    }

    /** An attested agent signed up at the main service. */
    async function signedUp(email = emailAddress("agent")) {
      const { agent, jwt } = await attestedAgent(email);
      const me = await main.signed(agent, "GET", ME, { attestation: jwt });
      assert.equal(me.status, 200, me.text);
      return { agent, email, jwt, account: me.json };
    }

    async function signIn(browser: Browser, email: string, returnTo = `${OWNER}/accounts`) {
      const start = `${MAIN.origin}${OWNER}/signin?${new URLSearchParams({ attestor: "proto-trust", return_to: returnTo })}`;
      return browser.follow(start, attestor, email);
    }

    function newBrowser() {
      return new Browser(services);
    }

    test("GET /.well-known/proto: the document built from the configuration, valid under the protocol schema", async () => {
      const answer = await main.request("GET", "/.well-known/proto");
      assert.equal(answer.status, 200, answer.text);
      assert.match(answer.headers.get("cache-control") ?? "", /max-age=300/);
      assert.equal(answer.headers.get("access-control-allow-origin"), "*");
      const result = validateDiscoveryDocument(answer.json);
      assert.ok(result.valid, JSON.stringify(result));
      const doc = answer.json as DiscoveryDocument;
      assert.deepEqual(doc.endpoints, {
        accounts: ACCOUNTS,
        owner_invitation: INVITE,
        claim_completion: CLAIM,
        key_rotation: ROTATE,
        claim_page: `${MAIN.origin}/proto/claim`,
        key_rekey: REKEY,
        key_revocation: REVOKE,
      });
      assert.deepEqual(doc.billing, { unclaimed_mode: "attested_only", accepted_attestors: ["proto-trust"] });
      assert.deepEqual(doc.recipient_types, ["email", "oidc"]);
      assert.equal(doc.proto_version, "0.1");
      assert.deepEqual(doc.signature_algorithms, ["ed25519"]);
      const freeDoc = (await free.request("GET", "/.well-known/proto")).json;
      assert.deepEqual(freeDoc.billing, { unclaimed_mode: "free", accepted_attestors: [] });
      assert.equal(freeDoc.recipient_types, undefined, "absent: e-mail only");
    });

    test("attested_only: a signup without an attestation is 401 attestation_required and creates no account", async () => {
      const agent = newAgent();
      ledger.expect(await main.signed(agent, "GET", ME), 401, "attestation_required");
      ledger.expect(await main.signed(agent, "POST", ACCOUNTS), 401, "attestation_required");
      ledger.expect(
        await main.signed(agent, "POST", "/api/notes", { body: { text: "hi" } }),
        401,
        "attestation_required",
      );
      assert.equal(await store.findAccountByDid(agent.did), undefined, "no account was created");
    });

    test("attested signup: the first valid signed request creates an UNCLAIMED account with the attestation", async () => {
      const email = emailAddress("first");
      const { agent, jwt } = await attestedAgent(email);
      const before = clock.now();
      const me = await main.signed(agent, "GET", ME, { attestation: jwt });
      assert.equal(me.status, 200, me.text);
      // Upstream §6.5 field for field: no TTL, so no unclaimed_expires_at; no owner before CLAIMED.
      const account = me.json;
      assert.deepEqual(Object.keys(account).sort(), ["account_id", "agent_did", "created_at", "owner", "state"]);
      assert.equal(account.agent_did, agent.did);
      assert.equal(account.state, "UNCLAIMED");
      assert.match(account.account_id, /^acct_/);
      assert.ok(Date.parse(account.created_at) >= before - 1000);
      assert.equal(account.owner, null);
      // Within the attested session, requests need no attestation; explicit signup answers 200 (exists).
      assert.equal((await main.signed(agent, "GET", ME)).status, 200);
      const again = await main.signed(agent, "POST", ACCOUNTS);
      assert.equal(again.status, 200, again.text);
      // Upstream §6.4 field for field: the account without `owner` (introspection has it).
      assert.deepEqual(Object.keys(again.json).sort(), ["account_id", "agent_did", "created_at", "state"]);
      assert.deepEqual(again.json, {
        account_id: account.account_id,
        agent_did: agent.did,
        state: "UNCLAIMED",
        created_at: account.created_at,
      });
      // The account is keyed to the person the attestation names (canonical issuer + sub_h), and the
      // attested session runs to the attestation's exp.
      const record = await store.findAccountByDid(agent.did);
      assert.ok(record?.personId);
      assert.equal(record.attestedIssuer, "proto-trust");
      assert.equal(record.attestedVerification, "email");
      assert.equal(record.attestedUntil, (decodeJwt(jwt).exp as number) * 1000);
      const person = await store.findPerson(record.personId);
      assert.deepEqual([person?.issuer, person?.subject], ["proto-trust", decodeJwt(jwt).sub_h]);
    });

    test("request signatures: unsigned, tampered, expired and replayed requests", async () => {
      const { agent } = await signedUp();
      ledger.expect(await main.request("GET", ME), 401, "invalid_signature");
      ledger.expect(
        await main.signed(agent, "POST", "/api/notes", { body: { text: "signed" }, sentBody: '{"text":"altered"}' }),
        401,
        "invalid_signature",
      );
      const now = clock.nowSeconds();
      ledger.expect(
        await main.signed(agent, "GET", ME, { created: now - 300, expires: now - 200 }),
        401,
        "expired_signature",
      );
      // Valid for no time at all: malformed, not merely expired.
      ledger.expect(await main.signed(agent, "GET", ME, { created: now, expires: now }), 401, "invalid_signature");
      const headers = signRequest(
        { method: "GET", url: `${MAIN.origin}${ME}` },
        { keyid: agent.did, privateKey: agent.privateKey, created: now },
      ).headers;
      assert.equal((await main.signed(agent, "GET", ME, { replay: { ...headers } })).status, 200);
      ledger.expect(await main.signed(agent, "GET", ME, { replay: { ...headers } }), 401, "replayed_nonce");
      // A request signed for another origin does not verify here.
      const foreign = signRequest(
        { method: "GET", url: `https://elsewhere.example${ME}` },
        { keyid: agent.did, privateKey: agent.privateKey, created: now },
      ).headers;
      ledger.expect(await main.signed(agent, "GET", ME, { replay: { ...foreign } }), 401, "invalid_signature");
      // The covered components are exactly the profile's (upstream conformance, service rule 2): a
      // good signature that also covers the Content-Type the request carries is refused.
      const note = JSON.stringify({ text: "extra component" });
      const sent: Record<string, string> = {
        "content-type": "application/json",
        "content-digest": contentDigest(new TextEncoder().encode(note)),
      };
      const extra = signMessage(
        { method: "POST", targetUri: fetchTargetUri(`${MAIN.origin}/api/notes`), header: (name) => sent[name] },
        ["@method", "@target-uri", "content-digest", "content-type"].map((name) => [name, new Map()]),
        [
          ["created", now],
          ["expires", now + 60],
          ["nonce", randomNonce()],
          ["keyid", agent.did],
          ["alg", "ed25519"],
        ],
        agent.privateKey,
        "sig1",
      );
      const refused = await main.signed(agent, "POST", "/api/notes", {
        rawBody: note,
        replay: { ...sent, ...signatureHeaderPair([extra]) },
      });
      ledger.expect(refused, 401, "invalid_signature");
      assert.match(String((refused.json as { error?: { message?: unknown } }).error?.message), /content-type/);
    });

    test("every 401 carries the Proto challenge; error only when the request tried the protocol (upstream §5.7)", async () => {
      const discovery = `discovery="${MAIN.origin}/.well-known/proto"`;
      const anonymous = await main.request("GET", ME);
      ledger.expect(anonymous, 401, "invalid_signature");
      assert.equal(anonymous.headers.get("www-authenticate"), `Proto ${discovery}, realm="${MAIN.did}"`);
      const tried = await main.request("GET", ME, {
        headers: { signature: "sig1=:AA==:", "signature-input": "sig1=()" },
      });
      ledger.expect(tried, 401, "invalid_signature");
      assert.equal(findProtoChallenge(tried.headers.get("www-authenticate"))?.error, "invalid_signature");
      const unattested = await main.signed(newAgent(), "GET", ME);
      ledger.expect(unattested, 401, "attestation_required");
      assert.deepEqual(findProtoChallenge(unattested.headers.get("www-authenticate")), {
        discovery: `${MAIN.origin}/.well-known/proto`,
        realm: MAIN.did,
        error: "attestation_required",
        attestors: ["proto-trust"],
      });
      const owner = await main.request("GET", `${OWNER}/accounts`);
      ledger.expect(owner, 401, "owner_authentication_required");
      assert.equal(
        findProtoChallenge(owner.headers.get("www-authenticate"))?.ownerLogin,
        `${MAIN.origin}${OWNER}/signin`,
      );
      // Statuses other than 401 carry no challenge.
      const malformed = await main.signed((await signedUp()).agent, "POST", INVITE, { body: {} });
      assert.equal(malformed.status, 400);
      assert.equal(malformed.headers.get("www-authenticate"), null);
    });

    test("another scheme's challenge set by the application stays, in order, before ours (upstream §5.7)", async () => {
      const refused = await main.request("GET", "/api/bearer-too");
      ledger.expect(refused, 401, "invalid_signature");
      const challenges = parseWwwAuthenticate(refused.headers.get("www-authenticate"));
      assert.deepEqual(
        challenges.map((c) => c.scheme),
        ["Bearer", "Proto"],
      );
      assert.deepEqual(challenges[0]?.params, { realm: "notes", resource_metadata: "https://notes.example/rm" });
      assert.equal(challenges[1]?.params.discovery, `${MAIN.origin}/.well-known/proto`);
    });

    test("optional authentication (upstream §5.8): anonymous served, signed recognised, bad credentials 401", async () => {
      const anonymous = await main.request("GET", "/api/maybe");
      assert.equal(anonymous.status, 200, anonymous.text);
      assert.deepEqual(anonymous.json, { did: null });
      const { agent } = await signedUp();
      const signed = await main.signed(agent, "GET", "/api/maybe");
      assert.equal(signed.status, 200, signed.text);
      assert.deepEqual(signed.json, { did: agent.did });
      const elsewhere = signRequest(
        { method: "GET", url: `${MAIN.origin}/api/whoami` },
        { keyid: agent.did, privateKey: agent.privateKey, created: clock.nowSeconds() },
      ).headers;
      const forged = await main.signed(agent, "GET", "/api/maybe", { replay: { ...elsewhere } });
      ledger.expect(forged, 401, "invalid_signature");
      assert.equal(findProtoChallenge(forged.headers.get("www-authenticate"))?.error, "invalid_signature");
      const badAttestation = await main.request("GET", "/api/maybe", { headers: { "proto-attestation": "garbage" } });
      ledger.expect(badAttestation, 401, "invalid_signature");
    });

    test("attestations: garbage, another audience, another agent, an issuer the service does not accept", async () => {
      const { agent, jwt } = await attestedAgent();
      const fresh = newAgent();
      ledger.expect(await main.signed(fresh, "GET", ME, { attestation: "not-a-jwt" }), 401, "invalid_attestation");
      const otherAud = await attestor.mint(agent, "did:web:other.example");
      ledger.expect(await main.signed(agent, "GET", ME, { attestation: otherAud }), 401, "invalid_attestation");
      ledger.expect(await main.signed(fresh, "GET", ME, { attestation: jwt }), 401, "invalid_attestation");
      assert.equal(await store.findAccountByDid(agent.did), undefined);
      assert.equal(await store.findAccountByDid(fresh.did), undefined);
      // The free service accepts no attestor: a presented attestation is refused, not ignored.
      const forFree = await attestor.mint(agent, FREE.did);
      const refused = await free.signed(agent, "POST", ACCOUNTS, { attestation: forFree });
      ledger.expect(refused, 401, "invalid_attestation");
      assert.match(refused.json.error.message, /not accepted/);
    });

    test("attested session (strict): lapses at the attestation's exp; a fresh attestation renews it", async () => {
      const { agent, jwt } = await signedUp();
      const exp = decodeJwt(jwt).exp as number;
      clock.advance(exp - clock.nowSeconds() - 5);
      assert.equal((await main.signed(agent, "GET", ME)).status, 200, "still inside the window");
      clock.advance(10);
      const lapsed = await main.signed(agent, "GET", ME);
      ledger.expect(lapsed, 401, "attestation_required");
      assert.match(lapsed.json.error.message, /lapsed/);
      assert.deepEqual(lapsed.json.error.details, {
        reason: "attested_session_lapsed",
        attestation: { header: "Proto-Attestation", accepted_attestors: ["proto-trust"] },
      });
      assert.deepEqual(findProtoChallenge(lapsed.headers.get("www-authenticate"))?.attestors, ["proto-trust"]);
      const renewed = await main.signed(agent, "GET", ME, { attestation: await attestor.mint(agent, MAIN.did) });
      assert.equal(renewed.status, 200, renewed.text);
      assert.ok(((await store.findAccountByDid(agent.did))?.attestedUntil ?? 0) > clock.now());
      assert.equal((await main.signed(agent, "GET", ME)).status, 200);
    });

    test("attested session (extended): one presentation keeps the account usable for the window, then attestation_required", async () => {
      const { agent, jwt } = await attestedAgent(emailAddress("ext"), EXTENDED.did);
      const first = await extended.signed(agent, "GET", ME, { attestation: jwt });
      assert.equal(first.status, 200, first.text);
      clock.advance(1000); // past the token's exp (900 s), inside the 1800 s window
      assert.equal((await extended.signed(agent, "GET", ME)).status, 200);
      clock.advance(900);
      ledger.expect(await extended.signed(agent, "GET", ME), 401, "attestation_required");
      const back = await extended.signed(agent, "GET", ME, { attestation: await attestor.mint(agent, EXTENDED.did) });
      assert.equal(back.status, 200, back.text);
    });

    test("owner invitation: malformed bodies, unsupported and invalid recipients", async () => {
      const { agent } = await signedUp();
      ledger.expect(await main.signed(agent, "POST", INVITE, { rawBody: "{not json" }), 400, "malformed_request");
      ledger.expect(await main.signed(agent, "POST", INVITE, { body: {} }), 400, "malformed_request");
      ledger.expect(
        await main.signed(agent, "POST", INVITE, { body: { recipient: { type: 7 } } }),
        400,
        "malformed_request",
      );
      ledger.expect(
        await main.signed(agent, "POST", INVITE, { body: { recipient: { type: "phone", value: "+14155550173" } } }),
        400,
        "unsupported_recipient_type",
      );
      ledger.expect(
        await main.signed(agent, "POST", INVITE, { body: { recipient: { type: "fax", value: "+14155550173" } } }),
        400,
        "unsupported_recipient_type",
      );
      ledger.expect(
        await main.signed(agent, "POST", INVITE, { body: { recipient: { type: "email", value: "no at sign" } } }),
        400,
        "malformed_request",
      );
      // Both forms at once is refused (upstream §7.2).
      ledger.expect(
        await main.signed(agent, "POST", INVITE, {
          body: { email: "a@example.com", recipient: { type: "email", value: "a@example.com" } },
        }),
        400,
        "malformed_request",
      );
      ledger.expect(await main.signed(agent, "POST", INVITE, { body: { email: 7 } }), 400, "malformed_request");
      // redirect_url only to an allowed origin, never credentials or control characters.
      for (const redirect of [
        "https://evil.example/welcome",
        "http://notes.example/welcome",
        "https://user@notes.example/",
        "https://notes.example/\tx",
        "/relative",
        42,
      ]) {
        ledger.expect(
          await main.signed(agent, "POST", INVITE, { body: { email: "a@example.com", redirect_url: redirect } }),
          400,
          "malformed_request",
        );
      }
      const me = await main.signed(agent, "GET", ME);
      assert.equal(me.json.state, "UNCLAIMED", "nothing was staged");
      // Without recipient_types only e-mail is accepted.
      const freeAgent = newAgent();
      assert.equal((await free.signed(freeAgent, "POST", ACCOUNTS)).status, 201);
      ledger.expect(
        await free.signed(freeAgent, "POST", INVITE, {
          body: { recipient: { type: "oidc", value: { issuer: "https://i.example", sub: "1" } } },
        }),
        400,
        "unsupported_recipient_type",
      );
      const ok = await free.signed(freeAgent, "POST", INVITE, {
        body: { recipient: { type: "email", value: "Owner@Example.COM" } },
      });
      assert.equal(ok.status, 202, ok.text);
      const staged = await store.findAccountByDid(freeAgent.did);
      assert.deepEqual(staged?.invitation?.recipient, { type: "email", value: "owner@example.com" }, "normalised");
      // The bare `email` shorthand, and a redirect_url on an allowed origin.
      const shorthand = await main.signed(agent, "POST", INVITE, {
        body: { email: "Short@Example.com", redirect_url: "https://app.notes.example/welcome?x=1" },
      });
      assert.equal(shorthand.status, 202, shorthand.text);
      const record = await store.findAccountByDid(agent.did);
      assert.deepEqual(record?.invitation?.recipient, { type: "email", value: "short@example.com" });
      assert.equal(record?.invitation?.redirectUrl, "https://app.notes.example/welcome?x=1");
    });

    test("one pending invitation, replaced atomically: the old token answers invitation_expired (410), an unknown one invitation_not_found (404)", async () => {
      const { agent } = await signedUp();
      const first = await main.signed(agent, "POST", INVITE, {
        body: { recipient: { type: "email", value: "a@example.com" } },
      });
      // Upstream §7.2: 202 {invitation_id, expires_at, state}; an e-mail claim link goes by mail only.
      assert.equal(first.status, 202, first.text);
      assert.deepEqual(Object.keys(first.json).sort(), ["expires_at", "invitation_id", "state"]);
      assert.equal(first.json.state, "INVITED");
      assert.match(first.json.invitation_id, /^inv_/);
      assertAbout(first.json.expires_at, clock.now() + INVITATION_TTL * 1000);
      const firstToken = tokenOf(agent);
      const second = await main.signed(agent, "POST", INVITE, {
        body: { recipient: { type: "email", value: "b@example.com" } },
      });
      assert.equal(second.status, 202);
      assert.notEqual(second.json.invitation_id, first.json.invitation_id);
      const me = await main.signed(agent, "GET", ME);
      assert.equal(me.json.state, "INVITED");
      assert.equal(me.json.owner, null, "the pending recipient is never shown to the agent");
      assert.ok(!me.text.includes("b@example.com"));

      const browser = newBrowser();
      const replacedPage = await browser.get(`${MAIN.origin}/proto/claim?token=${firstToken}`);
      assert.equal(replacedPage.status, 410);
      assert.match(replacedPage.text, /invitation_expired/);
      ledger.expect(await main.request("POST", claimPath(firstToken)), 410, "invitation_expired");
      const unknown = await browser.get(`${MAIN.origin}/proto/claim?token=clm_nothing`);
      assert.equal(unknown.status, 404);
      assert.match(unknown.text, /invitation_not_found/);
      ledger.expect(await main.request("POST", claimPath("clm_nothing")), 404, "invitation_not_found");
      ledger.expect(
        await main.request("POST", claimPath(tokenOf(agent)), {
          rawBody: "{not json",
          headers: { "content-type": "application/json" },
        }),
        400,
        "malformed_request",
      );
      const bare = await main.request("POST", CLAIM);
      assert.equal(bare.status, 404, "the completion endpoint needs the token as its last segment");
      // Concurrent replacements leave exactly one live invitation.
      const raced = await Promise.all(
        ["c@example.com", "d@example.com", "e@example.com"].map((value) =>
          main.signed(agent, "POST", INVITE, { body: { recipient: { type: "email", value } } }),
        ),
      );
      assert.deepEqual(
        raced.map((r) => r.status),
        [202, 202, 202],
      );
      assert.equal(new Set(raced.map((r) => r.json.invitation_id)).size, 3);
      const live = [];
      for (const token of tokensOf(agent).slice(-3)) {
        live.push((await main.request("POST", claimPath(token))).json.error.code);
      }
      assert.deepEqual(
        live.sort(),
        ["invitation_expired", "invitation_expired", "owner_authentication_required"],
        "one token is live (it asks for a session), the others were replaced",
      );
    });

    test("an invitation past its TTL is invitation_expired and the account is UNCLAIMED again", async () => {
      const { agent, jwt } = await signedUp();
      const staged = await main.signed(agent, "POST", INVITE, {
        body: { recipient: { type: "email", value: "late@example.com" } },
      });
      assert.equal(staged.status, 202);
      clock.advance(INVITATION_TTL + 1);
      ledger.expect(await main.request("POST", claimPath(tokenOf(agent))), 410, "invitation_expired");
      const me = await main.signed(agent, "GET", ME, { attestation: await attestor.mint(agent, MAIN.did) });
      assert.equal(me.status, 200, me.text);
      assert.equal(me.json.state, "UNCLAIMED");
      assert.ok(jwt);
    });

    test("claim with an e-mail identity the service verified itself; no authentication time means too stale", async () => {
      const { agent } = await signedUp();
      const staged = await main.signed(agent, "POST", INVITE, {
        body: { recipient: { type: "email", value: "carol@example.com" } },
      });
      assert.equal(staged.status, 202, staged.text);
      const token = tokenOf(agent);
      const stale = await main.kit.createOwnerSession({ identities: [{ type: "email", value: "carol@example.com" }] });
      const cookie = stale.setCookie.split(";")[0] as string;
      ledger.expect(
        await main.request("POST", claimPath(token), { headers: { cookie } }),
        403,
        "owner_session_too_stale",
      );
      const wrong = await main.kit.createOwnerSession({
        identities: [{ type: "email", value: "mallory@example.com" }],
        authenticatedAt: clock.now(),
      });
      ledger.expect(
        await main.request("POST", claimPath(token), { headers: { cookie: wrong.setCookie.split(";")[0] as string } }),
        403,
        "owner_authentication_required",
      );
      const carol = await main.kit.createOwnerSession({
        identities: [{ type: "email", value: "Carol@Example.com" }],
        authenticatedAt: clock.now(),
      });
      const carolCookie = carol.setCookie.split(";")[0] as string;
      const claimed = await main.request("POST", claimPath(token), { headers: { cookie: carolCookie } });
      assert.equal(claimed.status, 200, claimed.text);
      // Upstream §7.4 field for field: the account, CLAIMED, with the owner's verified identity.
      assert.deepEqual(Object.keys(claimed.json).sort(), ["account_id", "owner", "state"]);
      assert.equal(claimed.json.state, "CLAIMED");
      assert.equal(claimed.json.account_id, (await store.findAccountByDid(agent.did))?.id);
      assert.deepEqual(claimed.json.owner.identity, { type: "email", value: "carol@example.com" });
      assertAbout(claimed.json.owner.claimed_at, clock.now());
      assert.equal((await main.signed(agent, "GET", ME)).json.owner.identity.value, "carol@example.com");
      const owned = await main.request("GET", `${OWNER}/accounts`, { headers: { cookie: carolCookie } });
      assert.equal(owned.status, 200, owned.text);
      assert.deepEqual(
        owned.json.accounts.map((a: { agent_did: string; relation: string }) => [a.agent_did, a.relation]),
        [[agent.did, "owner"]],
      );
      ledger.expect(
        await main.request("POST", claimPath(token), { headers: { cookie: carolCookie } }),
        409,
        "already_claimed",
      );
    });

    test("pre-claim key rotation signed by the old key: the account moves to the new DID, the old key is revoked", async () => {
      const { agent, account } = await signedUp();
      const next = newAgent();
      ledger.expect(
        await main.signed(agent, "POST", ROTATE, { body: { new_account_did: "did:key:nope" } }),
        400,
        "malformed_request",
      );
      ledger.expect(
        await main.signed(agent, "POST", ROTATE, { body: { new_account_did: "did:web:example.com" } }),
        400,
        "malformed_request",
      );
      const taken = await signedUp();
      const inUse = await main.signed(agent, "POST", ROTATE, { body: { new_account_did: taken.agent.did } });
      assert.equal(inUse.status, 409, inUse.text);
      assert.equal(inUse.json.error.code, "kit_did_in_use");
      const rotated = await main.signed(agent, "POST", ROTATE, { body: { new_account_did: next.did } });
      assert.equal(rotated.status, 200, rotated.text);
      // Upstream §8.1 field for field.
      assert.deepEqual(Object.keys(rotated.json).sort(), ["account_id", "agent_did", "old_revoked_at"]);
      assert.equal(rotated.json.agent_did, next.did);
      assert.equal(rotated.json.account_id, account.account_id);
      assertAbout(rotated.json.old_revoked_at, clock.now());
      ledger.expect(await main.signed(agent, "GET", ME), 401, "revoked_key");
      const me = await main.signed(next, "GET", ME, {
        attestation: await attestor.mint(await attestor.link(next, emailAddress("next")), MAIN.did),
      });
      assert.equal(me.status, 200, me.text);
      assert.equal(me.json.account_id, account.account_id);
      // The old DID can never come back, not even as a fresh signup.
      ledger.expect(await main.signed(agent, "POST", ACCOUNTS), 401, "revoked_key");
    });

    describe("the ceremony: an agent invites its own human, who signs in with the attestor and claims", () => {
      let alice: {
        agent: ReturnType<typeof newAgent>;
        email: string;
        jwt: string;
        account: { account_id: string; agent_did: string };
      };
      let subH: string;
      let token: string;
      let claimUrl: string;
      let aliceB: Browser;
      let bobB: Browser;
      const aliceBrowser = () => aliceB;

      before(async () => {
        alice = await signedUp(emailAddress("alice"));
        subH = decodeJwt(alice.jwt).sub_h as string;
        aliceB = newBrowser();
        bobB = newBrowser();
      });

      test("the agent stages an oidc invitation for the person its attestations name ({trust_url} canonicalised)", async () => {
        const staged = await main.signed(alice.agent, "POST", INVITE, {
          body: { recipient: { type: "oidc", value: { issuer: attestor.url, sub: subH } } },
        });
        assert.equal(staged.status, 202, staged.text);
        assert.deepEqual((await store.findAccountByDid(alice.agent.did))?.invitation?.recipient, {
          type: "oidc",
          value: { issuer: "proto-trust", sub: subH },
        });
        // An oidc recipient proves itself by signing in, so the agent may carry the link to its human.
        token = tokenOf(alice.agent);
        claimUrl = staged.json.claim_url;
        assert.equal(claimUrl, `${MAIN.origin}/proto/claim?token=${token}`);
      });

      test("claim completion without a session is 401; the claim page offers sign-in", async () => {
        ledger.expect(await main.request("POST", claimPath(token)), 401, "owner_authentication_required");
        const page = await aliceBrowser().get(claimUrl);
        assert.equal(page.status, 200, page.text);
        // The URL holds the token: at most the origin leaves as Referer.
        assert.equal(page.headers.get("referrer-policy"), "strict-origin");
        assert.match(page.headers.get("content-security-policy") ?? "", /default-src 'none'/);
        assert.ok(page.text.includes(alice.agent.did));
        assert.ok(link(page.text, `${OWNER}/signin?`));
      });

      test("signing in lands the person in the account their agent's attestations created", async () => {
        const page = await aliceBrowser().get(claimUrl);
        const signInHref = `${MAIN.origin}${link(page.text, `${OWNER}/signin?`)}`;
        const startedAt = clock.nowSeconds() * 1000;
        const landed = await aliceBrowser().follow(signInHref, attestor, alice.email);
        const finishedAt = clock.now();
        assert.equal(landed.status, 200, landed.text);
        assert.equal(landed.url, claimUrl, "back on the claim page");
        assert.ok(field(landed.text, "csrf"));
        assert.ok(landed.text.includes(`action="${claimPath(token)}"`), "the form posts to the token's path");
        assert.ok(aliceBrowser().cookie(MAIN.origin, "proto_owner"));

        const owned = await aliceBrowser().get(`${MAIN.origin}${OWNER}/accounts`);
        assert.equal(owned.status, 200, owned.text);
        assert.equal(owned.json.person.issuer, "proto-trust", "the canonical issuer, not {trust_url}");
        assert.equal(owned.json.person.subject, subH, "the id_token sub is the attestation's sub_h");
        const record = await store.findAccountByDid(alice.agent.did);
        assert.equal(owned.json.person.id, record?.personId, "the same person the agent's attestation created");
        assert.deepEqual(
          owned.json.accounts.map((a: { agent_did: string; relation: string }) => [a.agent_did, a.relation]),
          [[alice.agent.did, "attested"]],
        );
        assert.deepEqual(owned.json.identities, [{ type: "oidc", value: { issuer: "proto-trust", sub: subH } }]);
        const authenticatedAt = Date.parse(owned.json.authenticated_at);
        assert.ok(
          authenticatedAt >= startedAt && authenticatedAt <= finishedAt,
          "the id_token's iat, issued during the sign-in",
        );
        assert.equal(authenticatedAt % 1000, 0, "whole seconds, as iat");
      });

      test("someone else, signed in, cannot claim it (403)", async () => {
        const bobEmail = emailAddress("bob");
        await attestor.link(undefined, bobEmail); // Bob exists at the attestor as well
        const landed = await bobB.follow(
          `${MAIN.origin}${OWNER}/signin?attestor=proto-trust&return_to=${encodeURIComponent(`${OWNER}/accounts`)}`,
          attestor,
          bobEmail,
        );
        assert.equal(landed.status, 200, landed.text);
        assert.deepEqual(landed.json.accounts, [], "Bob's agent never signed up here");
        const refused = await bobB.send("POST", `${MAIN.origin}${claimPath(token)}`);
        ledger.expect(refused, 403, "owner_authentication_required");
      });

      test("a form post needs the page's form token", async () => {
        const forged = await aliceBrowser().send("POST", `${MAIN.origin}${claimPath(token)}`, {
          form: { csrf: "forged" },
        });
        assert.equal(forged.status, 403, forged.text);
        assert.match(forged.text, /kit_csrf/);
      });

      test("the person claims through the page; the account is CLAIMED and owned", async () => {
        const page = await aliceBrowser().get(claimUrl);
        const done = await aliceBrowser().send("POST", `${MAIN.origin}${claimPath(token)}`, {
          form: { csrf: field(page.text, "csrf") },
        });
        assert.equal(done.status, 200, done.text);
        assert.match(done.text, /Agent claimed/);
        const me = await main.signed(alice.agent, "GET", ME);
        assert.equal(me.status, 200, me.text);
        assert.equal(me.json.state, "CLAIMED");
        assert.deepEqual(me.json.owner.identity, {
          type: "oidc",
          value: { issuer: "proto-trust", sub: subH },
        });
        const owned = await aliceBrowser().get(`${MAIN.origin}${OWNER}/accounts`);
        assert.equal(owned.json.accounts[0].relation, "owner");
        const again = await aliceBrowser().send("POST", `${MAIN.origin}${claimPath(token)}`);
        ledger.expect(again, 409, "already_claimed");
        const claimedPage = await aliceBrowser().get(claimUrl);
        assert.equal(claimedPage.status, 409);
      });

      test("a claimed account's attested session lapses too (upstream §10.7); a fresh attestation reopens it", async () => {
        const record = await store.findAccountByDid(alice.agent.did);
        assert.ok(record?.claimedAt !== undefined && record.attestedUntil !== undefined);
        clock.advance((record.attestedUntil - clock.now()) / 1000 + 1);
        const lapsed = await main.signed(alice.agent, "GET", ME);
        ledger.expect(lapsed, 401, "attestation_required");
        assert.equal(lapsed.json.error.details.reason, "attested_session_lapsed");
        const back = await main.signed(alice.agent, "GET", ME, {
          attestation: await attestor.mint(alice.agent, MAIN.did),
        });
        assert.equal(back.status, 200, back.text);
        assert.equal(back.json.state, "CLAIMED");
        // The time moved on: the owner signs in again for the owner operations that follow.
        assert.equal((await signIn(aliceBrowser(), alice.email)).status, 200);
      });

      test("after the claim the agent key alone cannot invite or re-key", async () => {
        ledger.expect(
          await main.signed(alice.agent, "POST", INVITE, {
            body: { recipient: { type: "email", value: "x@example.com" } },
          }),
          409,
          "already_claimed",
        );
        ledger.expect(
          await main.signed(alice.agent, "POST", ROTATE, { body: { new_account_did: newAgent().did } }),
          403,
          "owner_binding_blocked",
        );
      });

      test("owner operations (upstream §8.2, §8.4): no session 401, someone else's 403, unknown 404, unclaimed 409", async () => {
        const body = { agent_did: alice.agent.did };
        ledger.expect(await main.request("POST", REVOKE, { body }), 401, "owner_authentication_required");
        ledger.expect(
          await main.request("POST", REKEY, {
            body: { current_account_did: alice.agent.did, new_account_did: newAgent().did },
          }),
          401,
          "owner_authentication_required",
        );
        const bobRevoke = await bobB.send("POST", `${MAIN.origin}${REVOKE}`, { json: body });
        ledger.expect(bobRevoke, 403, "owner_authentication_required");
        const unclaimed = await signedUp();
        const onUnclaimed = await aliceBrowser().send("POST", `${MAIN.origin}${REVOKE}`, {
          json: { agent_did: unclaimed.agent.did },
        });
        ledger.expect(onUnclaimed, 409, "not_claimed");
        ledger.expect(
          await aliceBrowser().send("POST", `${MAIN.origin}${REVOKE}`, { json: { account_id: "acct_nothing" } }),
          404,
          "unknown_account",
        );
        ledger.expect(
          await aliceBrowser().send("POST", `${MAIN.origin}${REKEY}`, {
            json: { current_account_did: newAgent().did, new_account_did: newAgent().did },
          }),
          404,
          "unknown_account",
        );
        for (const json of [
          {},
          { account_id: alice.account.account_id, agent_did: alice.agent.did },
          { agent_did: "did:web:nope.example" },
          { account_id: 7 },
        ]) {
          ledger.expect(
            await aliceBrowser().send("POST", `${MAIN.origin}${REVOKE}`, { json }),
            400,
            "malformed_request",
          );
        }
        const notJson = await aliceBrowser().send("POST", `${MAIN.origin}${REVOKE}`, { form: body });
        ledger.expect(notJson, 400, "malformed_request");
        ledger.expect(
          await aliceBrowser().send("POST", `${MAIN.origin}${REKEY}`, {
            json: { current_account_did: alice.agent.did, new_account_did: alice.agent.did },
          }),
          400,
          "malformed_request",
        );
        ledger.expect(
          await aliceBrowser().send("POST", `${MAIN.origin}${REKEY}`, {
            json: { current_account_did: alice.agent.did, new_account_did: unclaimed.agent.did },
          }),
          409,
          "already_claimed",
        );
        // An agent signature never reaches the owner endpoints.
        ledger.expect(await main.signed(alice.agent, "POST", REVOKE, { body }), 401, "owner_authentication_required");
      });

      test("the owner re-keys the account: account_id and owner stay, the old key is revoked everywhere", async () => {
        const next = newAgent();
        const rekeyed = await aliceBrowser().send("POST", `${MAIN.origin}${REKEY}`, {
          json: { current_account_did: alice.agent.did, new_account_did: next.did },
        });
        assert.equal(rekeyed.status, 200, rekeyed.text);
        assert.deepEqual(Object.keys(rekeyed.json).sort(), ["account_id", "agent_did", "old_revoked_at", "state"]);
        assert.equal(rekeyed.json.account_id, alice.account.account_id);
        assert.equal(rekeyed.json.agent_did, next.did);
        assert.equal(rekeyed.json.state, "CLAIMED");
        assertAbout(rekeyed.json.old_revoked_at, clock.now());
        ledger.expect(await main.signed(alice.agent, "GET", ME), 401, "revoked_key");
        ledger.expect(await main.signed(alice.agent, "POST", ACCOUNTS), 401, "revoked_key");
        ledger.expect(
          await main.signed(alice.agent, "POST", "/api/notes", { body: { text: "x" } }),
          401,
          "revoked_key",
        );
        const me = await main.signed(next, "GET", ME);
        assert.equal(me.status, 200, me.text);
        assert.equal(me.json.account_id, alice.account.account_id);
        assert.deepEqual(me.json.owner.identity, { type: "oidc", value: { issuer: "proto-trust", sub: subH } });
        alice.agent = next;
      });

      test("owner-binding operations need a recent authentication: 301 s later it is owner_session_too_stale", async () => {
        clock.advance(301);
        const stale = await aliceBrowser().send("POST", `${MAIN.origin}${REVOKE}`, {
          json: { agent_did: alice.agent.did },
        });
        ledger.expect(stale, 403, "owner_session_too_stale");
        // Signing in again refreshes the authentication time; the revocation then goes through.
        const landed = await signIn(aliceBrowser(), alice.email);
        assert.equal(landed.status, 200, landed.text);
        const revoked = await aliceBrowser().send("POST", `${MAIN.origin}${REVOKE}`, {
          json: { agent_did: alice.agent.did },
        });
        assert.equal(revoked.status, 200, revoked.text);
        assert.deepEqual(Object.keys(revoked.json).sort(), ["account_id", "revoked_at"]);
        assert.equal(revoked.json.account_id, alice.account.account_id);
        ledger.expect(await main.signed(alice.agent, "GET", ME), 401, "revoked_key");
        // Idempotent, by account_id too: the first revocation's time.
        clock.advance(5);
        const again = await aliceBrowser().send("POST", `${MAIN.origin}${REVOKE}`, {
          json: { account_id: alice.account.account_id },
        });
        assert.equal(again.status, 200, again.text);
        assert.equal(again.json.revoked_at, revoked.json.revoked_at);
        // A re-key after the revocation gives the account a working key again.
        const restored = newAgent();
        const rekeyed = await aliceBrowser().send("POST", `${MAIN.origin}${REKEY}`, {
          json: { current_account_did: alice.agent.did, new_account_did: restored.did },
        });
        assert.equal(rekeyed.status, 200, rekeyed.text);
        const me = await main.signed(restored, "GET", ME, {
          attestation: await attestor.mint(await attestor.link(restored, alice.email), MAIN.did),
        });
        assert.equal(me.status, 200, me.text);
        assert.equal(me.json.state, "CLAIMED");
      });

      test("sign-out ends the owner session", async () => {
        const out = await aliceBrowser().send("POST", `${MAIN.origin}${OWNER}/signout`);
        assert.equal(out.status, 200, out.text);
        assert.equal(aliceBrowser().cookie(MAIN.origin, "proto_owner"), undefined);
        const after = await aliceBrowser().get(`${MAIN.origin}${OWNER}/accounts`);
        ledger.expect(after, 401, "owner_authentication_required");
      });

      test("a callback that this browser did not start is refused", async () => {
        const stray = await newBrowser().get(`${MAIN.origin}${OWNER}/callback?code=abc&state=xyz`);
        assert.equal(stray.status, 400, stray.text);
        assert.match(stray.text, /kit_signin_failed/);
      });
    });

    test("sign-in: an id_token for another audience is refused; nobody lands in an empty account", async () => {
      // The attestor registered this client with another service_did, so its id_tokens name
      // another audience (and another pairwise subject): the kit refuses them.
      const browser = newBrowser();
      const answer = await browser.follow(
        `${MISMATCH.origin}${OWNER}/signin?attestor=proto-trust`,
        attestor,
        emailAddress("mis"),
      );
      assert.equal(answer.status, 400, answer.text);
      assert.match(answer.text, /kit_signin_failed/);
      assert.match(answer.text, /aud/);
      assert.equal(browser.cookie(MISMATCH.origin, "proto_owner"), undefined, "no owner session");
    });

    test("sign-in: a hostile return_to lands on the owned accounts of this service", async () => {
      const browser = newBrowser();
      assert.equal((await signIn(browser, emailAddress("returner"))).status, 200);
      /** Where the kit's callback sends the browser, for a sign-in started with `returnTo`. */
      async function returnsTo(returnTo: string): Promise<string | undefined> {
        const query = new URLSearchParams({ attestor: "proto-trust", return_to: returnTo });
        const started = await browser.get(`${MAIN.origin}${OWNER}/signin?${query}`);
        assert.equal(started.status, 303, started.text);
        // Signed in at the attestor already: it answers with the code at once.
        const atAttestor = await browser.get(started.location ?? "");
        assert.equal(atAttestor.status, 302, atAttestor.text);
        const back = await browser.get(atAttestor.location ?? "");
        assert.equal(back.status, 303, back.text);
        return back.location;
      }
      for (const { name, value } of hostileRedirects(MAIN.origin)) {
        assert.equal(await returnsTo(value), `${MAIN.origin}${OWNER}/accounts`, name);
      }
      // A page of the service's own, as a path or an absolute URL, is where the person returns.
      for (const own of ["/proto/claim?token=abc", `${MAIN.origin}/proto/claim?token=abc`]) {
        assert.equal(await returnsTo(own), `${MAIN.origin}/proto/claim?token=abc`, own);
      }
    });

    test("implicit signup off: unknown_account until POST {accounts} creates the account", async () => {
      const agent = newAgent();
      ledger.expect(await free.signed(agent, "GET", ME), 404, "unknown_account");
      ledger.expect(await free.signed(agent, "POST", "/api/notes", { body: { a: 1 } }), 404, "unknown_account");
      assert.equal(await store.findAccountByDid(agent.did), undefined);
      const created = await free.signed(agent, "POST", ACCOUNTS);
      assert.equal(created.status, 201, created.text);
      assert.deepEqual(Object.keys(created.json).sort(), ["account_id", "agent_did", "created_at", "state"]);
      assert.equal(created.json.agent_did, agent.did);
      assert.equal(created.json.state, "UNCLAIMED");
      assert.equal((await store.findAccountByDid(agent.did))?.attestedIssuer, undefined, "free: no attestation needed");
      assert.equal((await free.signed(agent, "GET", ME)).status, 200);
    });

    test("per-route, per-DID hourly limit for unclaimed accounts: 429 rate_limit_exceeded with Retry-After", async () => {
      clock.alignTo(3600);
      const agent = newAgent();
      for (let i = 0; i < 3; i++) assert.equal((await limited.signed(agent, "GET", ME)).status, 200);
      const refused = await limited.signed(agent, "GET", ME);
      ledger.expect(refused, 429, "rate_limit_exceeded");
      const retryAfter = Number(refused.headers.get("retry-after"));
      assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 3600, `Retry-After ${retryAfter}`);
      assert.equal((await limited.signed(agent, "GET", "/api/whoami")).status, 200, "another route has its own bucket");
      assert.equal((await limited.signed(newAgent(), "GET", ME)).status, 200, "another DID has its own bucket");
      clock.advance(retryAfter);
      assert.equal((await limited.signed(agent, "GET", ME)).status, 200, "the next window");
    });

    test("limits.unclaimed_ttl_seconds: an unclaimed account past it is 410 account_expired", async () => {
      const agent = newAgent();
      const created = await limited.signed(agent, "GET", ME);
      assert.equal(created.status, 200, created.text);
      assert.equal(
        created.json.unclaimed_expires_at,
        new Date(Date.parse(created.json.created_at) + 3600_000).toISOString(),
      );
      // Explicit signup with a TTL: upstream §6.4 field for field, the expiry included.
      const signup = await limited.signed(agent, "POST", ACCOUNTS);
      assert.equal(signup.status, 200, signup.text);
      assert.deepEqual(signup.json, {
        account_id: created.json.account_id,
        agent_did: agent.did,
        state: "UNCLAIMED",
        created_at: created.json.created_at,
        unclaimed_expires_at: created.json.unclaimed_expires_at,
      });
      const staged = await limited.signed(agent, "POST", INVITE, {
        body: { recipient: { type: "email", value: "ttl@example.com" } },
      });
      assert.equal(staged.status, 202);
      clock.advance(3601);
      ledger.expect(await limited.signed(agent, "GET", ME), 410, "account_expired");
      ledger.expect(await limited.request("POST", claimPath(tokenOf(agent))), 410, "account_expired");
    });

    test("the service's own routes: guarded by the kit with Fastify, or untouched", async () => {
      const { agent } = await signedUp();
      const note = await main.signed(agent, "POST", "/api/notes", { body: { text: "hello" } });
      assert.equal(note.status, 200, note.text);
      assert.deepEqual(note.json, { did: agent.did, state: "UNCLAIMED", note: { text: "hello" } });
      const invalid = await main.signed(agent, "POST", "/api/notes", { rawBody: "{broken" });
      assert.equal(invalid.status, 400, "Fastify's JSON parser still refuses a broken body");
      const plain = await main.request("POST", "/api/plain", { body: { x: 1 } });
      assert.deepEqual(plain.json, { echo: { x: 1 } });
      ledger.expect(
        await main.request("POST", "/api/notes", { body: { text: "anonymous" } }),
        401,
        "invalid_signature",
      );
    });

    test("the Fetch-API function works with a plain Request", async () => {
      const { agent } = await signedUp();
      const body = JSON.stringify({ text: "from a worker" });
      const url = `${MAIN.origin}/anything/notes?x=1`;
      const signed = signRequest(
        { method: "POST", url, body },
        { keyid: agent.did, privateKey: agent.privateKey, created: clock.nowSeconds() },
      );
      const request = new Request(url, {
        method: "POST",
        headers: { ...signed.headers, "content-type": "application/json" },
        body,
      });
      const context = await main.kit.authenticate(request);
      assert.equal(context.did, agent.did);
      assert.equal(context.account.state, "UNCLAIMED");
      assert.deepEqual(context.json(), { text: "from a worker" });
      assert.equal(await request.text(), body, "the caller can still read the body");

      // Behind a proxy: the app sees an internal URL, the kit checks the public one.
      const internal = new Request("http://10.0.0.7:3000/anything", {
        headers: signRequest(
          { method: "GET", url: `${MAIN.origin}/anything` },
          { keyid: agent.did, privateKey: agent.privateKey, created: clock.nowSeconds() },
        ).headers,
      });
      assert.equal((await main.kit.authenticate(internal)).did, agent.did);

      await assert.rejects(main.kit.authenticate(new Request(url, { method: "POST", body })), (error: unknown) => {
        assert.ok(error instanceof ProtoError);
        assert.equal(error.code, "invalid_signature");
        return true;
      });
      const refusal = new ProtoError("invalid_signature", 401, "Signature verification failed");
      const response = main.kit.errorToResponse(refusal, new Request(url, { headers: { signature: "sig1=:AA==:" } }));
      assert.equal(response.status, 401);
      assert.deepEqual(await response.json(), {
        error: { code: "invalid_signature", message: "Signature verification failed" },
      });
      assert.equal(
        response.headers.get("www-authenticate"),
        `Proto discovery="${MAIN.origin}/.well-known/proto", realm="${MAIN.did}", error=invalid_signature`,
      );

      // The kit's endpoints as a Fetch handler.
      const meUrl = `${MAIN.origin}${ME}`;
      const me = await main.kit.handle(
        new Request(meUrl, {
          headers: signRequest(
            { method: "GET", url: meUrl },
            { keyid: agent.did, privateKey: agent.privateKey, created: clock.nowSeconds() },
          ).headers,
        }),
      );
      assert.ok(me);
      assert.equal(me.status, 200);
      assert.equal(((await me.json()) as { agent_did: string }).agent_did, agent.did);
      assert.equal(await main.kit.handle(new Request(`${MAIN.origin}/not-the-kit`)), undefined);
      const discovery = await main.kit.handle(new Request(`${MAIN.origin}/.well-known/proto`));
      assert.equal(discovery?.status, 200);
    });

    test("every reserved code was reached by a real request, with the status of the kit's table", () => {
      const missing = Object.keys(RESERVED_ERRORS).filter((code) => !ledger.seen.has(code));
      assert.deepEqual(missing, [], "codes never produced");
      for (const [code, statuses] of ledger.seen) {
        assert.ok(isReservedErrorCode(code), code);
        const allowed: readonly number[] = KIT_ERRORS[code].statuses;
        for (const status of statuses) assert.ok(allowed.includes(status), `${code} answered ${status}`);
      }
      assert.deepEqual([...(ledger.seen.get("owner_authentication_required") ?? [])].sort(), [401, 403]);
    });
  });
}
