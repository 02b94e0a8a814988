/**
 * The Web Bot Auth key directory client (draft-ietf-webbotauth-httpsig-protocol, "Key Distribution
 * and Discovery"): fetches the JWK Set a `Signature-Agent` names, through the SSRF-safe fetch only,
 * and keeps it as HTTP caching allows. The directory URL is chosen by whoever sends a signed
 * request, so every path here is bounded: body size, key count, cached directories, and how often
 * one directory is fetched whatever the requests name.
 */
import type { KeyObject } from "node:crypto";
import { SafeFetchError, type SafeFetcher, type SafeResponse } from "../safe-fetch.js";
import { freshnessSeconds, type LifetimeBounds } from "./cache-lifetime.js";
import { type DirectoryKey, parseDirectoryKeys, validKeys } from "./directory-keys.js";
import { checkDirectorySignatures } from "./directory-signature.js";
import { KeyDirectoryError } from "./key-directory-error.js";

export { jwkThumbprint } from "./directory-keys.js";
export { DIRECTORY_SIGNATURE_TAG } from "./directory-signature.js";
export { KeyDirectoryError, type KeyDirectoryFailure } from "./key-directory-error.js";

export const KEY_DIRECTORY_PATH = "/.well-known/http-message-signatures-directory";
export const KEY_DIRECTORY_MEDIA_TYPE = "application/http-message-signatures-directory+json";
const JWK_SET_MEDIA_TYPE = "application/jwk-set+json";
const JSON_MEDIA_TYPE = "application/json";
const ACCEPT = `${KEY_DIRECTORY_MEDIA_TYPE}, ${JWK_SET_MEDIA_TYPE};q=0.9, ${JSON_MEDIA_TYPE};q=0.8`;

/** An unknown keyid refetches a directory at most this often, so forged keyids cannot drive fetches. */
const UNKNOWN_KEY_COOLDOWN_MS = 60_000;
/** The draft's bound on negative caching. */
const MAX_FAILURE_CACHE_SECONDS = 300;
/** Least lifetime of a fetched directory, `no-store` included, for the same reason as the cooldown. */
const MIN_LIFETIME_SECONDS = 60;
const MAX_URL_LENGTH = 2048;
// An https URL spelled in printable ASCII only (an sf-string cannot carry more), so the lenient
// WHATWG parser never gets to guess at whitespace, backslashes or a missing `//`.
const HTTPS_URL = /^https:\/\/[\x21-\x7e]+$/i;

export interface KeyDirectoryOptions {
  /** The SSRF-safe fetch (`createSafeFetcher`); the only way the client reaches the network. */
  fetcher: SafeFetcher;
  /** Milliseconds since the epoch; an injectable clock. */
  now?: () => number;
  /** Directories kept, least recently used evicted first (default 1000). */
  maxEntries?: number;
  /** Entries a directory's `keys` may hold; more is `malformed` (default 64). */
  maxKeys?: number;
  /** Largest directory body accepted (default 64 KiB); the fetcher's own cap applies too. */
  maxBytes?: number;
  /** Lifetime of a directory whose response has no caching headers (default 3600). */
  defaultMaxAgeSeconds?: number;
  /** Upper bound of any directory's lifetime (default 86400). */
  maxAgeCapSeconds?: number;
  /** How long a failed fetch is remembered before trying again (default 60, at most 300). */
  failureCacheSeconds?: number;
  /** Refuse directories whose response is not signed (`unsigned`); default false. */
  requireSignedResponse?: boolean;
}

interface GoodKeys {
  keys: ReadonlyMap<string, DirectoryKey>;
  freshUntil: number;
  /** While later fetches fail, the keys are still served until then. */
  usableUntil: number;
}

interface CachedFailure {
  error: KeyDirectoryError;
  until: number;
}

interface Entry {
  good: GoodKeys | undefined;
  failure: CachedFailure | undefined;
  lastFetchAt: number;
  pending: Promise<void> | undefined;
}

interface Settings {
  maxEntries: number;
  maxKeys: number;
  maxBytes: number;
  lifetime: LifetimeBounds;
  /** Milliseconds a good directory outlives its freshness while refetches fail. */
  graceMs: number;
  failureMs: number;
  requireSigned: boolean;
}

function malformed(message: string): KeyDirectoryError {
  return new KeyDirectoryError("malformed", message);
}

