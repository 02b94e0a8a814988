import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { connect } from "node:net";
import { after, before, beforeEach, describe, it } from "node:test";
import { promisify } from "node:util";
import type { HttpsHost, TestCA, TestFetch } from "../src/index.js";
import {
  createTestCA,
  DISCOVERY_PATH,
  PROOF_PATH,
  parseResolveEntries,
  startHttpsHost,
  startSentinel,
  testFetch,
} from "../src/index.js";

const HOSTNAME = "svc.test";
const execFileAsync = promisify(execFile);

describe("test CA", () => {
  it("issues leaf certificates with SANs, serverAuth and a validity window around now", async () => {
    const ca = await createTestCA();
    const leaf = await ca.issue(["svc.test", "127.0.0.1", "::1"]);
    const cert = new X509Certificate(leaf.certPem);
    assert.equal(cert.checkHost("svc.test"), "svc.test");
    assert.equal(cert.checkIP("127.0.0.1"), "127.0.0.1");
    assert.equal(cert.checkIP("::1"), "::1");
    assert.equal(cert.checkHost("other.test"), undefined);
    assert.equal(cert.ca, false);
    assert.deepEqual(cert.keyUsage, ["1.3.6.1.5.5.7.3.1"]);
    assert.ok(cert.checkIssued(new X509Certificate(ca.certPem)));
    assert.ok(cert.verify(new X509Certificate(ca.certPem).publicKey));
    const now = Date.now();
    assert.ok(Date.parse(cert.validFrom) < now && now < Date.parse(cert.validTo));
  });

  it("writes its certificate to a file for NODE_EXTRA_CA_CERTS", async () => {
    const ca = await createTestCA();
    assert.equal(readFileSync(ca.writeCertFile(), "utf8"), ca.certPem);
  });
});

