/**
 * The `proto-server` command as an operator runs it: a real child process, real HTTP, real signals.
 * Readiness is the server's own "listening" log line, never a sleep.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, type TestContext, test } from "node:test";
import { fileURLToPath } from "node:url";
import { createTestDatabase, REDIS_URL, reportSkippedVariants, STORE_VARIANTS } from "./support/stores.js";

reportSkippedVariants();

const CLI = fileURLToPath(new URL("../src/cli.ts", import.meta.url));
const REPO_ROOT = fileURLToPath(new URL("../../../", import.meta.url));
/** Only a guard against a hung child; no assertion depends on time. */
const TEST_TIMEOUT_MS = 60_000;

/** The parent's environment without anything that configures the services or the test runner. */
function baseEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (value === undefined) continue;
    if (/^(NODE_ENV|NODE_TEST_CONTEXT|NODE_OPTIONS|PROTO_|DIRECTORY_|TRUST_|REDIS_URL|TEST_|LOG_LEVEL)/.test(key)) {
      continue;
    }
    env[key] = value;
  }
  return env;
}

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

interface Running {
  child: ChildProcess;
  output(): { stdout: string; stderr: string };
  exited: Promise<Exit>;
  /** Resolves once stdout or stderr matches; rejects if the process ends first. */
  waitFor(pattern: RegExp): Promise<void>;
}

const started: ChildProcess[] = [];

function run(args: string[], env: Record<string, string>): Running {
  const child = spawn(process.execPath, ["--conditions=source", "--import", "tsx", CLI, ...args], {
    cwd: REPO_ROOT,
    env: { ...baseEnv(), ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  started.push(child);
  let stdout = "";
  let stderr = "";
  const waiters: { pattern: RegExp; resolve: () => void; reject: (e: Error) => void }[] = [];
  const check = () => {
    for (const waiter of [...waiters]) {
      if (waiter.pattern.test(stdout) || waiter.pattern.test(stderr)) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve();
      }
    }
  };
  child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
    stdout += chunk;
    check();
  });
  child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk;
    check();
  });
  const exited = new Promise<Exit>((resolve) => {
    child.once("close", (code, signal) => {
      for (const waiter of waiters.splice(0)) {
        waiter.reject(
          new Error(`proto-server ended (${code ?? signal}) before ${waiter.pattern}:\n${stdout}\n${stderr}`),
        );
      }
      resolve({ code, signal });
    });
  });
  return {
    child,
    exited,
    output: () => ({ stdout, stderr }),
    waitFor(pattern) {
      return new Promise<void>((resolve, reject) => {
        waiters.push({ pattern, resolve, reject });
        check();
      });
    },
  };
}

/** A port that was free a moment ago: listen on 0, note the port, close. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  assert.ok(address !== null && typeof address === "object");
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return address.port;
}

function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), "proto-cli-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

after(() => {
  // Only the children this file started, each by its own handle.
  for (const child of started) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
});

for (const variant of STORE_VARIANTS) {
  describe(`proto-server directory (${variant.name})`, () => {
    test("serves /healthz on --port, has no test hooks, and exits 0 on SIGTERM", {
      timeout: TEST_TIMEOUT_MS,
    }, async (t) => {
      const port = await freePort();
      let databaseUrl: string;
      let dbFile: string | undefined;
      let drop = async () => {};
      if (variant.engine === "sqlite") {
        dbFile = join(tempDir(t), "nested", "directory.db");
        databaseUrl = `sqlite:${dbFile}`;
      } else {
        const database = await createTestDatabase("postgres");
        databaseUrl = database.url;
        drop = database.drop;
      }
      try {
        const server = run(["directory", "--port", String(port), "--host", "127.0.0.1"], {
          DIRECTORY_DATABASE_URL: databaseUrl,
          ...(variant.redis && REDIS_URL ? { REDIS_URL } : {}),
        });
        await server.waitFor(new RegExp(`listening.*127\\.0\\.0\\.1:${port}`, "i"));
        const base = `http://127.0.0.1:${port}`;

        const health = await fetch(`${base}/healthz`);
        assert.equal(health.status, 200);
        assert.deepEqual(await health.json(), { status: "ok" });
        const ready = await fetch(`${base}/readyz`);
        assert.equal(ready.status, 200);
        const list = await fetch(`${base}/v1/listings`);
        assert.equal(list.status, 200);
        assert.deepEqual(await list.json(), { listings: [], next_cursor: null });
        if (dbFile !== undefined) assert.ok(existsSync(dbFile), "the SQLite file is created, folders included");

        for (const hook of ["/__test/clock", "/__test/revalidate"]) {
          const res = await fetch(`${base}${hook}`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ advance_seconds: 86400 }),
          });
          assert.equal(res.status, 404, `${hook} without PROTO_TEST_HOOKS`);
          const body = (await res.json()) as { error?: { code?: string } };
          assert.equal(body.error?.code, "not_found");
        }

        assert.ok(server.child.kill("SIGTERM"));
        const exit = await server.exited;
        assert.deepEqual(exit, { code: 0, signal: null }, server.output().stderr);
      } finally {
        await drop();
      }
    });
  });
}

/**
 * Whether a server answers on 127.0.0.2: Linux routes all of 127.0.0.0/8 to loopback, so a socket
 * bound to 0.0.0.0 accepts there and one bound to 127.0.0.1 refuses (as it would another machine).
 */
