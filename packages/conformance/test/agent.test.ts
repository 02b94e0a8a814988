/**
 * The agent mode: our agent pointed at the stand-in passes every probe; an agent broken in one way
 * (requests signed by hand, then altered) fails exactly the probe of that rule; and the command
 * itself, run as a user runs it.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { generateKeyPairSync, type KeyObject } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe as suite, test } from "node:test";
import { fileURLToPath } from "node:url";
import { Agent, getAccount, signUp } from "@proto/agent";
import {
  type ComponentIdentifier,
  contentDigest,
  encodeDidKey,
  fetchTargetUri,
  rawPublicKey,
  signatureHeaderPair,
  signMessage,
  signRequest,
} from "@proto/protocol";
import { freePort } from "@proto/testkit";
import { type AgentStandIn, agentProbes, type ProbeResult, startAgentStandIn } from "../src/index.js";
import { describe } from "./support/run.js";
import { type Attestor, startAttestor } from "./support/targets.js";

const ids = agentProbes.map((p) => p.id);
const ATTESTATION_IDS = ["agent.attestation.presented", "agent.attestation.valid"];
const ACCOUNTS = "/proto/v1/accounts";

const statuses = (results: readonly ProbeResult[]) => results.map((r) => `${r.id}: ${r.status}`);

interface Key {
  did: string;
  privateKey: KeyObject;
}

function newKey(): Key {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  return { did: encodeDidKey(rawPublicKey(publicKey)), privateKey };
}

async function postJson(url: string, body: unknown): Promise<Record<string, unknown>> {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const json = (await response.json()) as Record<string, unknown>;
  if (!response.ok) throw new Error(`${url} answered ${response.status}: ${JSON.stringify(json)}`);
  return json;
}

/** An agent of ours linked to `attestor` through its test hook, reaching `https://` URLs of the stand-in over http. */
async function linkedAgent(attestor: Attestor, standInOrigin: string): Promise<Agent> {
  const dir = mkdtempSync(join(tmpdir(), "proto-conformance-agent-"));
  process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
  const plain = standInOrigin.replace(/^https:/, "http:");
  const fetchThrough: typeof fetch = (input, init) => {
    const url = input instanceof Request ? input.url : String(input);
    return fetch(url.startsWith(standInOrigin) ? plain + url.slice(standInOrigin.length) : input, init);
  };
  const { agent } = Agent.init({ home: join(dir, "home"), fetch: fetchThrough, attestorUrl: attestor.url });
  const client = agent.attestor();
  const started = await client.linkStart({ label: "conformance" });
  await postJson(`${attestor.url}/__test/link/confirm`, { req_id: started.req_id, email: "agent-mode@example.com" });
  await client.linkPoll(started.req_id);
  return agent;
}

/** Our agent's session: discovery, signup, introspection, and a POST with a body. */
async function session(agent: Agent, url: string): Promise<void> {
  const service = await agent.service(url);
  const account = await signUp(service);
  assert.equal(account.agent_did, agent.did);
  assert.equal((await getAccount(service)).account_id, account.account_id);
  const { response } = await service.send("/proto/v1/notes", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ text: "a note" }),
  });
  assert.equal(response.status, 200);
}

