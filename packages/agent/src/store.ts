/**
 * The agent's home folder (`PROTO_HOME`, default `~/.proto`): the key file and the bindings in
 * upstream's layout (`key.json` v1, `trust.json` v2), so an upstream client can share the home;
 * our configuration, cached attestations and directory sessions beside them. The folder is 0700
 * and every file 0600, written atomically (temporary file, then rename). Files of our older layout
 * are rewritten in upstream's on first load, the originals kept in `legacy/`.
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
import { KeyStoreError } from "./errors.js";
import {
  type BindingRecord,
  keyFileOf,
  legacyBindings,
  rawOf,
  readKeyFile,
  readTrustFile,
  recordOf,
  sameBaseUrl,
  TRUST_FILE_VERSION,
  type TrustFile,
} from "./home-layout.js";
import { AgentIdentity } from "./identity.js";
import type { CachedToken, TokenCachePersistence } from "./token-cache.js";

export type { BindingRecord } from "./home-layout.js";

/** `PROTO_HOME`, else `~/.proto`. */
export function defaultHome(env: NodeJS.ProcessEnv = process.env): string {
  const fromEnv = env.PROTO_HOME;
  return resolve(fromEnv !== undefined && fromEnv !== "" ? fromEnv : join(homedir(), ".proto"));
}

const CHECK_MODES = process.platform !== "win32";

export interface AgentConfig {
  attestor_url?: string;
  directory_url?: string;
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

  /** `trust.json`: one binding per attestor, in upstream's layout (version 2). */
  get trustPath(): string {
    return join(this.home, "trust.json");
  }

  get archiveDir(): string {
    return join(this.home, "archive");
  }

  /** Where files of our older layout go once rewritten in upstream's. */
  get legacyDir(): string {
    return join(this.home, "legacy");
  }

  hasIdentity(): boolean {
    return existsSync(this.keyPath);
  }

  /**
   * Loads the key. Refuses a key file that group or others can access (or that another user owns)
   * with `unsafe_permissions`, like ssh does. A key file of our older layout is rewritten in
   * upstream's, the original kept in `legacy/`.
   */
  loadIdentity(): AgentIdentity {
    const path = this.keyPath;
    if (!existsSync(path)) {
      throw new KeyStoreError("no_key", `no agent key in ${this.home}: run \`proto init\` first`, path);
    }
    assertPrivateFile(path);
    const text = readFileSync(path, "utf8");
    const read = readKeyFile(parseKeyFile(text, path), path, () => statSync(path).mtime.toISOString());
    if (read.layout === "legacy") {
      this.#keepLegacy("key.json", text);
      this.#writeKey(read.identity, read.unknown);
    }
    return read.identity;
  }

  /**
   * Rewrites files of our older layout in upstream's (the key, `bindings.json`) and upstream's
   * `trust.json` version 1 as version 2, keeping the originals in `legacy/`. Nothing happens when
   * there is nothing to migrate; every load migrates too, this only does it at once.
   */
  migrate(): void {
    if (this.hasIdentity()) this.loadIdentity();
    this.#trust();
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
   * attestor bindings belong to the old DID (link again), and services that support key rotation
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

  /** The archived keys, oldest first (loaded with the same checks as the current key, in either layout). */
  archivedIdentities(): AgentIdentity[] {
    if (!existsSync(this.archiveDir)) return [];
    return readdirSync(this.archiveDir)
      .filter((name) => name.startsWith("key-") && name.endsWith(".json"))
      .sort()
      .map((name) => {
        const path = join(this.archiveDir, name);
        assertPrivateFile(path);
        return readKeyFile(parseKeyFile(readFileSync(path, "utf8"), path), path, () => "").identity;
      });
  }

  #writeKey(identity: AgentIdentity, unknown: Record<string, unknown> = {}): void {
    ensurePrivateDir(this.home, true);
    writePrivateFile(this.keyPath, `${JSON.stringify(keyFileOf(identity, unknown), null, 2)}\n`);
  }

