/**
 * The agent's home folder (`PROTO_HOME`, default `~/.proto`): the key file, configuration,
 * bindings, cached attestations, directory sessions. The folder is 0700 and every file 0600,
 * written atomically (temporary file, then rename).
 */
import { createHash, randomBytes } from "node:crypto";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { decodeBase64url, encodeBase64url, seedOfPrivateKey } from "@proto/protocol";
import { KeyStoreError } from "./errors.js";
import { AgentIdentity } from "./identity.js";
import type { CachedToken, TokenCachePersistence } from "./token-cache.js";

/** `PROTO_HOME`, else `~/.proto`. */
export function defaultHome(env: NodeJS.ProcessEnv = process.env): string {
  const fromEnv = env.PROTO_HOME;
  return resolve(fromEnv !== undefined && fromEnv !== "" ? fromEnv : join(homedir(), ".proto"));
}

const KEY_FILE_VERSION = 1;
const CHECK_MODES = process.platform !== "win32";

/** The key file on disk. */
interface KeyFile {
  version: number;
  algorithm: "ed25519";
  did: string;
  public_key_b64: string;
  /** The 32-byte Ed25519 seed, base64url. */
  private_key_b64: string;
  created_at: string;
}

export interface AgentConfig {
  attestor_url?: string;
  directory_url?: string;
}

/** What the agent knows of its link to a person at one attestor. */
export interface BindingRecord {
  attestor_url: string;
  agent_did: string;
  /** `bnd_...`; null when the binding is only known from a mint (linked elsewhere). */
  binding_id: string | null;
  /** Unix seconds: the inactivity deadline, re-armed by every mint. */
  binding_expires_at: number;
  /** `active`, or what the attestor last said about it. */
  state: "active" | "revoked" | "expired";
  linked_at: string | null;
  updated_at: string;
  /** The verification method of the last minted token. */
  verification?: string;
}

/** A directory session token (bearer credential for one listing). */
export interface StoredSession {
  directory_url: string;
  service_did: string;
  session_token: string;
  /** RFC 3339. */
  expires_at: string;
  discovery_url?: string;
  saved_at: string;
}

/** A challenge whose proof the user publishes by hand, kept for `register --submit`. */
export interface PendingChallenge {
  directory_url: string;
  discovery_url: string;
  challenge_token: string;
  proof_url: string;
  expires_at: string;
  title?: string;
  description?: string;
  tags?: string[];
}

export interface RotationResult {
  previous: AgentIdentity;
  current: AgentIdentity;
  /** Where the previous key file now lives. */
  archivedTo: string;
}

const hashName = (...parts: string[]) => createHash("sha256").update(parts.join("\n")).digest("hex").slice(0, 32);

export class AgentStore {
  readonly home: string;

  constructor(home: string = defaultHome()) {
    this.home = resolve(home);
  }

  get keyPath(): string {
    return join(this.home, "key.json");
  }

  get archiveDir(): string {
    return join(this.home, "archive");
  }

  hasIdentity(): boolean {
    return existsSync(this.keyPath);
  }

  /**
   * Loads the key. Refuses a key file that group or others can access (or that another user owns)
   * with `unsafe_permissions`, like ssh does.
   */
  loadIdentity(): AgentIdentity {
    const path = this.keyPath;
    if (!existsSync(path)) {
      throw new KeyStoreError("no_key", `no agent key in ${this.home}: run \`proto init\` first`, path);
    }
    assertPrivateFile(path);
    let file: KeyFile;
    try {
      file = JSON.parse(readFileSync(path, "utf8")) as KeyFile;
    } catch (error) {
      throw new KeyStoreError("invalid_key_file", `key file ${path} is not valid JSON`, path, { cause: error });
    }
    return identityOf(file, path);
  }

  /** Generates and saves a key; refuses (`key_exists`) to overwrite one. */
  createIdentity(now: Date = new Date()): AgentIdentity {
    if (this.hasIdentity()) {
      throw new KeyStoreError("key_exists", `an agent key already exists at ${this.keyPath}`, this.keyPath);
    }
    const identity = AgentIdentity.generate(now);
    this.#writeKey(identity);
    return identity;
  }

  /** The existing key (checked as `loadIdentity` does), or a new one. */
  initIdentity(now: Date = new Date()): { identity: AgentIdentity; created: boolean } {
    if (this.hasIdentity()) return { identity: this.loadIdentity(), created: false };
    return { identity: this.createIdentity(now), created: true };
  }