suite("our agent against the stand-in", () => {
  let attestor: Attestor;
  before(async () => {
    attestor = await startAttestor();
  });
  after(() => attestor.close());

  test("attested_only: signup with an attestation, a GET and a POST pass every probe", async () => {
    const port = await freePort();
    const standIn = await startAgentStandIn({
      port,
      publicUrl: `https://127.0.0.1:${port}`,
      attestor: { url: attestor.url, issuer: "proto-trust" },
      requests: 3,
    });
    try {
      const agent = await linkedAgent(attestor, standIn.url);
      await session(agent, standIn.url);
      await standIn.done;
      assert.equal(standIn.checked(), 3);
      const results = standIn.report();
      assert.deepEqual(
        statuses(results),
        ids.map((id) => `${id}: pass`),
        describe(results),
      );
    } finally {
      await standIn.close();
    }
  });

  test("open: the signing probes pass, the attestation probes are skipped with the reason", async () => {
    const port = await freePort();
    const standIn = await startAgentStandIn({ port, publicUrl: `https://127.0.0.1:${port}` });
    try {
      const agent = await linkedAgent(attestor, standIn.url);
      await session(agent, standIn.url);
      const results = standIn.report();
      assert.deepEqual(
        results.filter((r) => r.status !== "pass").map((r) => `${r.id}: ${r.status}: ${r.message}`),
        ATTESTATION_IDS.map((id) => `${id}: skipped: the stand-in is open (--open): it asks for no attestation`),
        describe(results),
      );
    } finally {
      await standIn.close();
    }
  });

  test("nothing sent: every probe is skipped as never exercised, none fails", async () => {
    const standIn = await startAgentStandIn({ port: 0, attestor: { url: attestor.url, issuer: "proto-trust" } });
    await standIn.close();
    const results = standIn.report();
    assert.deepEqual(
      statuses(results),
      ids.map((id) => `${id}: skipped`),
    );
    assert.match(results[0]?.message ?? "", /^never exercised: /);
  });
});

/** What a hand-made agent sends: a method, a path and a body, with its signature headers. */
interface Sent {
  method: "GET" | "POST";
  path: string;
  body?: string;
  headers: Record<string, string>;
}

/** A correct request signed with `signRequest`, then `alter`ed. */
function signed(
  standIn: AgentStandIn,
  key: Key,
  now: number,
  request: { method: "GET" | "POST"; path: string; body?: string },
  sign: { created?: number; expires?: number; nonce?: string; signedUrl?: string; signedBody?: string } = {},
): Sent {
  const body = request.body;
  const { headers } = signRequest(
    { method: request.method, url: sign.signedUrl ?? `${standIn.url}${request.path}`, body: sign.signedBody ?? body },
    {
      keyid: key.did,
      privateKey: key.privateKey,
      created: sign.created ?? now,
      ...(sign.expires === undefined ? {} : { expires: sign.expires }),
      ...(sign.nonce === undefined ? {} : { nonce: sign.nonce }),
    },
  );
  return {
    ...request,
    headers: { ...(body === undefined ? {} : { "content-type": "application/json" }), ...headers },
  };
}

/** A request signed over the given components and parameters (what `signRequest` never makes). */
function signedWith(
  standIn: AgentStandIn,
  key: Key,
  now: number,
  request: { method: "POST"; path: string; body: string },
  components: string[],
  alg = "ed25519",
): Sent {
  const digest = contentDigest(Buffer.from(request.body, "utf8"));
  const signature = signMessage(
    {
      method: request.method,
      targetUri: fetchTargetUri(`${standIn.url}${request.path}`),
      header: (name) => (name === "content-digest" ? digest : name === "content-type" ? "application/json" : undefined),
    },
    components.map((name): ComponentIdentifier => [name, new Map()]),
    [
      ["created", now],
      ["expires", now + 60],
      ["nonce", `n-${Math.random().toString(36).slice(2)}`],
      ["keyid", key.did],
      ["alg", alg],
    ],
    key.privateKey,
    "sig1",
  );
  return {
    ...request,
    headers: { "content-type": "application/json", "content-digest": digest, ...signatureHeaderPair([signature]) },
  };
}

async function send(standIn: AgentStandIn, request: Sent): Promise<number> {
  const response = await fetch(`${standIn.url}${request.path}`, {
    method: request.method,
    headers: request.headers,
    ...(request.body === undefined ? {} : { body: request.body }),
  });
  await response.arrayBuffer();
  return response.status;
}

