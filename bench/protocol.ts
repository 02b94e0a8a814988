/**
 * Protocol library throughput against bare node:crypto, measured side by side in one run.
 *   npm run bench:protocol
 * Target (issue 2): the full RFC 9421 verify (parse + base + digest + verify + nonce) at >= 60%
 * of the bare Ed25519 verify rate.
 */
import { generateKeyPairSync, verify } from "node:crypto";
import { performance } from "node:perf_hooks";
import {
  createAttestationVerifier,
  createRequestVerifier,
  encodeDidKey,
  MemoryNonceStore,
  rawPublicKey,
  signRequest,
} from "@proto/protocol";
import { exportJWK, SignJWT } from "jose";
import { printLine } from "./report.js";

const N = Number(process.env.BENCH_N ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);

const { privateKey, publicKey } = generateKeyPairSync("ed25519");
const did = encodeDidKey(rawPublicKey(publicKey));
const url = "https://api.example.com/proto/v1/accounts/me/owner-invitation";
const body = '{"recipient":{"type":"email","value":"alice@example.com"}}';
const now = Math.floor(Date.now() / 1000);

const requests = Array.from({ length: N }, (_, i) => {
  const signed = signRequest({ method: "POST", url, body }, { keyid: did, privateKey, created: now, nonce: `n${i}` });
  return {
    method: "POST",
    url,
    headers: { ...signed.headers, "content-type": "application/json" },
    body,
    base: signed.signatureBase,
  };
});
const bases = requests.map((r) => Buffer.from(r.base));
const sigs = requests.map((r) => Buffer.from(r.headers.signature.slice(6, -1), "base64"));

function bareVerify(): number {
  const start = performance.now();
  for (let i = 0; i < N; i++) {
    if (!verify(null, bases[i]!, publicKey, sigs[i]!)) throw new Error("bare verify failed");
  }
  return N / ((performance.now() - start) / 1000);
}

async function fullVerify(): Promise<number> {
  const verifier = createRequestVerifier({ nonceStore: new MemoryNonceStore() });
  const start = performance.now();
  for (let i = 0; i < N; i++) await verifier.verify(requests[i]!);
  return N / ((performance.now() - start) / 1000);
}

const jwks = { keys: [{ ...(await exportJWK(publicKey)), kid: "k1" }] };
const AUD = "did:web:svc.example";
const tokens = await Promise.all(
  Array.from({ length: Math.min(N, 5000) }, (_, i) =>
    new SignJWT({
      iss: "proto-trust",
      aud: AUD,
      sub: did,
      iat: now,
      exp: now + 900,
      verification: "email",
      sub_h: "tR6nWsqjQ6rXehUPidkhOw0WNYjk2oB1qptEOHO2K4o",
      n: i,
    })
      .setProtectedHeader({ alg: "EdDSA", typ: "JWT", kid: "k1" })
      .sign(privateKey),
  ),
);

async function attestationVerify(): Promise<number> {
  const verifier = createAttestationVerifier({ keySet: jwks });
  const start = performance.now();
  for (const token of tokens) await verifier.verify(token, { audience: AUD, agentDid: did });
  return tokens.length / ((performance.now() - start) / 1000);
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

const bare: number[] = [];
const full: number[] = [];
const att: number[] = [];
// Warm up both paths, then interleave rounds so machine noise hits them alike.
bareVerify();
await fullVerify();
await attestationVerify();
for (let r = 0; r < ROUNDS; r++) {
  bare.push(bareVerify());
  full.push(await fullVerify());
  att.push(await attestationVerify());
}

const fmt = (n: number) => `${Math.round(n).toLocaleString("en-US")}/s`;
const b = median(bare);
const f = median(full);
const a = median(att);
printLine(`node ${process.version}, ${N} requests x ${ROUNDS} rounds (medians)`);
printLine(`bare node:crypto Ed25519 verify     ${fmt(b)}`);
printLine(
  `RFC 9421 full verify (POST + digest) ${fmt(f)}  ratio ${(f / b).toFixed(2)}  target >= 0.60 ${f / b >= 0.6 ? "MET" : "NOT MET"}`,
);
printLine(`attestation JWT verify (jose)        ${fmt(a)}  ratio ${(a / b).toFixed(2)}`);