async function answersBeyond127001(port: number): Promise<boolean> {
  try {
    return (await fetch(`http://127.0.0.2:${port}/healthz`)).status === 200;
  } catch (error) {
    assert.equal((error as { cause?: { code?: string } }).cause?.code, "ECONNREFUSED", String(error));
    return false;
  }
}

describe("proto-server's listening address", () => {
  async function start(t: TestContext, args: string[], env: Record<string, string>) {
    const port = await freePort();
    const server = run(["directory", "--port", String(port), ...args], {
      DIRECTORY_DATABASE_URL: `sqlite:${join(tempDir(t), "directory.db")}`,
      ...env,
    });
    t.after(async () => {
      if (server.child.exitCode === null && server.child.signalCode === null) server.child.kill("SIGTERM");
      await server.exited;
    });
    await server.waitFor(new RegExp(`listening.*:${port}`, "i"));
    const health = await fetch(`http://127.0.0.1:${port}/healthz`);
    assert.equal(health.status, 200, "this machine always reaches it");
    return port;
  }

  test("outside production it listens on 127.0.0.1 only, so /dev/outbox and the test hooks stay on this machine", {
    timeout: TEST_TIMEOUT_MS,
  }, async (t) => {
    const port = await start(t, [], { PROTO_TEST_HOOKS: "1" });
    assert.equal(await answersBeyond127001(port), false);
  });

  test("--host 0.0.0.0 opens it to other addresses", { timeout: TEST_TIMEOUT_MS }, async (t) => {
    const port = await start(t, ["--host", "0.0.0.0"], {});
    assert.equal(await answersBeyond127001(port), true);
  });

  test("in production (NODE_ENV in any case) it listens on 0.0.0.0 by default", {
    timeout: TEST_TIMEOUT_MS,
  }, async (t) => {
    const port = await start(t, [], { NODE_ENV: "Production", DIRECTORY_PUBLIC_URL: "https://directory.example" });
    assert.equal(await answersBeyond127001(port), true);
  });
});

