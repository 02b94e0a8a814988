import { createHmac, generateKeyPairSync, sign, verify } from "node:crypto";
import { performance } from "node:perf_hooks";
import { SignJWT } from "jose";

const { privateKey, publicKey } = generateKeyPairSync("ed25519");
const N = 5000;
async function bench(name: string, fn: (i: number) => unknown | Promise<unknown>, par = 1) {
  for (let i = 0; i < 500; i++) await fn(i);
  const c0 = process.cpuUsage(); const t0 = performance.now();
  if (par === 1) for (let i = 0; i < N; i++) await fn(i);
  else { let n = 0; await Promise.all(Array.from({ length: par }, async () => { while (n < N) await fn(n++); })); }
  const wall = performance.now() - t0; const c = process.cpuUsage(c0);
  console.log(`${name.padEnd(34)} wall ${(wall * 1000 / N).toFixed(1)} µs/op  cpu(all threads) ${((c.user + c.system) / N).toFixed(1)} µs/op`);
}
const claims = (i: number) => ({ iss: "proto-trust", aud: "did:web:svc1.example", sub: "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK", sub_h: createHmac("sha256", "k").update(`h:${i}`).digest("base64url"), iat: 1763700000 + i, exp: 1763700900 + i, verification: "email" });
const msg = Buffer.alloc(300, 1);
const sig = sign(null, msg, privateKey);
for (let r = 0; r < 2; r++) {
await bench("crypto.verify", () => verify(null, msg, publicKey, sig));
await bench("crypto.sign", () => sign(null, msg, privateKey));
await bench("jose SignJWT (sequential)", (i) => new SignJWT(claims(i)).setProtectedHeader({ alg: "EdDSA", typ: "JWT", kid: "abc" }).sign(privateKey));
await bench("jose SignJWT (50 concurrent)", (i) => new SignJWT(claims(i)).setProtectedHeader({ alg: "EdDSA", typ: "JWT", kid: "abc" }).sign(privateKey), 50);
const header = Buffer.from(JSON.stringify({ alg: "EdDSA", typ: "JWT", kid: "abc" })).toString("base64url");
await bench("hand JWT crypto.sign", (i) => { const input = `${header}.${Buffer.from(JSON.stringify(claims(i))).toString("base64url")}`; return `${input}.${sign(null, Buffer.from(input), privateKey).toString("base64url")}`; });
}