  /** Keeps a file of an older layout in `legacy/` (never over an earlier copy). */
  #keepLegacy(name: string, text: string): string {
    ensurePrivateDir(this.legacyDir);
    let path = join(this.legacyDir, name);
    if (existsSync(path)) path = join(this.legacyDir, `${name}.${Date.now()}`);
    writePrivateFile(path, text);
    return path;
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

  // --- bindings (trust.json) ---

  /**
   * The binding at this attestor, when it belongs to `agentDid`. A binding of another DID (an
   * earlier key) is orphaned and never used to mint.
   */
  getBinding(attestorUrl: string, agentDid: string): BindingRecord | undefined {
    const binding = this.listBindings().find((b) => sameBaseUrl(b.attestor_url, attestorUrl));
    return binding?.agent_did === agentDid ? binding : undefined;
  }

  /** Every binding, one per attestor, orphaned ones (of an earlier key) included. */
  listBindings(): BindingRecord[] {
    return this.#trust().bindings.flatMap((raw) => recordOf(raw) ?? []);
  }

  /**
   * Saves the binding at its attestor: in place of the one there (whatever its DID: linking again
   * replaces it), keeping that one's unknown fields and learned `iss`; else appended.
   */
  saveBinding(record: BindingRecord): void {
    const file = this.#trust();
    const index = file.bindings.findIndex(
      (raw) => typeof raw.base_url === "string" && sameBaseUrl(raw.base_url, record.attestor_url),
    );
    if (index === -1) file.bindings.push(rawOf(record));
    else file.bindings[index] = rawOf(record, file.bindings[index]);
    this.#writeJson(this.trustPath, file);
  }

  /** `trust.json`, after migrating upstream's version 1 and our `bindings.json` into it. */
  #trust(): TrustFile {
    const text = this.#readText(this.trustPath);
    let file: TrustFile = { version: TRUST_FILE_VERSION, bindings: [] };
    let changed = false;
    if (text !== undefined) {
      const read = readTrustFile(parseJson(text, this.trustPath), this.trustPath);
      file = read.file;
      if (read.migrated) {
        this.#keepLegacy("trust.json", text);
        changed = true;
      }
    }
    const legacyPath = join(this.home, "bindings.json");
    const legacyText = this.#readText(legacyPath);
    if (legacyText !== undefined) {
      for (const record of legacyBindings(parseJson(legacyText, legacyPath), this.#currentDid())) {
        const known = file.bindings.some(
          (raw) => typeof raw.base_url === "string" && sameBaseUrl(raw.base_url, record.attestor_url),
        );
        if (!known) file.bindings.push(rawOf(record));
      }
      this.#keepLegacy("bindings.json", legacyText);
      changed = true;
    }
    if (changed) {
      this.#writeJson(this.trustPath, file);
      if (legacyText !== undefined) rmSync(legacyPath, { force: true });
    }
    return file;
  }

  #currentDid(): string | undefined {
    try {
      return this.hasIdentity() ? this.loadIdentity().did : undefined;
    } catch {
      return undefined;
    }
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
    const text = this.#readText(path);
    return text === undefined ? undefined : (parseJson(text, path) as T);
  }

  #readText(path: string): string | undefined {
    try {
      return readFileSync(path, "utf8");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw new KeyStoreError("unreadable_file", `cannot read ${path}: ${(error as Error).message}`, path, {
        cause: error,
      });
    }
  }

  #writeJson(path: string, value: unknown): void {
    ensurePrivateDir(this.home, true);
    const dir = resolve(path, "..");
    if (dir !== this.home) ensurePrivateDir(dir);
    writePrivateFile(path, `${JSON.stringify(value, null, 2)}\n`);
  }
}

function parseJson(text: string, path: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new KeyStoreError("invalid_file", `${path} is not valid JSON; fix or delete it`, path, { cause: error });
  }
}

function parseKeyFile(text: string, path: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new KeyStoreError("invalid_key_file", `key file ${path} is not valid JSON`, path, { cause: error });
  }
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
