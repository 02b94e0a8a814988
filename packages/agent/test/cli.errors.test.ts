/**
 * Bad input and failures: each ends with one line on stderr (`proto: code: message`, no stack
 * trace) and a documented non-zero exit code. Also the loopback-callback link flow, which the
 * revoked-binding case uses to link its agent.
 */
import assert from "node:assert/strict";
import { chmodSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { createTestCA, startHttpsHost } from "@proto/testkit";
import { nextStepFor } from "../src/cli/output.js";
import {
  type CliResult,
  closedPort,
  jsonOf,
  runCli,
  startCli,
  startTestEnv,
  type TestEnv,
  tempHome,
} from "./support/env.js";

/**
 * One line on stderr, in the CLI's error format, with this code; for a final refusal, one more
 * saying what to do next.
 */
function assertOneLineError(result: CliResult, exitCode: number, code: string): string {
  assert.equal(result.code, exitCode, `exit code\nstdout: ${result.stdout}\nstderr: ${result.stderr}`);
  const lines = result.stderr.split("\n").filter((line) => line !== "");
  const next = nextStepFor(code);
  assert.equal(lines.length, next === undefined ? 1 : 2, `stderr lines:\n${result.stderr}`);
  if (next !== undefined) assert.equal(lines[1], `proto: ${next}`);
  const line = lines[0] ?? "";
  assert.match(line, new RegExp(`^proto: ${code}: \\S`));
  assert.doesNotMatch(result.stderr, /\n\s+at /, "no stack trace");
  return line;
}

describe("proto CLI, failures", () => {
  let env: TestEnv;
  const homes = { linked: "", fresh: "", suspended: "" };
  const cli = (home: string, ...args: string[]) => runCli(args, { home, caFile: env.caFile });

  before(async () => {
    env = await startTestEnv();
    homes.linked = tempHome();
    homes.fresh = tempHome();
    for (const home of Object.values(homes)) assert.equal((await cli(home, "init")).code, 0);
  });
  after(() => env.close());

  test("usage errors: exit 2", async () => {
    assertOneLineError(
      await cli(homes.fresh, "trust", "token", "not-a-did", "--attestor", env.trustUrl),
      2,
      "invalid_aud",
    );
    assertOneLineError(await cli(homes.fresh, "trust", "token", "did:web:x.example"), 2, "no_attestor");
    assertOneLineError(await cli(homes.fresh, "call", "http://localhost:1/x"), 2, "insecure_url");
    assertOneLineError(
      await cli(homes.fresh, "trust", "link", "--attestor", "http://attestor.example"),
      2,
      "insecure_url",
    );
    assertOneLineError(await cli(homes.fresh, "directory", "list"), 2, "no_directory");
    assertOneLineError(
      await cli(homes.fresh, "directory", "register", "https://localhost/proto", "--directory", env.directoryUrl),
      2,
      "invalid_url",
    );
    assertOneLineError(await cli(homes.fresh, "whoami", "--bogus"), 2, "usage");
    // A service's URL stands for the MCP endpoint its discovery document names; this one names none.
    assert.equal(
      assertOneLineError(await cli(homes.fresh, "mcp", env.site.origin), 2, "no_mcp_endpoint"),
      `proto: no_mcp_endpoint: ${env.site.discoveryUrl} names no MCP endpoint (its mcp.url): give the MCP server's own URL`,
    );
    // With --json the error is also the stdout document.
    const json = await cli(homes.fresh, "trust", "token", "not-a-did", "--attestor", env.trustUrl, "--json");
    assert.equal(jsonOf(json).error.code, "invalid_aud");
  });

  test("unreachable attestor: exit 3", async () => {
    const port = await closedPort();
    const result = await cli(homes.fresh, "trust", "link", "--attestor", `https://127.0.0.1:${port}`, "--no-browser");
    const line = assertOneLineError(result, 3, "unreachable");
    assert.equal(line, `proto: unreachable: cannot reach https://127.0.0.1:${port}: connection refused`);
  });

  test("a service whose CA this process does not trust: exit 3, one line naming NODE_EXTRA_CA_CERTS", async () => {
    // A host under a CA of its own: the CLI trusts the environment's test CA only.
    const untrusted = await startHttpsHost({ ca: await createTestCA(), hostnames: ["localhost"] });
    try {
      untrusted.serveDiscovery(env.site.document());
      const origin = untrusted.origin();
      const result = await cli(homes.fresh, "call", `${origin}/proto/v1/hello`, "--attestor", env.trustUrl);
      const line = assertOneLineError(result, 3, "tls_error");
      assert.equal(
        line,
        `proto: tls_error: cannot reach ${origin}: the server's TLS certificate is not trusted (UNABLE_TO_VERIFY_LEAF_SIGNATURE); if it comes from a development CA, point NODE_EXTRA_CA_CERTS at its PEM (npm run dev: data/dev-ca/ca.pem)`,
      );
    } finally {
      await untrusted.close();
    }
  });

  test("malformed discovery document on call: exit 6", async () => {
    const result = await cli(homes.fresh, "call", `${env.broken.origin()}/proto/v1/hello`, "--attestor", env.trustUrl);
    const line = assertOneLineError(result, 6, "discovery_invalid");
    assert.match(line, /missing required field endpoints\.accounts/);
    assert.match(line, /missing required field signature_algorithms/);
  });

  test("call to an attested_only service by an agent that is not linked: exit 4", async () => {
    // The attestation is minted before the request goes out; the attestor refuses the unlinked DID.
    const result = await cli(homes.fresh, "call", `${env.site.origin}/proto/v1/hello`, "--attestor", env.trustUrl);
    assertOneLineError(result, 4, "unauthorized");
  });

  test("link through the loopback callback, then a revoked binding on trust token: exit 4", async () => {
    const running = startCli(["trust", "link", "--attestor", env.trustUrl, "--callback"], {
      home: homes.linked,
      caFile: env.caFile,
    });
    const linkLine = await running.line("stdout", (line) => line.includes("/link?req="));
    const reqId = decodeURIComponent(/\/link\?req=([^\s&]+)/.exec(linkLine)?.[1] ?? "");
    assert.match(reqId, /^lr_/);
    const waiting = await running.line("stdout", (line) => line.includes("/callback"));
    const callbackUrl = /http:\/\/127\.0\.0\.1:\d+\/callback/.exec(waiting)?.[0];
    assert.ok(callbackUrl, waiting);
    const confirmed = await env.trustHook("/__test/link/confirm", { req_id: reqId, email: "bob@example.com" });
    assert.equal(confirmed.status, 200);
    // What the link page does after confirmation: redirect the browser to the callback.
    const stray = await fetch(`${callbackUrl}?req_id=lr_other&state=confirmed&binding_id=x`);
    assert.equal(stray.status, 400);
    const landing = await fetch(
      `${callbackUrl}?req_id=${encodeURIComponent(reqId)}&state=confirmed&binding_id=${String(confirmed.json.binding_id)}`,
    );
    assert.equal(landing.status, 200);
    assert.match(await landing.text(), /Agent linked/);
    const linked = await running.done;
    assert.equal(linked.code, 0, linked.stderr);
    // Human output: the link URL and a QR code in the terminal, then the result.
    assert.match(linked.stdout, /[▀▄█]/);
    assert.match(linked.stdout, new RegExp(`binding ${String(confirmed.json.binding_id)} at `));
    assert.doesNotMatch(linked.stdout, /Waiting for confirmation\.\.\./, "no repeated polling in callback mode");

    const status = jsonOf(await cli(homes.linked, "trust", "status", "--json"));
    assert.equal(status.binding.binding_id, confirmed.json.binding_id);

    // A service's error answer is printed (status and body), its code on one stderr line, exit 1.
    const missing = await cli(homes.linked, "call", `${env.site.origin}/nope`, "--json");
    assertOneLineError(missing, 1, "http_404");
    assert.equal(jsonOf(missing).status, 404);
    assert.equal(jsonOf(missing).attested, true);

    const revoked = await env.trustHook("/__test/bindings/revoke", { binding_id: String(confirmed.json.binding_id) });
    assert.equal(revoked.status, 200);
    // The call above cached a token for the site; a new audience needs a mint, which is refused.
    const token = await cli(homes.linked, "trust", "token", "did:web:other.example", "--json");
    const line = assertOneLineError(token, 4, "binding_revoked");
    assert.match(line, /revoked/);
    assert.deepEqual(Object.keys(jsonOf(token).error).sort(), ["code", "message", "status"]);
    assert.equal(jsonOf(token).error.status, 403);
    assert.equal(jsonOf(await cli(homes.linked, "trust", "status", "--json")).state, "revoked");
    // Once the attestor said so, the cached tokens of that binding are dropped too.
    assertOneLineError(await cli(homes.linked, "trust", "token", env.site.did), 4, "binding_revoked");
  });

  test("a service suspended on /account: exit 4 with a line naming it; other services go on; restored, it works", async () => {
    const running = startCli(["trust", "link", "--attestor", env.trustUrl, "--label", "suspended agent", "--json"], {
      home: homes.suspended,
      caFile: env.caFile,
    });
    const started = JSON.parse(await running.line("stderr", (line) => line.includes('"link_started"')));
    const confirmed = await env.trustHook("/__test/link/confirm", {
      req_id: started.req_id,
      email: "dana@example.com",
    });
    assert.equal(confirmed.status, 200);
    assert.equal((await running.done).code, 0);
    const bindingId = String(confirmed.json.binding_id);
    const other = "did:web:other.example";
    const hello = `${env.site.origin}/proto/v1/hello`;
    assert.equal((await cli(homes.suspended, "call", hello)).code, 0);
    assert.equal((await cli(homes.suspended, "trust", "token", other)).code, 0);
    const accepted = env.site.accepted.length;

    // The person suspends the agent for the site (what the account page's button does).
    const suspended = await env.trustHook("/__test/bindings/suspend", { binding_id: bindingId, aud: env.site.did });
    assert.equal(suspended.status, 200, JSON.stringify(suspended.json));

    const token = await cli(homes.suspended, "trust", "token", env.site.did, "--fresh");
    const line = assertOneLineError(token, 4, "service_suspended");
    assert.equal(
      line,
      `proto: service_suspended: the person who linked this agent suspended it for the service ${env.site.did}; no attestation for that service until they restore it on ${env.trustUrl}/account (other services are not affected)`,
    );
    const json = jsonOf(await cli(homes.suspended, "trust", "token", env.site.did, "--fresh", "--json"));
    assert.deepEqual(json.error, {
      code: "service_suspended",
      message: line.replace(/^proto: service_suspended: /, ""),
      status: 403,
    });
    // The refusal dropped the cached token for the site: a call mints, is refused, sends nothing.
    assertOneLineError(await cli(homes.suspended, "call", hello), 4, "service_suspended");
    assert.equal(env.site.accepted.length, accepted, "the site received nothing");
    // Other services keep minting, and the binding is still active.
    assert.equal((await cli(homes.suspended, "trust", "token", other, "--fresh")).code, 0);
    assert.equal(jsonOf(await cli(homes.suspended, "trust", "status", "--json")).state, "active");

    const restored = await env.trustHook("/__test/bindings/suspend", {
      binding_id: bindingId,
      aud: env.site.did,
      suspended: false,
    });
    assert.equal(restored.status, 200);
    assert.equal(restored.json.suspended_at, null);
    const call = await cli(homes.suspended, "call", hello);
    assert.equal(call.code, 0, call.stderr);
    assert.equal(env.site.accepted.length, accepted + 1);
  });

  test("wrong key file permissions: refused, exit 5", async () => {
    const keyFile = join(homes.linked, "key.json");
    chmodSync(keyFile, 0o644);
    try {
      const line = assertOneLineError(await cli(homes.linked, "trust", "token", env.site.did), 5, "unsafe_permissions");
      assert.match(line, /mode 0644.*chmod 600/);
      assertOneLineError(await cli(homes.linked, "whoami", "--json"), 5, "unsafe_permissions");
    } finally {
      chmodSync(keyFile, 0o600);
    }
    assert.equal((await cli(homes.linked, "whoami")).code, 0);
  });

  // Last: it moves the attestor's clock 30 minutes ahead, past the freshness of local signatures.
  test("expired link request while the CLI polls: exit 4", async () => {
    const running = startCli(["trust", "link", "--attestor", env.trustUrl, "--json"], {
      home: homes.fresh,
      caFile: env.caFile,
    });
    const started = JSON.parse(await running.line("stderr", (line) => line.includes('"link_started"')));
    await running.line("stderr", (line) => line.includes('"waiting"'));
    const clock = await env.trustHook("/__test/clock", { advance_seconds: 1801 });
    assert.equal(clock.status, 200);
    const result = await running.done;
    const stderr = result.stderr
      .split("\n")
      .filter((line) => line !== "" && !line.startsWith("{"))
      .join("\n");
    assertOneLineError({ ...result, stderr }, 4, "link_request_expired");
    assert.equal(jsonOf(result).error.code, "link_request_expired");
    assert.equal(jsonOf(result).error.status, 410);
    assert.match(started.req_id, /^lr_/);
  });
});