/** A JWT minted by our attestor for `key` (linked there) with audience `aud`. */
async function mint(attestor: Attestor, key: Key, aud: string): Promise<string> {
  const body = JSON.stringify({ aud });
  const url = `${attestor.url}/v1/token`;
  const { headers } = signRequest({ method: "POST", url, body }, { keyid: key.did, privateKey: key.privateKey });
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body,
  });
  const json = (await response.json()) as { jwt?: string };
  assert.equal(response.status, 200, JSON.stringify(json));
  return json.jwt ?? "";
}

interface BrokenCase {
  name: string;
  /** The one probe it fails. */
  fails: string;
  message: RegExp;
  /** An attested_only stand-in (the attestation cases). */
  attested?: boolean;
  /** The statuses the stand-in answers, in order: what the agent saw. */
  answers: number[];
  requests(c: { standIn: AgentStandIn; key: Key; now: number; mintFor(aud: string): Promise<string> }): Promise<Sent[]>;
}

const CASES: BrokenCase[] = [
  {
    name: "a reused nonce",
    fails: "agent.nonce.fresh",
    message: /nonce n-1 was already used by GET .*\/proto\/v1\/accounts\/me/,
    answers: [200, 401],
    requests: async ({ standIn, key, now }) => [
      signed(standIn, key, now, { method: "GET", path: `${ACCOUNTS}/me` }, { nonce: "n-1" }),
      signed(standIn, key, now, { method: "POST", path: ACCOUNTS, body: "{}" }, { nonce: "n-1" }),
    ],
  },
  {
    name: "a window over 300 s",
    fails: "agent.signature.window",
    message: /expires - created is 301 s \(at most 300\)/,
    answers: [401],
    requests: async ({ standIn, key, now }) => [
      signed(standIn, key, now, { method: "POST", path: ACCOUNTS, body: "{}" }, { expires: now + 301 }),
    ],
  },
  {
    name: "created in the future",
    fails: "agent.signature.window",
    message: /created is 600 s in the future/,
    answers: [401],
    requests: async ({ standIn, key, now }) => [
      signed(standIn, key, now, { method: "GET", path: `${ACCOUNTS}/me` }, { created: now + 600, expires: now + 660 }),
    ],
  },
  {
    name: "expires long past",
    fails: "agent.signature.window",
    message: /expires passed 600 s before the request came/,
    answers: [401],
    requests: async ({ standIn, key, now }) => [
      signed(
        standIn,
        key,
        now,
        { method: "POST", path: ACCOUNTS, body: "{}" },
        { created: now - 660, expires: now - 600 },
      ),
    ],
  },
  {
    name: "a digest of another body",
    fails: "agent.digest",
    message: /Content-Digest sha-256=.* is not the sha-256 of the 14-byte body/,
    answers: [401],
    requests: async ({ standIn, key, now }) => [
      signed(standIn, key, now, { method: "POST", path: ACCOUNTS, body: '{"sent":true}\n' }, { signedBody: "{}" }),
    ],
  },
  {
    name: "a Content-Digest on a bodyless GET",
    fails: "agent.digest.bodyless",
    message: /a request without a body carries Content-Digest/,
    answers: [200],
    requests: async ({ standIn, key, now }) => {
      const request = signed(standIn, key, now, { method: "GET", path: `${ACCOUNTS}/me` });
      return [{ ...request, headers: { ...request.headers, "content-digest": contentDigest(Buffer.from("{}")) } }];
    },
  },
  {
    name: "content-digest missing from the components of a POST",
    fails: "agent.signature.components",
    message: /covers \("@method" "@target-uri"\): content-digest missing \(the request has a body\)/,
    answers: [401],
    requests: async ({ standIn, key, now }) => [
      signedWith(standIn, key, now, { method: "POST", path: ACCOUNTS, body: "{}" }, ["@method", "@target-uri"]),
    ],
  },
  {
    name: "content-type covered besides the required components of a POST",
    fails: "agent.signature.components",
    message:
      /covers \("@method" "@target-uri" "content-digest" "content-type"\): content-type not among the required components/,
    answers: [401],
    requests: async ({ standIn, key, now }) => [
      signedWith(standIn, key, now, { method: "POST", path: ACCOUNTS, body: "{}" }, [
        "@method",
        "@target-uri",
        "content-digest",
        "content-type",
      ]),
    ],
  },
  {
    name: "alg other than ed25519",
    fails: "agent.signature.params",
    message: /alg is rsa-pss-sha512, not ed25519/,
    answers: [401],
    requests: async ({ standIn, key, now }) => [
      signedWith(
        standIn,
        key,
        now,
        { method: "POST", path: ACCOUNTS, body: "{}" },
        ["@method", "@target-uri", "content-digest"],
        "rsa-pss-sha512",
      ),
    ],
  },
  {
    name: "a @target-uri of another host",
    fails: "agent.signature.verifies",
    message:
      /the signature does not verify over @method GET and @target-uri http:\/\/127\.0\.0\.1:\d+\/proto\/v1\/accounts\/me/,
    answers: [401],
    requests: async ({ standIn, key, now }) => [
      signed(
        standIn,
        key,
        now,
        { method: "GET", path: `${ACCOUNTS}/me` },
        { signedUrl: `https://elsewhere.example${ACCOUNTS}/me` },
      ),
    ],
  },
  {
    name: "no attestation after the 401",
    fails: "agent.attestation.presented",
    message: /came back without Proto-Attestation after 401 attestation_required/,
    attested: true,
    answers: [401, 401],
    requests: async ({ standIn, key, now }) => [
      signed(standIn, key, now, { method: "POST", path: ACCOUNTS, body: "{}" }),
      signed(standIn, key, now, { method: "POST", path: ACCOUNTS, body: "{}" }),
    ],
  },
  {
    name: "an attestation for another service",
    fails: "agent.attestation.valid",
    message: /the attestation does not verify/,
    attested: true,
    answers: [401],
    requests: async ({ standIn, key, now, mintFor }) => {
      const request = signed(standIn, key, now, { method: "POST", path: ACCOUNTS, body: "{}" });
      const jwt = await mintFor("did:web:elsewhere.example");
      return [{ ...request, headers: { ...request.headers, "proto-attestation": jwt } }];
    },
  },
];

