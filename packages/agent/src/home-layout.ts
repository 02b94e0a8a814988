/**
 * The two files an agent home shares with upstream clients (upstream `spec/storage.md`): `key.json`
 * version 1 and `trust.json` version 2, field for field, and the older layouts they replace (ours,
 * and upstream's `trust.json` version 1). Pure conversions; the store does the file work.
 */
import { seedOfPrivateKey } from "@proto/protocol";
import { KeyStoreError } from "./errors.js";
import { AgentIdentity } from "./identity.js";

export const KEY_FILE_VERSION = 1;
export const TRUST_FILE_VERSION = 2;

/** `key.json`: upstream's fields, plus `created_at` of ours (readers ignore fields they do not know). */
export interface KeyFile {
  version: 1;
  algorithm: "ed25519";
  /** The `did:key` of `public_key_hex`. */
  did_key: string;
  /** The raw 32-byte Ed25519 public key, lowercase hex. */
  public_key_hex: string;
  /** The raw 32-byte Ed25519 seed, lowercase hex. Secret. */
  private_key_seed_hex: string;
  created_at?: string;
  [field: string]: unknown;
}

/** What the agent knows of its link to a person at one attestor (one per attestor). */
export interface BindingRecord {
  /** `base_url` in `trust.json`: the attestor's `{trust_url}`, without a trailing slash. */
  attestor_url: string;
  agent_did: string;
  /** `bnd_...`; null when the binding is only known from a mint (linked elsewhere). */
  binding_id: string | null;
  /** Unix seconds (`binding_token_expires_at`): the inactivity deadline, re-armed by every mint; 0 = none reported. */
  binding_expires_at: number;
  /** The `iss` of the attestor's tokens, learned from the first one; what services list in `billing.accepted_attestors`. */
  iss?: string;
  /** `active`, or what the attestor last said about it. */
  state: "active" | "revoked" | "expired";
  linked_at: string | null;
  updated_at: string;
  /** The verification method of the last minted token. */
  verification?: string;
  /** Unix seconds: when `verification` was last reported. */
  verification_seen_at?: number;
}

/** One binding as it is on disk, unknown fields included (they are kept when it is rewritten). */
export type RawBinding = Record<string, unknown>;

/** `trust.json` version 2, unknown top-level fields included. */
export interface TrustFile {
  version: 2;
  bindings: RawBinding[];
  [field: string]: unknown;
}

const HEX_32 = /^[0-9a-f]{64}$/;
const KEY_FIELDS = ["version", "algorithm", "did_key", "public_key_hex", "private_key_seed_hex", "created_at"];
/** Our layout before upstream's: also version 1, base64url instead of hex. */
const LEGACY_KEY_FIELDS = ["version", "algorithm", "did", "public_key_b64", "private_key_b64", "created_at"];
const STATES = new Set<BindingRecord["state"]>(["active", "revoked", "expired"]);
const VERIFICATIONS = new Set(["email", "oauth", "payment"]);
const BINDING_FIELDS = [
  "base_url",
  "agent_did",
  "binding_id",
  "binding_token_expires_at",
  "iss",
  "verification",
  "verification_seen_at",
];
const OUR_BINDING_FIELDS = ["state", "linked_at", "updated_at"];

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");

const without = (value: Record<string, unknown>, names: string[]) =>
  Object.fromEntries(Object.entries(value).filter(([name]) => !names.includes(name)));

/** The key file of an identity, with the unknown fields of the file it replaces after upstream's. */
export function keyFileOf(identity: AgentIdentity, unknown: Record<string, unknown> = {}): KeyFile {
  return {
    version: KEY_FILE_VERSION,
    algorithm: "ed25519",
    did_key: identity.did,
    public_key_hex: hex(identity.publicKey),
    private_key_seed_hex: hex(seedOfPrivateKey(identity.privateKey)),
    ...(identity.createdAt === "" ? {} : { created_at: identity.createdAt }),
    ...without(unknown, KEY_FIELDS),
  };
}

export interface ReadKey {
  identity: AgentIdentity;
  /** `legacy`: our layout before upstream's, to be rewritten. */
  layout: "upstream" | "legacy";
  /** Fields neither layout defines, kept when the file is rewritten. */
  unknown: Record<string, unknown>;
}

