/**
 * The SDK in-process against the real attestor and directory, with an injected fetch that trusts
 * the test CA and pins the `*.test` service names (`testFetch(ca, { resolve })`).
 */
import assert from "node:assert/strict";
import { existsSync, statSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { createAttestationVerifier, RemoteKeySet } from "@proto/protocol";
import { DISCOVERY_PATH, testFetch } from "@proto/testkit";
import {
  Agent,
  AgentError,
  AttestorClient,
  AttestorError,
  AuthError,
  DirectoryError,
  DiscoveryError,
  discoverService,
  type FetchFunction,
  NetworkError,
  ServiceClient,
  UsageError,
  writeProofFile,
} from "../src/index.js";
import { closedPort, startTestEnv, type TestEnv, tempHome } from "./support/env.js";

function rejectsWith(code: string, type: new (...args: never[]) => AgentError = AgentError) {
  return (error: unknown) => {
    assert.ok(error instanceof type, `expected ${type.name}, got ${String(error)}`);
    assert.equal((error as AgentError).code, code, (error as Error).message);
    return true;
  };
}

describe("SDK against the real servers", () => {
  let env: TestEnv;
  let agent: Agent;

  before(async () => {
    env = await startTestEnv();
    agent = Agent.init({
      home: tempHome(),
      fetch: env.fetch,
      attestorUrl: env.trustUrl,
      directoryUrl: env.directoryUrl,
    }).agent;
  });
  after(() => env.close());

  test("link: start, confirmation, poll; the binding is stored and delivered once", async () => {
    const attestor = agent.attestor();
    const request = await attestor.linkStart({ label: "sdk test" });
    assert.match(request.req_id, /^lr_/);
    assert.equal(request.expires_in, 1800);
    assert.deepEqual(await attestor.pollOnce(request.req_id), { state: "pending", phase: "awaiting_signin" });
    const confirmed = await env.trustHook("/__test/link/confirm", {
      req_id: request.req_id,
      email: "carol@example.com",
    });
    const binding = await attestor.linkPoll(request.req_id);
    assert.equal(binding.binding_id, confirmed.json.binding_id);
    assert.equal(agent.store.getBinding(attestor.url, agent.did)?.binding_id, binding.binding_id);
    await assert.rejects(attestor.pollOnce(request.req_id), (error: unknown) => {
      assert.ok(error instanceof AttestorError);
      assert.deepEqual([error.code, error.status], ["link_request_expired", 410]);
      return true;
    });
    await assert.rejects(attestor.linkPoll(request.req_id), rejectsWith("link_request_expired", AttestorError));
  });

  test("mint by a key the attestor has no binding for: the error names the command that links it, as the CLI's", async () => {
    const unlinked = Agent.init({ home: tempHome(), fetch: env.fetch, attestorUrl: env.trustUrl }).agent;
    await assert.rejects(unlinked.attestor().token(env.site.did), (error: unknown) => {
      assert.ok(error instanceof AttestorError, String(error));
      assert.deepEqual([error.code, error.status], ["unauthorized", 401]);
      assert.equal(
        error.message,
        `this agent's key is not linked to a person at ${env.trustUrl}: run \`proto trust link --attestor ${env.trustUrl}\` to link it`,
      );
      return true;
    });
  });

  test("mint: a token the attestor's key set verifies, cached per audience, binding deadline refreshed", async () => {
    const attestor = agent.attestor();
    const aud = env.named.a?.did ?? "";
    const before = agent.store.getBinding(attestor.url, agent.did)?.binding_expires_at ?? 0;
    const minted = await attestor.token(aud);
    assert.equal(minted.cached, false);
    assert.ok((minted.binding_expires_at ?? 0) >= before);
    assert.equal(agent.store.getBinding(attestor.url, agent.did)?.binding_expires_at, minted.binding_expires_at);
    const keySet = new RemoteKeySet(`${env.trustUrl}/.well-known/jwks.json`, { fetch: testFetch(env.ca) });
    const verified = await createAttestationVerifier({ keySet }).verify(minted.jwt, {
      audience: aud,
      agentDid: agent.did,
    });
    assert.equal(verified.verification, "email");
    const again = await attestor.token(aud);
    assert.deepEqual([again.cached, again.jwt], [true, minted.jwt]);
    const other = await attestor.token(env.named.b?.did ?? "");
    assert.equal(other.cached, false);
    assert.notEqual(other.jwt, minted.jwt);
    assert.equal((await attestor.keySet()).keys.length > 0, true);
  });

  test("service fetch: signed and attested for attested_only services; fetch-compatible", async () => {
    const site = env.named.a;
    assert.ok(site);
    const service = await agent.service(site.origin);
    assert.equal(service.did, site.did);
    assert.equal(service.discovery.attestedOnly, true);
    const response = await service.fetch("/proto/v1/hello", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ n: 1 }),
    });
    assert.equal(response.status, 200);
    const body = (await response.json()) as { agent: string; verification: string; echo: string };
    assert.deepEqual(body, { agent: agent.did, verification: "email", echo: '{"n":1}' });
    assert.equal(site.accepted.at(-1)?.attested, true);
    // A Request object works too, and the same nonce is never reused.
    const second = await service.fetch(new Request(`${site.origin}/proto/v1/hello`));
    assert.equal(second.status, 200);
    await assert.rejects(service.fetch("https://b.test/proto/v1/hello"), rejectsWith("foreign_origin", UsageError));
  });

  test("service fetch: a free service gets no attestation until it answers attestation_required", async () => {
    const site = env.named.free;
    assert.ok(site);
    const service = await agent.service(site.origin);
    assert.equal(service.discovery.attestedOnly, false);
    const { response, attested } = await service.send("/proto/v1/hello");
    assert.equal(response.status, 200);
    assert.equal(attested, true);
    const noRetry = new ServiceClient(service.discovery, { identity: agent.identity, fetch: env.fetch });
    const refused = await noRetry.fetch("/proto/v1/hello");
    assert.equal(refused.status, 401);
    assert.equal(((await refused.json()) as { error: { code: string } }).error.code, "attestation_required");
  });

  test("service endpoints: paths and absolute URLs resolved; signed and attested on every host a signed endpoint names", async () => {
    const site = env.named.a;
    assert.ok(site);
    const plain = await agent.service(site.origin);
    assert.deepEqual(plain.discovery.endpoints, {
      accounts: `${site.origin}/proto/v1/accounts`,
      owner_invitation: `${site.origin}/proto/v1/accounts/me/owner-invitation`,
      claim_page: `${site.origin}/claim`,
      claim_completion: `${site.origin}/proto/v1/claim`,
    });
    assert.deepEqual(plain.origins, [site.origin]);

    const { split, splitApi } = env;
    const service = await agent.service(`${split.origin}/anything?x=1`);
    assert.equal(service.did, split.did);
    assert.deepEqual(service.discovery.endpoints, {
      accounts: `${splitApi.origin}/proto/v1/accounts`,
      owner_invitation: `${split.origin}/proto/v1/hello`,
      claim_page: "https://claims.example/claim",
      claim_completion: `${split.origin}/proto/v1/claim`,
    });
    // The claim page is for people: its host never receives signatures or attestations.
    assert.deepEqual(service.origins, [split.origin, splitApi.origin]);
    assert.equal(service.endpoint("accounts", "/me"), `${splitApi.origin}/proto/v1/accounts/me`);

    // An endpoint on another host: the request goes there, signed over that URL, with an
    // attestation for the service's DID (the audience does not follow the host).
    const response = await service.fetch(service.endpoint("accounts", "/me"));
    assert.equal(response.status, 200, await response.clone().text());
    const body = (await response.json()) as { agent: string; verification: string };
    assert.deepEqual(body, { agent: agent.did, verification: "email", echo: "" });
    assert.deepEqual(splitApi.accepted.at(-1), {
      keyid: agent.did,
      attested: true,
      verification: "email",
      attestor: env.trustUrl,
      body: "",
    });

    // An absolute endpoint on the discovery origin works as a path would.
    const invited = await service.fetch(service.endpoint("owner_invitation"), { method: "POST", body: "{}" });
    assert.equal(invited.status, 200);
    assert.equal(split.accepted.at(-1)?.body, "{}");

    await assert.rejects(service.fetch("https://claims.example/claim"), rejectsWith("foreign_origin", UsageError));
    assert.throws(() => service.endpoint("key_rotation"), rejectsWith("unknown_endpoint", UsageError));
    assert.throws(() => service.endpoint("accounts", "me"), rejectsWith("invalid_argument", UsageError));
  });

  test("a service suspended by the person: service_suspended, final for that service only, never retried", async () => {
    const attestor = agent.attestor();
    const [a, b, free] = [env.named.a, env.named.b, env.named.free];
    assert.ok(a && b && free);
    // The earlier tests minted for all three; the person suspends the agent for two of them.
    const bindingId = agent.store.getBinding(attestor.url, agent.did)?.binding_id;
    for (const site of [a, free]) {
      const suspended = await env.trustHook("/__test/bindings/suspend", { binding_id: bindingId, aud: site.did });
      assert.equal(suspended.status, 200, JSON.stringify(suspended.json));
    }
    const isSuspended = (site: { did: string }) => (error: unknown) => {
      assert.ok(error instanceof AttestorError, String(error));
      assert.deepEqual([error.code, error.status, error.kind], ["service_suspended", 403, "auth"]);
      assert.equal(
        error.message,
        `the person who linked this agent suspended it for the service ${site.did}; no attestation for that service until they restore it on ${env.trustUrl}/account (other services are not affected)`,
      );
      return true;
    };
    await assert.rejects(attestor.mint(a.did), isSuspended(a));
    // Its cached token for that service is gone; the others and the binding stay.
    assert.equal(attestor.tokenCache.get(attestor.url, agent.did, a.did), undefined);
    assert.ok(attestor.tokenCache.get(attestor.url, agent.did, b.did));
    assert.equal(agent.store.getBinding(attestor.url, agent.did)?.state, "active");
    assert.equal((await attestor.mint(b.did)).cached, false);

    // Through a service client, every request counted: one mint, no retry, nothing sent on.
    const sent: string[] = [];
    const counting: FetchFunction = (input, init) => {
      sent.push(new URL(input instanceof Request ? input.url : String(input)).host);
      return env.fetch(input, init);
    };
    const counted = new AttestorClient({ url: env.trustUrl, identity: agent.identity, fetch: counting });
    const trustHost = new URL(env.trustUrl).host;
    for (const site of [a, free]) {
      sent.length = 0;
      const accepted = site.accepted.length;
      const service = await ServiceClient.connect(site.origin, {
        identity: agent.identity,
        attestor: counted,
        fetch: counting,
      });
      await assert.rejects(service.fetch("/proto/v1/hello"), isSuspended(site));
      assert.equal(site.accepted.length, accepted, `${site.did} accepted nothing`);
      assert.equal(sent.filter((host) => host === trustHost).length, 1, `one mint for ${site.did}: ${sent}`);
    }
    // The free service was asked once, without an attestation; the attested_only one never.
    assert.deepEqual(
      sent.filter((host) => host !== trustHost),
      [new URL(free.origin).host, new URL(free.origin).host],
      "discovery, then the one request that answered attestation_required",
    );
    const other = await ServiceClient.connect(b.origin, {
      identity: agent.identity,
      attestor: counted,
      fetch: counting,
    });
    assert.equal((await other.fetch("/proto/v1/hello")).status, 200);

    // Restored: minting and the service work again.
    for (const site of [a, free]) {
      const restored = await env.trustHook("/__test/bindings/suspend", {
        binding_id: bindingId,
        aud: site.did,
        suspended: false,
      });
      assert.equal(restored.status, 200);
    }
    assert.equal((await (await agent.service(a.origin)).fetch("/proto/v1/hello")).status, 200);
  });

  test("discovery: HTTPS only, schema and v0.1 rules, DID must name the host, size cap, no redirects, timeout", async () => {
    const fetch = env.fetch;
    await assert.rejects(discoverService("http://a.test/", { fetch }), rejectsWith("insecure_url", UsageError));
    await assert.rejects(
      discoverService(env.broken.origin(), { fetch: testFetch(env.ca) }),
      rejectsWith("discovery_invalid", DiscoveryError),
    );
    const broken = env.broken;
    const good = env.site.document();
    try {
      broken.serveDiscovery({ ...good, proto_version: "0.2" });
      await assert.rejects(
        discoverService(broken.origin(), { fetch: testFetch(env.ca) }),
        rejectsWith("discovery_incompatible", DiscoveryError),
      );
      broken.serveDiscovery({ ...good, signature_algorithms: ["ecdsa-p256-sha256"] });
      await assert.rejects(
        discoverService(broken.origin(), { fetch: testFetch(env.ca) }),
        (error: unknown) => error instanceof DiscoveryError && /ed25519/.test(error.message),
      );
      broken.serveDiscovery(good); // declares did:web:localhost%3A<site port>, not this host's port
      await assert.rejects(
        discoverService(broken.origin(), { fetch: testFetch(env.ca) }),
        rejectsWith("discovery_did_mismatch", DiscoveryError),
      );
      broken.serveDiscovery("not json");
      await assert.rejects(
        discoverService(broken.origin(), { fetch: testFetch(env.ca) }),
        rejectsWith("discovery_invalid", DiscoveryError),
      );
      broken.misbehave(DISCOVERY_PATH, "oversized");
      await assert.rejects(
        discoverService(broken.origin(), { fetch: testFetch(env.ca) }),
        rejectsWith("response_too_large", NetworkError),
      );
      broken.serveDiscovery(good);
      broken.misbehave(DISCOVERY_PATH, "redirect");
      await assert.rejects(
        discoverService(broken.origin(), { fetch: testFetch(env.ca) }),
        rejectsWith("discovery_fetch_failed", DiscoveryError),
      );
      broken.misbehave(DISCOVERY_PATH, "hang");
      await assert.rejects(
        discoverService(broken.origin(), { fetch: testFetch(env.ca), timeoutMs: 300 }),
        rejectsWith("timeout", NetworkError),
      );
    } finally {
      broken.serveDiscovery({ proto_version: "0.1", service_did: "did:web:localhost", endpoints: {} });
    }
    // Without the test CA the certificate is refused, as a one-line TLS error that says what to do:
    // the same words as the CLI's.
    await assert.rejects(discoverService(env.site.origin), (error: unknown) => {
      rejectsWith("tls_error", NetworkError)(error);
      assert.equal(
        (error as Error).message,
        `cannot reach ${env.site.origin}: the server's TLS certificate is not trusted (UNABLE_TO_VERIFY_LEAF_SIGNATURE); if it comes from a development CA, point NODE_EXTRA_CA_CERTS at its PEM (npm run dev: data/dev-ca/ca.pem)`,
      );
      return true;
    });
  });

  test("directory: register, list with cursor iteration, search, update, withdraw; sessions kept 0600", async () => {
    const directory = agent.directory();
    const names = ["a", "b", "c"] as const;
    const titles = { a: "Alpha widgets", b: "Beta widgets", c: "Gamma gadgets" };
    for (const name of names) {
      const site = env.named[name];
      assert.ok(site);
      const result = await directory.register({
        discoveryUrl: site.discoveryUrl,
        title: titles[name],
        tags: [name === "c" ? "gadgets" : "widgets"],
        publish: (challenge) => {
          writeProofFile(site.proofDir, challenge.challenge_token);
        },
      });
      assert.equal(result.created, true);
      assert.equal(result.session.service_did, site.did);
      assert.equal(statSync(result.sessionFile ?? "").mode & 0o777, 0o600);
    }
    const all = [];
    for await (const listing of directory.list({ limit: 1 })) all.push(listing.service_did);
    assert.deepEqual(all.sort(), names.map((n) => env.named[n]?.did).sort());
    const page = await directory.listPage({ limit: 1 });
    assert.equal(page.listings.length, 1);
    assert.equal(typeof page.next_cursor, "string");

    const widgets = [];
    for await (const listing of directory.list({ search: "WIDGETS", limit: 1 })) widgets.push(listing.title);
    assert.deepEqual(widgets.sort(), ["Alpha widgets", "Beta widgets"]);

    const c = env.named.c?.did ?? "";
    const updated = await directory.update(c, { description: "Now with gadgets", tags: ["gadgets", "new"] });
    assert.deepEqual([updated.description, updated.tags], ["Now with gadgets", ["gadgets", "new"]]);
    await assert.rejects(directory.update(c, {}), rejectsWith("nothing_to_update", UsageError));
    await assert.rejects(directory.update(c, { title: "x".repeat(121) }), rejectsWith("invalid_field", UsageError));

    const sessionFile = agent.store.sessionPath(directory.url, c);
    assert.equal(existsSync(sessionFile), true);
    await directory.withdraw(c);
    assert.equal(existsSync(sessionFile), false);
    assert.equal((await directory.get(c)).status, "deleted");
    await assert.rejects(directory.update(c, { title: "again" }), rejectsWith("no_session", AuthError));
    await assert.rejects(
      directory.update(c, { title: "again" }, { sessionToken: "sess_wrong" }),
      (error: unknown) => error instanceof DirectoryError && error.status === 401 && error.code === "unauthorized",
    );
    await assert.rejects(directory.get("did:web:nowhere.test"), (error: unknown) => {
      assert.ok(error instanceof DirectoryError);
      assert.deepEqual([error.code, error.status, error.kind], ["not_found", 404, "server"]);
      return true;
    });
  });

  test("directory errors carry Retry-After: the per-host challenge cap", async () => {
    const directory = agent.directory();
    const url = env.named.free?.discoveryUrl ?? "";
    for (let i = 0; i < 10; i++) await directory.challenge(url);
    await assert.rejects(directory.challenge(url), (error: unknown) => {
      assert.ok(error instanceof DirectoryError);
      assert.deepEqual([error.code, error.status], ["rate_limited", 429]);
      assert.ok((error.retryAfter ?? 0) > 0, `Retry-After ${error.retryAfter}`);
      return true;
    });
  });

  test("unreachable attestor: a network error, no stack in the message", async () => {
    const port = await closedPort();
    const closed = Agent.load({ home: agent.store.home, attestorUrl: `https://127.0.0.1:${port}` });
    await assert.rejects(closed.attestor().mint("did:web:svc.example"), (error: unknown) => {
      assert.ok(error instanceof NetworkError);
      assert.equal(error.kind, "network");
      assert.equal(error.message, `cannot reach https://127.0.0.1:${port}: connection refused`);
      assert.doesNotMatch(error.message, /\n/);
      return true;
    });
  });
});