suite("an agent broken in one way fails that probe and no other", () => {
  let attestor: Attestor;
  let linked: Key;
  let now: number;
  before(async () => {
    attestor = await startAttestor();
    const { did, pem } = await attestor.linkAgent();
    const { createPrivateKey } = await import("node:crypto");
    linked = { did, privateKey: createPrivateKey(pem) };
    // One instant for the whole suite: what is signed, and what the stand-in takes as now.
    now = Math.floor(Date.now() / 1000);
  });
  after(() => attestor.close());

  test("every probe has a broken agent below", () => {
    assert.deepEqual(new Set(CASES.map((c) => c.fails)), new Set(ids));
  });

  for (const c of CASES) {
    test(c.name, async () => {
      const standIn = await startAgentStandIn({
        port: 0,
        nowSeconds: () => now,
        ...(c.attested ? { attestor: { url: attestor.url, issuer: "proto-trust" } } : {}),
      });
      try {
        const key = c.attested ? linked : newKey();
        const requests = await c.requests({ standIn, key, now, mintFor: (aud) => mint(attestor, key, aud) });
        const answers: number[] = [];
        for (const request of requests) answers.push(await send(standIn, request));
        assert.deepEqual(answers, c.answers);
        const results = standIn.report();
        assert.deepEqual(
          results.filter((r) => r.status === "fail").map((r) => r.id),
          [c.fails],
          describe(results),
        );
        const failed = results.find((r) => r.id === c.fails);
        assert.match(failed?.message ?? "", c.message);
        assert.ok(failed?.exchange, "the request that broke it is in the result");
        assert.equal(failed.exchange.status, c.answers.at(-1));
      } finally {
        await standIn.close();
      }
    });
  }
});