/**
 * Reads a key file in upstream's layout or in our older one, and checks it: a version other than
 * 1 is refused (upstream: a reader that does not understand the version refuses the file), and
 * the DID and public key must be those of the seed.
 */
export function readKeyFile(value: unknown, path: string, fallbackCreatedAt: () => string): ReadKey {
  const invalid = (why: string) => new KeyStoreError("invalid_key_file", `key file ${path} ${why}`, path);
  if (!isObject(value)) throw invalid("is not a JSON object");
  if (value.version !== KEY_FILE_VERSION) {
    throw invalid(`has unsupported version ${JSON.stringify(value.version)} (this agent reads version 1)`);
  }
  if (value.algorithm !== "ed25519") throw invalid(`has unsupported algorithm ${JSON.stringify(value.algorithm)}`);
  const createdAt = typeof value.created_at === "string" ? value.created_at : fallbackCreatedAt();

  if (!("private_key_seed_hex" in value) && "private_key_b64" in value) {
    const seed =
      typeof value.private_key_b64 === "string" ? Buffer.from(value.private_key_b64, "base64url") : undefined;
    if (seed === undefined || seed.length !== 32) throw invalid("has no valid 32-byte private_key_b64");
    const identity = AgentIdentity.fromSeed(new Uint8Array(seed), createdAt);
    if (value.did !== identity.did || value.public_key_b64 !== identity.publicKeyB64) {
      throw invalid("does not match its private key (did or public_key_b64 differ)");
    }
    return { identity, layout: "legacy", unknown: without(value, LEGACY_KEY_FIELDS) };
  }

  const seedHex = value.private_key_seed_hex;
  if (typeof seedHex !== "string" || !HEX_32.test(seedHex)) {
    throw invalid("has no private_key_seed_hex of 64 lowercase hex characters");
  }
  if (typeof value.public_key_hex !== "string" || !HEX_32.test(value.public_key_hex)) {
    throw invalid("has no public_key_hex of 64 lowercase hex characters");
  }
  const identity = AgentIdentity.fromSeed(new Uint8Array(Buffer.from(seedHex, "hex")), createdAt);
  if (value.public_key_hex !== hex(identity.publicKey)) {
    throw invalid("does not match its private key (public_key_hex is not the seed's public key)");
  }
  if (value.did_key !== identity.did) {
    throw invalid("does not match its private key (did_key is not the did:key of public_key_hex)");
  }
  return { identity, layout: "upstream", unknown: without(value, KEY_FIELDS) };
}

/** A base URL for comparison: parsed and without trailing slashes (upstream compares ignoring one). */
export function canonicalBaseUrl(value: string): string {
  try {
    return new URL(value).href.replace(/\/+$/, "");
  } catch {
    return value.replace(/\/+$/, "");
  }
}

export const sameBaseUrl = (a: string, b: string) => canonicalBaseUrl(a) === canonicalBaseUrl(b);

/**
 * Reads `trust.json`: version 2 as it is; version 1 (one binding's fields at the top level) as a
 * version 2 file holding that binding (`migrated`). Other versions are refused.
 */
export function readTrustFile(value: unknown, path: string): { file: TrustFile; migrated: boolean } {
  const invalid = (why: string) => new KeyStoreError("invalid_file", `${path} ${why}`, path);
  if (!isObject(value)) throw invalid("is not a JSON object");
  if (value.version === 1) {
    const { version: _version, ...binding } = value;
    return { file: { version: TRUST_FILE_VERSION, bindings: [binding] }, migrated: true };
  }
  if (value.version !== TRUST_FILE_VERSION) {
    throw invalid(`has unsupported version ${JSON.stringify(value.version)} (this agent reads versions 1 and 2)`);
  }
  if (!Array.isArray(value.bindings)) throw invalid("has no bindings array");
  return {
    file: { ...value, version: TRUST_FILE_VERSION, bindings: value.bindings.filter(isObject) },
    migrated: false,
  };
}

