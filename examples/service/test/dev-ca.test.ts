/**
 * The development CA of `npm run dev` (scripts/dev/ca.ts): kept across runs, its keys private to
 * their owner, the server certificate renewed before it ends, and unable to vouch for anything but
 * this machine (Node refuses its certificate for another name). Real TLS handshakes, with the
 * clock injected for the renewals.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { connect } from "node:tls";
import { ensureDevCa } from "../../../scripts/dev/ca.js";

const DAY_MS = 24 * 60 * 60 * 1000;

function tempDir(t: { after(fn: () => void): void }): string {
  const dir = mkdtempSync(join(tmpdir(), "proto-dev-ca-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A TLS handshake to a server with this certificate, from a client that trusts only `caPem`. */
async function handshake(server: { certPem: string; keyPem: string }, caPem: string, name: string): Promise<string> {
  const https = createServer({ cert: server.certPem, key: server.keyPem }, (_request, response) => response.end());
  await new Promise<void>((resolve) => https.listen(0, "127.0.0.1", resolve));
  const { port } = https.address() as { port: number };
  try {
    return await new Promise<string>((resolve) => {
      const socket = connect({ port, host: "127.0.0.1", ca: [caPem], servername: name }, () => {
        socket.end();
        resolve("trusted");
      });
      socket.once("error", (error) => resolve(error.message));
    });
  } finally {
    https.close();
  }
}

test("made once, kept across runs, keys readable by their owner only", async (t) => {
  const dir = join(tempDir(t), "dev-ca");
  const first = await ensureDevCa({ dir });
  assert.equal(first.ca, "created");
  assert.equal(first.caCertPath, join(dir, "ca.pem"));
  for (const key of ["ca-key.pem", "localhost-key.pem"]) assert.equal(statSync(join(dir, key)).mode & 0o777, 0o600);
  assert.equal(statSync(dir).mode & 0o077, 0);

  const second = await ensureDevCa({ dir });
  assert.equal(second.ca, "kept");
  assert.equal(second.caCertPem, first.caCertPem);
  assert.equal(second.certPem, first.certPem, "a current server certificate is kept too");
  assert.equal(await handshake(second, second.caCertPem, "localhost"), "trusted");
});

test("the server certificate is renewed a month before it ends; the CA after its own end", async (t) => {
  const dir = join(tempDir(t), "dev-ca");
  const now = Date.now();
  const first = await ensureDevCa({ dir, now: () => now });
  const later = await ensureDevCa({ dir, now: () => now + 340 * DAY_MS });
  assert.equal(later.ca, "kept");
  assert.equal(later.caCertPem, first.caCertPem);
  assert.notEqual(later.certPem, first.certPem);

  const years = await ensureDevCa({ dir, now: () => now + 6 * 365 * DAY_MS });
  assert.equal(years.ca, "created");
  assert.notEqual(years.caCertPem, first.caCertPem);
});

test("a damaged key makes a new CA, and a new server certificate with it", async (t) => {
  const dir = join(tempDir(t), "dev-ca");
  const first = await ensureDevCa({ dir });
  writeFileSync(join(dir, "ca-key.pem"), "not a key");
  const again = await ensureDevCa({ dir });
  assert.equal(again.ca, "created");
  assert.notEqual(again.certPem, first.certPem);
  assert.equal(await handshake(again, again.caCertPem, "localhost"), "trusted");
  assert.notEqual(await handshake(first, again.caCertPem, "localhost"), "trusted");
});

test("it vouches for this machine only: a certificate it issues for another name is refused", async (t) => {
  const ca = await ensureDevCa({ dir: join(tempDir(t), "dev-ca") });
  assert.equal(await handshake(ca, ca.caCertPem, "localhost"), "trusted");
  const elsewhere = await ca.issue(["bank.example"]);
  assert.match(await handshake(elsewhere, ca.caCertPem, "bank.example"), /permitted subtree violation/);
  const lan = await ca.issue(["localhost", "192.168.1.10"]);
  assert.match(await handshake(lan, ca.caCertPem, "localhost"), /permitted subtree violation/);
});
