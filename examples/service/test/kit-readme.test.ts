/**
 * The kit README's first screen, run as written: its code blocks are read from the README, so the
 * two cannot drift. In the repository, `npm pack` of the three tarballs and `npm run dev` (its own
 * data folder and ports); next to it, an empty folder becomes an Express project from the
 * tarballs, the README's `app.mjs` listens over https with the development CA's certificate, and
 * the `proto` command of that project runs `init`, `trust link` (the person confirms in a browser,
 * as in the dev-stack test) and `call` with NODE_EXTRA_CA_CERTS.
 *
 * What differs from a person's machine, and only that: the ports (8081, 8443) and the folders
 * (`../tarballs`, `../proto/data/dev-ca`) are replaced by free ones in a temporary folder, and
 * `proto trust link` gets `--no-browser` (this test never opens the desktop's browser).
 *
 * Third-party packages (express and the tarballs' dependencies) come from the npm registry, the
 * local cache first; without a registry the test is skipped, except under CI=true.
 */
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, isAbsolute, join, relative } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { freePort, launchChromium } from "@proto/testkit";
import { type Run, start as startProcess, stop, stopAll } from "./support/processes.js";

const REPO_ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const README = join(REPO_ROOT, "packages", "kit", "README.md");
const SECTION = "## First agent call (Express, from an empty folder)";
const PERSON = "express-developer@example.com";
const MINUTE = 60_000;

interface Block {
  lang: string;
  body: string;
}

/** The fenced code blocks of the README's first-call section, in order. */
function readmeBlocks(): Block[] {
  const text = readFileSync(README, "utf8");
  const start = text.indexOf(`\n${SECTION}\n`);
  assert.ok(start >= 0, `the kit README has the section "${SECTION}"`);
  const end = text.indexOf("\n## ", start + SECTION.length + 2);
  const section = text.slice(start, end === -1 ? undefined : end);
  return [...section.matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)].map((m) => ({
    lang: m[1] as string,
    body: m[2] as string,
  }));
}

function isInside(parent: string, child: string): boolean {
  const path = relative(parent, child);
  return path === "" || (!path.startsWith("..") && !isAbsolute(path));
}

/**
 * What a person's shell has: none of the variables of the test runner, npm's script runner (this
 * file runs inside the workspace), our services or the agent, and no workspace node_modules/.bin.
 * NODE_EXTRA_CA_CERTS stays: it is how the machine reaches the registry when npm's own cafile is not
 * read (npm under another Node's prefix, as on CI's Node lines); it never names our dev CA, which the
 * README's agent line sets itself.
 */
function userEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (value === undefined) continue;
    if (
      /^(NODE_ENV|NODE_OPTIONS|NODE_PATH|NODE_TEST_CONTEXT|INIT_CWD|PROTO_|DIRECTORY_|TRUST_|NOTES_|SMTP_URL|REDIS_URL|LOG_LEVEL|npm_package_|npm_lifecycle_|npm_config_local_prefix|npm_config_workspace)/.test(
        key,
      )
    ) {
      continue;
    }
    env[key] = value;
  }
  const path = (process.env.PATH ?? "").split(delimiter).filter((dir) => dir !== "" && !isInside(REPO_ROOT, dir));
  env.PATH = [dirname(process.execPath), ...path].join(delimiter);
  return { ...env, ...extra };
}

/**
 * A README line or block in a POSIX shell, leading a process group of its own: npm, node and what
 * they start stop together, as with Ctrl-C.
 */
function start(line: string, cwd: string, env: Record<string, string>, timeoutMs = 10 * MINUTE): Run {
  return startProcess("/bin/sh", ["-c", line], { cwd, env, group: true, timeoutMs });
}

/** Runs a README block (or line) to its end, as a person pastes it into a POSIX shell. */
async function shell(script: string, cwd: string, env: Record<string, string>) {
  const run = start(`set -e\n${script}`, cwd, env, 15 * MINUTE);
  const { code } = await run.exited;
  return { code, stdout: run.stdout(), stderr: run.stderr() };
}

async function registryProblem(): Promise<string | undefined> {
  const ping = await shell("npm ping --fetch-retries=0 --fetch-timeout=30000", tmpdir(), userEnv());
  if (ping.code === 0) return undefined;
  const firstError = ping.stderr.split("\n").find((line) => line.startsWith("npm error") && !/complete log/.test(line));
  return `the npm registry cannot be reached (npm ping: ${firstError ?? `exit ${ping.code}`})`;
}

after(stopAll);

const unreachable = await registryProblem();

