/**
 * Redis counters with a per-replica pre-count, for limits that only protect availability (the
 * directory's public read limit): a hit is decided in this process from the last global count
 * Redis answered plus this replica's hits not yet acknowledged, and the hits are sent in batches,
 * every key at once in one pipelined round trip, every `flushIntervalMs` and as soon as a key's
 * unacknowledged hits reach its slack.
 *
 * The bound. A replica admits a hit only while (known + unacknowledged) < limit and
 * unacknowledged < slack, where slack = max(1, ceil(limit / 100)) and unacknowledged counts the
 * hits sent and not yet answered as well as those not sent; a hit past the slack waits for the
 * next answer (hitSync says undefined, hit() waits). One batch is in flight at a time, so a
 * replica's answers for a key come in the order Redis counted them. With N replicas sharing one
 * Redis, while Redis answers and each replica holds fewer than maxKeys keys, a key admits at most
 * limit + (N - 1) x slack hits in a window. Why: take the replica r whose last admission was
 * decided on the latest answer (in Redis's order), of global count G. r's hits are those counted
 * in G and its unacknowledged ones, so a_r + (the other replicas' hits in G) <= limit. Every other
 * replica s decided its last admission on an earlier answer, with at most `slack` of its hits not
 * counted in it, so a_s <= (s's hits in G) + slack. Summed: total <= limit + (N - 1) x slack.
 * One replica is exact. Written down for operators in docs/contract/decisions.md (D16).
 *
 * Windows: the window index is part of the Redis key, as for the exact counters (same keys, so
 * exact and batched replicas count together); hits of a window not yet sent when the window ends
 * are dropped, never counted into the next one. A failed batch forgets every pre-count and makes
 * the next hits wait for an answer (hit() rejects while Redis does not answer), so
 * FallbackRateLimiter counts per process meanwhile and reports the outage and the recovery.
 */
import { createHash } from "node:crypto";
import type { Clock } from "./clock.js";
import {
  type CheckedRule,
  checkRule,
  decide,
  EXPIRY_GRACE_MS,
  type RateLimitDecision,
  type RateLimiter,
  type RateLimitRule,
  type RedisRateLimitClient,
  redisCounterKey,
  runScript,
} from "./rate-limit.js";

// KEYS[1] a window's counter, ARGV[1] hits to add (0 only reads it), ARGV[2] its TTL in ms.
// Increment and expiry in one script, as for the exact counters: no counter is left without a
// TTL. Only admitted hits are ever sent, so the count is of admitted hits.
const ADD_SCRIPT = `
local count = redis.call('INCRBY', KEYS[1], ARGV[1])
if redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return count
`;
const ADD_SCRIPT_SHA = createHash("sha1").update(ADD_SCRIPT).digest("hex");

/** The hits of one key a replica may admit before Redis has acknowledged them: 1% of the limit. */
export function replicaSlack(limit: number): number {
  return Math.max(1, Math.ceil(limit / 100));
}

export interface BatchedRedisRateLimiterOptions {
  redis: RedisRateLimitClient;
  clock: Clock;
  /** Prepended to every key, so services and test runs can share one Redis. */
  keyPrefix?: string;
  /** Quit the client on close(); leave false when the client is shared with other components. */
  ownsClient?: boolean;
  /** How long a hit may wait in this process before it is sent; 50 ms by default. */
  flushIntervalMs?: number;
  /**
   * The most (rule, key) pre-counts kept. When full, ended windows are dropped first, then the
   * pre-counts whose window started longest ago (with their unsent hits); an evicted key learns
   * the global count again at its next batch.
   */
  maxKeys?: number;
}

/** One key's count in the current window, as this replica knows it. */
interface PreCount {
  readonly rule: RateLimitRule;
  readonly key: string;
  window: number;
  resetAt: number;
  /** The global count Redis answered last (this window). */
  known: number;
  /** Hits sent, not yet answered. */
  inFlight: number;
  /** Hits admitted, not yet sent. */
  pending: number;
  /** In the next batch. */
  queued: boolean;
  /** A hit waits for the global count: the next batch asks for it even with nothing to add. */
  read: boolean;
  /** Built at its first batch in the window. */
  redisKey: string | undefined;
}

interface Sent {
  entry: PreCount;
  window: number;
  hits: number;
}

