/**
 * How many key directories never seen before the kit may fetch per minute: a bound for the whole
 * process, and a smaller one per client, so that one client's junk `Signature-Agent` URLs use up
 * its own share and never the others'. A client is its address as the adapter reports it (after
 * the framework's trusted proxies), an IPv6 client its /64, which one host usually holds whole.
 */
import { addressKey, type ProtoError, rateLimitExceeded } from "@proto/protocol";
import { kitError } from "./errors.js";

export interface DirectoryBudgetOptions {
  /** New directories per minute for the whole process (default 60). */
  perMinute?: number;
  /**
   * New directories per minute for one client (default 10, or half of `perMinute` when that is
   * less): below `perMinute`, so no one client can use the process's bound up.
   */
  perClientPerMinute?: number;
  now: () => number;
}

const WINDOW_MS = 60_000;

function whole(name: string, value: number, least: number): number {
  if (!Number.isSafeInteger(value) || value < least) throw new RangeError(`${name} must be a whole number ≥ ${least}`);
  return value;
}

export class DirectoryBudget {
  readonly #perMinute: number;
  readonly #perClient: number;
  readonly #now: () => number;
  #window = -1;
  #admitted = 0;
  /** Admitted clients of this window only: at most `perMinute` entries. */
  #clients = new Map<string, number>();

  constructor(options: DirectoryBudgetOptions) {
    this.#perMinute = whole("newDirectoriesPerMinute", options.perMinute ?? 60, 1);
    const fallback = Math.max(1, Math.min(10, Math.floor(this.#perMinute / 2)));
    this.#perClient = whole("newDirectoriesPerClientPerMinute", options.perClientPerMinute ?? fallback, 1);
    if (this.#perClient > this.#perMinute) {
      throw new RangeError("newDirectoriesPerClientPerMinute must not exceed newDirectoriesPerMinute");
    }
    this.#now = options.now;
  }

  /**
   * Charges one new directory to `client`, or throws: 429 `rate_limit_exceeded` when the client
   * used its own share (its own traffic is the cause), 503 `kit_key_directories_busy` when the
   * process's bound is reached (others' traffic is). Both say when the window ends (`Retry-After`).
   * Without a client address only the process's bound applies.
   */
  charge(client: string | undefined): void {
    const now = this.#now();
    const window = Math.floor(now / WINDOW_MS);
    if (window !== this.#window) {
      this.#window = window;
      this.#admitted = 0;
      this.#clients = new Map();
    }
    const retryAfter = Math.max(1, Math.ceil(((window + 1) * WINDOW_MS - now) / 1000));
    const key = client === undefined || client === "" ? undefined : addressKey(client);
    const used = key === undefined ? 0 : (this.#clients.get(key) ?? 0);
    if (used >= this.#perClient) {
      throw rateLimitExceeded(
        retryAfter,
        `this client asked for ${this.#perClient} new Web Bot Auth key directories this minute, the most it may; try again later`,
      );
    }
    if (this.#admitted >= this.#perMinute) throw busy(retryAfter);
    this.#admitted += 1;
    if (key !== undefined) this.#clients.set(key, used + 1);
  }
}

function busy(retryAfter: number): ProtoError {
  return kitError("kit_key_directories_busy", undefined, { retryAfter });
}
