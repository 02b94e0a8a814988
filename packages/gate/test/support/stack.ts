/**
 * What sits behind a TLS front in the gate's tests: OUR attestor (in this process, test hooks on,
 * plain http on loopback), the Python standard-library application (test/support/echo_app.py), and
 * proto-gate configured from a proto-gate.yaml the way an operator writes it, listening on plain
 * http on 127.0.0.1 with the front as its trusted proxy. Also the agent's side: our `proto` CLI run
 * as a child process with its own home, linked at that attestor.
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { buildTrustApp, readTrustConfig } from "@proto/server";
import { freePort, quietStream } from "@proto/testkit";
import pino from "pino";
import { loadConfigFile } from "../../src/config.js";
import { createGate, type Gate } from "../../src/gate.js";
import { type EchoApp, startEchoApp } from "./echo-app.js";

/** Everything from 127.0.0.1: limits no test meets (the limiter stays on). */
const RELAXED_TRUST_LIMITS = "link_start=100000/60,link_start_agent=100000/3600,link_poll=100000/60,token=100000/60";

export interface StackOptions {
  /** A folder of the test's own (the gate's file and databases go there). */
  dir: string;
  /** The front's https origin: the gate's `service.public_url`, what agents call and sign. */
  publicUrl: string;
}

export interface Stack {
  /** The attestor's `{trust_url}`: `http://127.0.0.1:PORT`. */
  trustUrl: string;
  gate: Gate;
  /** The gate's plain-http port on 127.0.0.1 (the front's upstream). */
  gatePort: number;
  /** The text of the proto-gate.yaml the gate was started from. */
  gateYaml: string;
  /** Stops the Python application (the gate keeps running). */
  stopApp(): Promise<void>;
  /** Starts it again on the same port. */
  startApp(): Promise<void>;
  /** POSTs to one of the attestor's test hooks (`/__test/link/confirm`: a person confirms a link). */
  hook(path: string, body: Record<string, unknown>): Promise<{ status: number; json: Record<string, unknown> }>;
  close(): Promise<void>;
}

/** The gate's file: routes for each part of the story, the front trusted, the app on loopback. */
export function gateYaml(publicUrl: string, gatePort: number, appPort: number, trustUrl: string): string {
  const url = new URL(publicUrl);
  return `service:
  did: did:web:${url.hostname}%3A${url.port}
  name: Echo
  public_url: ${publicUrl}
  unclaimed_mode: free
  recipient_types: [oidc]
listen:
  host: 127.0.0.1
  port: ${gatePort}
upstream:
  url: http://127.0.0.1:${appPort}
attestors:
  proto-trust:
    url: ${trustUrl}
store:
  database: sqlite:./gate.db
trusted_proxies: [127.0.0.1]
routes:
  - path: /open/
    access: open
  - path: /sse
    access: open
  - path: /attested/
    access: attested
  - path: /
    access: agents
limits:
  max_body_bytes: 67108864
log_level: warn
`;
}

