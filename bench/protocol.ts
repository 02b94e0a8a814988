/**
 * Protocol library throughput against bare node:crypto, measured side by side in one run.
 *
 *   npm run bench:protocol [-- --quick]
 *
 * Targets (issues 25 and 39): the full RFC 9421 verify of a POST (Signature-Input and Signature parsed,
 * profile checked, Content-Digest checked, signature base built, Ed25519 verified, nonce recorded)
 * at >= 0.95 of the bare Ed25519 verify rate, and attestation verification (JWT header, key set
 * lookup, EdDSA signature, every claim rule) at >= 0.7 of it. Issue 38: an attestation that carries
 * a grant (`grant_id`, four permissions in `scope`, a spend limit in `authorization_details`), read
 * and checked for a route's permission, at >= 0.95 of the same verify of one without a grant.
 *
 * The four loops alternate, round after round, each over the same number of operations (in odd
 * rounds in reverse order, so no loop always runs first); a round's ratio compares loops run
 * seconds apart, and the figure is the median of the rounds' ratios, each round's printed beside
 * it. CPU time per operation is printed beside each rate (the ratio of CPU times is the one to
 * read on a busy machine). Every path is checked before timing: a request and a token
 * verify, and a tampered one of each is refused.
 *
 * Environment: BENCH_N (operations per loop, default 10,000; 3,000 with --quick) and BENCH_ROUNDS
 * (default 9; 5 with --quick). The last line is machine-readable: `RESULT {json}`; each figure
 * holds its median `ratio`, `roundRatios` and `roundCpuRatios` (CPU time per operation of the
 * reference loop over this loop's, round by round), `cpuRatio` (their median) and `met`.
 */
import { generateKeyPairSync, verify } from "node:crypto";
import { loadavg } from "node:os";
import { performance } from "node:perf_hooks";
import {
  type AuthorityGrant,
  createAttestationVerifier,
  createRequestVerifier,
  encodeDidKey,
  grantClaims,
  MemoryNonceStore,
  ProtoError,
  rawPublicKey,
  signRequest,
} from "@proto/protocol";
import { exportJWK, SignJWT } from "jose";
import { printLine } from "./report.js";

const QUICK = process.argv.includes("--quick");
const N = Number(process.env.BENCH_N ?? (QUICK ? 3_000 : 10_000));
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? (QUICK ? 5 : 9));
const TOKENS = Math.min(N, 2_000);
const TARGETS = { rfc9421: 0.95, attestation: 0.7, grant: 0.95 } as const;
const loadBefore = loadavg();

const { privateKey, publicKey } = generateKeyPairSync("ed25519");
const did = encodeDidKey(rawPublicKey(publicKey));
const url = "https://api.example.com/proto/v1/accounts/me/owner-invitation";
const body = '{"recipient":{"type":"email","value":"alice@example.com"}}';
const now = Math.floor(Date.now() / 1000);
/** The verifiers' clock stays at the signing time: a run on a busy host outlives the signatures' minute. */
const signingClock = () => now * 1000;
const AUD = "did:web:svc.example";

/** A header value as a node:http server has it: a string decoded from the bytes received. */
const received = (value: string) => Buffer.from(value, "latin1").toString("latin1");

// As a node:http server has them: header values read from the wire, the body as its bytes.
const requests = Array.from({ length: N }, (_, i) => {
  const signed = signRequest({ method: "POST", url, body }, { keyid: did, privateKey, created: now, nonce: `n${i}` });
  const headers = { ...signed.headers, "content-type": "application/json" };
  return {
    method: "POST",
    url,
    headers: Object.fromEntries(Object.entries(headers).map(([name, value]) => [name, received(value)])),
    body: Buffer.from(body),
    base: signed.signatureBase,
  };
});
const bases = requests.map((r) => Buffer.from(r.base));
const sigs = requests.map((r) => Buffer.from((r.headers.signature ?? "").slice(6, -1), "base64"));

