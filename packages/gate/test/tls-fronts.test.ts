/**
 * Issue 40, item 3: proto-gate behind real nginx and real Caddy (Debian's packages) as TLS fronts,
 * each running the recipe of docs/gate-tls-proxies.md as written. Behind the front: the gate on
 * plain http on 127.0.0.1 (the front its trusted proxy), OUR attestor, and the Python
 * standard-library app that echoes the identity headers it receives. The agent is our `proto` CLI
 * as a child process (its own home, the test CA trusted through NODE_EXTRA_CA_CERTS) and, where the
 * CLI cannot do what the test needs (leave out an attestation), the SDK it is built on.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Agent, discoverService, ServiceClient } from "@proto/agent";
import { createTestCA, freePort, type TestFetch, testFetch } from "@proto/testkit";
import { type Front, type FrontName, type FrontOptions, findBinary, startCaddy, startNginx } from "./support/fronts.js";
import { type ProtoCli, protoCli, type Stack, startStack } from "./support/stack.js";

/** Resolves to 127.0.0.1 on every machine (/etc/hosts), so the CLI child needs no pinned names. */
const HOST = "localhost";

interface Echoed {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: { length: number; sha256: string };
}

/** A `proto call --json` document. */
interface Called {
  status: number;
  attested: boolean;
  body: Echoed;
}

const FRONTS: { name: FrontName; start: (binary: string, options: FrontOptions) => Promise<Front> }[] = [
  { name: "nginx", start: startNginx },
  { name: "caddy", start: startCaddy },
];

