import {
  type CryptoKey,
  createLocalJWKSet,
  type FlattenedJWSInput,
  type JSONWebKeySet,
  type JWSHeaderParameters,
  errors as joseErrors,
} from "jose";

/** A key lookup jose can verify with: a static key set or a remote one. */
export type KeyLookup = (header: JWSHeaderParameters, token: FlattenedJWSInput) => Promise<CryptoKey>;

export type FetchFunction = (input: string, init?: RequestInit) => Promise<Response>;

export interface RemoteKeySetOptions {
  /** A `fetch` to use (tests inject one that trusts their CA); the global one by default. */
  fetch?: FetchFunction;
  /** Least time between two fetches caused by an unknown `kid` (default 30 s). */
  cooldownSeconds?: number;
  /** Cache lifetime when the response says none (default 300 s, the attestor's own). */
  defaultMaxAgeSeconds?: number;
  timeoutMs?: number;
  /** Largest key set accepted (default 64 KiB). */
  maxBytes?: number;
  /** Milliseconds since the epoch; an injectable clock. */
  now?: () => number;
  /**
   * After a failed fetch, how long callers that need a fresh copy are told to come back instead of
   * each waiting on a fetch of their own (default 5 s).
   */
  failureBackoffSeconds?: number;
}

/**
 * The key set could not be had (unreachable, timed out, an answer other than a JSON key set) and
 * no cached copy may answer: nothing is known about the token, so its sender is not at fault.
 * Services answer 503 with `Retry-After: retryAfterSeconds`.
 */
export class KeySetUnavailableError extends Error {
  override readonly name = "KeySetUnavailableError";
  readonly retryAfterSeconds: number;

