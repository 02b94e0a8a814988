/**
 * What a developer reads when `createKit` cannot start: one `KitConfigError` whose message names the
 * option, why, and what to write instead. The three a new Express developer met first: an http
 * `publicUrl` (agents reach services over https only), the attestor of `npm run dev` on
 * `http://localhost:8081` (accepted, as the agent accepts it), and a did:web with a bare `:port`.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createKit, KitConfigError, type KitOptions } from "../src/index.js";

const ATTESTOR = "proto-trust";
/** The did:key of the did:key method's published test vector. */
const PUBLISHED_DID_KEY = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";

function options(overrides: Partial<KitOptions> = {}): KitOptions {
  return {
    publicUrl: "https://notes.example",
    database: "sqlite::memory:",
    discovery: { service_did: "did:web:notes.example" },
    attestors: { [ATTESTOR]: { url: "https://trust.example" } },
    mail: { developmentOutbox: true },
    ...overrides,
  };
}

/** The refusal `createKit` gives, which must be a KitConfigError naming `option`. */
async function refusal(kitOptions: KitOptions, option: string): Promise<string> {
  const error = await createKit(kitOptions).then(
    async (kit) => {
      await kit.close();
      return undefined;
    },
    (caught: unknown) => caught,
  );
  assert.ok(error instanceof KitConfigError, `createKit refuses with a KitConfigError, got ${String(error)}`);
  assert.equal(error.option, option);
  return error.message;
}

describe("createKit: publicUrl must be a URL agents can call (https)", () => {
  test("an http publicUrl on another host is refused: why, and the https recipe for development", async () => {
    const message = await refusal(
      options({ publicUrl: "http://notes.example", discovery: { service_did: "did:web:notes.example" } }),
      "publicUrl",
    );
    assert.match(
      message,
      /^publicUrl http:\/\/notes\.example must be https: proto agents reach services over https only/,
    );
    assert.match(message, /insecure_url/);
    assert.match(message, /`npm run dev`.*data\/dev-ca\/ \(localhost\.pem and localhost-key\.pem\)/);
    assert.match(message, /publicUrl to https:\/\/localhost:PORT/);
    assert.match(message, /NODE_EXTRA_CA_CERTS=data\/dev-ca\/ca\.pem/);
  });

  test("allowHttp does not open plain http to other hosts", async () => {
    const message = await refusal(
      options({
        publicUrl: "http://notes.example",
        allowHttp: true,
        discovery: { service_did: "did:web:notes.example" },
      }),
      "publicUrl",
    );
    assert.match(message, /allowHttp accepts http on localhost, 127\.0\.0\.0\/8 and \[::1\] only/);
  });

  test("http on this machine needs the explicit development option, which the message names", async () => {
    for (const publicUrl of ["http://localhost:3000", "http://127.0.0.1:3000", "http://[::1]:3000"]) {
      // A did:web cannot name an IPv6 address.
      const serviceDid = publicUrl.includes("[") ? PUBLISHED_DID_KEY : `did:web:${new URL(publicUrl).hostname}%3A3000`;
      const kitOptions = options({ publicUrl, discovery: { service_did: serviceDid } });
      const message = await refusal(kitOptions, "publicUrl");
      assert.match(message, /proto agents reach services over https only/, publicUrl);
      assert.match(message, /allowHttp: true in createKit's options; agents still cannot call it/, publicUrl);
      const kit = await createKit({ ...kitOptions, allowHttp: true });
      assert.equal(kit.origin, new URL(publicUrl).origin);
      await kit.close();
    }
  });

  test("what is not an http(s) URL is refused by name", async () => {
    assert.match(await refusal(options({ publicUrl: "notes.example" }), "publicUrl"), /is not an absolute URL/);
    assert.match(
      await refusal(options({ publicUrl: "ftp://notes.example" }), "publicUrl"),
      /must be https: .*Use an https URL\./,
    );
  });
});

describe("createKit: attestor URLs follow the agent's rule", () => {
  test("plain http on this machine (the attestor of `npm run dev`) needs no flag, and signs people in over it", async () => {
    for (const url of [
      "http://localhost:8081",
      "http://127.0.0.1:8081",
      "http://127.0.0.2:8081",
      "http://[::1]:8081",
    ]) {
      const kit = await createKit(options({ attestors: { [ATTESTOR]: { url } } }));
      const attestor = kit.attestors.get(ATTESTOR);
      assert.equal(attestor?.url, url, url);
      assert.equal(attestor?.allowHttp, true, `${url}: the OpenID client may use http`);
      await kit.close();
    }
  });

  test("http elsewhere is refused with the exact option to write", async () => {
    const message = await refusal(
      options({ attestors: { [ATTESTOR]: { url: "http://trust.internal:8081" } } }),
      `attestors["proto-trust"].url`,
    );
    assert.ok(
      message.includes(`attestors: { "proto-trust": { url: "http://trust.internal:8081", allowHttp: true } }`),
      message,
    );
    assert.match(message, /^attestors\["proto-trust"\]\.url http:\/\/trust\.internal:8081 must be https/);
    const kit = await createKit(
      options({ attestors: { [ATTESTOR]: { url: "http://trust.internal:8081", allowHttp: true } } }),
    );
    assert.equal(kit.attestors.get(ATTESTOR)?.allowHttp, true);
    await kit.close();
  });

  test("an attestor URL that does not parse is named, not a TypeError", async () => {
    const message = await refusal(
      options({ attestors: { [ATTESTOR]: { url: "trust.example" } } }),
      `attestors["proto-trust"].url`,
    );
    assert.match(message, /is not an absolute URL/);
  });
});

describe("createKit: a did:web with a port", () => {
  test("did:web:localhost:18103 is refused with the DID that names the host (the port written %3A)", async () => {
    const message = await refusal(
      options({ publicUrl: "https://localhost:18103", discovery: { service_did: "did:web:localhost:18103" } }),
      "discovery",
    );
    assert.match(message, /service_did did:web:localhost:18103 does not name the host of https:\/\/localhost:18103/);
    assert.ok(message.includes("the did:web of that host is did:web:localhost%3A18103"), message);
    assert.match(message, /writes the port's colon as %3A/);
    const kit = await createKit(
      options({ publicUrl: "https://localhost:18103", discovery: { service_did: "did:web:localhost%3A18103" } }),
    );
    assert.equal(kit.serviceDid, "did:web:localhost%3A18103");
    await kit.close();
  });

  test("another host entirely: the message gives that host's DID", async () => {
    const message = await refusal(options({ discovery: { service_did: "did:web:other.example" } }), "discovery");
    assert.ok(message.includes("the did:web of that host is did:web:notes.example"), message);
    assert.doesNotMatch(message, /%3A/);
  });
});
