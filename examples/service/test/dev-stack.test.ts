/**
 * A newcomer's first hour, black-box: `npm run dev` as a child process (its own data folder and
 * ports), the banner it prints, then exactly the commands the banner lists, pasted into a shell
 * in a fresh agent home: `proto init`, `proto trust link` (the person opens the link in a browser,
 * signs in through the attestor's development outbox and confirms), `proto call` to the notes
 * service over HTTPS, `proto directory list`, `proto mcp`, and `proto call -X DELETE`, which asks
 * the person for an approval (here with `--no-wait`: approving with a passkey is
 * authority.browser.test.ts's). Then the person reads the agent's signup on the notes service's
 * owner page (owner sign-in with the attestor), and Ctrl-C stops everything.
 *
 * Here, not next to the servers: the stack is the notes example with our servers, and this folder's
 * tests are part of `npm test`.
 */
import assert from "node:assert/strict";
import { createHash, createPublicKey } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { connect, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { freePort, launchChromium } from "@proto/testkit";
import { nextCommands } from "../../../scripts/dev/banner.js";
import { start, stopAll } from "./support/processes.js";

const REPO_ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const PERSON = "newcomer@example.com";

/** The parent's environment without what configures our services, the agent or the test runner. */
function cleanEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (value === undefined) continue;
    if (
      /^(NODE_ENV|NODE_TEST_CONTEXT|NODE_OPTIONS|NODE_EXTRA_CA_CERTS|PROTO_|DIRECTORY_|TRUST_|NOTES_|SMTP_URL|REDIS_URL|LOG_LEVEL)/.test(
        key,
      )
    ) {
      continue;
    }
    env[key] = value;
  }
  return env;
}

/** A line of the banner, as a person pastes it into a POSIX shell. */
async function shell(line: string, env: Record<string, string>) {
  const run = start("/bin/sh", ["-c", line], { cwd: REPO_ROOT, env });
  const { code } = await run.exited;
  return { code, stdout: run.stdout(), stderr: run.stderr() };
}

function refused(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      resolve(false);
    });
    socket.once("error", () => resolve(true));
  });
}

/** What the browser shows for `--ignore-certificate-errors-spki-list`: base64 SHA-256 of the key. */
function spkiHash(certPem: string): string {
  const der = createPublicKey(certPem).export({ type: "spki", format: "der" });
  return createHash("sha256").update(der).digest("base64");
}

after(stopAll);

