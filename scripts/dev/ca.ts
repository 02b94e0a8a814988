/**
 * The development certificate authority of `npm run dev`: made once under `{data}/dev-ca/`, kept
 * across runs (so a browser or a shell that trusts it keeps trusting it), and allowed to certify
 * loopback names only (a critical Name Constraints extension: `localhost` and its subdomains,
 * 127.0.0.0/8, ::1), so its key, which sits in a plain folder, can never vouch for a real site.
 * The server certificate for `localhost` is re-issued when it is missing, no longer signed by the
 * CA, or close to expiring.
 */
import { createPrivateKey, X509Certificate as NodeCertificate, webcrypto } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { isIP } from "node:net";
import { join } from "node:path";
import { AsnConvert } from "@peculiar/asn1-schema";
import { GeneralName, GeneralSubtree, GeneralSubtrees, NameConstraints } from "@peculiar/asn1-x509";
import {
  AuthorityKeyIdentifierExtension,
  BasicConstraintsExtension,
  ExtendedKeyUsage,
  ExtendedKeyUsageExtension,
  Extension,
  KeyUsageFlags,
  KeyUsagesExtension,
  SubjectAlternativeNameExtension,
  SubjectKeyIdentifierExtension,
  X509Certificate,
  X509CertificateGenerator,
} from "@peculiar/x509";

const DAY_MS = 24 * 60 * 60 * 1000;
const CA_LIFETIME_DAYS = 5 * 365;
const SERVER_LIFETIME_DAYS = 365;
/** A certificate this close to its end is replaced at start, so a running stack never sees it expire. */
const RENEW_BEFORE_DAYS = 30;

const KEY_ALGORITHM: webcrypto.EcKeyImportParams & webcrypto.EcKeyGenParams = { name: "ECDSA", namedCurve: "P-256" };
const SIGNING_ALGORITHM: webcrypto.EcdsaParams = { name: "ECDSA", hash: "SHA-256" };

/** What the CA may certify (RFC 5280 §4.2.1.10). A dNSName constraint covers its subdomains too. */
const PERMITTED_NAMES = [
  new GeneralName({ dNSName: "localhost" }),
  new GeneralName({ iPAddress: "127.0.0.0/8" }),
  new GeneralName({ iPAddress: "::1/128" }),
];

/** The names of the server certificate: what people and agents type for this machine. */
export const SERVER_NAMES = ["localhost", "127.0.0.1", "::1"] as const;

export interface DevCa {
  dir: string;
  /** The CA certificate, for `NODE_EXTRA_CA_CERTS` and for a browser's list of authorities. */
  caCertPath: string;
  caCertPem: string;
  /** The server certificate and its key, for `localhost`. */
  certPath: string;
  keyPath: string;
  certPem: string;
  keyPem: string;
  /** `created` on the first run (or after the old CA expired or was damaged), else `kept`. */
  ca: "created" | "kept";
  /** Issues a server certificate for other names (tests show that the CA refuses to vouch for them). */
  issue(names: string[], lifetimeDays?: number): Promise<Pair>;
}

export interface DevCaOptions {
  /** The folder of the CA (`{data}/dev-ca`). */
  dir: string;
  now?: () => number;
}

