/**
 * The agent home shared with upstream clients (rule 11 of upstream.md, upstream `spec/storage.md`):
 * `key.json` version 1 and `trust.json` version 2 in upstream's layout, read and written exactly
 * (unknown fields kept), 0700/0600; our older files and upstream's `trust.json` version 1
 * migrated once, with a backup. The files are checked against the JSON Schemas in `schemas/`,
 * written from the field lists of upstream's `schemas/key-store.json` and `trust-store.json`.
 */
import assert from "node:assert/strict";
import { generateKeyPairSync, sign } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { encodeDidKey, privateKeyFromSeed, rawPublicKey } from "@proto/protocol";
import { type TestFetch, testFetch } from "@proto/testkit";
import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { Agent, AgentIdentity, AgentStore, KeyStoreError } from "../src/index.js";
import { AGENT_DIR, jsonOf, runCli, startCli, startTestEnv, type TestEnv, tempHome } from "./support/env.js";

const ajv = new Ajv2020({ allErrors: true, strict: true });
addFormats.default(ajv, ["uri"]);
const schema = (name: string) =>
  ajv.compile(JSON.parse(readFileSync(join(AGENT_DIR, "schemas", name), "utf8")) as Record<string, unknown>);
const keySchema = schema("key-store.json");
const trustSchema = schema("trust-store.json");

function assertValid(validate: ValidateFunction, value: unknown, what: string): void {
  assert.ok(validate(value), `${what}: ${ajv.errorsText(validate.errors)}`);
}

const readJson = (path: string) => JSON.parse(readFileSync(path, "utf8"));
const mode = (path: string) => statSync(path).mode & 0o777;

/** A key.json as upstream writes it, from its field list, with a fresh Ed25519 key. */
function upstreamKey() {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const seed = Buffer.from(privateKey.export({ format: "jwk" }).d ?? "", "base64url");
  const raw = Buffer.from(publicKey.export({ format: "jwk" }).x ?? "", "base64url");
  const file = {
    version: 1,
    algorithm: "ed25519",
    did_key: encodeDidKey(new Uint8Array(raw)),
    public_key_hex: raw.toString("hex"),
    private_key_seed_hex: seed.toString("hex"),
  };
  return { file, privateKey };
}