const SWEEP_INTERVAL_MS = 1_000;

function ignore(): void {}

export class BatchedRedisRateLimiter implements RateLimiter {
  readonly #redis: RedisRateLimitClient;
  readonly #clock: Clock;
  readonly #prefix: string;
  readonly #ownsClient: boolean;
  readonly #intervalMs: number;
  readonly #maxKeys: number;
  // Map order is insertion order, and a pre-count is re-inserted when its window rolls over, so
  // the front holds those whose window started longest ago.
  readonly #entries = new Map<string, PreCount>();
  readonly #dirty = new Set<PreCount>();
  #sending: Promise<void> | undefined;
  #next: Promise<void> | undefined;
  #timer: NodeJS.Timeout | undefined;
  /** After a failed batch: nothing is decided here until Redis answers again. */
  #unconfirmed = false;
  #closed = false;
  #nextSweepAt = Number.NEGATIVE_INFINITY;
  #lastKey: string | undefined;
  #lastRule: CheckedRule | undefined;
  #lastId = "";

  constructor(options: BatchedRedisRateLimiterOptions) {
    this.#redis = options.redis;
    this.#clock = options.clock;
    this.#prefix = options.keyPrefix ?? "proto:ratelimit:";
    this.#ownsClient = options.ownsClient ?? false;
    this.#intervalMs = options.flushIntervalMs ?? 50;
    this.#maxKeys = options.maxKeys ?? 100_000;
    if (!Number.isSafeInteger(this.#maxKeys) || this.#maxKeys < 1) {
      throw new RangeError("maxKeys must be a positive integer");
    }
    if (!(this.#intervalMs > 0)) throw new RangeError("flushIntervalMs must be positive");
  }

  /** Pre-counts currently held. */
  get size(): number {
    return this.#entries.size;
  }

  hitSync(rule: RateLimitRule, key: string): RateLimitDecision | undefined {
    if (this.#unconfirmed || this.#closed) return undefined;
    return this.#count(rule, key);
  }

  async hit(rule: RateLimitRule, key: string): Promise<RateLimitDecision> {
    for (;;) {
      if (this.#closed) throw new Error("rate limiter closed");
      const decision = this.#unconfirmed ? undefined : this.#count(rule, key);
      if (decision !== undefined) return decision;
      // Each pass waits for a batch that carries this key, so it learns the global count anew.
      const entry = this.#entryAt(rule, key, this.#clock.now());
      entry.read = true;
      this.#queue(entry);
      await this.flush();
    }
  }

  /** Sends every pending hit now, after the batch in flight if any; rejects when Redis fails. */
  flush(): Promise<void> {
    if (this.#sending === undefined) {
      const sending = this.#send().finally(() => {
        this.#sending = undefined;
      });
      this.#sending = sending;
      return sending;
    }
    this.#next ??= this.#sending.then(ignore, ignore).then(() => {
      this.#next = undefined;
      return this.flush();
    });
    return this.#next;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    // Hits counted here still reach the other replicas.
    await this.flush().catch(ignore);
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#forget();
    if (this.#ownsClient) await this.#redis.quit();
  }

  #count(rule: RateLimitRule, key: string): RateLimitDecision | undefined {
    const checked = checkRule(rule);
    const now = this.#clock.now();
    const entry = this.#entry(rule, checked, key, now);
    const unacknowledged = entry.inFlight + entry.pending;
    const counted = entry.known + unacknowledged;
    if (counted >= checked.limit) return decide(rule, false, counted, now, entry.resetAt);
    const slack = replicaSlack(checked.limit);
    if (unacknowledged >= slack) return undefined;
    entry.pending += 1;
    this.#queue(entry);
    if (unacknowledged + 1 >= slack) this.flush().catch(ignore);
    return decide(rule, true, counted + 1, now, entry.resetAt);
  }

  #entryAt(rule: RateLimitRule, key: string, now: number): PreCount {
    return this.#entry(rule, checkRule(rule), key, now);
  }