function toPem(label: string, der: ArrayBuffer): string {
  const lines =
    Buffer.from(der)
      .toString("base64")
      .match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join("\n")}\n-----END ${label}-----\n`;
}

/** Written whole or not at all (a crash mid-write never leaves half a key), with its mode from the start. */
function writeAtomically(path: string, content: string, mode: number): void {
  const temporary = `${path}.${process.pid}.tmp`;
  writeFileSync(temporary, content, { mode });
  chmodSync(temporary, mode);
  renameSync(temporary, path);
}

interface Pair {
  certPem: string;
  keyPem: string;
}

/** The stored certificate and key when they are usable: parseable, matching, valid for a while yet. */
function loadPair(certPath: string, keyPath: string, now: number): Pair | undefined {
  if (!existsSync(certPath) || !existsSync(keyPath)) return undefined;
  try {
    const pair = { certPem: readFileSync(certPath, "utf8"), keyPem: readFileSync(keyPath, "utf8") };
    const cert = new NodeCertificate(pair.certPem);
    const fresh = Date.parse(cert.validTo) - now > RENEW_BEFORE_DAYS * DAY_MS;
    return fresh && cert.checkPrivateKey(createPrivateKey(pair.keyPem)) ? pair : undefined;
  } catch {
    return undefined;
  }
}

function savePair(certPath: string, keyPath: string, pair: Pair): void {
  // The key first: a certificate on disk always has its key next to it.
  writeAtomically(keyPath, pair.keyPem, 0o600);
  writeAtomically(certPath, pair.certPem, 0o644);
}

async function importSigningKey(pem: string): Promise<webcrypto.CryptoKey> {
  const der = createPrivateKey(pem).export({ type: "pkcs8", format: "der" });
  return webcrypto.subtle.importKey("pkcs8", der, KEY_ALGORITHM, true, ["sign"]);
}

async function exportKeyPem(key: webcrypto.CryptoKey): Promise<string> {
  return toPem("PRIVATE KEY", await webcrypto.subtle.exportKey("pkcs8", key));
}

async function createCa(now: number): Promise<Pair> {
  const keys = await webcrypto.subtle.generateKey(KEY_ALGORITHM, true, ["sign", "verify"]);
  // A random tag in the name: a browser that trusted an earlier CA of this folder never mixes them up.
  const tag = Buffer.from(webcrypto.getRandomValues(new Uint8Array(4))).toString("hex");
  const constraints = new NameConstraints({
    permittedSubtrees: new GeneralSubtrees(PERMITTED_NAMES.map((base) => new GeneralSubtree({ base }))),
  });
  const cert = await X509CertificateGenerator.createSelfSigned({
    name: `CN=proto development CA ${tag} (localhost only), O=proto npm run dev`,
    keys,
    signingAlgorithm: SIGNING_ALGORITHM,
    notBefore: new Date(now - DAY_MS),
    notAfter: new Date(now + CA_LIFETIME_DAYS * DAY_MS),
    extensions: [
      new BasicConstraintsExtension(true, 0, true),
      new KeyUsagesExtension(KeyUsageFlags.keyCertSign | KeyUsageFlags.cRLSign, true),
      new Extension("2.5.29.30", true, AsnConvert.serialize(constraints)),
      await SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { certPem: cert.toString("pem"), keyPem: await exportKeyPem(keys.privateKey) };
}

/** Makes (first run) or loads the CA and a current server certificate for `localhost`. */
export async function ensureDevCa(options: DevCaOptions): Promise<DevCa> {
  const now = (options.now ?? Date.now)();
  const dir = options.dir;
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const caCertPath = join(dir, "ca.pem");
  const caKeyPath = join(dir, "ca-key.pem");
  const certPath = join(dir, "localhost.pem");
  const keyPath = join(dir, "localhost-key.pem");

  const kept = loadPair(caCertPath, caKeyPath, now);
  const caPair = kept ?? (await createCa(now));
  if (kept === undefined) savePair(caCertPath, caKeyPath, caPair);
  const caCert = new X509Certificate(caPair.certPem);
  const caPublicKey = new NodeCertificate(caPair.certPem).publicKey;
  const caSigningKey = await importSigningKey(caPair.keyPem);
  const authorityKeyId = await AuthorityKeyIdentifierExtension.create(caCert.publicKey);

  async function issue(names: string[], lifetimeDays = SERVER_LIFETIME_DAYS): Promise<Pair> {
    const first = names[0];
    if (first === undefined) throw new Error("a certificate needs at least one name");
    const keys = await webcrypto.subtle.generateKey(KEY_ALGORITHM, true, ["sign", "verify"]);
    const cert = await X509CertificateGenerator.create({
      subject: `CN=${first}`,
      issuer: caCert.subject,
      publicKey: keys.publicKey,
      signingKey: caSigningKey,
      signingAlgorithm: SIGNING_ALGORITHM,
      notBefore: new Date(now - DAY_MS),
      notAfter: new Date(now + lifetimeDays * DAY_MS),
      extensions: [
        new BasicConstraintsExtension(false, undefined, true),
        new KeyUsagesExtension(KeyUsageFlags.digitalSignature, true),
        new ExtendedKeyUsageExtension([ExtendedKeyUsage.serverAuth]),
        // Node checks IP hosts against IP SANs only, names against DNS SANs only.
        new SubjectAlternativeNameExtension(names.map((name) => ({ type: isIP(name) ? "ip" : "dns", value: name }))),
        await SubjectKeyIdentifierExtension.create(keys.publicKey),
        authorityKeyId,
      ],
    });
    return { certPem: cert.toString("pem"), keyPem: await exportKeyPem(keys.privateKey) };
  }

  // A server certificate of an earlier CA (the folder's CA was replaced) is issued again.
  const keptServer = kept === undefined ? undefined : loadPair(certPath, keyPath, now);
  let server =
    keptServer !== undefined && new NodeCertificate(keptServer.certPem).verify(caPublicKey) ? keptServer : undefined;
  if (server === undefined) {
    server = await issue([...SERVER_NAMES]);
    savePair(certPath, keyPath, server);
  }
  return {
    dir,
    caCertPath,
    caCertPem: caPair.certPem,
    certPath,
    keyPath,
    certPem: server.certPem,
    keyPem: server.keyPem,
    ca: kept === undefined ? "created" : "kept",
    issue,
  };
}