test("the kit README's first screen: empty folder to a first agent call over https against npm run dev", {
  skip: unreachable !== undefined && process.env.CI !== "true" ? unreachable : false,
  timeout: 40 * MINUTE,
}, async (t) => {
  if (unreachable !== undefined) assert.fail(`${unreachable} (CI=true: not skipped)`);
  const blocks = readmeBlocks();
  assert.deepEqual(
    blocks.map((b) => b.lang),
    ["sh", "sh", "js", "sh", "sh"],
    "the section's blocks: repository, project, app.mjs, run it, the agent",
  );
  const [repository, project, app, run, agent] = blocks as [Block, Block, Block, Block, Block];

  const root = mkdtempSync(join(tmpdir(), "proto-kit-readme-"));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const tarballs = join(root, "tarballs");
  const dataDir = join(root, "proto-data");
  const home = join(root, "agent-home");
  mkdirSync(tarballs);
  const [directoryPort, trustPort, notesPort, appPort] = [
    await freePort(),
    await freePort(),
    await freePort(),
    await freePort(),
  ];
  // The person's ports and folders, and only those, become this test's.
  const adapt = (text: string) =>
    text
      .replaceAll("../proto/data/dev-ca", join(dataDir, "dev-ca"))
      .replaceAll("../tarballs", tarballs)
      .replaceAll("8081", String(trustPort))
      .replaceAll("8443", String(appPort));
  const lines = (block: Block) =>
    block.body
      .split("\n")
      .filter((line) => line.trim() !== "")
      .map(adapt);

  // 1. In the repository: the tarballs, then the development stack, left running.
  const [pack, dev, ...moreRepository] = lines(repository);
  assert.deepEqual(moreRepository, []);
  assert.match(pack as string, /^npm pack /);
  assert.equal(dev, "npm run dev");
  const packed = await shell(pack as string, REPO_ROOT, userEnv());
  assert.equal(packed.code, 0, `${pack}\n${packed.stderr}`);
  const stack = start(
    dev as string,
    REPO_ROOT,
    userEnv({
      PROTO_DEV_DATA_DIR: dataDir,
      PROTO_DEV_DIRECTORY_PORT: String(directoryPort),
      PROTO_DEV_TRUST_PORT: String(trustPort),
      PROTO_DEV_NOTES_PORT: String(notesPort),
    }),
  );
  t.after(async () => {
    stop(stack.child, "SIGINT");
    await stack.exited;
  });
  await stack.waitFor(/^ {2}4\. .+$/m);
  assert.ok(existsSync(join(dataDir, "dev-ca", "ca.pem")), "npm run dev made its development CA");

  // 2. Next to the clone: the Express project, from the tarballs (the registry's cache first).
  const installEnv = userEnv({
    npm_config_prefer_offline: "true",
    npm_config_audit: "false",
    npm_config_fund: "false",
  });
  const installed = await shell(adapt(project.body), root, installEnv);
  assert.equal(installed.code, 0, `${project.body}\n${installed.stdout}\n${installed.stderr}`);
  const folder = project.body.match(/^mkdir (\S+) && cd \1/m)?.[1];
  assert.ok(folder, "the project block makes a folder and enters it");
  const appDir = join(root, folder);

  // 3. app.mjs, as the README shows it, run with plain node.
  const file = app.body.match(/^\/\/ (\S+\.mjs)\n/)?.[1];
  assert.ok(file, "the app block names its file in its first line");
  writeFileSync(join(appDir, file), adapt(app.body));
  const [serve, ...moreRun] = lines(run);
  assert.deepEqual(moreRun, []);
  assert.equal(serve, `node ${file}`);
  const service = start(serve, appDir, userEnv());
  t.after(async () => {
    stop(service.child, "SIGTERM");
    await service.exited;
  });
  await service.waitFor(new RegExp(`listening on https://localhost:${appPort}`));

  // 4. The agent, in the project: init, trust link (the person confirms), call.
  const [init, link, call, ...moreAgent] = lines(agent);
  assert.deepEqual(moreAgent, []);
  assert.match(init as string, /^npx proto init --attestor http:\/\/localhost:\d+$/);
  assert.equal(link, "npx proto trust link");
  assert.match(call as string, /^NODE_EXTRA_CA_CERTS=\S+ npx proto call https:\/\/localhost:\d+\//);
  const agentEnv = userEnv({ PROTO_HOME: home });
  const created = await shell(init as string, appDir, agentEnv);
  assert.equal(created.code, 0, created.stderr);
  const did = created.stdout.match(/Created the agent key (did:key:\S+)/)?.[1];
  assert.ok(did, created.stdout);

  const { browser, skip } = await launchChromium();
  if (browser === undefined) {
    t.skip(`the person's confirmation needs Chromium: ${skip}`);
    return;
  }
  t.after(() => browser.close());
  const trust = `http://localhost:${trustPort}`;
  const linking = start(`${link} --no-browser`, appDir, agentEnv);
  const linkUrl = (await linking.waitFor(new RegExp(`${trust}/link\\?req=\\S+`)))[0];
  const page = await (await browser.newContext({ locale: "en-GB" })).newPage();
  await page.goto(linkUrl);
  await page.getByLabel("E-mail address").fill(PERSON);
  await page.getByRole("button", { name: "E-mail me a sign-in link" }).click();
  await page.getByRole("heading", { name: "Check your e-mail" }).waitFor();
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

  // The first agent call: signed, attested, over https with the development CA; the agent signs up.
  const called = await shell(call as string, appDir, agentEnv);
  assert.equal(called.code, 0, `${call}\n${called.stdout}\n${called.stderr}`);
  assert.match(called.stdout, /201/);
  assert.ok(called.stdout.includes(did), called.stdout);
  assert.ok(called.stdout.includes("UNCLAIMED"), called.stdout);
  assert.ok(called.stdout.includes("hello"), called.stdout);
});