const PACKAGE_DIR = join(dirname(fileURLToPath(import.meta.url)), "..");

/** `proto-conformance agent ...` as a child process, once it says where it listens. */
async function startAgentCli(args: string[]): Promise<{
  url: string;
  output: { stdout: string; stderr: string };
  child: ReturnType<typeof spawn>;
  exited: Promise<number | null>;
  done(): void;
}> {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of ["NODE_TEST_CONTEXT", "NODE_OPTIONS"]) delete env[name];
  const child = spawn(
    process.execPath,
    ["--conditions=source", "--import", "tsx", join(PACKAGE_DIR, "src/cli.ts"), "agent", ...args],
    { cwd: PACKAGE_DIR, env, stdio: ["ignore", "pipe", "pipe"] },
  );
  const killer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  const output = { stdout: "", stderr: "" };
  child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
    output.stderr += chunk;
  });
  const exited = new Promise<number | null>((resolve) => child.once("close", resolve));
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
      output.stdout += chunk;
      const match = /^point the agent at (http:\/\/127\.0\.0\.1:\d+)\n/.exec(output.stdout);
      if (match?.[1]) resolve(match[1]);
    });
    child.once("close", () => reject(new Error(`exited before printing the URL: ${output.stderr}`)));
  });
  return { url, output, child, exited, done: () => clearTimeout(killer) };
}

test("the command: prints the URL, checks --requests N requests, reports, exits 1 on a failure", async () => {
  const dir = mkdtempSync(join(tmpdir(), "proto-conformance-cli-"));
  const junit = join(dir, "agent.xml");
  const { url, output, exited, done } = await startAgentCli([
    "--listen",
    "0",
    "--open",
    "--requests",
    "2",
    "--junit",
    junit,
  ]);
  try {
    const standIn = { url } as AgentStandIn;
    const key = newKey();
    const now = Math.floor(Date.now() / 1000);
    const first = signed(standIn, key, now, { method: "GET", path: `${ACCOUNTS}/me` }, { nonce: "cli-nonce" });
    assert.equal(await send(standIn, first), 200);
    assert.equal(await send(standIn, first), 401);
    assert.equal(await exited, 1, output.stderr);
  } finally {
    done();
  }
  const lines = output.stdout.split("\n");
  assert.equal(lines[0], `point the agent at ${url}`);
  assert.match(output.stdout, /agent\.nonce\.fresh\s+FAIL\s+no nonce is used twice in the session/);
  assert.match(output.stdout, /agent\.signature\.components\s+pass/);
  assert.match(
    output.stdout,
    /nonce cli-nonce was already used by GET http:\/\/127\.0\.0\.1:\d+\/proto\/v1\/accounts\/me/,
  );
  assert.match(output.stdout, /\n5 passed, 1 failed, 3 skipped\n$/);
  assert.equal(output.stderr, "");
  const xml = readFileSync(junit, "utf8");
  assert.match(xml, /<testcase [^>]*name="agent\.nonce\.fresh"[^>]*>\s*<failure/);
  rmSync(dir, { recursive: true, force: true });
});

test("the command: a session that ends before any agent request exits 3 and says nothing was checked", async () => {
  const { url, output, child, exited, done } = await startAgentCli(["--listen", "0", "--open"]);
  try {
    // Reading the discovery document is not a request to check.
    const discovery = await fetch(`${url}/.well-known/proto`);
    assert.equal(discovery.status, 200);
    await discovery.text();
    child.kill("SIGINT");
    assert.equal(await exited, 3, output.stderr);
  } finally {
    done();
  }
  assert.match(output.stdout, /\n0 passed, 0 failed, 9 skipped\n$/);
  assert.equal(output.stderr, "proto-conformance: no agent request reached the stand-in; nothing was checked\n");
});