  #entry(rule: RateLimitRule, checked: CheckedRule, key: string, now: number): PreCount {
    const windowMs = checked.windowSeconds * 1000;
    const index = Math.floor(now / windowMs);
    // A client's hits come in runs: its id is kept rather than made anew for each.
    let id = this.#lastId;
    if (key !== this.#lastKey || checked !== this.#lastRule) {
      id = checked.prefix + key;
      this.#lastKey = key;
      this.#lastRule = checked;
      this.#lastId = id;
    }
    if (now >= this.#nextSweepAt) this.#sweep(now);
    let entry = this.#entries.get(id);
    if (entry === undefined) {
      this.#makeRoom(now);
      entry = {
        rule,
        key,
        window: index,
        resetAt: (index + 1) * windowMs,
        known: 0,
        inFlight: 0,
        pending: 0,
        queued: false,
        read: false,
        redisKey: undefined,
      };
      this.#entries.set(id, entry);
    } else if (entry.window !== index) {
      // Hits of the old window not yet sent are dropped, never counted into this one; answers
      // still on their way for the old window are ignored (see #send).
      entry.window = index;
      entry.resetAt = (index + 1) * windowMs;
      entry.known = 0;
      entry.inFlight = 0;
      entry.pending = 0;
      entry.read = false;
      entry.redisKey = undefined;
      this.#entries.delete(id);
      this.#entries.set(id, entry);
    }
    return entry;
  }

  #queue(entry: PreCount): void {
    if (entry.queued) return;
    entry.queued = true;
    this.#dirty.add(entry);
    if (this.#timer === undefined && !this.#closed) {
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        this.flush().catch(ignore);
      }, this.#intervalMs);
      this.#timer.unref();
    }
  }

  async #send(): Promise<void> {
    if (this.#dirty.size === 0) return;
    const now = this.#clock.now();
    const sent: Sent[] = [];
    const replies: Promise<unknown>[] = [];
    // Issued in one tick: the client writes them back to back (one write with auto-pipelining),
    // so the batch costs one round trip.
    for (const entry of this.#dirty) {
      entry.queued = false;
      const hits = entry.pending;
      if (hits === 0 && !entry.read) continue;
      entry.read = false;
      entry.pending = 0;
      entry.inFlight += hits;
      entry.redisKey ??= redisCounterKey(this.#prefix, entry.rule, entry.key, entry.window);
      const ttlMs = Math.max(1, entry.resetAt - now) + EXPIRY_GRACE_MS;
      replies.push(runScript(this.#redis, ADD_SCRIPT, ADD_SCRIPT_SHA, entry.redisKey, String(hits), String(ttlMs)));
      sent.push({ entry, window: entry.window, hits });
    }
    this.#dirty.clear();
    if (sent.length === 0) return;
    let counts: unknown[];
    try {
      counts = await Promise.all(replies);
      if (!counts.every((count) => typeof count === "number")) {
        throw new Error("rate limit script returned an unexpected reply");
      }
    } catch (error) {
      // What was sent may or may not have been counted, and Redis may come back empty: start
      // afresh from its answers once it is back.
      this.#forget();
      this.#unconfirmed = true;
      throw error;
    }
    this.#unconfirmed = false;
    for (let i = 0; i < sent.length; i++) {
      const { entry, window, hits } = sent[i] as Sent;
      // A pre-count that moved to another window (or was evicted) has nothing to learn from it.
      if (entry.window !== window) continue;
      entry.inFlight -= hits;
      entry.known = counts[i] as number;
    }
  }

  #forget(): void {
    for (const entry of this.#dirty) entry.queued = false;
    this.#dirty.clear();
    this.#entries.clear();
    this.#lastKey = undefined;
    this.#lastRule = undefined;
  }

  #drop(id: string, entry: PreCount): void {
    this.#entries.delete(id);
    if (entry.queued) {
      entry.queued = false;
      this.#dirty.delete(entry);
    }
    // An answer still on its way for it is ignored (see #send).
    entry.window = Number.NaN;
  }

  #sweep(now: number): void {
    this.#nextSweepAt = now + SWEEP_INTERVAL_MS;
    for (const [id, entry] of this.#entries) {
      if (entry.resetAt <= now) this.#drop(id, entry);
    }
  }

  #makeRoom(now: number): void {
    if (this.#entries.size < this.#maxKeys) return;
    if (now >= this.#nextSweepAt) this.#sweep(now);
    for (const [id, entry] of this.#entries) {
      if (this.#entries.size < this.#maxKeys) break;
      this.#drop(id, entry);
    }
  }
}