const jwks = { keys: [{ ...(await exportJWK(publicKey)), kid: "k1" }] };
/** TOKENS attestations of the same shape (each its own `n`), with `extra` claims. */
const attestationTokens = (extra: Record<string, unknown>) =>
  Promise.all(
    Array.from({ length: TOKENS }, (_, i) =>
      new SignJWT({
        iss: "proto-trust",
        aud: AUD,
        sub: did,
        iat: now,
        exp: now + 900,
        verification: "email",
        sub_h: "tR6nWsqjQ6rXehUPidkhOw0WNYjk2oB1qptEOHO2K4o",
        n: i,
        ...extra,
      })
        .setProtectedHeader({ alg: "EdDSA", typ: "JWT", kid: "k1" })
        .sign(privateKey),
    ),
  );
const tokens = await attestationTokens({});
const GRANT: AuthorityGrant = {
  id: "grt_Jq0m3lQ0d5xH1v9a2b7cdw",
  permissions: ["notes:read", "notes:write", "notes:delete", "purchase"],
  spendLimits: [{ permission: "purchase", currency: "EUR", perTransaction: 2000, perPeriod: 10000, period: "month" }],
};
const grantTokens = await attestationTokens({ ...grantClaims(GRANT) });
const attestations = createAttestationVerifier({ keySet: jwks });

// ---- results checked before timing -----------------------------------------------------------

async function refused(promise: Promise<unknown>, code: string): Promise<void> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof ProtoError && error.code === code) return;
    throw error;
  }
  throw new Error(`a tampered input was accepted (expected ${code})`);
}

{
  const first = requests[0]!;
  const checker = createRequestVerifier({ nonceStore: new MemoryNonceStore(), now: signingClock });
  if ((await checker.verify(first)).keyid !== did) throw new Error("the request verified with another keyid");
  await refused(checker.verify({ ...requests[1]!, body: Buffer.from(`${body} `) }), "invalid_signature");
  if (!verify(null, bases[0]!, publicKey, sigs[0]!)) throw new Error("bare verify refused a good signature");
  const verified = await attestations.verify(tokens[0]!, { audience: AUD, agentDid: did });
  if (verified.agentDid !== did || verified.kid !== "k1") throw new Error("the attestation verified wrong");
  const [header, payload, signature] = tokens[0]!.split(".") as [string, string, string];
  const claims = { ...JSON.parse(Buffer.from(payload, "base64url").toString()), n: -1 };
  const forged = `${header}.${Buffer.from(JSON.stringify(claims)).toString("base64url")}.${signature}`;
  await refused(attestations.verify(forged, { audience: AUD, agentDid: did }), "invalid_attestation");
  const granted = await attestations.verify(grantTokens[0]!, { audience: AUD, agentDid: did });
  if (granted.grant?.id !== GRANT.id || !granted.grant.permissions.includes("notes:delete")) {
    throw new Error("the grant-bearing attestation verified without its grant");
  }
  if (granted.grant.spendLimits[0]?.perPeriod !== 10000) throw new Error("the spend limit was misread");
}

// ---- timing ----------------------------------------------------------------------------------

interface Sample {
  perSecond: number;
  cpuUs: number;
}

async function timed(loop: () => Promise<void> | void): Promise<Sample> {
  const cpu = process.cpuUsage();
  const start = performance.now();
  await loop();
  const seconds = (performance.now() - start) / 1000;
  const used = process.cpuUsage(cpu);
  return { perSecond: N / seconds, cpuUs: (used.user + used.system) / N };
}

const bare = () =>
  timed(() => {
    for (let i = 0; i < N; i++) {
      if (!verify(null, bases[i]!, publicKey, sigs[i]!)) throw new Error("bare verify failed");
    }
  });

const full = () =>
  timed(async () => {
    // A new nonce store each round: the requests' nonces are fresh to it.
    const verifier = createRequestVerifier({ nonceStore: new MemoryNonceStore(), now: signingClock });
    for (let i = 0; i < N; i++) await verifier.verify(requests[i]!);
  });

const attestation = () =>
  timed(async () => {
    const expected = { audience: AUD, agentDid: did };
    for (let i = 0; i < N; i++) await attestations.verify(tokens[i % TOKENS]!, expected);
  });

/** The same verify of tokens that carry a grant, and the route's permission looked up in it. */
const withGrant = () =>
  timed(async () => {
    const expected = { audience: AUD, agentDid: did };
    for (let i = 0; i < N; i++) {
      const verified = await attestations.verify(grantTokens[i % TOKENS]!, expected);
      if (!verified.grant?.permissions.includes("notes:delete")) throw new Error("the permission is missing");
    }
  });

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