for (const { name, start } of FRONTS) {
  const binary = findBinary(name);
  const skip = binary === undefined ? `${name} is not installed (apt-get install ${name}; .ci/run installs it)` : false;

  describe(`proto-gate behind ${name} as its TLS front`, { skip, timeout: 300_000 }, () => {
    let temp: string;
    let caFile: string;
    let stack: Stack;
    let front: Front;
    let origin: string;
    let fetch: TestFetch;
    let home: string;
    let cli: ProtoCli;
    let accountId: string;

    before(async () => {
      temp = mkdtempSync(join(tmpdir(), `proto-gate-${name}-`));
      const ca = await createTestCA();
      caFile = join(temp, "ca.pem");
      writeFileSync(caFile, ca.certPem);
      const { certPem, keyPem } = await ca.issue([HOST]);
      const certFile = join(temp, "cert.pem");
      const keyFile = join(temp, "key.pem");
      writeFileSync(certFile, certPem);
      writeFileSync(keyFile, keyPem, { mode: 0o600 });

      const port = await freePort();
      const stackDir = join(temp, "stack");
      mkdirSync(stackDir);
      stack = await startStack({ dir: stackDir, publicUrl: `https://${HOST}:${port}` });
      front = await start(binary!, {
        dir: join(temp, name),
        port,
        host: HOST,
        certFile,
        keyFile,
        gatePort: stack.gatePort,
      });
      origin = front.origin;
      fetch = testFetch(ca, { resolve: { [HOST]: "127.0.0.1" } });
      home = join(temp, "agent-home");
      cli = protoCli(home, caFile);
      await cli.link(stack);
    });

    after(async () => {
      await front?.stop();
      await stack?.close();
      await fetch?.close();
      if (temp) rmSync(temp, { recursive: true, force: true });
    });

    async function echoed(response: Response): Promise<Echoed> {
      assert.equal(response.status, 200, await response.clone().text());
      assert.equal(response.headers.get("x-echo-app"), "python");
      return (await response.json()) as Echoed;
    }

    async function call(...args: string[]): Promise<Called> {
      const called = (await cli.json("call", ...args)) as unknown as Called;
      assert.equal(called.status, 200, JSON.stringify(called.body));
      return called;
    }

    /** The SDK on the CLI's own home (same key, same link). */
    function sdkAgent(): Agent {
      return Agent.load({ home, fetch });
    }

    test("the proto CLI signs up through the front, calls, and is recognised across calls", async () => {
      const account = await cli.json("account", "show", origin);
      assert.match(String(account.account_id), /\S/);
      accountId = String(account.account_id);
      const did = String((await cli.json("whoami")).did);

      const first = await call(`${origin}/api/notes?x=1`, "--data", '{"text":"hello"}');
      assert.equal(first.body.method, "POST");
      assert.equal(first.body.path, "/api/notes?x=1");
      assert.equal(first.body.headers["proto-gate-caller"], "agent");
      assert.equal(first.body.headers["proto-gate-agent-did"], did);
      assert.equal(first.body.headers["proto-gate-account"], accountId);
      assert.equal(first.body.body.sha256, createHash("sha256").update('{"text":"hello"}').digest("hex"));

      // A target a front could "normalise" (an encoded slash, a double slash, an encoded query):
      // the agent signed these bytes, so the front must pass them on as they are.
      const target = "/api/odd%2Fpath//x?q=a%20b&r=%7E";
      const second = await call(`${origin}${target}`);
      assert.equal(second.body.path, target);
      assert.equal(second.body.headers["proto-gate-account"], accountId);
    });

    test("an attested-only route refuses a signed call without an attestation; the CLI, attesting, passes", async () => {
      const discovery = await discoverService(origin, { fetch });
      const bare = new ServiceClient(discovery, { identity: sdkAgent().identity, fetch, retryWithAttestation: false });
      const refused = await bare.fetch("/attested/thing");
      assert.equal(refused.status, 401);
      assert.equal(((await refused.json()) as { error: { code: string } }).error.code, "attestation_required");

      const attested = await call(`${origin}/attested/thing`);
      assert.equal(attested.attested, true);
      assert.equal(attested.body.headers["proto-gate-via"], "signature+attestation");
      assert.equal(attested.body.headers["proto-gate-verification"], "email");
      assert.equal(attested.body.headers["proto-gate-account"], accountId);
    });

    test("Proto-Gate-* headers sent through the front never reach the app", async () => {
      const spoof = {
        "Proto-Gate-Account": "acct_spoofed",
        "proto-gate-caller": "agent",
        "PROTO-GATE-VERIFICATION": "passkey",
      };
      const open = await echoed(await fetch(`${origin}/open/x`, { headers: spoof }));
      assert.equal(open.headers["proto-gate-account"], undefined);
      assert.equal(open.headers["proto-gate-verification"], undefined);
      assert.equal(open.headers["proto-gate-caller"], "anonymous");

      const signed = await call(
        `${origin}/api/x`,
        "-H",
        "Proto-Gate-Account: acct_spoofed",
        "-H",
        "Proto-Gate-Verification: passkey",
      );
      assert.equal(signed.body.headers["proto-gate-account"], accountId);
      assert.equal(signed.body.headers["proto-gate-verification"], undefined);
    });

    test("a 50 MB upload passes intact: streamed on an open route, verified then forwarded on an agent route", async () => {
      const big = randomBytes(50 * 1024 * 1024);
      const sha256 = createHash("sha256").update(big).digest("hex");
      const open = await echoed(await fetch(`${origin}/open/upload`, { method: "PUT", body: big }));
      assert.deepEqual(open.body, { length: big.length, sha256 });

      const client = await sdkAgent().service(origin);
      const signed = await echoed(await client.fetch("/api/upload", { method: "PUT", body: big }));
      assert.deepEqual(signed.body, { length: big.length, sha256 });
      assert.equal(signed.headers["proto-gate-account"], accountId);
    });

    test("a server-sent event stream comes back whole, as the app sent it", async () => {
      const response = await fetch(`${origin}/sse`);
      assert.equal(response.status, 200);
      assert.equal(response.headers.get("content-type"), "text/event-stream");
      assert.equal(await response.text(), [0, 1, 2, 3, 4].map((i) => `id: ${i}\ndata: event ${i}\n\n`).join(""));
    });

    test("the app stopped: 503 with Retry-After through the front; started again: served, nothing restarted", async () => {
      await stack.stopApp();
      const down = await fetch(`${origin}/open/x`);
      assert.equal(down.status, 503);
      assert.equal(down.headers.get("retry-after"), "5");
      assert.equal(((await down.json()) as { error: { code: string } }).error.code, "gate_upstream_unavailable");

      await stack.startApp();
      const up = await echoed(await fetch(`${origin}/open/x`));
      assert.equal(up.path, "/open/x");
      const signed = await call(`${origin}/api/after-restart`);
      assert.equal(signed.body.headers["proto-gate-account"], accountId);
    });

    test("X-Forwarded-For as the app sees it names the real client, not the value it forged", async () => {
      const forged = { "X-Forwarded-For": "203.0.113.66" };
      const open = await echoed(await fetch(`${origin}/open/xff`, { headers: forged }));
      assert.equal(open.headers["x-forwarded-for"], "127.0.0.1");
      const signed = await call(`${origin}/api/xff`, "-H", "X-Forwarded-For: 203.0.113.66");
      assert.equal(signed.body.headers["x-forwarded-for"], "127.0.0.1");
    });

    test("a client at an address other than the front's is named once in X-Forwarded-For", async () => {
      // 127.0.0.2 is still this machine but not the trusted proxy (127.0.0.1), as a client on
      // the Internet would be: the app must see it, alone, not the front and not a forged value.
      const seen = await fromAddress("127.0.0.2", caFile, new URL(`${origin}/open/xff`), {
        "X-Forwarded-For": "203.0.113.66",
      });
      assert.equal(seen.headers["x-forwarded-for"], "127.0.0.2");
    });
  });
}

/** GET `url` over a connection from `localAddress`, through node:https (undici cannot pick the local address per request). */
function fromAddress(localAddress: string, caFile: string, url: URL, headers: Record<string, string>): Promise<Echoed> {
  return new Promise((resolve, reject) => {
    const outgoing = request(
      {
        host: "127.0.0.1",
        servername: url.hostname,
        port: url.port,
        path: `${url.pathname}${url.search}`,
        headers: { ...headers, host: url.host },
        localAddress,
        ca: readFileSync(caFile),
      },
      (response) => {
        let text = "";
        response.setEncoding("utf8").on("data", (chunk: string) => {
          text += chunk;
        });
        response.on("end", () => {
          if (response.statusCode !== 200) reject(new Error(`${response.statusCode}: ${text}`));
          else resolve(JSON.parse(text) as Echoed);
        });
      },
    );
    outgoing.on("error", reject);
    outgoing.end();
  });
}