test("npm run dev, then the six commands of its banner, in a fresh agent home", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), "proto-dev-data-"));
  const home = mkdtempSync(join(tmpdir(), "proto-dev-home-"));
  t.after(() => {
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(home, { recursive: true, force: true });
  });
  const [directoryPort, trustPort, notesPort] = [await freePort(), await freePort(), await freePort()];
  const stack = start("npm", ["run", "dev"], {
    cwd: REPO_ROOT,
    group: true,
    env: {
      ...cleanEnv(),
      PROTO_DEV_DATA_DIR: dataDir,
      PROTO_DEV_DIRECTORY_PORT: String(directoryPort),
      PROTO_DEV_TRUST_PORT: String(trustPort),
      PROTO_DEV_NOTES_PORT: String(notesPort),
    },
  });

  // The banner: every URL, the development CA, the six commands.
  await stack.waitFor(/^ {2}4\. .+$/m);
  const banner = stack.stdout();
  const directory = `http://localhost:${directoryPort}`;
  const trust = `http://localhost:${trustPort}`;
  const notes = `https://localhost:${notesPort}`;
  const caPath = join(dataDir, "dev-ca", "ca.pem");
  for (const url of [
    `${directory}/`,
    `${directory}/docs`,
    `${trust}/account`,
    `${trust}/docs`,
    `${trust}/dev/outbox`,
    `${notes}/`,
    `${notes}/owner`,
    `${notes}/proto/owner/dev/outbox`,
  ]) {
    assert.ok(banner.includes(url), `the banner names ${url}:\n${banner}`);
  }
  assert.ok(banner.includes(`NODE_EXTRA_CA_CERTS=${caPath}`), banner);
  assert.ok(banner.includes("test hooks off"), banner);
  assert.match(banner, /listed \(did:web:localhost%3A\d+\)/);
  const commands = [...banner.matchAll(/^ {2}(\d)\. (.+)$/gm)].map((m) => m[2] as string);
  assert.equal(commands.length, 6, banner);
  const [init, link, call, list, mcp, remove] = commands as [string, string, string, string, string, string];
  // The command by its path in the clone: `npx proto` outside the repository asks the npm
  // registry for an unrelated package named `proto`.
  assert.match(init, /^node_modules\/\.bin\/proto init /);
  assert.match(link, /^node_modules\/\.bin\/proto trust link/);
  assert.match(call, new RegExp(`node_modules/\\.bin/proto call ${notes}/notes`));
  assert.match(call, /^NODE_EXTRA_CA_CERTS=/);
  assert.match(list, /^node_modules\/\.bin\/proto directory list/);
  assert.match(mcp, new RegExp(`node_modules/\\.bin/proto mcp ${notes}/mcp list_notes$`));
  assert.ok(!commands.some((command) => /\bnpx\b/.test(command)), commands.join("\n"));
  assert.match(mcp, /^NODE_EXTRA_CA_CERTS=/);
  assert.match(
    remove,
    new RegExp(`^NODE_EXTRA_CA_CERTS=\\S+ node_modules/\\.bin/proto call -X DELETE ${notes}/notes$`),
  );
  assert.match(banner, /approval.*passkey/, "the banner says deleting asks the person, with a passkey");

  // The CA is kept in the data folder, its key readable by its owner only; the test hooks are off.
  assert.equal(statSync(join(dataDir, "dev-ca", "ca-key.pem")).mode & 0o077, 0);
  for (const origin of [directory, trust]) {
    const hook = await fetch(`${origin}/__test/clock`, { method: "POST", body: "{}" });
    assert.equal(hook.status, 404, `${origin} has no test hooks`);
  }

  // The person's browser accepts the notes service's certificate, and only that one, as it would
  // once they import the development CA.
  const serverCert = readFileSync(join(dataDir, "dev-ca", "localhost.pem"), "utf8");
  const { browser, skip } = await launchChromium([`--ignore-certificate-errors-spki-list=${spkiHash(serverCert)}`]);
  if (browser === undefined) {
    process.kill(-(stack.child.pid as number), "SIGINT");
    await stack.exited;
    t.skip(`the person's browser steps need Chromium: ${skip}`);
    return;
  }
  t.after(() => browser.close());

  // The second terminal: a fresh agent home and nothing else set.
  const agentEnv = { ...cleanEnv(), PROTO_HOME: home };
  const created = await shell(init, agentEnv);
  assert.equal(created.code, 0, created.stderr);
  const did = created.stdout.match(/Created the agent key (did:key:\S+)/)?.[1];
  assert.ok(did, created.stdout);

  // `--no-browser`: this test must never open the desktop's browser; the person's browser is Chromium.
  const linking = start("/bin/sh", ["-c", `${link} --no-browser`], { cwd: REPO_ROOT, env: agentEnv });
  const linkUrl = (await linking.waitFor(new RegExp(`${trust}/link\\?req=\\S+`)))[0];
  const context = await browser.newContext({ locale: "en-GB" });
  const page = await context.newPage();
  await page.goto(linkUrl);
  await page.getByLabel("E-mail address").fill(PERSON);
  await page.getByRole("button", { name: "E-mail me a sign-in link" }).click();
  await page.getByRole("heading", { name: "Check your e-mail" }).waitFor();
  // The mail, where the banner says it is.
  await page.goto(`${trust}/dev/outbox`);
  const mail = await page.locator("section", { hasText: PERSON }).first().innerText();
  const signInLink = mail.match(new RegExp(`${trust}/signin/email/verify\\S+`))?.[0];
  assert.ok(signInLink, mail);
  await page.goto(signInLink);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Link this agent to your account?" }).waitFor();
  await page.getByRole("button", { name: "Confirm" }).click();
  const linked = await linking.exited;
  assert.equal(linked.code, 0, linking.stderr());
  assert.ok(linking.stdout().includes(`Linked: ${did}`), linking.stdout());

  // A signed, attested call to the notes service over HTTPS: the agent signs up and writes a note.
  const called = await shell(call, agentEnv);
  assert.equal(called.code, 0, called.stderr);
  assert.match(called.stdout, /201/);
  assert.ok(called.stdout.includes("Hello from my agent"), called.stdout);

  // The directory lists the notes service.
  const listed = await shell(list, agentEnv);
  assert.equal(listed.code, 0, listed.stderr);
  assert.match(listed.stdout, new RegExp(`active\\s+did:web:localhost%3A${notesPort}\\s+Notes`));

  // The same note through the notes service's MCP endpoint: the agent's own access token.
  const tools = await shell(mcp, agentEnv);
  assert.equal(tools.code, 0, tools.stderr);
  assert.ok(tools.stdout.includes("Hello from my agent"), tools.stdout);

  // Deleting needs the person's approval: the service refuses, the command asks at the attestor
  // and prints where to approve (`--no-wait`: it stops there, exit 7); nothing was deleted.
  const asked = await shell(`${remove} --no-wait`, agentEnv);
  assert.equal(asked.code, 7, `${asked.stdout}\n${asked.stderr}`);
  assert.match(asked.stdout, /HTTP 403/);
  assert.match(asked.stdout, new RegExp(`${trust}/approvals/\\S+`));
  assert.match(asked.stderr, /approval_pending/);
  const kept = await shell(call.replace(/ -d .*$/, ""), agentEnv);
  assert.ok(kept.stdout.includes("Hello from my agent"), kept.stdout);

  // The person signs in on the notes service with the attestor (its OpenID client is registered)
  // and sees the agent their attestation signed up (same browser: already signed in there).
  const ownerPage = await context.newPage();
  await ownerPage.goto(`${notes}/owner`);
  await ownerPage.getByRole("link", { name: /^Sign in with/ }).click();
  // The first sign-in to the notes service at the attestor asks for consent.
  await ownerPage.getByRole("button", { name: "Allow" }).click();
  await ownerPage.getByRole("heading", { name: "Agents waiting to be claimed" }).waitFor();
  assert.ok((await ownerPage.locator("main").innerText()).includes(did));

  // Ctrl-C: SIGINT to the process group, as a terminal sends it.
  process.kill(-(stack.child.pid as number), "SIGINT");
  const stopped = await stack.exited;
  assert.ok(stack.stderr().includes("npm run dev: stopped"), stack.stderr());
  // npm re-raises the signal once its script has exited, as a shell shows for any Ctrl-C.
  assert.ok(stopped.code === 0 || stopped.signal === "SIGINT", JSON.stringify(stopped));
  for (const port of [directoryPort, trustPort, notesPort]) assert.ok(await refused(port), `port ${port} is free`);
});

