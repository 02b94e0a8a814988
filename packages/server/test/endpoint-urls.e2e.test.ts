/**
 * A service in the upstream SDK's style, end to end: its discovery document gives absolute
 * endpoint URLs (upstream §4.3), `accounts` on an API host beside the service host. Our directory
 * lists it and finds it by search; an agent made with the @proto/agent SDK finds it there, links
 * to our attestor, and calls it: signed over the resolved URL, attested for the service's DID.
 * Everything runs over HTTPS under a test CA, on both stores.
 */
import assert from "node:assert/strict";
import type { IncomingMessage, ServerResponse } from "node:http";
import { after, before, describe, test } from "node:test";
import { AgentIdentity, AttestorClient, DirectoryClient, ServiceClient } from "@proto/agent";
import {
  ATTESTATION_HEADER,
  createAttestationVerifier,
  createRequestVerifier,
  MemoryNonceStore,
  ProtoError,
  protoError,
  RemoteKeySet,
} from "@proto/protocol";
import { type HttpsHost, startHttpsHost, type TestFetch, testFetch } from "@proto/testkit";
import { type DirectoryHarness, type Site, startDirectoryHarness } from "./support/directory.js";
import { reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";
import { freePort, RELAXED_RATE_LIMITS, startTrustHarness, type TrustHarness } from "./support/trust.js";

reportSkippedVariants();

const API_HOST = "api.upstream.test";

/** What the service saw of one request it accepted. */
interface Accepted {
  url: string;
  keyid: string;
  verification: string | undefined;
  body: string;
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}

for (const variant of STORE_VARIANTS) {
  describe(`absolute endpoint URLs end to end: directory, attestor, agent (${variant.name})`, () => {
    let h: DirectoryHarness;
    let trust: TrustHarness;
    let api: HttpsHost;
    let site: Site;
    let fetch: TestFetch;
    const accepted: Accepted[] = [];

    before(async () => {
      h = await startDirectoryHarness(variant, { sites: 2 });
      const trustPort = await freePort();
      trust = await startTrustHarness(variant, {
        port: trustPort,
        env: { TRUST_PUBLIC_URL: `http://127.0.0.1:${trustPort}`, TRUST_RATE_LIMITS: RELAXED_RATE_LIMITS },
      });
      site = h.site();
      api = await startHttpsHost({ ca: h.ca, hostnames: [API_HOST] });
      const [siteHost, sitePort] = site.authority.split(":") as [string, string];
      fetch = testFetch(h.ca, { resolve: `${siteHost}:${sitePort}:127.0.0.1,${API_HOST}:${api.port}:127.0.0.1` });

      // The service: verifies the signature over the URL it was reached at, and the attestation
      // for its own DID, whichever of its hosts answers.
      const verifier = createRequestVerifier({ nonceStore: new MemoryNonceStore() });
      const attestations = createAttestationVerifier({
        keySet: new RemoteKeySet(`${trust.url}/.well-known/jwks.json`),
      });
      const serve = (origin: string) => async (req: IncomingMessage, res: ServerResponse) => {
        try {
          const body = await readBody(req);
          const url = `${origin}${req.url ?? "/"}`;
          const verified = await verifier.verify({ method: req.method ?? "GET", url, headers: req.headers, body });
          const jwt = req.headers[ATTESTATION_HEADER];
          if (typeof jwt !== "string") throw protoError("attestation_required");
          const { verification } = await attestations.verify(jwt, { audience: site.did, agentDid: verified.keyid });
          accepted.push({ url, keyid: verified.keyid, verification, body });
          sendJson(res, req.method === "POST" ? 201 : 200, { agent_did: verified.keyid, state: "UNCLAIMED" });
        } catch (error) {
          if (error instanceof ProtoError) sendJson(res, error.status, error.toEnvelope());
          else sendJson(res, 500, { error: { code: "internal_error", message: String(error) } });
        }
      };
      const base = `https://${site.authority}`;
      const apiBase = api.origin(API_HOST);
      for (const path of ["/proto/v1/accounts", "/proto/v1/accounts/me"]) api.route(path, serve(apiBase));
      site.setHandler("/proto/v1/accounts/me/owner-invitation", serve(base));
      // The shape of the upstream SDK's synthesised document, renamed.
      site.serveDiscovery({
        proto_version: "0.1",
        service_did: site.did,
        signature_algorithms: ["ed25519"],
        endpoints: {
          accounts: `${apiBase}/proto/v1/accounts`,
          owner_invitation: `${base}/proto/v1/accounts/me/owner-invitation`,
          claim_page: `${base}/claim`,
          claim_completion: `${base}/proto/v1/claim`,
          key_rotation: `${apiBase}/proto/v1/accounts/me/keys/rotate`,
        },
        billing: { unclaimed_mode: "attested_only", accepted_attestors: ["proto-trust"] },
      });
    });
    after(async () => {
      await h?.close();
      await trust?.close();
      await api?.close();
      await fetch?.close();
    });

    test("listed, found by search, then called by the agent at the endpoints it names", async () => {
      const { did } = await h.register(site, {
        title: "Upstream SDK service",
        description: "Publishes absolute endpoint URLs",
        tags: ["upstream"],
      });
      assert.equal(did, site.did);

      // The agent finds it in the directory.
      const directory = new DirectoryClient({ url: h.url });
      const found = [];
      for await (const listing of directory.list({ search: "absolute endpoint" })) found.push(listing);
      assert.deepEqual(
        found.map((l) => [l.service_did, l.status, l.title]),
        [[site.did, "active", "Upstream SDK service"]],
      );
      const listing = found[0];
      assert.ok(listing);
      const apiBase = api.origin(API_HOST);
      assert.equal(
        (listing.discovery_doc.endpoints as Record<string, string>).accounts,
        `${apiBase}/proto/v1/accounts`,
      );

      // Linked to our attestor, it connects from the listing's discovery URL.
      const identity = AgentIdentity.generate();
      const attestor = new AttestorClient({ url: trust.url, identity, fetch });
      const link = await attestor.linkStart({ label: "e2e agent" });
      const confirmed = await trust.hook("/__test/link/confirm", { req_id: link.req_id, email: "ada@example.com" });
      assert.equal(confirmed.status, 200, confirmed.text);
      await attestor.linkPoll(link.req_id, { minDelayMs: 10, maxDelayMs: 20 });
      const service = await ServiceClient.connect(listing.discovery_url, { identity, attestor, fetch });
      assert.equal(service.did, site.did);
      assert.deepEqual(service.origins, [`https://${site.authority}`, apiBase]);

      // accounts lives on the API host: the request goes there, signed over that URL.
      const signup = await service.fetch(service.endpoint("accounts"), { method: "POST" });
      assert.equal(signup.status, 201, await signup.clone().text());
      assert.deepEqual(await signup.json(), { agent_did: identity.did, state: "UNCLAIMED" });
      const me = await service.fetch(service.endpoint("accounts", "/me"));
      assert.equal(me.status, 200);
      // owner_invitation is an absolute URL on the discovery host.
      const invitation = JSON.stringify({ recipient: { type: "email", value: "ada@example.com" } });
      const invited = await service.fetch(service.endpoint("owner_invitation"), {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: invitation,
      });
      assert.equal(invited.status, 201);

      assert.deepEqual(accepted, [
        { url: `${apiBase}/proto/v1/accounts`, keyid: identity.did, verification: "email", body: "" },
        { url: `${apiBase}/proto/v1/accounts/me`, keyid: identity.did, verification: "email", body: "" },
        {
          url: `https://${site.authority}/proto/v1/accounts/me/owner-invitation`,
          keyid: identity.did,
          verification: "email",
          body: invitation,
        },
      ]);
    });
  });
}
