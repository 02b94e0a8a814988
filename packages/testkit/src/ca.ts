import type { webcrypto } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { isIP } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { JsonGeneralName } from "@peculiar/x509";
import {
  AuthorityKeyIdentifierExtension,
  BasicConstraintsExtension,
  ExtendedKeyUsage,
  ExtendedKeyUsageExtension,
  KeyUsageFlags,
  KeyUsagesExtension,
  SubjectAlternativeNameExtension,
  SubjectKeyIdentifierExtension,
  X509CertificateGenerator,
} from "@peculiar/x509";

const DAY_MS = 24 * 60 * 60 * 1000;

// P-256 keeps generation in the low milliseconds, so every test file can afford a fresh CA.
const KEY_ALGORITHM: webcrypto.EcKeyGenParams = { name: "ECDSA", namedCurve: "P-256" };
const SIGNING_ALGORITHM: webcrypto.EcdsaParams = { name: "ECDSA", hash: "SHA-256" };

export interface TestCAOptions {
  /** Subject common name of the CA; shows up in TLS error messages. */
  commonName?: string;
}

export interface IssueOptions {
  /** Defaults to one day in the past, so clock skew between processes never matters. */
  notBefore?: Date;
  /** Defaults to 30 days from now; pass a past date to get an expired certificate. */
  notAfter?: Date;
}

export interface IssuedCert {
  certPem: string;
  /** PKCS#8 PEM, accepted as-is by `tls.createServer({ key })`. */
  keyPem: string;
}

export interface TestCA {
  /** The CA certificate, to pass as `ca` to TLS clients. */
  readonly certPem: string;
  /**
   * Issues a server certificate for the given names. IP literals become IP SANs, everything else a
   * DNS SAN, because Node checks IP hosts against IP SANs only.
   */
  issue(hostnames: string[], options?: IssueOptions): Promise<IssuedCert>;
  /**
   * Writes the CA certificate to a file and returns its path, for `NODE_EXTRA_CA_CERTS` in child
   * processes (which read CAs only from disk). Without `dir`, the file goes to a fresh temporary
   * directory that is removed when the process exits.
   */
  writeCertFile(dir?: string): string;
}

function toPem(label: string, der: ArrayBuffer): string {
  const base64 = Buffer.from(der).toString("base64");
  const lines = base64.match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join("\n")}\n-----END ${label}-----\n`;
}

function generateKeys(): Promise<webcrypto.CryptoKeyPair> {
  return crypto.subtle.generateKey(KEY_ALGORITHM, true, ["sign", "verify"]);
}

/** Keeps the subject DN parseable whatever the caller puts in a hostname. */
function escapeDnValue(value: string): string {
  return value.replace(/[,+"\\<>;=]/g, (c) => `\\${c}`);
}

const tempDirs = new Set<string>();
let exitHookInstalled = false;

function removeTempDirsOnExit(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once("exit", () => {
    for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
  });
}

export async function createTestCA(options: TestCAOptions = {}): Promise<TestCA> {
  const commonName = options.commonName ?? "proto testkit CA";
  const caKeys = await generateKeys();
  const now = Date.now();
  const caCert = await X509CertificateGenerator.createSelfSigned({
    name: `CN=${escapeDnValue(commonName)}`,
    keys: caKeys,
    signingAlgorithm: SIGNING_ALGORITHM,
    notBefore: new Date(now - DAY_MS),
    notAfter: new Date(now + 365 * DAY_MS),
    extensions: [
      new BasicConstraintsExtension(true, 0, true),
      new KeyUsagesExtension(KeyUsageFlags.keyCertSign | KeyUsageFlags.cRLSign, true),
      await SubjectKeyIdentifierExtension.create(caKeys.publicKey),
    ],
  });
  const certPem = caCert.toString("pem");
  // The AKI only depends on the CA key, so it is computed once for every leaf.
  const authorityKeyId = await AuthorityKeyIdentifierExtension.create(caKeys.publicKey);

  async function issue(hostnames: string[], issueOptions: IssueOptions = {}): Promise<IssuedCert> {
    const first = hostnames[0];
    if (first === undefined) throw new Error("issue() needs at least one hostname");
    const names: JsonGeneralName[] = hostnames.map((name) => ({ type: isIP(name) ? "ip" : "dns", value: name }));
    const keys = await generateKeys();
    const issued = Date.now();
    const cert = await X509CertificateGenerator.create({
      subject: `CN=${escapeDnValue(first)}`,
      issuer: caCert.subject,
      publicKey: keys.publicKey,
      signingKey: caKeys.privateKey,
      signingAlgorithm: SIGNING_ALGORITHM,
      notBefore: issueOptions.notBefore ?? new Date(issued - DAY_MS),
      notAfter: issueOptions.notAfter ?? new Date(issued + 30 * DAY_MS),
      extensions: [
        new BasicConstraintsExtension(false, undefined, true),
        new KeyUsagesExtension(KeyUsageFlags.digitalSignature, true),
        new ExtendedKeyUsageExtension([ExtendedKeyUsage.serverAuth]),
        new SubjectAlternativeNameExtension(names),
        await SubjectKeyIdentifierExtension.create(keys.publicKey),
        authorityKeyId,
      ],
    });
    const pkcs8 = await crypto.subtle.exportKey("pkcs8", keys.privateKey);
    return { certPem: cert.toString("pem"), keyPem: toPem("PRIVATE KEY", pkcs8) };
  }

  function writeCertFile(dir?: string): string {
    let target = dir;
    if (target === undefined) {
      target = mkdtempSync(join(tmpdir(), "proto-test-ca-"));
      tempDirs.add(target);
      removeTempDirsOnExit();
    }
    const path = join(target, "proto-test-ca.pem");
    writeFileSync(path, certPem);
    return path;
  }

  return { certPem, issue, writeCertFile };
}