test("the README's six commands are the banner's at the default ports; no README runs `npx proto`", () => {
  const readme = readFileSync(join(REPO_ROOT, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("### Trying it"));
  const block = [...section.matchAll(/```sh\n([\s\S]*?)```/g)][1]?.[1] ?? "";
  // The README's lines keep comments for people; the banner's do not.
  const documented = block
    .split("\n")
    .map((line) => line.replace(/\s+#.*$/, ""))
    .filter((line) => line !== "");
  const caCertPath = "/CA/ca.pem";
  const printed = nextCommands({
    urls: {
      directory: "http://localhost:8080",
      trust: "http://localhost:8081",
      notes: "https://localhost:3443",
      notesDid: "did:web:localhost%3A3443",
      notesOutbox: "https://localhost:3443/proto/owner/dev/outbox",
    },
    caCertPath,
  }).map((command) => command.replace(caCertPath, "$PWD/data/dev-ca/ca.pem"));
  assert.deepEqual(documented, printed);
  // Outside a project that installed @proto/agent, `npx proto` asks the npm registry for an
  // unrelated package named `proto`.
  for (const file of ["README.md", "packages/agent/README.md", "examples/service/README.md"]) {
    const text = readFileSync(join(REPO_ROOT, file), "utf8");
    const runs = text.split("\n").filter((line) => /^(\S+=\S+ )*npx proto /.test(line));
    assert.deepEqual(runs, [], `${file} runs \`npx proto\``);
  }
});

test("a port already taken (say, by `npm start`) is one line naming it and the variable to change", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), "proto-dev-data-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
  t.after(() => taken.close());
  const takenPort = (taken.address() as { port: number }).port;
  const [trustPort, notesPort] = [await freePort(), await freePort()];
  const stack = start("npm", ["run", "--silent", "dev"], {
    cwd: REPO_ROOT,
    group: true,
    env: {
      ...cleanEnv(),
      PROTO_DEV_DATA_DIR: dataDir,
      PROTO_DEV_DIRECTORY_PORT: String(takenPort),
      PROTO_DEV_TRUST_PORT: String(trustPort),
      PROTO_DEV_NOTES_PORT: String(notesPort),
    },
  });
  const { code } = await stack.exited;
  assert.equal(code, 1);
  assert.match(stack.stderr(), new RegExp(`npm run dev: port ${takenPort} is in use .*PROTO_DEV_DIRECTORY_PORT`));
  assert.equal(stack.stdout().includes("Next, in a second terminal"), false);
  // What had started already (the attestor) was stopped.
  assert.ok(await refused(trustPort));
});
