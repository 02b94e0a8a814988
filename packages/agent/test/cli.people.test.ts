/**
 * What a person reads from `proto` when things do not go the happy way: a declined link, an
 * unlinked key, a link that replaces another, a revoked link in `trust status`, a private key
 * export, Ctrl-C. The CLI runs as a child process against real attestors: the TLS-fronted one of
 * the test environment, and one on plain `http://127.0.0.1` (as `npm start` runs it) whose link
 * URL a phone cannot open and whose pages a person signs in to, to decline.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { after, before, describe, test } from "node:test";
import { buildTrustApp, readTrustConfig } from "@proto/server";
import { writeProofFile } from "../src/index.js";
import {
  AGENT_DIR,
  type CliResult,
  closedPort,
  jsonOf,
  runCli,
  startCli,
  startTestEnv,
  type TestEnv,
  tempHome,
} from "./support/env.js";

/** The attestor as `npm start` runs it: plain HTTP on this machine, mail in the development outbox. */
async function startLocalAttestor() {
  const port = await closedPort();
  const dir = mkdtempSync(join(tmpdir(), "proto-local-attestor-"));
  const url = `http://127.0.0.1:${port}`;
  const trust = await buildTrustApp(
    readTrustConfig({
      TRUST_PUBLIC_URL: url,
      TRUST_DATABASE_URL: `sqlite:${join(dir, "trust.db")}`,
      TRUST_KEY_ENCRYPTION_KEY: Buffer.alloc(32, 7).toString("base64url"),
      TRUST_PSEUDONYM_KEY: Buffer.alloc(32, 9).toString("base64url"),
      LOG_LEVEL: "warn",
    }),
    {
      logStream: new Writable({
        write(_chunk, _encoding, done) {
          done();
        },
      }),
    },
  );
  await trust.app.listen({ port, host: "127.0.0.1" });
  const outbox = trust.mailer as unknown as { entries: { to: string; text: string }[] };
  return {
    url,
    outbox,
    async close() {
      await trust.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A person's browser without a browser: cookies kept, forms posted, redirects not followed. */
class Person {
  readonly #cookies = new Map<string, string>();
  constructor(readonly base: string) {}

  async send(path: string, form?: Record<string, string>): Promise<{ status: number; text: string }> {
    const headers: Record<string, string> = {};
    if (this.#cookies.size > 0) headers.cookie = [...this.#cookies].map(([k, v]) => `${k}=${v}`).join("; ");
    if (form !== undefined) headers["content-type"] = "application/x-www-form-urlencoded";
    const response = await fetch(path.startsWith("http") ? path : `${this.base}${path}`, {
      method: form === undefined ? "GET" : "POST",
      headers,
      redirect: "manual",
      ...(form === undefined ? {} : { body: new URLSearchParams(form).toString() }),
    });
    for (const line of response.headers.getSetCookie()) {
      const [pair = ""] = line.split(";");
      const eq = pair.indexOf("=");
      this.#cookies.set(pair.slice(0, eq).trim(), pair.slice(eq + 1).trim());
    }
    return { status: response.status, text: await response.text() };
  }
}

function formField(page: string, name: string): string {
  const value = new RegExp(`name="${name}" value="([^"]+)"`).exec(page)?.[1];
  assert.ok(value, `no ${name} field in:\n${page}`);
  return value;
}

/** Signs in by the e-mail link from the development outbox, as a person does. */
async function signIn(person: Person, outbox: { entries: { to: string; text: string }[] }, email: string) {
  const page = await person.send("/signin?next=%2Faccount");
  const sent = await person.send("/signin/email", { _csrf: formField(page.text, "_csrf"), next: "/account", email });
  assert.equal(sent.status, 200, sent.text);
  const token = /\/signin\/email\/verify\?token=(\S+)/.exec(
    outbox.entries.find((m) => m.to === email)?.text ?? "",
  )?.[1];
  assert.ok(token, "the sign-in mail");
  const verify = await person.send(`/signin/email/verify?token=${token}`);
  const signedIn = await person.send("/signin/email/verify", {
    _csrf: formField(verify.text, "_csrf"),
    token: decodeURIComponent(token),
  });
  assert.equal(signedIn.status, 303, signedIn.text);
}

/**
 * `proto ...` on a terminal: `script` gives it a pseudo-terminal (stdin and stdout are TTYs, as
 * for a person at a shell); what it prints is read back, and `input` types at its prompts.
 */
function onTerminal(args: string[], env: Record<string, string>) {
  const quote = (arg: string) => `'${arg.replaceAll("'", "'\\''")}'`;
  const command = [process.execPath, "--conditions=source", "--import", "tsx", join(AGENT_DIR, "src/cli.ts"), ...args]
    .map(quote)
    .join(" ");
  const child = spawn("script", ["-qfec", command, "/dev/null"], {
    cwd: AGENT_DIR,
    env: { ...process.env, NODE_OPTIONS: "", NODE_TEST_CONTEXT: "", TERM: "dumb", ...env },
  });
  let screen = "";
  /** Where the next search starts: after the last match, so each wait reads the screen onward. */
  let cursor = 0;
  const waiters: { pattern: RegExp; resolve: (match: RegExpExecArray) => void }[] = [];
  const check = () => {
    for (const waiter of [...waiters]) {
      const match = waiter.pattern.exec(screen.slice(cursor));
      if (match !== null) {
        cursor += match.index + match[0].length;
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve(match);
      }
    }
  };
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    screen += chunk.replaceAll("\r\n", "\n");
    check();
  });
  const exited = new Promise<number | null>((resolve) => child.once("close", (code) => resolve(code)));
  return {
    exited,
    screen: () => screen,
    /** The next match of `pattern` after the previous wait's. */
    waitFor(pattern: RegExp) {
      return new Promise<RegExpExecArray>((resolve, reject) => {
        // Only a guard against a wedged child, with what it printed; no assertion depends on time.
        const guard = setTimeout(() => reject(new Error(`no ${pattern} within 30 s:\n${screen}`)), 30_000);
        waiters.push({
          pattern,
          resolve: (match) => {
            clearTimeout(guard);
            resolve(match);
          },
        });
        check();
        exited.then((code) => reject(new Error(`exited (${code}) before ${pattern}:\n${screen}`)));
      });
    },
    type(text: string) {
      child.stdin.write(text);
    },
  };
}

/** stderr without the `--json` progress events: the lines a person reads. */
const personLines = (result: CliResult) => result.stderr.split("\n").filter((l) => l !== "" && !l.startsWith("{"));

describe("proto CLI, what a person reads", () => {
  let env: TestEnv;
  let local: Awaited<ReturnType<typeof startLocalAttestor>>;

  before(async () => {
    env = await startTestEnv();
    local = await startLocalAttestor();
  });
  after(async () => {
    await local.close();
    await env.close();
  });

  const cliIn =
    (home: string) =>
    (...args: string[]) =>
      runCli(args, { home, caFile: env.caFile });

  test("keys export --private warns on stderr, with --json too; stdout stays one document", async () => {
    const cli = cliIn(tempHome());
    assert.equal((await cli("init")).code, 0);
    const warning = "warning: this output contains the agent's private key; keep it secret\n";
    const json = await cli("keys", "export", "--private", "--json");
    assert.equal(json.code, 0, json.stderr);
    assert.match(jsonOf(json).private_key_b64, /^[A-Za-z0-9_-]{43}$/);
    assert.equal(json.stderr, warning);
    assert.equal((await cli("keys", "export", "--private")).stderr, warning);
    assert.equal((await cli("keys", "export", "--json")).stderr, "", "no warning without the private key");
  });

  test("Ctrl-C while waiting for a link prints one line, `proto: interrupted`, and exits 130", async () => {
    const home = tempHome();
    assert.equal((await runCli(["init"], { home, caFile: env.caFile })).code, 0);
    const child = spawn(
      process.execPath,
      [
        "--conditions=source",
        "--import",
        "tsx",
        join(AGENT_DIR, "src/cli.ts"),
        "trust",
        "link",
        "--attestor",
        local.url,
      ],
      { cwd: AGENT_DIR, env: { ...process.env, PROTO_HOME: home, NODE_OPTIONS: "", NODE_TEST_CONTEXT: "" } },
    );
    let stdout = "";
    let stderr = "";
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk;
    });
    const exited = new Promise<number | null>((resolve) => child.once("close", (code) => resolve(code)));
    await new Promise<void>((resolve) => {
      child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
        stdout += chunk;
        if (stdout.includes("Waiting for confirmation")) resolve();
      });
    });
    child.kill("SIGINT");
    assert.equal(await exited, 130, stderr);
    assert.equal(stderr, "proto: interrupted\n");
  });

  test("a link the person declines: says they may have declined, and what to run next (exit 4)", async () => {
    const home = tempHome();
    assert.equal((await runCli(["init"], { home, caFile: env.caFile })).code, 0);
    const running = startCli(["trust", "link", "--attestor", local.url, "--label", "declined agent"], {
      home,
      caFile: env.caFile,
    });
    const linkLine = await running.line("stdout", (line) => line.includes("/link?req="));
    const linkUrl = linkLine.trim();
    await running.line("stdout", (line) => line.startsWith("Waiting for confirmation"));

    const person = new Person(local.url);
    await signIn(person, local.outbox, "decliner@example.com");
    const page = await person.send(linkUrl);
    assert.equal(page.status, 200, page.text);
    const declined = await person.send("/link/decline", {
      _csrf: formField(page.text, "_csrf"),
      req: formField(page.text, "req"),
    });
    assert.match(declined.text, /Link declined/);

    const result = await running.done;
    assert.equal(result.code, 4, result.stderr);
    assert.deepEqual(personLines(result), [
      "proto: link_request_expired: the link was not confirmed: the person may have declined it, or the request expired before they confirmed it",
      "proto: run `proto trust link` to start a new link request, and ask the person to confirm it",
    ]);
    // The link points to this machine: the QR code comes with a warning that a phone cannot open it.
    assert.match(result.stdout, /[▀▄█]/);
    assert.match(
      result.stdout,
      /This link points to this machine: a phone that scans the QR code cannot open it\.\nOpen it in a browser here\./,
    );
  });

  test("register --submit after a proof mismatch: the error, then a new challenge saved; --submit works with it", async () => {
    const site = env.named.a;
    assert.ok(site);
    const home = tempHome();
    const cli = cliIn(home);
    const token = (text: string) => /^ {2}(ch_[A-Za-z0-9_-]{22})$/m.exec(text)?.[1];
    const pending = await cli(
      "directory",
      "register",
      site.discoveryUrl,
      "--directory",
      env.directoryUrl,
      "--title",
      "A",
    );
    assert.equal(pending.code, 0, pending.stderr);
    const first = token(pending.stdout);
    assert.ok(first, pending.stdout);
    writeProofFile(site.proofDir, "ch_not_the_published_token_");
    const failed = await cli("directory", "register", site.discoveryUrl, "--directory", env.directoryUrl, "--submit");
    assert.equal(failed.code, 1, failed.stderr);
    assert.match(failed.stderr, /^proto: proof_mismatch: /);
    assert.match(failed.stdout, /^That challenge is used up; a new one is saved\.$/m);
    const second = token(failed.stdout);
    assert.ok(second && second !== first, failed.stdout);
    assert.match(
      failed.stdout,
      /Then run: proto directory register https:\/\/a\.test:\d+\/\.well-known\/proto --submit/,
    );

    writeProofFile(site.proofDir, second);
    const submitted = await cli(
      "directory",
      "register",
      site.discoveryUrl,
      "--directory",
      env.directoryUrl,
      "--submit",
      "--json",
    );
    assert.equal(submitted.code, 0, submitted.stderr);
    assert.equal(jsonOf(submitted).service_did, site.did);
    const listing = jsonOf(await cli("directory", "show", site.did, "--json"));
    assert.deepEqual([listing.status, listing.title], ["active", "A"], "the title given first is kept");
  });

  test("interactive register: a proof mismatch offers to try again with a new challenge; Ctrl-C leaves --submit to finish", async () => {
    const site = env.named.b;
    assert.ok(site);
    const home = tempHome();
    const terminalEnv = { PROTO_HOME: home, NODE_EXTRA_CA_CERTS: env.caFile };
    const args = ["directory", "register", site.discoveryUrl, "--directory", env.directoryUrl, "--title", "B"];
    const token = /^ {2}(ch_[A-Za-z0-9_-]{22})$/m;

    // A mismatch, then the right proof for the new challenge: listed, in one run.
    const run = onTerminal(args, terminalEnv);
    const first = (await run.waitFor(token))[1] ?? "";
    await run.waitFor(/Press Enter once it is published\.\.\. $/);
    writeProofFile(site.proofDir, "ch_not_the_published_token_");
    run.type("\n");
    const error = await run.waitFor(/proto: proof_mismatch: [^\n]+/);
    assert.equal(error[0], "proto: proof_mismatch: the proof file does not contain exactly the challenge token");
    await run.waitFor(/That challenge is used up; here is a new one, saved/);
    const second = (await run.waitFor(token))[1] ?? "";
    await run.waitFor(/Press Enter to try again once it is published \(Ctrl-C to stop\)\.\.\. $/);
    assert.notEqual(second, first);
    writeProofFile(site.proofDir, second);
    run.type("\n");
    await run.waitFor(new RegExp(`Listed ${site.did} at `));
    assert.equal(await run.exited, 0, run.screen());

    // Another mismatch, and Ctrl-C at the prompt: the new challenge is saved for --submit.
    const again = onTerminal(args, terminalEnv);
    await again.waitFor(/Press Enter once it is published\.\.\. $/);
    writeProofFile(site.proofDir, "ch_not_the_published_token_");
    again.type("\n");
    await again.waitFor(/That challenge is used up/);
    const third = (await again.waitFor(token))[1] ?? "";
    await again.waitFor(/Press Enter to try again/);
    again.type("\u0003");
    assert.equal(await again.exited, 130, again.screen());
    assert.match(again.screen(), /proto: interrupted\n?$/);
    writeProofFile(site.proofDir, third);
    const submitted = await cliIn(home)(
      "directory",
      "register",
      site.discoveryUrl,
      "--directory",
      env.directoryUrl,
      "--submit",
    );
    assert.equal(submitted.code, 0, submitted.stderr);
    assert.match(submitted.stdout, new RegExp(`^Re-registered ${site.did} at `));
  });

  test("an agent whose key is not linked: the error names `proto trust link` (exit 4)", async () => {
    const home = tempHome();
    const cli = cliIn(home);
    assert.equal((await cli("init")).code, 0);
    const result = await cli("trust", "token", env.site.did, "--attestor", env.trustUrl);
    assert.equal(result.code, 4, result.stderr);
    assert.equal(
      result.stderr,
      `proto: unauthorized: this agent's key is not linked to a person at ${env.trustUrl}: run \`proto trust link --attestor ${env.trustUrl}\` to link it\n`,
    );
  });

  test("trust link on a linked agent says it replaces the link; status shows a revoked link without a deadline", async () => {
    const home = tempHome();
    const cli = cliIn(home);
    assert.equal((await cli("init")).code, 0);
    const link = async (args: string[]) => {
      const running = startCli(["trust", "link", "--attestor", env.trustUrl, ...args], { home, caFile: env.caFile });
      const line = await running.line("stdout", (l) => l.includes("/link?req="));
      const reqId = decodeURIComponent(/\/link\?req=([^\s&]+)/.exec(line)?.[1] ?? "");
      await running.line("stdout", (l) => l.startsWith("Waiting for confirmation"));
      const confirmed = await env.trustHook("/__test/link/confirm", { req_id: reqId, email: "carol@example.com" });
      assert.equal(confirmed.status, 200, JSON.stringify(confirmed.json));
      const result = await running.done;
      assert.equal(result.code, 0, result.stderr);
      return { result, bindingId: String(confirmed.json.binding_id) };
    };
    const first = await link([]);
    assert.doesNotMatch(first.result.stdout, /already linked/);
    assert.match(first.result.stdout, / lapses \S+ unless used$/m);
    // The attestor's URL is 127.0.0.1 too: the local-link warning applies here.
    assert.match(first.result.stdout, /a phone that scans the QR code cannot open it/);

    const second = await link([]);
    const text = second.result.stdout;
    const notice = text.indexOf(`This agent is already linked at ${env.trustUrl} (binding ${first.bindingId}).`);
    assert.ok(notice >= 0, text);
    assert.ok(notice < text.indexOf("/link?req="), "said before the new link starts");
    assert.match(text, /Confirming this new request replaces that link: the attestor revokes the current binding/);
    assert.match(text, /Only the person it is linked to can confirm; until they do, the current link keeps working/);

    const active = await cli("trust", "status");
    assert.match(active.stdout, new RegExp(`${second.bindingId} +active +\\S+Z unless used$`, "m"));

    assert.equal((await env.trustHook("/__test/bindings/revoke", { binding_id: second.bindingId })).status, 200);
    // The attestor says so on the next mint; the binding is recorded as revoked.
    assert.equal((await cli("trust", "token", "did:web:elsewhere.example")).code, 4);
    const status = await cli("trust", "status");
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, new RegExp(`${second.bindingId} +revoked +-$`, "m"));
    assert.doesNotMatch(status.stdout, /unless used/);
    assert.match(
      status.stdout,
      /^revoked: the person ended this link; `proto trust link --attestor URL` asks them to link again\.$/m,
    );
    // Linking again after a revocation is a new link, not a replacement.
    const again = await link([]);
    assert.doesNotMatch(again.result.stdout, /already linked/);
  });
});