  constructor(message: string, retryAfterSeconds: number, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

interface CacheDirectives {
  maxAge: number | undefined;
  staleWhileRevalidate: number;
  noStore: boolean;
}

function parseCacheControl(header: string | null): CacheDirectives {
  const directives: CacheDirectives = { maxAge: undefined, staleWhileRevalidate: 0, noStore: false };
  for (const part of (header ?? "").split(",")) {
    const [rawName, rawValue] = part.trim().split("=", 2);
    const name = rawName?.toLowerCase();
    const value = rawValue === undefined ? Number.NaN : Number.parseInt(rawValue.replace(/"/g, ""), 10);
    if (name === "no-store" || name === "no-cache") directives.noStore = true;
    else if (name === "max-age" && Number.isFinite(value) && value >= 0) directives.maxAge = value;
    else if (name === "stale-while-revalidate" && Number.isFinite(value) && value >= 0) {
      directives.staleWhileRevalidate = value;
    }
  }
  return directives;
}

function isKeySet(value: unknown): value is JSONWebKeySet {
  return typeof value === "object" && value !== null && Array.isArray((value as { keys?: unknown }).keys);
}

/**
 * A key set fetched from a URL that honours the response's cache lifetime (`max-age`, with
 * `stale-while-revalidate` served while a refresh runs or when the source is down) and refetches
 * on an unknown `kid` at most once per cooldown, so a flood of forged `kid`s cannot become a
 * flood of fetches.
 */
export class RemoteKeySet {
  readonly url: string;
  readonly #fetch: FetchFunction;
  readonly #cooldownMs: number;
  readonly #defaultMaxAge: number;
  readonly #timeoutMs: number;
  readonly #maxBytes: number;
  readonly #now: () => number;
  #local: ReturnType<typeof createLocalJWKSet> | undefined;
  #freshUntil = 0;
  #staleUntil = 0;
  #lastFetchAt = Number.NEGATIVE_INFINITY;
  #pending: Promise<void> | undefined;
  readonly #failureBackoffMs: number;
  /** Until when a failed fetch answers for the source (no fetch before then). */
  #failedUntil = Number.NEGATIVE_INFINITY;
  #failure = "";

  constructor(url: string | URL, options: RemoteKeySetOptions = {}) {
    this.url = new URL(url).href;
    this.#fetch = options.fetch ?? ((input, init) => fetch(input, init));
    this.#cooldownMs = (options.cooldownSeconds ?? 30) * 1000;
    this.#defaultMaxAge = options.defaultMaxAgeSeconds ?? 300;
    this.#timeoutMs = options.timeoutMs ?? 5000;
    this.#maxBytes = options.maxBytes ?? 64 * 1024;
    this.#now = options.now ?? Date.now;
    this.#failureBackoffMs = (options.failureBackoffSeconds ?? 5) * 1000;
  }

  /** The jose-compatible lookup. Throws `KeySetUnavailableError` when the source cannot answer. */
  readonly getKey: KeyLookup = async (header, token) => {
    const now = this.#now();
    if (this.#local === undefined || now >= this.#staleUntil) {
      await this.#refreshFor(now);
    } else if (now >= this.#freshUntil && now >= this.#failedUntil) {
      // Serve the stale copy now; the refresh runs alongside and its failure is not this caller's.
      this.refresh().catch(() => undefined);
    }
    try {
      return await this.#lookup(header, token);
    } catch (error) {
      if (!(error instanceof joseErrors.JWKSNoMatchingKey) || this.#now() - this.#lastFetchAt < this.#cooldownMs) {
        throw error;
      }
      // A kid we do not hold may be a key published since: only a fresh copy can tell.
      await this.#refreshFor(this.#now());
      return this.#lookup(header, token);
    }
  };

  /**
   * Fetches the key set now (concurrent callers share one fetch). Rejects with
   * `KeySetUnavailableError` when the fetch fails.
   */
  refresh(): Promise<void> {
    this.#pending ??= this.#load()
      .catch((error: unknown) => {
        this.#failedUntil = this.#now() + this.#failureBackoffMs;
        this.#failure = reasonOf(error);
        throw this.#unavailable(error);
      })
      .finally(() => {
        this.#pending = undefined;
      });
    return this.#pending;
  }

  /** A refresh a caller must wait for, unless a fetch failed moments ago: then the failure answers. */
  async #refreshFor(now: number): Promise<void> {
    if (now < this.#failedUntil && this.#pending === undefined) throw this.#unavailable();
    await this.refresh();
  }

  #unavailable(cause?: unknown): KeySetUnavailableError {
    const seconds = Math.max(1, Math.ceil((this.#failedUntil - this.#now()) / 1000));
    return new KeySetUnavailableError(`the key set at ${this.url} is unavailable (${this.#failure})`, seconds, cause);
  }

  async #lookup(header: JWSHeaderParameters, token: FlattenedJWSInput): Promise<CryptoKey> {
    if (this.#local === undefined) throw new joseErrors.JWKSNoMatchingKey();
    return this.#local(header, token);
  }

  async #load(): Promise<void> {
    this.#lastFetchAt = this.#now();
    const response = await this.#fetch(this.url, {
      headers: { accept: "application/json" },
      redirect: "error",
      signal: AbortSignal.timeout(this.#timeoutMs),
    });
    if (response.status !== 200) throw new joseErrors.JOSEError(`key set answered HTTP ${response.status}`);
    const text = await readCapped(response, this.#maxBytes);
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      throw new joseErrors.JWKSInvalid("key set is not JSON");
    }
    if (!isKeySet(body)) throw new joseErrors.JWKSInvalid("key set has no keys array");
    const cache = parseCacheControl(response.headers.get("cache-control"));
    const maxAge = cache.noStore ? 0 : (cache.maxAge ?? this.#defaultMaxAge);
    const fetchedAt = this.#now();
    this.#local = createLocalJWKSet(body);
    this.#freshUntil = fetchedAt + maxAge * 1000;
    this.#staleUntil = this.#freshUntil + cache.staleWhileRevalidate * 1000;
  }
}

function reasonOf(error: unknown): string {
  if (error instanceof Error && (error.name === "TimeoutError" || error.name === "AbortError")) return "timed out";
  if (error instanceof joseErrors.JOSEError) return error.message;
  return "unreachable";
}

async function readCapped(response: Response, maxBytes: number): Promise<string> {
  const declared = Number(response.headers.get("content-length") ?? "0");
  if (declared > maxBytes) throw new joseErrors.JWKSInvalid("key set is too large");
  if (response.body === null) return "";
  const chunks: Uint8Array[] = [];
  let total = 0;
  for await (const chunk of response.body) {
    total += chunk.byteLength;
    if (total > maxBytes) throw new joseErrors.JWKSInvalid("key set is too large");
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString("utf8");
}

/** A key lookup over a key set held in memory. */
export function staticKeySet(jwks: JSONWebKeySet): KeyLookup {
  return createLocalJWKSet(jwks);
}
