import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import type { EnvReader } from "../platform/env.js";

/** The attestor's two root secrets: the key-encryption key and the pseudonym key. */
export interface TrustSecrets {
  keyEncryptionKey: Buffer;
  pseudonymKey: Buffer;
  /** Set when development secrets were generated or read from the data directory. */
  developmentFile: string | undefined;
}

const MIN_KEY_BYTES = 32;

/** A key given as 64 hex characters or as base64url/base64 of at least 32 bytes. */
function decodeKey(value: string): Buffer | undefined {
  if (/^[0-9a-fA-F]{64,}$/.test(value) && value.length % 2 === 0) return Buffer.from(value, "hex");
  if (/^[A-Za-z0-9_\-+/]+=*$/.test(value)) {
    const bytes = Buffer.from(value.replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, ""), "base64url");
    return bytes.length >= MIN_KEY_BYTES ? bytes : undefined;
  }
  return undefined;
}

/** Where development secrets live: beside the SQLite file, or in ./data. */
export function dataDirectory(databaseUrl: string): string {
  if (databaseUrl.startsWith("sqlite:") && databaseUrl !== "sqlite::memory:") {
    return dirname(resolve(databaseUrl.slice("sqlite:".length)));
  }
  return resolve("data");
}

/**
 * Reads `TRUST_KEY_ENCRYPTION_KEY` and `TRUST_PSEUDONYM_KEY`. Both are required in production. In
 * development a missing one is generated once and kept, owner-readable only, in the data
 * directory, so restarts keep decrypting keys and deriving the same pseudonyms.
 */
export function readTrustSecrets(reader: EnvReader, production: boolean, dataDir: string): TrustSecrets {
  const names = { keyEncryptionKey: "TRUST_KEY_ENCRYPTION_KEY", pseudonymKey: "TRUST_PSEUDONYM_KEY" } as const;
  const found: Partial<Record<keyof typeof names, Buffer>> = {};
  for (const [field, name] of Object.entries(names) as [keyof typeof names, string][]) {
    const value = reader.string(name);
    if (value === undefined) {
      if (production)
        reader.problem(`${name} is required when NODE_ENV=production (32 random bytes, hex or base64url)`);
      continue;
    }
    const key = decodeKey(value);
    if (key === undefined) reader.problem(`${name} must be at least 32 bytes, as hex or base64url`);
    else found[field] = key;
  }
  if (found.keyEncryptionKey && found.pseudonymKey) {
    return { keyEncryptionKey: found.keyEncryptionKey, pseudonymKey: found.pseudonymKey, developmentFile: undefined };
  }
  const file = join(dataDir, "trust-dev-secrets.json");
  if (production) {
    return { keyEncryptionKey: Buffer.alloc(32), pseudonymKey: Buffer.alloc(32), developmentFile: undefined };
  }
  let stored: { key_encryption_key?: string; pseudonym_key?: string } = {};
  if (existsSync(file)) stored = JSON.parse(readFileSync(file, "utf8")) as typeof stored;
  // Only what development itself generated is kept in the file; a key from the environment
  // stays in the environment.
  const kept = {
    key_encryption_key: found.keyEncryptionKey
      ? stored.key_encryption_key
      : (stored.key_encryption_key ?? randomBytes(32).toString("base64url")),
    pseudonym_key: found.pseudonymKey
      ? stored.pseudonym_key
      : (stored.pseudonym_key ?? randomBytes(32).toString("base64url")),
  };
  const keyEncryptionKey = found.keyEncryptionKey ?? Buffer.from(kept.key_encryption_key as string, "base64url");
  const pseudonymKey = found.pseudonymKey ?? Buffer.from(kept.pseudonym_key as string, "base64url");
  mkdirSync(dataDir, { recursive: true });
  writeFileSync(file, `${JSON.stringify(kept)}\n`, { mode: 0o600 });
  chmodSync(file, 0o600);
  return { keyEncryptionKey, pseudonymKey, developmentFile: file };
}