describe("https host", () => {
  let ca: TestCA;
  let host: HttpsHost;
  let fetchTrusted: TestFetch;

  before(async () => {
    ca = await createTestCA();
    host = await startHttpsHost({ ca, hostnames: [HOSTNAME, "127.0.0.1"] });
    fetchTrusted = testFetch(ca, { resolve: host.resolveEntries() });
  });
  after(async () => {
    await fetchTrusted.close();
    await host.close();
  });
  beforeEach(() => host.reset());

  const url = (path: string): string => `${host.origin()}${path}`;

  it("maps its hostnames to the listen address in PROTO_FETCH_RESOLVE syntax", () => {
    assert.equal(host.resolveEntries(), `${HOSTNAME}:${host.port}:127.0.0.1`);
    assert.equal(host.origin(), `https://${HOSTNAME}:${host.port}`);
    assert.deepEqual(
      [...parseResolveEntries("a.test:443:[::1],b.test:8443:10.0.0.1")],
      [
        ["a.test", "::1"],
        ["b.test", "10.0.0.1"],
      ],
    );
  });

  it("is trusted by a child process given the CA file as NODE_EXTRA_CA_CERTS", async () => {
    host.serveProof("tok-child");
    const script = `const r = await fetch(${JSON.stringify(`${host.origin("127.0.0.1")}${PROOF_PATH}`)}); process.stdout.write(await r.text());`;
    const { stdout } = await execFileAsync(process.execPath, ["--input-type=module", "-e", script], {
      env: { ...process.env, NODE_EXTRA_CA_CERTS: ca.writeCertFile() },
    });
    assert.equal(stdout, "tok-child");
  });

  it("is trusted by testFetch for a hostname pinned to 127.0.0.1", async () => {
    host.serveProof("tok-123");
    const res = await fetchTrusted(url(PROOF_PATH));
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("content-type"), "text/plain");
    assert.equal(await res.text(), "tok-123");
    assert.equal(host.requests.length, 1);
    assert.equal(host.requests[0]?.method, "GET");
    assert.equal(host.requests[0]?.path, PROOF_PATH);
    assert.equal(host.requests[0]?.headers.host, `${HOSTNAME}:${host.port}`);
    assert.equal(host.requests[0]?.servername, HOSTNAME);
  });

  it("is rejected by clients that do not trust the test CA", async () => {
    host.serveProof("tok");
    const otherCa = await createTestCA({ commonName: "some other CA" });
    const fetchUntrusted = testFetch(otherCa, { resolve: host.resolveEntries() });
    try {
      await assert.rejects(fetchUntrusted(url(PROOF_PATH)), (error: Error) => {
        assert.match(String(error.cause), /certificate/i);
        return true;
      });
    } finally {
      await fetchUntrusted.close();
    }
    // The process-wide fetch has no test CA either (the IP SAN makes the name check pass).
    await assert.rejects(fetch(`${host.origin("127.0.0.1")}${PROOF_PATH}`), (error: Error) => {
      assert.match(String(error.cause), /certificate/i);
      return true;
    });
    assert.equal(host.requests.length, 0);
  });

  it("serves JSON discovery documents and custom routes", async () => {
    host.serveDiscovery({ service_did: "did:web:svc.test" });
    host.route("/custom", { status: 418, headers: { "x-why": "test" }, body: Buffer.from([1, 2, 3]) });
    host.route("/handler", (req, res) => res.end(req.method));

    const discovery = await fetchTrusted(url(DISCOVERY_PATH));
    assert.equal(discovery.headers.get("content-type"), "application/json");
    assert.deepEqual(await discovery.json(), { service_did: "did:web:svc.test" });

    const custom = await fetchTrusted(url("/custom?x=1"));
    assert.equal(custom.status, 418);
    assert.equal(custom.headers.get("x-why"), "test");
    assert.equal(custom.headers.get("content-type"), "application/octet-stream");
    assert.deepEqual(new Uint8Array(await custom.arrayBuffer()), new Uint8Array([1, 2, 3]));

    assert.equal(await (await fetchTrusted(url("/handler"), { method: "POST" })).text(), "POST");
    assert.equal((await fetchTrusted(url("/nothing"))).status, 404);
    assert.deepEqual(
      host.requests.map((r) => r.path),
      [DISCOVERY_PATH, "/custom?x=1", "/handler", "/nothing"],
    );
  });

  it("misbehaves: wrong-content-type keeps the body", async () => {
    host.serveProof("tok");
    host.misbehave(PROOF_PATH, "wrong-content-type");
    const res = await fetchTrusted(url(PROOF_PATH));
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("content-type"), "text/html; charset=utf-8");
    assert.equal(await res.text(), "tok");
  });

  it("misbehaves: trailing-newline", async () => {
    host.serveProof("tok");
    host.misbehave(PROOF_PATH, "trailing-newline");
    const res = await fetchTrusted(url(PROOF_PATH));
    assert.equal(res.headers.get("content-type"), "text/plain");
    assert.equal(await res.text(), "tok\n");
  });

  it("misbehaves: redirect answers 302 and moves the real response", async () => {
    host.serveProof("tok");
    host.misbehave(PROOF_PATH, "redirect");
    const res = await fetchTrusted(url(PROOF_PATH), { redirect: "manual" });
    assert.equal(res.status, 302);
    const location = res.headers.get("location");
    assert.equal(location, `/moved${PROOF_PATH}`);
    await res.body?.cancel();
    const followed = await fetchTrusted(url(location ?? ""));
    assert.equal(await followed.text(), "tok");
  });

  it("misbehaves: status-500", async () => {
    host.misbehave(DISCOVERY_PATH, "status-500");
    const res = await fetchTrusted(url(DISCOVERY_PATH));
    assert.equal(res.status, 500);
    await res.body?.cancel();
  });

  it("misbehaves: oversized streams more than 64 KiB", async () => {
    host.misbehave(PROOF_PATH, "oversized");
    const res = await fetchTrusted(url(PROOF_PATH));
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("content-length"), null);
    const body = await res.arrayBuffer();
    assert.ok(body.byteLength > 65536, `body is ${body.byteLength} bytes`);
  });

  it("misbehaves: slow-drip sends headers then bytes without ever finishing", async () => {
    host.misbehave(PROOF_PATH, "slow-drip", { intervalMs: 10 });
    const controller = new AbortController();
    const res = await fetchTrusted(url(PROOF_PATH), { signal: controller.signal });
    assert.equal(res.status, 200);
    const reader = res.body?.getReader();
    assert.ok(reader);
    const first = await reader.read();
    assert.equal(first.done, false);
    assert.ok((first.value?.byteLength ?? 0) > 0);
    controller.abort();
    await assert.rejects(reader.read());
  });

  it("misbehaves: hang is cut by the client's timeout", async () => {
    host.misbehave(PROOF_PATH, "hang");
    await assert.rejects(fetchTrusted(url(PROOF_PATH), { signal: AbortSignal.timeout(300) }), {
      name: "TimeoutError",
    });
    assert.equal(host.requests.length, 1);
  });
});

describe("https host shutdown", () => {
  it("close() returns while requests hang and bodies drip", async () => {
    const ca = await createTestCA();
    const host = await startHttpsHost({ ca, hostnames: [HOSTNAME] });
    const fetchTrusted = testFetch(ca, { resolve: { [HOSTNAME]: "127.0.0.1" } });
    host.misbehave("/hang", "hang");
    host.misbehave("/drip", "slow-drip");
    const hanging = fetchTrusted(`${host.origin()}/hang`);
    const dripping = await fetchTrusted(`${host.origin()}/drip`);
    assert.equal(dripping.status, 200);
    await host.close();
    await assert.rejects(hanging);
    await assert.rejects(dripping.text());
    await fetchTrusted.close();
  });
});

describe("sentinel", () => {
  it("counts connections", async () => {
    const sentinel = await startSentinel();
    try {
      assert.equal(sentinel.hits, 0);
      await new Promise<void>((resolve, reject) => {
        const socket = connect(sentinel.port, sentinel.address);
        socket.on("error", reject);
        socket.on("close", () => resolve());
      });
      assert.equal(sentinel.hits, 1);
    } finally {
      await sentinel.close();
    }
  });
});