  /**
   * Replaces the key with a new one and moves the old key file to `archive/`. Local only: the
   * attestor binding belongs to the old DID (link again), and services that support key rotation
   * must be told through their own flow. Cached attestations of the old DID are dropped.
   */
  rotateIdentity(now: Date = new Date()): RotationResult {
    const previous = this.loadIdentity();
    const stamp = now
      .toISOString()
      .replace(/[-:]/g, "")
      .replace(/\.\d+Z$/, "Z");
    ensurePrivateDir(this.archiveDir);
    const archivedTo = join(this.archiveDir, `key-${stamp}-${previous.did.slice(-8)}.json`);
    writePrivateFile(archivedTo, readFileSync(this.keyPath, "utf8"));
    const current = AgentIdentity.generate(now);
    this.#writeKey(current);
    this.writeTokens(this.readTokens().filter((t) => t.agent_did !== previous.did));
    return { previous, current, archivedTo };
  }

  /** The archived keys, oldest first (loaded with the same checks as the current key). */
  archivedIdentities(): AgentIdentity[] {
    if (!existsSync(this.archiveDir)) return [];
    return readdirSync(this.archiveDir)
      .filter((name) => name.startsWith("key-") && name.endsWith(".json"))
      .sort()
      .map((name) => {
        const path = join(this.archiveDir, name);
        assertPrivateFile(path);
        return identityOf(JSON.parse(readFileSync(path, "utf8")) as KeyFile, path);
      });
  }

  #writeKey(identity: AgentIdentity): void {
    ensurePrivateDir(this.home, true);
    const file: KeyFile = {
      version: KEY_FILE_VERSION,
      algorithm: "ed25519",
      did: identity.did,
      public_key_b64: identity.publicKeyB64,
      private_key_b64: encodeBase64url(seedOfPrivateKey(identity.privateKey)),
      created_at: identity.createdAt,
    };
    writePrivateFile(this.keyPath, `${JSON.stringify(file, null, 2)}\n`);
  }

  // --- configuration ---

  readConfig(): AgentConfig {
    return this.#readJson<AgentConfig>(join(this.home, "config.json")) ?? {};
  }

  updateConfig(patch: AgentConfig): AgentConfig {
    const next = { ...this.readConfig(), ...patch };
    this.#writeJson(join(this.home, "config.json"), next);
    return next;
  }

  // --- bindings ---

  getBinding(attestorUrl: string, agentDid: string): BindingRecord | undefined {
    return this.#bindings().find((b) => b.attestor_url === attestorUrl && b.agent_did === agentDid);
  }

  /** Every binding record, of every attestor and every key this home has had. */
  listBindings(): BindingRecord[] {
    return this.#bindings();
  }

  saveBinding(record: BindingRecord): void {
    const others = this.#bindings().filter(
      (b) => !(b.attestor_url === record.attestor_url && b.agent_did === record.agent_did),
    );
    this.#writeJson(join(this.home, "bindings.json"), { version: 1, bindings: [...others, record] });
  }

  #bindings(): BindingRecord[] {
    return this.#readJson<{ bindings?: BindingRecord[] }>(join(this.home, "bindings.json"))?.bindings ?? [];
  }

  // --- attestation cache ---

  readTokens(): CachedToken[] {
    return this.#readJson<{ tokens?: CachedToken[] }>(join(this.home, "tokens.json"))?.tokens ?? [];
  }

  writeTokens(tokens: CachedToken[]): void {
    this.#writeJson(join(this.home, "tokens.json"), { version: 1, tokens });
  }

  /** Persistence for a `TokenCache` backed by `tokens.json`. */
  tokenPersistence(): TokenCachePersistence {
    return { load: () => this.readTokens(), save: (tokens) => this.writeTokens(tokens) };
  }

  // --- directory sessions (one file per listing, 0600) ---

  sessionPath(directoryUrl: string, serviceDid: string): string {
    return join(this.home, "sessions", `${hashName(directoryUrl, serviceDid)}.json`);
  }

  getSession(directoryUrl: string, serviceDid: string): StoredSession | undefined {
    return this.#readJson<StoredSession>(this.sessionPath(directoryUrl, serviceDid));
  }

  saveSession(session: StoredSession): string {
    const path = this.sessionPath(session.directory_url, session.service_did);
    this.#writeJson(path, session);
    return path;
  }

  deleteSession(directoryUrl: string, serviceDid: string): void {
    rmSync(this.sessionPath(directoryUrl, serviceDid), { force: true });
  }

  // --- pending challenges ---

  #pendingPath(directoryUrl: string, discoveryUrl: string): string {
    return join(this.home, "pending", `${hashName(directoryUrl, discoveryUrl)}.json`);
  }

  getPendingChallenge(directoryUrl: string, discoveryUrl: string): PendingChallenge | undefined {
    return this.#readJson<PendingChallenge>(this.#pendingPath(directoryUrl, discoveryUrl));
  }

  savePendingChallenge(challenge: PendingChallenge): void {
    this.#writeJson(this.#pendingPath(challenge.directory_url, challenge.discovery_url), challenge);
  }

  deletePendingChallenge(directoryUrl: string, discoveryUrl: string): void {
    rmSync(this.#pendingPath(directoryUrl, discoveryUrl), { force: true });
  }

  // --- files ---

  #readJson<T>(path: string): T | undefined {
    let text: string;
    try {
      text = readFileSync(path, "utf8");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw new KeyStoreError("unreadable_file", `cannot read ${path}: ${(error as Error).message}`, path, {
        cause: error,
      });
    }
    try {
      return JSON.parse(text) as T;
    } catch (error) {
      throw new KeyStoreError("invalid_file", `${path} is not valid JSON; fix or delete it`, path, { cause: error });
    }
  }

  #writeJson(path: string, value: unknown): void {
    ensurePrivateDir(this.home, true);
    const dir = resolve(path, "..");
    if (dir !== this.home) ensurePrivateDir(dir);
    writePrivateFile(path, `${JSON.stringify(value, null, 2)}\n`);
  }
}