/** The URL a directory is fetched from and cached under: https, no credentials, query or fragment. */
function canonicalUrl(raw: string): URL {
  if (typeof raw !== "string" || raw.length > MAX_URL_LENGTH || !HTTPS_URL.test(raw)) {
    throw malformed("a key directory URL must be an https URL");
  }
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw malformed("the key directory URL is not valid");
  }
  if (url.username !== "" || url.password !== "") throw malformed("a key directory URL must not carry credentials");
  // The draft identifies a directory by its URL without query or fragment, so those never pick
  // another directory (nor another cache entry).
  url.search = "";
  url.hash = "";
  return url;
}

/**
 * The directory URL a `Signature-Agent` member value names. Since -01 the value is the JWK Set URL
 * itself; a bare origin (the -00 `directory` type, and agents in the wild) means its well-known path.
 */
export function directoryUrlFor(signatureAgentValue: string): string {
  const url = canonicalUrl(signatureAgentValue);
  if (url.pathname === "/") url.pathname = KEY_DIRECTORY_PATH;
  return url.href;
}

function positiveInteger(name: string, value: number | undefined, fallback: number): number {
  const chosen = value ?? fallback;
  if (!Number.isSafeInteger(chosen) || chosen < 1) throw new RangeError(`${name} must be a whole number ≥ 1`);
  return chosen;
}

function settingsFrom(options: KeyDirectoryOptions): Settings {
  const defaultSeconds = positiveInteger("defaultMaxAgeSeconds", options.defaultMaxAgeSeconds, 3600);
  const capSeconds = positiveInteger("maxAgeCapSeconds", options.maxAgeCapSeconds, 86_400);
  const failureSeconds = options.failureCacheSeconds ?? 60;
  if (!Number.isFinite(failureSeconds) || failureSeconds < 0) {
    throw new RangeError("failureCacheSeconds must be a number ≥ 0");
  }
  return {
    maxEntries: positiveInteger("maxEntries", options.maxEntries, 1000),
    maxKeys: positiveInteger("maxKeys", options.maxKeys, 64),
    maxBytes: positiveInteger("maxBytes", options.maxBytes, 64 * 1024),
    lifetime: { defaultSeconds, capSeconds, floorSeconds: MIN_LIFETIME_SECONDS },
    graceMs: Math.min(defaultSeconds, capSeconds) * 1000,
    failureMs: Math.min(failureSeconds, MAX_FAILURE_CACHE_SECONDS) * 1000,
    requireSigned: options.requireSignedResponse ?? false,
  };
}

function fromFetchError(error: unknown): KeyDirectoryError {
  if (error instanceof KeyDirectoryError) return error;
  if (!(error instanceof SafeFetchError)) {
    return new KeyDirectoryError("unreachable", "the key directory could not be fetched", { cause: error });
  }
  switch (error.kind) {
    case "redirect":
      return new KeyDirectoryError("redirect", `the key directory answered with a redirect (${error.status})`);
    case "http_status":
      return new KeyDirectoryError("http_status", `the key directory answered with HTTP status ${error.status}`);
    case "too_large":
      return new KeyDirectoryError("too_large", "the key directory is too large");
    case "invalid_url":
      return malformed("the key directory URL is not fetchable");
    default:
      return new KeyDirectoryError("unreachable", `the key directory could not be fetched (${error.kind})`);
  }
}

function checkMediaType(url: URL, contentType: string | undefined): void {
  const mediaType = contentType?.split(";")[0]?.trim().toLowerCase();
  const accepted =
    url.pathname === KEY_DIRECTORY_PATH
      ? mediaType === KEY_DIRECTORY_MEDIA_TYPE
      : mediaType === KEY_DIRECTORY_MEDIA_TYPE || mediaType === JWK_SET_MEDIA_TYPE || mediaType === JSON_MEDIA_TYPE;
  if (!accepted) throw new KeyDirectoryError("media_type", "the key directory is not served as a key directory");
}

export class KeyDirectoryClient {
  readonly #fetcher: SafeFetcher;
  readonly #now: () => number;
  readonly #settings: Settings;
  /** Insertion order is recency: a hit moves its entry to the end, eviction takes the front. */
  readonly #entries = new Map<string, Entry>();

  constructor(options: KeyDirectoryOptions) {
    this.#fetcher = options.fetcher;
    this.#now = options.now ?? Date.now;
    this.#settings = settingsFrom(options);
  }