// Warm every path, then alternate so that machine noise hits them alike.
await bare();
await full();
await attestation();
await withGrant();
type Loop = "bare" | "full" | "attestation" | "grant";
const loops: [Loop, () => Promise<Sample>][] = [
  ["bare", bare],
  ["full", full],
  ["attestation", attestation],
  ["grant", withGrant],
];
const rounds: Record<Loop, Sample>[] = [];
for (let r = 0; r < ROUNDS; r++) {
  const round: Partial<Record<Loop, Sample>> = {};
  for (const [name, loop] of r % 2 === 0 ? loops : [...loops].reverse()) round[name] = await loop();
  rounds.push(round as Record<Loop, Sample>);
}
const loadAfter = loadavg();

/** `name` against `against` (default the bare verify), round by round. */
function figure(name: "full" | "attestation" | "grant", target: number, against: "bare" | "attestation" = "bare") {
  const ratios = rounds.map((r) => r[name].perSecond / r[against].perSecond);
  const cpuRatios = rounds.map((r) => r[against].cpuUs / r[name].cpuUs);
  const ratio = median(ratios);
  return {
    perSecond: median(rounds.map((r) => r[name].perSecond)),
    cpuUs: median(rounds.map((r) => r[name].cpuUs)),
    ratio,
    ratioMin: Math.min(...ratios),
    ratioMax: Math.max(...ratios),
    roundRatios: ratios,
    roundCpuRatios: cpuRatios,
    cpuRatio: median(cpuRatios),
    target,
    met: ratio >= target,
  };
}

const bareFigure = {
  perSecond: median(rounds.map((r) => r.bare.perSecond)),
  cpuUs: median(rounds.map((r) => r.bare.cpuUs)),
};
const rfc9421 = figure("full", TARGETS.rfc9421);
const attest = figure("attestation", TARGETS.attestation);
// Against the attestation loop of the same round: what carrying and checking a grant costs.
const grant = figure("grant", TARGETS.grant, "attestation");

const fmt = (n: number, digits = 0) =>
  n.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
const load = (l: number[]) => l.map((v) => v.toFixed(2)).join(" ");
printLine(
  `node ${process.version}, ${fmt(N)} operations per loop x ${ROUNDS} alternating rounds${QUICK ? " (quick)" : ""}; ` +
    `load average ${load(loadBefore)} before, ${load(loadAfter)} after`,
);
printLine(
  `bare node:crypto Ed25519 verify        ${fmt(bareFigure.perSecond).padStart(7)}/s  ${fmt(bareFigure.cpuUs, 1)} µs CPU`,
);
for (const [label, f] of [
  ["RFC 9421 full verify (POST + digest)", rfc9421],
  ["attestation JWT verify               ", attest],
  ["with a grant, vs attestation verify  ", grant],
] as const) {
  printLine(
    `${label}  ${fmt(f.perSecond).padStart(7)}/s  ${fmt(f.cpuUs, 1)} µs CPU  ratio ${f.ratio.toFixed(3)} ` +
      `(rounds ${f.ratioMin.toFixed(2)}-${f.ratioMax.toFixed(2)}; CPU-time view ${f.cpuRatio.toFixed(2)})  ` +
      `target >= ${f.target.toFixed(2)} ${f.met ? "MET" : "NOT MET"}`,
  );
  printLine(
    `    per round: ${f.roundRatios.map((r) => r.toFixed(3)).join(" ")}; median ${f.ratio.toFixed(3)}` +
      ` (CPU-time view per round: ${f.roundCpuRatios.map((r) => r.toFixed(3)).join(" ")})`,
  );
}
printLine(
  `RESULT ${JSON.stringify({
    bench: "protocol",
    quick: QUICK,
    node: process.version,
    operations: N,
    rounds: ROUNDS,
    loadavg: { before: loadBefore, after: loadAfter },
    bare: bareFigure,
    rfc9421,
    attestation: attest,
    grant,
    met: rfc9421.met && attest.met && grant.met,
  })}`,
);