function identityOf(file: KeyFile, path: string): AgentIdentity {
  const invalid = (why: string) => new KeyStoreError("invalid_key_file", `key file ${path} ${why}`, path);
  if (typeof file !== "object" || file === null) throw invalid("is not a JSON object");
  if (file.version !== KEY_FILE_VERSION) throw invalid(`has unsupported version ${JSON.stringify(file.version)}`);
  if (file.algorithm !== "ed25519") throw invalid(`has unsupported algorithm ${JSON.stringify(file.algorithm)}`);
  const seed = typeof file.private_key_b64 === "string" ? decodeBase64url(file.private_key_b64) : undefined;
  if (seed === undefined || seed.length !== 32) throw invalid("has no valid 32-byte private_key_b64");
  const identity = AgentIdentity.fromSeed(seed, typeof file.created_at === "string" ? file.created_at : "");
  if (file.did !== identity.did || file.public_key_b64 !== identity.publicKeyB64) {
    throw invalid("does not match its private key (did or public_key_b64 differ)");
  }
  return identity;
}

/** Refuses a file that group or others may access, or that another user owns. */
export function assertPrivateFile(path: string): void {
  if (!CHECK_MODES) return;
  const stat = statSync(path);
  const mode = stat.mode & 0o777;
  if ((mode & 0o077) !== 0) {
    throw new KeyStoreError(
      "unsafe_permissions",
      `key file ${path} is accessible by group or others (mode ${mode.toString(8).padStart(4, "0")}); run \`chmod 600 ${path}\``,
      path,
    );
  }
  const uid = process.getuid?.();
  if (uid !== undefined && stat.uid !== uid) {
    throw new KeyStoreError("unsafe_permissions", `key file ${path} is owned by another user (uid ${stat.uid})`, path);
  }
}

/** Creates a folder 0700 (parents as needed); `tighten` also fixes the mode of an existing one. */
function ensurePrivateDir(dir: string, tighten = false): void {
  if (!existsSync(dir)) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    if (CHECK_MODES) chmodSync(dir, 0o700);
  } else if (tighten && CHECK_MODES && (statSync(dir).mode & 0o077) !== 0) {
    chmodSync(dir, 0o700);
  }
}

/** Writes a file 0600 atomically: a temporary file created 0600, then renamed over the target. */
export function writePrivateFile(path: string, content: string): void {
  const temporary = `${path}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`;
  try {
    writeFileSync(temporary, content, { mode: 0o600, flag: "wx" });
    if (CHECK_MODES) chmodSync(temporary, 0o600);
    renameSync(temporary, path);
  } catch (error) {
    rmSync(temporary, { force: true });
    throw new KeyStoreError("write_failed", `cannot write ${path}: ${(error as Error).message}`, path, {
      cause: error,
    });
  }
}