/** The record of a binding on disk; undefined when it lacks a required field (it is kept, not used). */
export function recordOf(raw: RawBinding): BindingRecord | undefined {
  const { base_url, agent_did, binding_id, binding_token_expires_at: expires } = raw;
  if (typeof base_url !== "string" || typeof agent_did !== "string" || typeof binding_id !== "string") return undefined;
  const state = raw.state as BindingRecord["state"];
  return {
    attestor_url: canonicalBaseUrl(base_url),
    agent_did,
    binding_id: binding_id === "" ? null : binding_id,
    binding_expires_at: typeof expires === "number" && Number.isFinite(expires) ? expires : 0,
    ...(typeof raw.iss === "string" && raw.iss !== "" ? { iss: raw.iss } : {}),
    state: STATES.has(state) ? state : "active",
    linked_at: typeof raw.linked_at === "string" ? raw.linked_at : null,
    updated_at: typeof raw.updated_at === "string" ? raw.updated_at : "",
    ...(typeof raw.verification === "string" ? { verification: raw.verification } : {}),
    ...(typeof raw.verification_seen_at === "number" ? { verification_seen_at: raw.verification_seen_at } : {}),
  };
}

/**
 * A record in upstream's binding layout, over the binding it replaces: that binding's unknown
 * fields and its spelling of `base_url` stay, and so do a learned `iss` and the last verification
 * when the record has none. Upstream's fields come first; `state`, `linked_at` and `updated_at`
 * (ours) last.
 */
export function rawOf(record: BindingRecord, existing: RawBinding = {}): RawBinding {
  const known = (name: string) => (name in existing ? { [name]: existing[name] } : {});
  const iss = record.iss ?? (typeof existing.iss === "string" ? existing.iss : undefined);
  return {
    base_url:
      typeof existing.base_url === "string" && sameBaseUrl(existing.base_url, record.attestor_url)
        ? existing.base_url
        : record.attestor_url,
    agent_did: record.agent_did,
    binding_id: record.binding_id ?? "",
    binding_token_expires_at: record.binding_expires_at,
    ...(iss === undefined ? {} : { iss }),
    // Upstream's layout knows three methods; another one is not worth a file its readers refuse.
    ...(record.verification !== undefined && VERIFICATIONS.has(record.verification)
      ? { verification: record.verification }
      : known("verification")),
    ...(record.verification_seen_at !== undefined
      ? { verification_seen_at: record.verification_seen_at }
      : known("verification_seen_at")),
    ...without(existing, [...BINDING_FIELDS, ...OUR_BINDING_FIELDS]),
    state: record.state,
    linked_at: record.linked_at,
    updated_at: record.updated_at,
  };
}

/**
 * Our `bindings.json` (before upstream's layout): one record per attestor and DID. Upstream keeps
 * one binding per attestor: the current key's, else the one used last.
 */
export function legacyBindings(value: unknown, currentDid: string | undefined): BindingRecord[] {
  const list = isObject(value) && Array.isArray(value.bindings) ? value.bindings.filter(isObject) : [];
  const byAttestor = new Map<string, BindingRecord>();
  for (const entry of list) {
    if (typeof entry.attestor_url !== "string" || typeof entry.agent_did !== "string") continue;
    const record: BindingRecord = {
      attestor_url: canonicalBaseUrl(entry.attestor_url),
      agent_did: entry.agent_did,
      binding_id: typeof entry.binding_id === "string" ? entry.binding_id : null,
      binding_expires_at: typeof entry.binding_expires_at === "number" ? entry.binding_expires_at : 0,
      state: STATES.has(entry.state as BindingRecord["state"]) ? (entry.state as BindingRecord["state"]) : "active",
      linked_at: typeof entry.linked_at === "string" ? entry.linked_at : null,
      updated_at: typeof entry.updated_at === "string" ? entry.updated_at : "",
      ...(typeof entry.verification === "string" ? { verification: entry.verification } : {}),
    };
    const kept = byAttestor.get(record.attestor_url);
    const current = (r: BindingRecord) => r.agent_did === currentDid;
    if (
      kept === undefined ||
      (current(record) && !current(kept)) ||
      (current(record) === current(kept) && record.updated_at > kept.updated_at)
    ) {
      byAttestor.set(record.attestor_url, record);
    }
  }
  return [...byAttestor.values()];
}
