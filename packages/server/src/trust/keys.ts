import { createCipheriv, createDecipheriv, generateKeyPairSync, type KeyObject, randomBytes } from "node:crypto";
import { privateKeyFromSeed, rawPublicKey, seedOfPrivateKey } from "@proto/protocol";
import { calculateJwkThumbprint } from "jose";
import type { Kysely } from "kysely";
import type { Clock } from "../platform/clock.js";
import type { Database } from "../platform/database.js";
import type { SigningKeyRow, TrustSchema } from "./migrations.js";

export interface PublicJwk {
  kty: "OKP";
  crv: "Ed25519";
  kid: string;
  x: string;
}

export interface SigningKey {
  kid: string;
  privateKey: KeyObject;
}

interface LoadedKey {
  row: SigningKeyRow;
  jwk: PublicJwk;
  /** Decrypted once, on first use, then kept: signing never decrypts. */
  privateKey: KeyObject | undefined;
}

const ENVELOPE_VERSION = "v1";

/** Every replica (and `proto-server trust rotate-keys`) takes this lock before it adds a key. */
const ROTATION_LOCK = "proto:trust:signing-key-rotation";

/** AES-256-GCM under the key-encryption key, bound to the kid so rows cannot be swapped. */
export function sealSeed(kek: Buffer, kid: string, seed: Uint8Array): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv("aes-256-gcm", kek.subarray(0, 32), iv);
  cipher.setAAD(Buffer.from(kid, "utf8"));
  const sealed = Buffer.concat([cipher.update(seed), cipher.final(), cipher.getAuthTag()]);
  return `${ENVELOPE_VERSION}.${Buffer.concat([iv, sealed]).toString("base64url")}`;
}

export function openSeed(kek: Buffer, kid: string, envelope: string): Uint8Array {
  const [version, payload] = envelope.split(".");
  if (version !== ENVELOPE_VERSION || payload === undefined)
    throw new Error(`signing key ${kid} has an unknown envelope`);
  const bytes = Buffer.from(payload, "base64url");
  const decipher = createDecipheriv("aes-256-gcm", kek.subarray(0, 32), bytes.subarray(0, 12));
  decipher.setAAD(Buffer.from(kid, "utf8"));
  decipher.setAuthTag(bytes.subarray(bytes.length - 16));
  return new Uint8Array(Buffer.concat([decipher.update(bytes.subarray(12, bytes.length - 16)), decipher.final()]));
}

export interface KeyRingOptions {
  database: Database<TrustSchema>;
  keyEncryptionKey: Buffer;
  clock: Clock;
  /** A new key is published this long before it signs (>= 900 s). */
  publishLeadSeconds: number;
  /** Scheduled rotation period. */
  rotationSeconds: number;
  /** The longest lifetime of anything signed (attestations, id_tokens): retired keys stay published that long. */
  maxTokenLifetimeSeconds: number;
  refreshSeconds: number;
}

/**
 * The attestor's Ed25519 signing keys. Keys are created with a publication time and a later
 * activation time; the newest active key signs; a key superseded at time T stays in the key set
 * until T plus the longest token lifetime, so every token it signed can still be verified.
 */
export class KeyRing {
  readonly #options: KeyRingOptions;
  #keys: LoadedKey[] = [];
  #loadedAt = Number.NEGATIVE_INFINITY;
  #loading: Promise<void> | undefined;
  #rotation: Promise<unknown> = Promise.resolve();

  constructor(options: KeyRingOptions) {
    this.#options = options;
  }