/** A line of the JSON log (standard error never holds one). */
const JSON_LOG_LINE = /^\{".*\}$/m;

/** Standard output is the JSON log: every line parses, whatever else the command printed. */
function assertJsonLines(stdout: string): void {
  const lines = stdout.split("\n").filter((line) => line !== "");
  assert.ok(lines.length > 0, "the servers logged");
  for (const line of lines) assert.doesNotThrow(() => JSON.parse(line), `not a JSON log line: ${line}`);
}

describe("proto-server prints where each service listens and what to open", () => {
  test("all: both services' URLs on standard error, the JSON log alone on standard output", {
    timeout: TEST_TIMEOUT_MS,
  }, async (t) => {
    const dir = tempDir(t);
    const [directoryPort, trustPort] = [await freePort(), await freePort()];
    const directory = `http://localhost:${directoryPort}`;
    const trust = `http://localhost:${trustPort}`;
    const server = run(["all", "--directory-port", String(directoryPort), "--trust-port", String(trustPort)], {
      DIRECTORY_DATABASE_URL: `sqlite:${join(dir, "directory.db")}`,
      TRUST_DATABASE_URL: `sqlite:${join(dir, "trust.db")}`,
      DIRECTORY_PUBLIC_URL: directory,
      TRUST_PUBLIC_URL: trust,
    });
    t.after(async () => {
      if (server.child.exitCode === null && server.child.signalCode === null) server.child.kill("SIGTERM");
      await server.exited;
    });
    await server.waitFor(/logs are JSON lines/);
    // The banner (stderr) and the first log line (stdout) race; the check below needs both.
    await server.waitFor(JSON_LOG_LINE);
    const { stdout, stderr } = server.output();
    const lines = stderr.split("\n");
    assert.ok(lines.includes(`proto-server: directory listening on http://127.0.0.1:${directoryPort}`), stderr);
    assert.ok(lines.includes(`proto-server: attestor listening on http://127.0.0.1:${trustPort}`), stderr);
    const urls = [
      `${directory}/`,
      `${directory}/docs`,
      `${trust}/account`,
      `${trust}/docs`,
      // Outside production, without SMTP_URL, sign-in mail waits there.
      `${trust}/dev/outbox`,
    ];
    for (const url of urls) {
      assert.ok(
        lines.some((line) => line.startsWith(`  ${url} `)),
        `${url} is printed:\n${stderr}`,
      );
      // What a person opens answers.
      const page = await fetch(url, { headers: { accept: "text/html" } });
      assert.equal(page.status, 200, url);
      await page.arrayBuffer();
    }
    assert.doesNotMatch(stderr, /note:/, "the public URLs name these ports");
    assert.ok(lines.includes("proto-server: logs are JSON lines on standard output, level info (LOG_LEVEL)"), stderr);
    assertJsonLines(stdout);
    assert.doesNotMatch(stdout, /proto-server:/);
  });

  test("a public URL on this machine with another port is pointed out, with the value to set", {
    timeout: TEST_TIMEOUT_MS,
  }, async (t) => {
    const port = await freePort();
    const server = run(["directory", "--port", String(port)], {
      DIRECTORY_DATABASE_URL: `sqlite:${join(tempDir(t), "directory.db")}`,
    });
    t.after(async () => {
      if (server.child.exitCode === null && server.child.signalCode === null) server.child.kill("SIGTERM");
      await server.exited;
    });
    await server.waitFor(/logs are JSON lines/);
    assert.match(
      server.output().stderr,
      new RegExp(
        `\n {2}note: DIRECTORY_PUBLIC_URL is http://localhost:8080, not this port: .*; set DIRECTORY_PUBLIC_URL=http://localhost:${port}\n`,
      ),
    );
  });

  test("in production the lines name the public URL, on standard error: standard output stays JSON lines", {
    timeout: TEST_TIMEOUT_MS,
  }, async (t) => {
    const port = await freePort();
    const server = run(["directory", "--port", String(port)], {
      NODE_ENV: "production",
      DIRECTORY_PUBLIC_URL: "https://directory.example",
      DIRECTORY_DATABASE_URL: `sqlite:${join(tempDir(t), "directory.db")}`,
    });
    t.after(async () => {
      if (server.child.exitCode === null && server.child.signalCode === null) server.child.kill("SIGTERM");
      await server.exited;
    });
    await server.waitFor(/logs are JSON lines/);
    // The banner (stderr) and the first log line (stdout) race; the check below needs both.
    await server.waitFor(JSON_LOG_LINE);
    const { stdout, stderr } = server.output();
    assert.match(stderr, new RegExp(`^proto-server: directory listening on http://0\\.0\\.0\\.0:${port}\n`, "m"));
    assert.match(stderr, /^ {2}https:\/\/directory\.example\/ +browse the listings/m);
    assert.match(stderr, /^ {2}https:\/\/directory\.example\/docs +API docs/m);
    assert.doesNotMatch(stderr, /note:/, "another machine's URL is not second-guessed");
    assertJsonLines(stdout);
  });
});

describe("proto-server refuses bad configuration and usage", () => {
  for (const nodeEnv of ["production", " Production "]) {
    test(`NODE_ENV=${JSON.stringify(nodeEnv)} with PROTO_TEST_HOOKS=1 refuses to start, naming PROTO_TEST_HOOKS`, {
      timeout: TEST_TIMEOUT_MS,
    }, async (t) => {
      const dir = tempDir(t);
      const port = await freePort();
      const server = run(["directory", "--port", String(port), "--host", "127.0.0.1"], {
        NODE_ENV: nodeEnv,
        PROTO_TEST_HOOKS: "1",
        DIRECTORY_PUBLIC_URL: "https://directory.example",
        DIRECTORY_DATABASE_URL: `sqlite:${join(dir, "directory.db")}`,
      });
      const exit = await server.exited;
      assert.notEqual(exit.code, 0);
      assert.equal(exit.signal, null);
      const { stderr } = server.output();
      assert.match(stderr, /PROTO_TEST_HOOKS/);
      assert.match(stderr, /production/);
    });
  }

  test("a DIRECTORY_DATABASE_URL of an unsupported kind fails with a message naming it", {
    timeout: TEST_TIMEOUT_MS,
  }, async () => {
    const port = await freePort();
    const server = run(["directory", "--port", String(port), "--host", "127.0.0.1"], {
      DIRECTORY_DATABASE_URL: "mysql://x",
    });
    const exit = await server.exited;
    assert.notEqual(exit.code, 0);
    assert.equal(exit.signal, null);
    const { stderr } = server.output();
    assert.match(stderr, /DIRECTORY_DATABASE_URL/);
    assert.match(stderr, /sqlite:/);
    assert.match(stderr, /postgres:\/\//);
    assert.match(stderr, /mysql:\/\/x/);
    assert.doesNotMatch(stderr, /\n\s+at /, "a message, not a stack trace");
  });

  test("an unknown command prints the usage and exits 2", { timeout: TEST_TIMEOUT_MS }, async () => {
    const server = run(["frobnicate"], {});
    const exit = await server.exited;
    assert.deepEqual(exit, { code: 2, signal: null });
    const { stderr } = server.output();
    assert.match(stderr, /frobnicate/);
    assert.match(stderr, /usage: proto-server/);
  });

  test("an unknown option or a bad port is a usage error too (exit 2)", { timeout: TEST_TIMEOUT_MS }, async () => {
    for (const args of [
      ["directory", "--bogus"],
      ["directory", "--port", "http"],
      ["directory", "--port", "70000"],
    ]) {
      const server = run(args, {});
      const exit = await server.exited;
      const { stderr } = server.output();
      assert.deepEqual(exit, { code: 2, signal: null }, `${args.join(" ")}: ${stderr}`);
      assert.match(stderr, /usage: proto-server/, args.join(" "));
      assert.doesNotMatch(stderr, /\n\s+at /, "a message, not a stack trace");
    }
  });

  test("all --port is refused (exit 2), naming the flags that do set its ports", {
    timeout: TEST_TIMEOUT_MS,
  }, async () => {
    const server = run(["all", "--port", "8090"], {});
    const exit = await server.exited;
    const { stderr } = server.output();
    assert.deepEqual(exit, { code: 2, signal: null }, stderr);
    assert.match(
      stderr,
      /^proto-server: --port does not apply to `all`, which runs two services: give --directory-port N and --trust-port N\n/,
    );
    assert.match(stderr, /usage: proto-server/);
    assert.doesNotMatch(stderr, /listening/i, "nothing was started");
    // And the other way round: a single service has one port.
    const single = run(["trust", "--trust-port", "8090"], {});
    assert.deepEqual(await single.exited, { code: 2, signal: null });
    assert.match(
      single.output().stderr,
      /^proto-server: --directory-port and --trust-port apply to `all` only: give --port N\n/,
    );
  });

  test("all reports every configuration problem of both services at once, then exits 2", {
    timeout: TEST_TIMEOUT_MS,
  }, async () => {
    const server = run(
      ["all", "--directory-port", String(await freePort()), "--trust-port", String(await freePort())],
      {
        NODE_ENV: "production",
        PROTO_TEST_HOOKS: "1",
        DIRECTORY_DATABASE_URL: "mysql://x",
      },
    );
    const exit = await server.exited;
    const { stderr } = server.output();
    assert.deepEqual(exit, { code: 2, signal: null }, stderr);
    const problems = stderr.split("\n").filter((line) => line.startsWith("  - "));
    // The shared setting once, then each service's own, under its name.
    assert.equal(problems.filter((line) => /PROTO_TEST_HOOKS/.test(line)).length, 1, stderr);
    assert.ok(
      problems.some((line) => /^ {2}- directory: DIRECTORY_DATABASE_URL .*mysql:\/\/x/.test(line)),
      stderr,
    );
    assert.ok(
      problems.some((line) => /^ {2}- directory: DIRECTORY_PUBLIC_URL/.test(line)),
      stderr,
    );
    for (const name of ["TRUST_PUBLIC_URL", "TRUST_KEY_ENCRYPTION_KEY", "TRUST_PSEUDONYM_KEY"]) {
      assert.ok(
        problems.some((line) => line.startsWith(`  - trust: ${name}`)),
        `${name}:\n${stderr}`,
      );
    }
    assert.equal(stderr.match(/invalid configuration/g)?.length, 1, "one report, one exit");
    assert.doesNotMatch(stderr, /listening/i);
  });

  test("--help prints the usage and exits 0", { timeout: TEST_TIMEOUT_MS }, async () => {
    const server = run(["--help"], {});
    const exit = await server.exited;
    assert.deepEqual(exit, { code: 0, signal: null });
    assert.match(server.output().stdout, /usage: proto-server/);
  });
});
