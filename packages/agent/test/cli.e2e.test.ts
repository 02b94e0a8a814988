/**
 * The `proto` command end to end, as a child process, against the real attestor and directory
 * (in this process, test hooks on, over HTTPS) and a local HTTPS service that verifies the
 * request signature and the attestation against the attestor's live key set.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { writeProofFile } from "../src/index.js";
import { jsonOf, runCli, startCli, startTestEnv, type TestEnv, tempHome } from "./support/env.js";

describe("proto CLI, happy path", () => {
  let env: TestEnv;
  let home: string;
  const cli = (...args: string[]) => runCli(args, { home, caFile: env.caFile });

  before(async () => {
    env = await startTestEnv();
    home = tempHome();
  });
  after(() => env.close());

  test("init creates a 0600 key file in a 0700 home; whoami and keys export read it", async () => {
    const created = await cli("init", "--json");
    assert.equal(created.code, 0, created.stderr);
    const doc = jsonOf(created);
    assert.equal(doc.created, true);
    assert.match(doc.did, /^did:key:z6Mk/);
    assert.equal(statSync(join(home, "key.json")).mode & 0o777, 0o600);
    assert.equal(statSync(home).mode & 0o777, 0o700);

    const again = await cli("init", "--json");
    assert.equal(jsonOf(again).created, false);
    assert.equal(jsonOf(again).did, doc.did);

    const whoami = await cli("whoami");
    assert.equal(whoami.code, 0);
    assert.match(whoami.stdout, new RegExp(`^${doc.did}$`, "m"));

    const exported = jsonOf(await cli("keys", "export", "--json"));
    assert.equal(exported.did, doc.did);
    assert.equal(exported.private_key_b64, undefined);
    const withPrivate = jsonOf(await cli("keys", "export", "--private", "--json"));
    assert.match(withPrivate.private_key_b64, /^[A-Za-z0-9_-]{43}$/);
  });

  test("trust link: confirmed through the test hook while the CLI polls", async () => {
    const running = startCli(["trust", "link", "--attestor", env.trustUrl, "--label", "e2e agent", "--json"], {
      home,
      caFile: env.caFile,
    });
    const started = JSON.parse(await running.line("stderr", (line) => line.includes('"link_started"')));
    assert.match(started.req_id, /^lr_/);
    assert.ok(started.link_url.startsWith(`${env.trustUrl}/link?req=`), started.link_url);
    // Wait for the CLI to have polled at least once (pending), then confirm as a person.
    await running.line("stderr", (line) => line.includes('"waiting"'));
    const confirmed = await env.trustHook("/__test/link/confirm", {
      req_id: started.req_id,
      email: "alice@example.com",
    });
    assert.equal(confirmed.status, 200);
    const result = await running.done;
    assert.equal(result.code, 0, result.stderr);
    const linked = jsonOf(result);
    assert.equal(linked.binding_id, confirmed.json.binding_id);
    assert.equal(linked.attestor_url, env.trustUrl);
    // Times in --json documents are ISO 8601.
    assert.match(linked.binding_expires_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.ok(Date.parse(linked.binding_expires_at) > Date.now());
  });

  test("trust token mints for a service DID, then answers from the cache; status shows both", async () => {
    const first = await cli("trust", "token", env.site.did, "--json");
    assert.equal(first.code, 0, first.stderr);
    const minted = jsonOf(first);
    assert.equal(minted.cached, false);
    assert.equal(minted.aud, env.site.did);
    assert.equal(minted.verification, "email");
    assert.equal(minted.jwt.split(".").length, 3);

    const second = jsonOf(await cli("trust", "token", env.site.did, "--json"));
    assert.equal(second.cached, true);
    assert.equal(second.jwt, minted.jwt);

    // Human output: the bare token on stdout, for $(proto trust token ...).
    const plain = await cli("trust", "token", env.site.did);
    assert.equal(plain.stdout, `${minted.jwt}\n`);

    const status = jsonOf(await cli("trust", "status", "--json"));
    assert.equal(status.state, "active");
    assert.match(status.binding.binding_id, /^bnd_/);
    assert.deepEqual(
      status.tokens.map((t: { aud: string }) => t.aud),
      [env.site.did],
    );
    const tokensFile = join(home, "tokens.json");
    assert.equal(statSync(tokensFile).mode & 0o777, 0o600);
  });

  test("call: a signed, attested request to an attested_only service", async () => {
    const result = await cli("call", `${env.site.origin}/proto/v1/hello?x=1`, "--data", '{"hello":"world"}', "--json");
    assert.equal(result.code, 0, result.stderr);
    const doc = jsonOf(result);
    assert.equal(doc.status, 200);
    assert.equal(doc.attested, true);
    assert.equal(doc.service_did, env.site.did);
    assert.equal(doc.body.verification, "email");
    assert.equal(doc.body.echo, '{"hello":"world"}');
    const accepted = env.site.accepted.at(-1);
    assert.equal(accepted?.attested, true);
    assert.equal(accepted?.keyid, jsonOf(await cli("whoami", "--json")).did);

    const human = await cli("call", `${env.site.origin}/proto/v1/hello`, "-H", "X-Trace: 1");
    assert.equal(human.code, 0, human.stderr);
    assert.match(human.stdout, /^HTTP 200 OK\n\{"agent":"did:key:/);
  });

  test("call --endpoint: the endpoint the discovery document names, absolute and on another host", async () => {
    const result = await cli("call", env.split.origin, "--endpoint", "accounts/me", "--json");
    assert.equal(result.code, 0, result.stderr);
    const doc = jsonOf(result);
    assert.equal(doc.url, `${env.splitApi.origin}/proto/v1/accounts/me`);
    assert.equal(doc.status, 200);
    assert.equal(doc.attested, true);
    assert.equal(doc.service_did, env.split.did);
    assert.equal(doc.body.verification, "email");
    assert.equal(env.splitApi.accepted.at(-1)?.attested, true);

    // An absolute endpoint on the discovery host; the URL given names the service only.
    const invited = await cli(
      "call",
      `${env.split.origin}/somewhere?else=1`,
      "-e",
      "owner_invitation",
      "-d",
      '{"x":1}',
    );
    assert.equal(invited.code, 0, invited.stderr);
    assert.match(invited.stdout, /^HTTP 200 OK\n/);
    assert.equal(env.split.accepted.at(-1)?.body, '{"x":1}');

    const unknown = await cli("call", env.split.origin, "--endpoint", "key_rotation");
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /^proto: unknown_endpoint: .*"key_rotation"/m);
  });

  test("directory register (--proof-dir) → update → list --search → show → withdraw", async () => {
    const register = await cli(
      "directory",
      "register",
      env.site.discoveryUrl,
      "--directory",
      env.directoryUrl,
      "--proof-dir",
      env.site.proofDir,
      "--title",
      "Widget service",
      "--description",
      "Sells widgets to agents",
      "--tag",
      "widgets",
      "--tag",
      "shop",
      "--json",
    );
    assert.equal(register.code, 0, register.stderr);
    const registered = jsonOf(register);
    assert.equal(registered.service_did, env.site.did);
    assert.equal(registered.created, true);
    // The proof file holds exactly the token bytes, no newline; the session file is private.
    const proof = readFileSync(join(env.site.proofDir, ".well-known", "proto-registry-proof"), "utf8");
    assert.match(proof, /^ch_[A-Za-z0-9_-]{22}$/);
    assert.equal(statSync(registered.session_file).mode & 0o777, 0o600);
    assert.ok(!readFileSync(registered.session_file, "utf8").includes("\n\n"));

    // The directory URL was saved: later commands need no --directory.
    const update = await cli("directory", "update", env.site.did, "--title", "Widget service v2", "--json");
    assert.equal(update.code, 0, update.stderr);
    assert.equal(jsonOf(update).title, "Widget service v2");
    assert.deepEqual(jsonOf(update).tags, ["widgets", "shop"]);

    const list = await cli("directory", "list", "--search", "WIDGET", "--json");
    assert.equal(list.code, 0, list.stderr);
    assert.deepEqual(
      jsonOf(list).listings.map((l: { service_did: string }) => l.service_did),
      [env.site.did],
    );
    const none = jsonOf(await cli("directory", "list", "--search", "gadget", "--json"));
    assert.deepEqual(none.listings, []);
    const human = await cli("directory", "list", "--tag", "shop");
    assert.match(human.stdout, /^active {2}did:web:localhost%3A\d+ {2}Widget service v2 {2}\[widgets, shop\]$/m);

    const show = jsonOf(await cli("directory", "show", env.site.did, "--json"));
    assert.equal(show.discovery_url, env.site.discoveryUrl);

    const withdraw = await cli("directory", "withdraw", env.site.did, "--json");
    assert.equal(withdraw.code, 0, withdraw.stderr);
    assert.equal(jsonOf(withdraw).withdrawn, true);
    assert.equal(existsSync(registered.session_file), false);
    assert.equal(jsonOf(await cli("directory", "show", env.site.did, "--json")).status, "deleted");
    const active = jsonOf(await cli("directory", "list", "--search", "widget", "--json"));
    assert.deepEqual(active.listings, []);
  });

  test("directory register without --proof-dir: prints what to publish, then --submit", async () => {
    const pending = await cli("directory", "register", env.site.discoveryUrl, "--title", "Widgets again");
    assert.equal(pending.code, 0, pending.stderr);
    const token = /^ {2}(ch_[A-Za-z0-9_-]{22})$/m.exec(pending.stdout)?.[1];
    assert.ok(token, pending.stdout);
    assert.match(
      pending.stdout,
      /Publish the challenge token at https:\/\/localhost:\d+\/\.well-known\/proto-registry-proof/,
    );
    assert.match(
      pending.stdout,
      /Then run: proto directory register https:\/\/localhost:\d+\/\.well-known\/proto --submit/,
    );
    // The host controller publishes it (here: the folder the site serves), then submits.
    writeProofFile(env.site.proofDir, token);
    const submitted = await cli("directory", "register", env.site.discoveryUrl, "--submit", "--json");
    assert.equal(submitted.code, 0, submitted.stderr);
    // A withdrawn listing registered again from the same host is the re-challenge path (200).
    assert.equal(jsonOf(submitted).created, false);
    const listing = jsonOf(await cli("directory", "show", env.site.did, "--json"));
    assert.deepEqual([listing.status, listing.title], ["active", "Widgets again"]);
    const again = await cli("directory", "register", env.site.discoveryUrl, "--submit");
    assert.equal(again.code, 2);
    assert.match(again.stderr, /^proto: no_pending_challenge: /);
  });

  test("keys rotate archives the old key; the new DID must link again", async () => {
    const before = jsonOf(await cli("whoami", "--json")).did;
    const rotated = await cli("keys", "rotate", "--json");
    assert.equal(rotated.code, 0, rotated.stderr);
    const doc = jsonOf(rotated);
    assert.equal(doc.previous_did, before);
    assert.notEqual(doc.did, before);
    assert.equal(statSync(doc.archived_to).mode & 0o777, 0o600);
    assert.equal(JSON.parse(readFileSync(doc.archived_to, "utf8")).did_key, before);
    const status = jsonOf(await cli("trust", "status", "--json"));
    assert.equal(status.state, "not_linked");
    assert.deepEqual(status.tokens, []);
    const token = await cli("trust", "token", env.site.did);
    assert.equal(token.code, 4);
    assert.match(token.stderr, /^proto: unauthorized: .+\n$/);
  });
});