  /**
   * Loads the keys, creating the very first one (active at once: there is nothing to roll from).
   * Replicas starting together on an empty store create one key between them, not one each.
   */
  async start(): Promise<void> {
    await this.reload();
    if (this.#keys.length > 0) return;
    await this.#options.database.exclusive(ROTATION_LOCK, async (trx) => {
      if ((await loadKeyRows(trx)).length > 0) return;
      const now = this.#options.clock.now();
      await this.#insertKey(trx, now, now);
    });
    await this.reload();
  }

  async reload(): Promise<void> {
    this.#loading ??= (async () => {
      this.#adopt(await loadKeyRows(this.#options.database.db));
    })().finally(() => {
      this.#loading = undefined;
    });
    return this.#loading;
  }

  #adopt(rows: SigningKeyRow[]): void {
    const previous = new Map(this.#keys.map((k) => [k.row.kid, k.privateKey]));
    this.#keys = rows.map((row) => ({
      row,
      jwk: { kty: "OKP", crv: "Ed25519", kid: row.kid, x: row.public_x },
      privateKey: previous.get(row.kid),
    }));
    this.#loadedAt = this.#options.clock.now();
  }

  /** Reloads when the cached list is older than the refresh period (another replica may have rotated). */
  async fresh(): Promise<void> {
    if (this.#options.clock.now() - this.#loadedAt >= this.#options.refreshSeconds * 1000) await this.reload();
  }

  /** The key that signs now: the newest whose activation time has come. */
  signingKey(): SigningKey {
    const now = this.#options.clock.now();
    let chosen: LoadedKey | undefined;
    for (const key of this.#keys) if (key.row.activate_at <= now) chosen = key;
    if (chosen === undefined) throw new Error("no active signing key");
    chosen.privateKey ??= privateKeyFromSeed(
      openSeed(this.#options.keyEncryptionKey, chosen.row.kid, chosen.row.private_enc),
    );
    return { kid: chosen.row.kid, privateKey: chosen.privateKey };
  }

  /** The published key set: announced keys, and retired ones until their last token expires. */
  publicKeys(): PublicJwk[] {
    const now = this.#options.clock.now();
    const lifetime = this.#options.maxTokenLifetimeSeconds * 1000;
    return this.#keys
      .filter((key, index) => {
        if (key.row.publish_at > now) return false;
        const successor = this.#keys.slice(index + 1).find((k) => k.row.activate_at > key.row.activate_at);
        return successor === undefined || successor.row.activate_at + lifetime > now;
      })
      .map((key) => key.jwk);
  }

  /**
   * When the newest key of the published set was published (ms since the epoch): the key set's
   * age is measured from it. Undefined before the first key exists.
   */
  newestPublishedAt(): number | undefined {
    const now = this.#options.clock.now();
    let newest: number | undefined;
    for (const key of this.#keys) {
      if (key.row.publish_at <= now && (newest === undefined || key.row.publish_at > newest))
        newest = key.row.publish_at;
    }
    return newest;
  }

  /**
   * Starts a rotation: a new key published now that signs only after the lead time. A rotation
   * already under way (a key published but not yet active) is reused, never doubled, whichever
   * replica or process asks.
   */
  rotate(): Promise<{ kid: string; publish_at: number; activate_at: number }> {
    return this.#serialised(async (trx, rows) => {
      const now = this.#options.clock.now();
      const pending = rows.find((row) => row.activate_at > now);
      if (pending !== undefined) return pending;
      return this.#insertKey(trx, now, now + this.#options.publishLeadSeconds * 1000);
    }).then((row) => ({ kid: row.kid, publish_at: row.publish_at, activate_at: row.activate_at }));
  }

  /** Rotates when the newest key is older than the rotation period. */
  async rotateIfDue(): Promise<boolean> {
    await this.reload();
    const newest = this.#keys.at(-1);
    // The common answer needs no lock: the newest key is young.
    if (
      newest !== undefined &&
      newest.row.created_at + this.#options.rotationSeconds * 1000 > this.#options.clock.now()
    )
      return false;
    return this.#serialised(async (trx, rows) => {
      const now = this.#options.clock.now();
      const newest = rows.at(-1);
      if (newest !== undefined && newest.created_at + this.#options.rotationSeconds * 1000 > now) return false;
      if (rows.some((row) => row.activate_at > now)) return false;
      await this.#insertKey(trx, now, now + this.#options.publishLeadSeconds * 1000);
      return true;
    });
  }

  /**
   * Runs `decide` on the key rows as they are under the cluster-wide rotation lock, then reloads.
   * Two rotations that each checked for a pending key before either inserted would add two keys;
   * the lock makes the check and the insert one step everywhere.
   */
  #serialised<T>(decide: (trx: Kysely<TrustSchema>, rows: SigningKeyRow[]) => Promise<T>): Promise<T> {
    const run = this.#rotation.then(async () => {
      const result = await this.#options.database.exclusive(ROTATION_LOCK, async (trx) =>
        decide(trx, await loadKeyRows(trx)),
      );
      await this.reload();
      return result;
    });
    this.#rotation = run.catch(() => undefined);
    return run;
  }

  async #insertKey(trx: Kysely<TrustSchema>, publishAt: number, activateAt: number): Promise<SigningKeyRow> {
    const { privateKey, publicKey } = generateKeyPairSync("ed25519");
    const x = Buffer.from(rawPublicKey(publicKey)).toString("base64url");
    const kid = await calculateJwkThumbprint({ kty: "OKP", crv: "Ed25519", x });
    const row: SigningKeyRow = {
      kid,
      public_x: x,
      private_enc: sealSeed(this.#options.keyEncryptionKey, kid, seedOfPrivateKey(privateKey)),
      created_at: this.#options.clock.now(),
      publish_at: publishAt,
      activate_at: activateAt,
    };
    await trx.insertInto("trust_signing_keys").values(row).execute();
    return row;
  }
}

function loadKeyRows(db: Kysely<TrustSchema>): Promise<SigningKeyRow[]> {
  return db.selectFrom("trust_signing_keys").selectAll().orderBy("activate_at").execute();
}