export async function startStack(options: StackOptions): Promise<Stack> {
  const trustPort = await freePort();
  const trustUrl = `http://127.0.0.1:${trustPort}`;
  const trust = await buildTrustApp(
    readTrustConfig({
      PROTO_TEST_HOOKS: "1",
      TRUST_PUBLIC_URL: trustUrl,
      TRUST_DATABASE_URL: `sqlite:${join(options.dir, "trust.db")}`,
      TRUST_KEY_ENCRYPTION_KEY: Buffer.alloc(32, 7).toString("base64url"),
      TRUST_PSEUDONYM_KEY: Buffer.alloc(32, 9).toString("base64url"),
      TRUST_RATE_LIMITS: RELAXED_TRUST_LIMITS,
      LOG_LEVEL: "warn",
    }),
    { logStream: quietStream() },
  );
  await trust.app.listen({ port: trustPort, host: "127.0.0.1" });

  const appPort = await freePort();
  let app: EchoApp | undefined = await startEchoApp(appPort);

  const gatePort = await freePort();
  const yaml = gateYaml(options.publicUrl, gatePort, appPort, trustUrl);
  const file = join(options.dir, "proto-gate.yaml");
  writeFileSync(file, yaml);
  const gate = await createGate(loadConfigFile(file, {}), { logger: pino({ level: "silent" }) });
  await new Promise<void>((resolve) => gate.server.listen(gatePort, "127.0.0.1", resolve));

  return {
    trustUrl,
    gate,
    gatePort,
    gateYaml: yaml,
    async stopApp() {
      await app?.stop();
      app = undefined;
    },
    async startApp() {
      app ??= await startEchoApp(appPort);
    },
    async hook(path, body) {
      const response = await fetch(`${trustUrl}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      return { status: response.status, json: (await response.json()) as Record<string, unknown> };
    },
    async close() {
      await gate.close();
      await app?.stop();
      await trust.close();
    },
  };
}

// --- the agent's side: our `proto` CLI ---

const AGENT_DIR = fileURLToPath(new URL("../../../agent/", import.meta.url));
/** The source of the `proto` command (bin/proto.js runs its compiled form), run through tsx like the agent's own tests. */
const PROTO_CLI = join(AGENT_DIR, "src/cli.ts");

export interface ProtoResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface ProtoCli {
  /** Runs `proto ARGS` to the end. */
  run(...args: string[]): Promise<ProtoResult>;
  /** `proto ... --json`: exit 0 and its JSON document, or an error quoting what it printed. */
  json(...args: string[]): Promise<Record<string, unknown>>;
  /** `proto trust link` at the attestor, confirmed by a person through the attestor's test hook. */
  link(stack: Stack): Promise<void>;
}

/** `proto` with its own PROTO_HOME, trusting the test CA's certificate file (NODE_EXTRA_CA_CERTS). */
export function protoCli(home: string, caFile: string): ProtoCli {
  const env: NodeJS.ProcessEnv = { ...process.env, PROTO_HOME: home, NODE_EXTRA_CA_CERTS: caFile };
  // Nothing of the test runner's or the developer's own agent leaks in.
  for (const name of [
    "PROTO_ATTESTOR_URL",
    "PROTO_DIRECTORY_URL",
    "PROTO_WEB_BOT_AUTH",
    "NODE_TEST_CONTEXT",
    "NODE_OPTIONS",
  ])
    delete env[name];

  const start = (args: string[], onStderr?: (text: string) => void) => {
    const child = spawn(process.execPath, ["--conditions=source", "--import", "tsx", PROTO_CLI, ...args], {
      cwd: AGENT_DIR,
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    const output = { stdout: "", stderr: "" };
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      output.stdout += chunk;
    });
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      output.stderr += chunk;
      onStderr?.(output.stderr);
    });
    // A wedged child must not hang the suite.
    const killer = setTimeout(() => child.kill("SIGKILL"), 120_000);
    return new Promise<ProtoResult>((resolve) => {
      child.once("close", (code) => {
        clearTimeout(killer);
        resolve({ code, ...output });
      });
    });
  };

  const json = async (...args: string[]) => {
    const result = await start([...args, "--json"]);
    if (result.code !== 0) throw new Error(`proto ${args.join(" ")} exited ${result.code}:\n${result.stderr}`);
    return JSON.parse(result.stdout) as Record<string, unknown>;
  };

  return {
    run: (...args) => start(args),
    json,
    async link(stack) {
      await json("init", "--attestor", stack.trustUrl);
      // The CLI prints its link request, then polls; the person confirms once it is waiting.
      let confirming: Promise<unknown> | undefined;
      let confirmFailed: Error | undefined;
      const linked = start(
        ["trust", "link", "--attestor", stack.trustUrl, "--label", "tls front agent", "--json"],
        (text) => {
          if (confirming !== undefined || !text.includes('"waiting"')) return;
          const started = text.split("\n").find((line) => line.includes('"link_started"'));
          const reqId = started === undefined ? undefined : (JSON.parse(started) as { req_id: string }).req_id;
          confirming = stack
            .hook("/__test/link/confirm", {
              req_id: reqId,
              email: `person-${randomBytes(3).toString("hex")}@mail.test`,
            })
            .then((answer) => {
              if (answer.status !== 200) confirmFailed = new Error(`link confirm: ${JSON.stringify(answer.json)}`);
            });
        },
      );
      const result = await linked;
      await confirming;
      if (confirmFailed !== undefined) throw confirmFailed;
      if (result.code !== 0) throw new Error(`proto trust link exited ${result.code}:\n${result.stderr}`);
    },
  };
}
