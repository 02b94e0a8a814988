/**
 * Several attestors per agent (rule 10 of upstream.md), through the `proto` command against two
 * real attestors: one binding per attestor, each attestor's iss learned from its first token,
 * per service the binding whose iss `billing.accepted_attestors` lists, `--attestor` (URL or
 * iss) overriding, a local error naming both lists when none fits, and no token ever sent to a
 * service that does not accept its iss.
 */
import assert from "node:assert/strict";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import {
  type Attestor,
  type CliResult,
  closedPort,
  jsonOf,
  runCli,
  startCli,
  startTestEnv,
  type TestEnv,
  tempHome,
} from "./support/env.js";

/** Exactly one line on stderr, in the CLI's error format, with this code. */
function oneLineError(result: CliResult, exitCode: number, code: string): string {
  assert.equal(result.code, exitCode, `exit code\nstdout: ${result.stdout}\nstderr: ${result.stderr}`);
  const lines = result.stderr.split("\n").filter((line) => line !== "");
  assert.equal(lines.length, 1, `one stderr line expected, got:\n${result.stderr}`);
  assert.match(lines[0] ?? "", new RegExp(`^proto: ${code}: \\S`));
  return lines[0] ?? "";
}

describe("several attestors per agent", () => {
  let env: TestEnv;
  let second: Attestor;
  let home: string;
  let did: string;
  const cli = (...args: string[]) => runCli(args, { home, caFile: env.caFile });
  const trustFile = () => JSON.parse(readFileSync(join(home, "trust.json"), "utf8"));
  const bindingAt = (url: string) =>
    trustFile().bindings.find((b: { base_url: string }) => b.base_url.replace(/\/$/, "") === url);
  /** The site answers with this `billing` from now on. */
  const accepting = (accepted: string[]) =>
    env.site.host.serveDiscovery(
      env.site.document({ billing: { unclaimed_mode: "attested_only", accepted_attestors: accepted } }),
    );
  const hello = () => `${env.site.origin}/proto/v1/hello`;

  async function link(attestor: { url: string; hook: Attestor["hook"] }, email: string): Promise<void> {
    const running = startCli(["trust", "link", "--attestor", attestor.url, "--json"], { home, caFile: env.caFile });
    const started = JSON.parse(await running.line("stderr", (line) => line.includes('"link_started"')));
    await running.line("stderr", (line) => line.includes('"waiting"'));
    assert.equal((await attestor.hook("/__test/link/confirm", { req_id: started.req_id, email })).status, 200);
    const result = await running.done;
    assert.equal(result.code, 0, result.stderr);
  }

  before(async () => {
    env = await startTestEnv();
    second = await env.startAttestor();
    home = tempHome();
    did = jsonOf(await cli("init", "--json")).did;
  });
  after(async () => {
    await env.close();
  });

  test("trust link adds one binding per attestor; trust status lists them, iss not learned yet", async () => {
    await link({ url: env.trustUrl, hook: env.trustHook }, "alice@example.com");
    await link(second, "alice@example.com");
    // Linking the same attestor again replaces its binding in place.
    await link(second, "alice@example.com");
    const status = jsonOf(await cli("trust", "status", "--json"));
    assert.deepEqual(
      status.bindings.map((b: { attestor_url: string; iss: string | null; state: string; default: boolean }) => [
        b.attestor_url,
        b.iss,
        b.state,
        b.default,
      ]),
      [
        [env.trustUrl, null, "active", false],
        [second.url, null, "active", true],
      ],
    );
    assert.equal(status.attestor_url, second.url, "the attestor linked last is the default");

    const human = await cli("trust", "status");
    assert.equal(human.code, 0, human.stderr);
    const lines = human.stdout.split("\n");
    assert.match(lines[2] ?? "", /^ATTESTOR {2,}ISS {2,}BINDING {2,}STATE {2,}LAPSES$/);
    assert.match(
      lines[3] ?? "",
      new RegExp(`^${env.trustUrl} {2,}\\(not learned yet\\) {2,}bnd_\\S+ {2,}active {2,}20`),
    );
    assert.match(lines[4] ?? "", new RegExp(`^${second.url} \\* {2,}\\(not learned yet\\) {2,}bnd_\\S+ {2,}active`));
  });

  test("a service gets a token from an attestor whose iss it lists; --attestor overrides", async () => {
    accepting(["proto-trust"]);
    // Neither iss is known: the default attestor mints first, and its token fits.
    const call = await cli("call", hello(), "--json");
    assert.equal(call.code, 0, call.stderr);
    assert.deepEqual([jsonOf(call).status, jsonOf(call).attested], [200, true]);
    assert.equal(env.site.accepted.at(-1)?.attestor, second.url);
    assert.equal(bindingAt(second.url).iss, "proto-trust", "learned from the first token");
    assert.equal(bindingAt(env.trustUrl).iss, undefined);

    const minted = jsonOf(await cli("trust", "token", env.site.did, "--attestor", env.trustUrl, "--json"));
    assert.deepEqual([minted.iss, minted.attestor_url, minted.cached], ["proto-trust", env.trustUrl, false]);
    assert.equal(bindingAt(env.trustUrl).iss, "proto-trust");

    const explicit = await cli("call", hello(), "--attestor", env.trustUrl, "--json");
    assert.equal(explicit.code, 0, explicit.stderr);
    assert.equal(env.site.accepted.at(-1)?.attestor, env.trustUrl);
    // By iss: a linked attestor with that iss (the default first).
    const byIss = await cli("call", hello(), "--attestor", "proto-trust", "--json");
    assert.equal(byIss.code, 0, byIss.stderr);
    assert.equal(env.site.accepted.at(-1)?.attestor, second.url);
  });

  test("no attestor fits: one local error naming both lists, before anything is minted or sent", async () => {
    accepting(["afauth-trust", "acme-attestor"]);
    const served = env.site.accepted.length;
    const trustBefore = readFileSync(join(home, "trust.json"), "utf8");
    const tokensBefore = readFileSync(join(home, "tokens.json"), "utf8");

    const line = oneLineError(await cli("call", hello()), 4, "attestor_not_accepted");
    assert.equal(
      line,
      `proto: attestor_not_accepted: ${env.site.did} accepts attestations from afauth-trust, acme-attestor; ` +
        `this agent's attestors: proto-trust (${second.url}), proto-trust (${env.trustUrl}). ` +
        "Link one it accepts with `proto trust link --attestor URL`",
    );
    // An explicit attestor whose iss the service does not list is refused the same way.
    oneLineError(await cli("call", hello(), "--attestor", env.trustUrl), 4, "attestor_not_accepted");
    const json = await cli("call", hello(), "--json");
    assert.equal(jsonOf(json).error.code, "attestor_not_accepted");

    assert.equal(env.site.accepted.length, served, "nothing reached the service");
    assert.equal(readFileSync(join(home, "trust.json"), "utf8"), trustBefore, "no mint slid a binding");
    assert.equal(readFileSync(join(home, "tokens.json"), "utf8"), tokensBefore, "no token minted");
  });

  test("--attestor by iss: an iss no linked attestor has is a usage error naming the known ones", async () => {
    const token = await cli("trust", "token", env.site.did, "--attestor", "proto-trust", "--json");
    assert.equal(token.code, 0, token.stderr);
    assert.equal(jsonOf(token).iss, "proto-trust");
    const line = oneLineError(
      await cli("trust", "token", env.site.did, "--attestor", "afauth-trust"),
      2,
      "unknown_attestor",
    );
    assert.match(line, /no linked attestor has iss "afauth-trust" \(linked: proto-trust\): give its URL/);
  });

  test("a binding an upstream client wrote at another attestor is chosen by its iss, and only then", async () => {
    const elsewhere = `https://127.0.0.1:${await closedPort()}`;
    const file = trustFile();
    file.bindings.push({
      base_url: `${elsewhere}/`,
      agent_did: did,
      binding_id: "bnd_elsewhere",
      binding_token_expires_at: Math.floor(Date.now() / 1000) + 86400,
      iss: "afauth-trust",
    });
    writeFileSync(join(home, "trust.json"), JSON.stringify(file), { mode: 0o600 });

    accepting(["afauth-trust"]);
    const served = env.site.accepted.length;
    // That attestor is down here: the error shows the agent went to it, and to no other.
    const line = oneLineError(await cli("call", hello()), 3, "unreachable");
    assert.equal(line, `proto: unreachable: cannot reach ${elsewhere}: connection refused`);
    assert.equal(env.site.accepted.length, served);

    accepting(["proto-trust", "afauth-trust"]);
    assert.equal((await cli("call", hello())).code, 0);
    accepting(["proto-trust"]);
    assert.equal((await cli("call", hello())).code, 0);
    assert.equal(env.site.accepted.length, served + 2);
    const status = jsonOf(await cli("trust", "status", "--json"));
    assert.deepEqual(
      status.bindings.map((b: { iss: string }) => b.iss),
      ["proto-trust", "proto-trust", "afauth-trust"],
    );
  });

  test("a token whose iss the service does not list is never sent, and its iss is learned", async () => {
    // The file says the second attestor is `afauth-trust`; its tokens say `proto-trust`.
    const file = trustFile();
    file.bindings = file.bindings.filter((b: { binding_id: string }) => b.binding_id !== "bnd_elsewhere");
    for (const binding of file.bindings) if (binding.base_url === second.url) binding.iss = "afauth-trust";
    writeFileSync(join(home, "trust.json"), JSON.stringify(file), { mode: 0o600 });
    rmSync(join(home, "tokens.json"));

    accepting(["afauth-trust"]);
    const served = env.site.accepted.length;
    const line = oneLineError(await cli("call", hello()), 4, "attestor_not_accepted");
    assert.equal(
      line,
      `proto: attestor_not_accepted: ${second.url} issued a token with iss proto-trust, and ${env.site.did} ` +
        "accepts attestations from afauth-trust only: the token was not sent",
    );
    assert.equal(env.site.accepted.length, served, "the token never reached the service");
    assert.equal(bindingAt(second.url).iss, "proto-trust", "the attestor's own iss replaces the file's");
    accepting(["proto-trust"]);
  });
});
