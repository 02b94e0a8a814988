/**
 * The bare crypto work of one mint, single-threaded with node:crypto: one Ed25519 verify (of an
 * RFC 9421 signature base as an agent sends it), one Ed25519 sign (of a JWT signing input as the
 * attestor produces it) and one SHA-256 over a typical token-request body.
 * Forked by `bench/trust/mint.ts`, which alternates its rounds with the server's so that both see
 * the same host (a busy neighbour slows the two alike, and the ratio of adjacent rounds holds):
 *   -> parent  { type: "ready" }                  after building the inputs and one warm-up round
 *   <- parent  { type: "round" }  -> { type: "round", wall, cpu }   operations per second of wall
 *                                    time and of this process's CPU time, over BENCH_CRYPTO_N operations
 *   <- parent  { type: "stop" }   -> exits 0
 */
import { createHash, generateKeyPairSync, randomBytes, sign, verify } from "node:crypto";
import { performance } from "node:perf_hooks";
import { encodeDidKey, rawPublicKey, signRequest } from "@proto/protocol";

const N = Number(process.env.BENCH_CRYPTO_N ?? 10_000);

const agent = generateKeyPairSync("ed25519");
const attestor = generateKeyPairSync("ed25519");
const did = encodeDidKey(rawPublicKey(agent.publicKey));
const body = JSON.stringify({ aud: "did:web:svc3.example" });
const now = Math.floor(Date.now() / 1000);

// Distinct inputs per operation, as the server sees them (fresh nonce, fresh claims).
const VARIANTS = 1024;
const verifyInputs = Array.from({ length: VARIANTS }, () => {
  const signed = signRequest(
    { method: "POST", url: "https://trust.bench/v1/token", body },
    { keyid: did, privateKey: agent.privateKey, created: now, expires: now + 300 },
  );
  const base = Buffer.from(signed.signatureBase, "utf8");
  const signature = Buffer.from(signed.headers.signature.slice("sig1=:".length, -1), "base64");
  return { base, signature };
});
const signInputs = Array.from({ length: VARIANTS }, () => {
  const header = Buffer.from(JSON.stringify({ alg: "EdDSA", typ: "JWT", kid: randomBytes(32).toString("base64url") }));
  const payload = Buffer.from(
    JSON.stringify({
      iss: "proto-trust",
      aud: "did:web:svc3.example",
      sub: did,
      sub_h: randomBytes(32).toString("base64url"),
      iat: now,
      exp: now + 900,
      verification: "email",
    }),
  );
  return Buffer.from(`${header.toString("base64url")}.${payload.toString("base64url")}`);
});
const bodyBytes = Buffer.from(body);

/** Operations per second of wall time, and per second of this process's CPU time. */
function round(): { wall: number; cpu: number } {
  const cpu0 = process.cpuUsage();
  const start = performance.now();
  for (let i = 0; i < N; i++) {
    const v = verifyInputs[i % VARIANTS]!;
    if (!verify(null, v.base, agent.publicKey, v.signature)) throw new Error("baseline verify failed");
    sign(null, signInputs[i % VARIANTS]!, attestor.privateKey);
    createHash("sha256").update(bodyBytes).digest();
  }
  const wallSeconds = (performance.now() - start) / 1000;
  const cpu = process.cpuUsage(cpu0);
  return { wall: N / wallSeconds, cpu: N / ((cpu.user + cpu.system) / 1e6) };
}

round(); // warm-up
process.on("message", (message: { type: string }) => {
  if (message.type === "round") process.send?.({ type: "round", ...round() });
  else if (message.type === "stop") process.exit(0);
});
process.on("disconnect", () => process.exit(0));
process.send?.({ type: "ready" });
