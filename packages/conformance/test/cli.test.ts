import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe as suite, test } from "node:test";
import { fileURLToPath } from "node:url";
import { freePort } from "@proto/testkit";
import { attestorProbes, directoryProbes, serviceProbes } from "../src/index.js";
import { type StandIn, startStandIn } from "./support/stand-in.js";
import { type Attestor, startAttestor, startDirectory, startNotes } from "./support/targets.js";

const PACKAGE_DIR = join(dirname(fileURLToPath(import.meta.url)), "..");
const CLI = join(PACKAGE_DIR, "src/cli.ts");

interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** `proto-conformance ...` from source, the way a user runs it; killed if it wedges. */
function cli(args: string[]): Promise<CliResult> {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of ["NODE_TEST_CONTEXT", "NODE_OPTIONS"]) delete env[name];
  const child = spawn(process.execPath, ["--conditions=source", "--import", "tsx", CLI, ...args], {
    cwd: PACKAGE_DIR,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const output = { stdout: "", stderr: "" };
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    output.stdout += chunk;
  });
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
    output.stderr += chunk;
  });
  const killer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  return new Promise((resolve) => {
    child.once("close", (code) => {
      clearTimeout(killer);
      resolve({ code, ...output });
    });
  });
}

suite("the proto-conformance command", () => {
  let attestor: Attestor;
  /** The attestor behind the broken stand-in, whose {trust_url} is the stand-in's URL. */
  let behind: Attestor;
  let broken: StandIn;
  let dir: string;
  let keyFile: string;
  before(async () => {
    attestor = await startAttestor();
    // A stand-in that strips the key set's Cache-Control: exactly one probe fails.
    const port = await freePort();
    broken = await startStandIn(`http://127.0.0.1:${port}`);
    behind = await startAttestor({ port, publicUrl: broken.url });
    broken.breakWith({
      response: (e, a) => {
        if (!e.path.startsWith("/.well-known/jwks.json")) return undefined;
        const { "cache-control": _dropped, ...headers } = a.headers;
        return { ...a, headers };
      },
    });
    dir = mkdtempSync(join(tmpdir(), "conformance-cli-"));
    keyFile = join(dir, "agent.pem");
    writeFileSync(keyFile, (await attestor.linkAgent()).pem);
  });
  after(async () => {
    await broken.close();
    await behind.close();
    await attestor.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test("a conforming attestor: the table, the summary line, exit 0", async () => {
    const result = await cli(["attestor", attestor.url, "--agent-key", keyFile, "--aud", "did:web:notes.example"]);
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stderr, "");
    const lines = result.stdout.trimEnd().split("\n");
    assert.match(lines[0] ?? "", /^id\s+result\s+description$/);
    for (const probe of attestorProbes) {
      const status = probe.id === "attestor.link.start.valid" ? "skip" : "pass";
      assert.ok(
        lines.some((line) => new RegExp(`^${probe.id.replaceAll(".", "\\.")}\\s+${status}\\s+\\S`).test(line)),
        `${probe.id} ${status} in\n${result.stdout}`,
      );
    }
    assert.match(result.stdout, /attestor\.link\.start\.valid: creates state on the target: run with --write/);
    assert.equal(lines.at(-1), `${attestorProbes.length - 1} passed, 0 failed, 1 skipped`);
  });

  test("a broken attestor: the failure and what came back under the table, exit 1", async () => {
    const result = await cli(["attestor", broken.url]);
    assert.equal(result.code, 1, result.stderr);
    assert.match(result.stdout, /^attestor\.jwks\.cache\s+FAIL\s+/m);
    assert.match(
      result.stdout,
      /\nattestor\.jwks\.cache \(trust\.md §GET \/\.well-known\/jwks\.json\)\n {2}GET \/\.well-known\/jwks\.json: Cache-Control must have public \(got no Cache-Control\)\n {4}sent: GET http:\/\/127\.0\.0\.1:\d+\/\.well-known\/jwks\.json\n {4}got: 200\n/,
    );
    assert.match(result.stdout, /\n12 passed, 1 failed, 8 skipped\n$/);
  });

  test("--json prints every result; --junit FILE writes one testcase per probe", async () => {
    const junit = join(dir, "conformance.xml");
    const result = await cli(["attestor", broken.url, "--json", "--junit", junit]);
    assert.equal(result.code, 1, result.stderr);
    const report = JSON.parse(result.stdout) as {
      mode: string;
      summary: Record<string, number>;
      results: { id: string; status: string; exchange?: { status: number } }[];
    };
    assert.equal(report.mode, "attestor");
    assert.deepEqual(report.summary, { passed: 12, failed: 1, skipped: 8 });
    assert.deepEqual(
      report.results.map((r) => r.id),
      attestorProbes.map((p) => p.id),
    );
    const failed = report.results.find((r) => r.status === "fail");
    assert.equal(failed?.id, "attestor.jwks.cache");
    assert.equal(failed?.exchange?.status, 200);

    const xml = readFileSync(junit, "utf8");
    const cases = [...xml.matchAll(/<testcase classname="[^"]*" name="([^"]+)">([\s\S]*?)<\/testcase>/g)];
    assert.equal(cases.length, attestorProbes.length);
    const withFailure = cases.filter((c) => c[2]?.includes("<failure "));
    assert.deepEqual(
      withFailure.map((c) => c[1]),
      ["attestor.jwks.cache"],
    );
    assert.equal(cases.filter((c) => c[2]?.includes("<skipped ")).length, 8);
    assert.match(xml, /<testsuites tests="21" failures="1" skipped="8">/);
  });

  test("a directory (and its mirror with --mirror) through the command: exit 0, the summary line", async () => {
    const directory = await startDirectory();
    try {
      const result = await cli(["directory", directory.url, "--page-size", "1", "--write"]);
      assert.equal(result.code, 0, result.stdout + result.stderr);
      assert.match(result.stdout, /^directory\.listings\.pagination\s+pass\s+/m);
      assert.match(result.stdout, new RegExp(`\n${directoryProbes.length - 1} passed, 0 failed, 1 skipped\n$`));
      const mirror = await directory.mirror();
      const mirrored = await cli(["directory", mirror.url, "--mirror", "--json"]);
      assert.equal(mirrored.code, 0, mirrored.stdout + mirrored.stderr);
      const report = JSON.parse(mirrored.stdout) as { results: { id: string; status: string }[] };
      assert.equal(report.results.find((r) => r.id === "directory.mirror.read-only")?.status, "pass");
    } finally {
      await directory.close();
    }
  });

  test("a service through the command: the table, the skipped writes, the summary line, exit 0", async () => {
    const notes = await startNotes();
    try {
      const result = await cli(["service", notes.url]);
      assert.equal(result.code, 0, result.stdout + result.stderr);
      assert.equal(result.stderr, "");
      assert.match(result.stdout, /^service\.signature\.replayed-nonce\s+pass\s+\S/m);
      assert.match(result.stdout, /^service\.invitation\.unsupported-recipient\s+skip\s+\S/m);
      assert.match(result.stdout, /^service\.authority\.insufficient-permission\s+skip\s+\S/m);
      assert.match(result.stdout, new RegExp(`\n${serviceProbes.length - 3} passed, 0 failed, 3 skipped\n$`));

      // With a linked agent, --write and the route that needs a permission it lacks: every probe runs.
      const notesKey = join(dir, "notes-agent.pem");
      writeFileSync(notesKey, (await notes.attestor.linkAgent()).pem);
      const full = await cli([
        "service",
        notes.url,
        "--write",
        "--agent-key",
        notesKey,
        "--attestor",
        notes.attestor.url,
        "--permission-route",
        "DELETE /notes/x notes:delete",
      ]);
      assert.equal(full.code, 0, full.stdout + full.stderr);
      assert.match(full.stdout, /^service\.authority\.insufficient-permission\s+pass\s+\S/m);
      assert.match(full.stdout, new RegExp(`\n${serviceProbes.length} passed, 0 failed, 0 skipped\n$`));
    } finally {
      await notes.close();
    }
  });

  test("--version and --help answer on stdout with exit 0", async () => {
    const version = await cli(["--version"]);
    assert.equal(version.code, 0);
    assert.equal(version.stdout, "0.1.0\n");
    const help = await cli(["attestor", "--help"]);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /--agent-key <file>/);
  });

  test("usage errors are one line on stderr and exit 2", async () => {
    const cases: [string[], RegExp][] = [
      [["attestor", "not a url"], /^proto-conformance: .*not a URL: not a url\n$/],
      [["attestor", "ftp://x.example"], /^proto-conformance: .*not an http\(s\) URL/],
      [["attestor"], /^proto-conformance: missing required argument 'url'\n$/],
      [["attestor", "https://trust.example/?x=1"], /^proto-conformance: .*no query/],
      [["directory", attestor.url, "--bogus"], /^proto-conformance: unknown option '--bogus'\n$/],
      [["frobnicate", attestor.url], /^proto-conformance: unknown command 'frobnicate'\n$/],
      [
        ["service", attestor.url, "--agent-key", keyFile],
        /^proto-conformance: --agent-key and --attestor go together\n$/,
      ],
      [
        ["agent", "--listen", "9000"],
        /^proto-conformance: give --attestor URL \(an attested_only service\) or --open, one of them\n$/,
      ],
      [["agent", "--open"], /^proto-conformance: required option .--listen <port>. not specified\n$/],
      [["agent", "--listen", "70000", "--open"], /--listen.*must be a port from 0 to 65535/],
      [["attestor", attestor.url, "--agent-key", keyFile], /^proto-conformance: --agent-key and --aud go together\n$/],
      [
        ["attestor", attestor.url, "--agent-key", join(dir, "absent.pem"), "--aud", "did:web:a.example"],
        /^proto-conformance: cannot read the agent key/,
      ],
      [["directory", attestor.url, "--page-size", "0"], /^proto-conformance: .*--page-size.*1 to 100/],
      [
        ["service", attestor.url, "--permission-route", "DELETE /notes/x"],
        /^proto-conformance: .*--permission-route.*give METHOD \/path permission/,
      ],
      [
        ["service", attestor.url, "--permission-route", "TRACE /notes notes:read"],
        /^proto-conformance: .*the method must be one of GET, POST, PUT, PATCH, DELETE/,
      ],
      [
        ["service", attestor.url, "--permission-route", "DELETE /notes/x Notes:Delete"],
        /^proto-conformance: .*not a permission name: Notes:Delete/,
      ],
      [
        ["service", attestor.url, "--permission-route", "DELETE /notes/x notes:delete"],
        /^proto-conformance: --permission-route needs --agent-key and --attestor/,
      ],
    ];
    for (const [args, message] of cases) {
      const result = await cli(args);
      assert.equal(result.code, 2, `${args.join(" ")}: ${result.stderr}`);
      assert.match(result.stderr, message, args.join(" "));
      assert.equal(result.stderr.trimEnd().split("\n").length, 1, `one line: ${result.stderr}`);
      assert.doesNotMatch(result.stderr, /\bat .*\.ts:\d+/, "no stack trace");
      assert.equal(result.stdout, "");
    }
  });
});