describe("the agent home in upstream's layout", () => {
  let env: TestEnv;
  let fetch: TestFetch;

  before(async () => {
    env = await startTestEnv();
    fetch = testFetch(env.ca);
  });
  after(async () => {
    await fetch.close();
    await env.close();
  });

  test("a home written by an upstream client is loaded and mints; unknown fields are kept", async () => {
    const { file: key, privateKey } = upstreamKey();
    // Linked the way an upstream client links: start, the person confirms, the poll signed over req_id.
    const post = async (path: string, body: unknown) => {
      const response = await fetch(`${env.trustUrl}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      assert.equal(response.status, 200, path);
      return (await response.json()) as Record<string, unknown>;
    };
    const start = await post("/v1/link/start", {
      agent_did: key.did_key,
      agent_pubkey_b64: Buffer.from(key.public_key_hex, "hex").toString("base64url"),
    });
    const reqId = String(start.req_id);
    assert.equal(
      (await env.trustHook("/__test/link/confirm", { req_id: reqId, email: "dana@example.com" })).status,
      200,
    );
    const poll = await post("/v1/link/poll", {
      req_id: reqId,
      sig_b64: sign(null, Buffer.from(reqId), privateKey).toString("base64url"),
    });
    assert.equal(poll.state, "confirmed");

    const home = tempHome();
    mkdirSync(home, { recursive: true, mode: 0o700 });
    const keyText = `${JSON.stringify({ ...key, written_by: "upstream client" }, null, 2)}\n`;
    writeFileSync(join(home, "key.json"), keyText, { mode: 0o600 });
    const trust = {
      version: 2,
      bindings: [
        {
          base_url: `${env.trustUrl}/`,
          agent_did: key.did_key,
          binding_id: poll.binding_id,
          binding_token_expires_at: poll.binding_token_expires_at,
          client_note: { pinned: true },
        },
      ],
      written_by: "upstream client",
    };
    assertValid(keySchema, key, "upstream key.json");
    assertValid(trustSchema, trust, "upstream trust.json");
    writeFileSync(join(home, "trust.json"), JSON.stringify(trust, null, 2), { mode: 0o600 });

    // No config.json: the attestor is the one the key is linked to.
    const cli = (...args: string[]) => runCli(args, { home, caFile: env.caFile });
    assert.equal(jsonOf(await cli("whoami", "--json")).did, key.did_key);
    const call = await cli("call", `${env.site.origin}/proto/v1/hello`, "--json");
    assert.equal(call.code, 0, call.stderr);
    assert.deepEqual(
      [jsonOf(call).status, jsonOf(call).attested, jsonOf(call).body.verification],
      [200, true, "email"],
    );
    assert.equal(env.site.accepted.at(-1)?.keyid, key.did_key);
    const token = await cli("trust", "token", "did:web:other.example", "--json");
    assert.equal(token.code, 0, token.stderr);

    assert.equal(readFileSync(join(home, "key.json"), "utf8"), keyText, "the key file is not rewritten");
    const after = readJson(join(home, "trust.json"));
    assertValid(trustSchema, after, "trust.json after minting");
    assert.equal(after.written_by, "upstream client");
    const [binding] = after.bindings;
    assert.equal(after.bindings.length, 1);
    assert.equal(binding.base_url, `${env.trustUrl}/`, "the binding is updated in place, as written");
    assert.deepEqual(binding.client_note, { pinned: true });
    assert.equal(binding.iss, "proto-trust", "learned from the first token");
    assert.equal(binding.verification, "email");
    assert.ok(Number.isInteger(binding.verification_seen_at));
    assert.ok(binding.binding_token_expires_at >= Number(poll.binding_token_expires_at));
    assert.equal(mode(join(home, "trust.json")), 0o600);
    assert.deepEqual(
      readdirSync(home).filter((name) => name.endsWith(".tmp")),
      [],
      "atomic writes leave no temporary file",
    );
  });

  test("the files we write validate against upstream's layout, 0600 in a 0700 home", async () => {
    const home = tempHome();
    const cli = (...args: string[]) => runCli(args, { home, caFile: env.caFile });
    assert.equal((await cli("init", "--attestor", env.trustUrl)).code, 0);
    const running = startCli(["trust", "link", "--json"], { home, caFile: env.caFile });
    const started = JSON.parse(await running.line("stderr", (line) => line.includes('"link_started"')));
    await running.line("stderr", (line) => line.includes('"waiting"'));
    await env.trustHook("/__test/link/confirm", { req_id: started.req_id, email: "erin@example.com" });
    assert.equal((await running.done).code, 0);
    assert.equal((await cli("trust", "token", env.site.did)).code, 0);

    const key = readJson(join(home, "key.json"));
    assertValid(keySchema, key, "our key.json");
    assert.deepEqual(Object.keys(key), [
      "version",
      "algorithm",
      "did_key",
      "public_key_hex",
      "private_key_seed_hex",
      "created_at",
    ]);
    const publicKey = rawPublicKey(privateKeyFromSeed(new Uint8Array(Buffer.from(key.private_key_seed_hex, "hex"))));
    assert.equal(key.public_key_hex, Buffer.from(publicKey).toString("hex"));
    assert.equal(key.did_key, encodeDidKey(publicKey));

    const trust = readJson(join(home, "trust.json"));
    assertValid(trustSchema, trust, "our trust.json");
    assert.equal(trust.version, 2);
    assert.deepEqual(
      trust.bindings.map((b: Record<string, unknown>) => [b.base_url, b.agent_did, b.iss, b.verification]),
      [[env.trustUrl, key.did_key, "proto-trust", "email"]],
    );
    assert.match(trust.bindings[0].binding_id, /^bnd_/);
    for (const name of ["key.json", "trust.json", "config.json", "tokens.json"]) {
      assert.equal(mode(join(home, name)), 0o600, name);
    }
    assert.equal(mode(home), 0o700);
  });
});

describe("migrating older files", () => {
  const write = (path: string, value: unknown) => writeFileSync(path, JSON.stringify(value, null, 2), { mode: 0o600 });

  test("our older key.json and bindings.json become upstream's, once, the originals kept in legacy/", () => {
    const home = tempHome();
    mkdirSync(home, { recursive: true, mode: 0o700 });
    const identity = AgentIdentity.generate(new Date("2025-01-02T03:04:05.000Z"));
    const secret = identity.exportPrivate();
    const oldKey = {
      version: 1,
      algorithm: "ed25519",
      did: identity.did,
      public_key_b64: identity.publicKeyB64,
      private_key_b64: secret.private_key_b64,
      created_at: identity.createdAt,
    };
    write(join(home, "key.json"), oldKey);
    const record = (attestor: string, agent: string, id: string, updated: string) => ({
      attestor_url: attestor,
      agent_did: agent,
      binding_id: id,
      binding_expires_at: 1_900_000_000,
      state: "active",
      linked_at: "2025-01-02T00:00:00.000Z",
      updated_at: updated,
      verification: "email",
    });
    const older = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";
    write(join(home, "bindings.json"), {
      version: 1,
      bindings: [
        record("https://trust.example", identity.did, "bnd_current", "2025-02-01T00:00:00.000Z"),
        // A later record of an earlier key at the same attestor: the current key's wins.
        record("https://trust.example", older, "bnd_older", "2025-03-01T00:00:00.000Z"),
        record("https://other.example", older, "bnd_other", "2025-03-01T00:00:00.000Z"),
      ],
    });
    const oldKeyText = readFileSync(join(home, "key.json"), "utf8");
    const oldBindingsText = readFileSync(join(home, "bindings.json"), "utf8");

    const agent = Agent.load({ home });
    assert.equal(agent.did, identity.did);
    assert.equal(agent.identity.createdAt, "2025-01-02T03:04:05.000Z");

    const key = readJson(join(home, "key.json"));
    assertValid(keySchema, key, "migrated key.json");
    assert.equal(key.private_key_b64, undefined, "no copy of the secret in the old spelling");
    assert.equal(key.did_key, identity.did);
    assert.equal(key.created_at, "2025-01-02T03:04:05.000Z");
    const trust = readJson(join(home, "trust.json"));
    assertValid(trustSchema, trust, "migrated trust.json");
    assert.deepEqual(
      trust.bindings.map((b: Record<string, unknown>) => [
        b.base_url,
        b.agent_did,
        b.binding_id,
        b.binding_token_expires_at,
      ]),
      [
        ["https://trust.example", identity.did, "bnd_current", 1_900_000_000],
        ["https://other.example", older, "bnd_other", 1_900_000_000],
      ],
    );
    assert.equal(agent.store.getBinding("https://trust.example/", identity.did)?.binding_id, "bnd_current");
    assert.equal(agent.store.getBinding("https://other.example", identity.did), undefined, "orphaned");

    const legacy = join(home, "legacy");
    assert.deepEqual(readdirSync(legacy).sort(), ["bindings.json", "key.json"]);
    assert.equal(readFileSync(join(legacy, "key.json"), "utf8"), oldKeyText);
    assert.equal(readFileSync(join(legacy, "bindings.json"), "utf8"), oldBindingsText);
    assert.equal(mode(join(legacy, "key.json")), 0o600);
    assert.equal(mode(legacy), 0o700);
    assert.deepEqual(readdirSync(home).sort(), ["key.json", "legacy", "trust.json"]);

    // Once: loading again changes nothing.
    const keyText = readFileSync(join(home, "key.json"), "utf8");
    const trustText = readFileSync(join(home, "trust.json"), "utf8");
    assert.equal(Agent.load({ home }).did, identity.did);
    assert.equal(readFileSync(join(home, "key.json"), "utf8"), keyText);
    assert.equal(readFileSync(join(home, "trust.json"), "utf8"), trustText);
    assert.deepEqual(readdirSync(legacy).sort(), ["bindings.json", "key.json"]);
  });

  test("upstream's trust.json version 1 (one binding at the top level) becomes version 2", () => {
    const store = new AgentStore(tempHome());
    const identity = store.createIdentity();
    const v1 = {
      version: 1,
      base_url: "https://trust.example/",
      agent_did: identity.did,
      binding_id: "bnd_v1",
      binding_token_expires_at: 0,
      iss: "proto-trust",
      extra: "kept",
    };
    write(store.trustPath, v1);
    const binding = store.getBinding("https://trust.example", identity.did);
    assert.deepEqual([binding?.binding_id, binding?.iss, binding?.binding_expires_at], ["bnd_v1", "proto-trust", 0]);
    const trust = readJson(store.trustPath);
    assertValid(trustSchema, trust, "migrated v1");
    const { version: _version, ...fields } = v1;
    assert.deepEqual(trust, { version: 2, bindings: [fields] });
    assert.deepEqual(readJson(join(store.legacyDir, "trust.json")), v1);
  });

  test("linking again replaces the attestor's binding in place, keeping its learned iss and unknown fields", () => {
    const store = new AgentStore(tempHome());
    const identity = store.createIdentity();
    write(store.trustPath, {
      version: 2,
      bindings: [
        {
          base_url: "https://trust.example/",
          agent_did: "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
          binding_id: "bnd_old",
          binding_token_expires_at: 1_800_000_000,
          iss: "proto-trust",
          client_note: "kept",
        },
      ],
    });
    store.saveBinding({
      attestor_url: "https://trust.example",
      agent_did: identity.did,
      binding_id: "bnd_new",
      binding_expires_at: 1_900_000_000,
      state: "active",
      linked_at: "2026-01-01T00:00:00.000Z",
      updated_at: "2026-01-01T00:00:00.000Z",
    });
    const [binding, ...rest] = readJson(store.trustPath).bindings;
    assert.deepEqual(rest, []);
    assert.deepEqual(
      [binding.base_url, binding.agent_did, binding.binding_id, binding.iss, binding.client_note],
      ["https://trust.example/", identity.did, "bnd_new", "proto-trust", "kept"],
    );
  });

  test("unknown versions and keys that do not match their seed are refused", () => {
    const store = new AgentStore(tempHome());
    const identity = store.createIdentity();
    const key = readJson(store.keyPath);
    const refuses = (code: string, pattern: RegExp, action: () => unknown) =>
      assert.throws(action, (error: unknown) => {
        assert.ok(error instanceof KeyStoreError);
        assert.equal(error.code, code);
        assert.match(error.message, pattern);
        return true;
      });
    write(store.keyPath, { ...key, version: 2 });
    refuses("invalid_key_file", /unsupported version 2/, () => store.loadIdentity());
    write(store.keyPath, { ...key, did_key: AgentIdentity.generate().did });
    refuses("invalid_key_file", /did_key is not the did:key of public_key_hex/, () => store.loadIdentity());
    write(store.keyPath, { ...key, public_key_hex: "00".repeat(32) });
    refuses("invalid_key_file", /public_key_hex/, () => store.loadIdentity());
    write(store.keyPath, { ...key, private_key_seed_hex: key.private_key_seed_hex.toUpperCase() });
    refuses("invalid_key_file", /64 lowercase hex/, () => store.loadIdentity());
    write(store.keyPath, key);
    assert.equal(store.loadIdentity().did, identity.did);
    write(store.trustPath, { version: 3, bindings: [] });
    refuses("invalid_file", /unsupported version 3/, () => store.listBindings());
  });
});