  /** The Ed25519 public keys of a directory by RFC 7638 thumbprint. Throws KeyDirectoryError. */
  async keys(directoryUrl: string): Promise<ReadonlyMap<string, KeyObject>> {
    const url = canonicalUrl(directoryUrl);
    const entry = this.#entry(url.href);
    if (this.#needsFetch(entry, this.#now())) await this.#refresh(url, entry);
    return this.#serve(entry);
  }

  /** Resolves one key; undefined when the directory (fresh or refetched once per cooldown) lacks it. */
  async lookup(directoryUrl: string, thumbprint: string): Promise<KeyObject | undefined> {
    const known = (await this.keys(directoryUrl)).get(thumbprint);
    if (known !== undefined) return known;
    const url = canonicalUrl(directoryUrl);
    const entry = this.#entry(url.href);
    // A fetch already under way may be the one that brings the key; otherwise, one per cooldown,
    // and none while a failure is cached (the keys served then are the last good ones).
    if (entry.pending === undefined) {
      const now = this.#now();
      if (now - entry.lastFetchAt < UNKNOWN_KEY_COOLDOWN_MS) return undefined;
      if (entry.failure !== undefined && now < entry.failure.until) return undefined;
      await this.#refresh(url, entry);
    } else await entry.pending;
    return this.#serve(entry).get(thumbprint);
  }

  #entry(key: string): Entry {
    let entry = this.#entries.get(key);
    if (entry !== undefined) this.#entries.delete(key);
    else entry = { good: undefined, failure: undefined, lastFetchAt: Number.NEGATIVE_INFINITY, pending: undefined };
    this.#entries.set(key, entry);
    if (this.#entries.size > this.#settings.maxEntries) {
      const oldest = this.#entries.keys().next().value;
      if (oldest !== undefined) this.#entries.delete(oldest);
    }
    return entry;
  }

  #needsFetch(entry: Entry, now: number): boolean {
    if (entry.good !== undefined && now < entry.good.freshUntil) return false;
    return entry.failure === undefined || now >= entry.failure.until;
  }

  /** The usable keys, else the cached failure (with how long it stays cached). */
  #serve(entry: Entry): ReadonlyMap<string, KeyObject> {
    const now = this.#now();
    const failure = entry.failure;
    // Without a failure the good keys were just fetched, whatever the clock did meanwhile.
    if (entry.good !== undefined && (now < entry.good.usableUntil || failure === undefined)) {
      return validKeys(entry.good.keys, Math.floor(now / 1000));
    }
    if (failure === undefined) {
      // Unreachable: a fetch always leaves good keys or a failure behind.
      return new Map();
    }
    const retryAfterSeconds = Math.max(0, Math.ceil((failure.until - now) / 1000));
    throw new KeyDirectoryError(failure.error.kind, failure.error.message, {
      retryAfterSeconds,
      cause: failure.error.cause,
    });
  }

  /** One fetch per directory at a time: concurrent callers share it. It never rejects. */
  #refresh(url: URL, entry: Entry): Promise<void> {
    entry.pending ??= this.#fetchInto(url, entry).finally(() => {
      entry.pending = undefined;
    });
    return entry.pending;
  }

  async #fetchInto(url: URL, entry: Entry): Promise<void> {
    entry.lastFetchAt = this.#now();
    try {
      const { keys, lifetimeSeconds } = await this.#load(url);
      const now = this.#now();
      const freshUntil = now + lifetimeSeconds * 1000;
      entry.good = { keys, freshUntil, usableUntil: freshUntil + this.#settings.graceMs };
      entry.failure = undefined;
    } catch (error) {
      // A failure never evicts good keys: they stay usable until their grace runs out.
      entry.failure = { error: fromFetchError(error), until: this.#now() + this.#settings.failureMs };
    }
  }

  async #load(url: URL): Promise<{ keys: ReadonlyMap<string, DirectoryKey>; lifetimeSeconds: number }> {
    let response: SafeResponse;
    try {
      response = await this.#fetcher.get(url.href, { accept: ACCEPT });
    } catch (error) {
      throw fromFetchError(error);
    }
    if (response.status !== 200) {
      throw new KeyDirectoryError("http_status", `the key directory answered with HTTP status ${response.status}`);
    }
    if (response.body.length > this.#settings.maxBytes) {
      throw new KeyDirectoryError("too_large", "the key directory is too large");
    }
    checkMediaType(url, response.contentType);
    const now = this.#now();
    const keys = parseDirectoryKeys(response.body, {
      maxKeys: this.#settings.maxKeys,
      kidMustBeThumbprint: url.pathname === KEY_DIRECTORY_PATH,
    });
    const nowSeconds = Math.floor(now / 1000);
    const signed = checkDirectorySignatures(
      { url: url.href, headers: response.headers, body: response.body },
      validKeys(keys, nowSeconds),
      nowSeconds,
    );
    if (signed === "unsigned" && this.#settings.requireSigned) {
      throw new KeyDirectoryError("unsigned", "the key directory response is not signed");
    }
    return { keys, lifetimeSeconds: freshnessSeconds(response.headers, now, this.#settings.lifetime) };
  }
}
