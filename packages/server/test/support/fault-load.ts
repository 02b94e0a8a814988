/**
 * Modest load on running servers while a dependency fails, and what a client saw of it: every
 * request's operation, when it started, how long it took and what it answered. The checks read
 * those samples the way a client would judge the service: an honest 503 with `Retry-After` is
 * fine during an outage, a 500, a dropped connection or a slow answer never is.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { type HttpResult, httpRequest, type RequestOptions } from "./http.js";

/** A bound the issue asks of every answer during a fault (correctness, not a benchmark). */
export const ANSWER_WITHIN_MS = 2_000;
/** How soon after its dependency returns a service must serve again, without a restart. */
export const RECOVER_WITHIN_MS = 5_000;
/** Only a guard so a hung request ends the run; any answer slower than ANSWER_WITHIN_MS fails anyway. */
const REQUEST_GUARD_MS = 15_000;

export interface Sample {
  op: string;
  /** Date.now() when the request was sent. */
  startedAt: number;
  ms: number;
  /** 0 when no HTTP answer came (connection refused or reset, the guard's timeout). */
  status: number;
  result: HttpResult | undefined;
  error: string | undefined;
}

/** One request a client sends, again and again, during a run. */
export interface Operation {
  name: string;
  /** `worker` numbers the client sending it (0 to concurrency - 1). */
  send(worker: number): Promise<HttpResult>;
  /** 4xx statuses this operation answers in normal service too (an unknown DID's read is a 404). */
  normal4xx?: readonly number[];
  /** Told about each 2xx answer: the write it acknowledged, to be read back afterwards. */
  acknowledged?(result: HttpResult): void;
}

/** A request as support/http.ts sends it, ended after REQUEST_GUARD_MS if nothing answers. */
export function guardedRequest(
  baseUrl: string,
  method: string,
  path: string,
  options: RequestOptions = {},
): Promise<HttpResult> {
  return httpRequest(baseUrl, method, path, { ...options, signal: AbortSignal.timeout(REQUEST_GUARD_MS) });
}

async function measure(op: string, send: () => Promise<HttpResult>): Promise<Sample> {
  const startedAt = Date.now();
  const t0 = performance.now();
  try {
    const result = await send();
    return { op, startedAt, ms: performance.now() - t0, status: result.status, result, error: undefined };
  } catch (error) {
    const message = error instanceof Error ? `${error.message} ${String(error.cause ?? "")}` : String(error);
    return { op, startedAt, ms: performance.now() - t0, status: 0, result: undefined, error: message };
  }
}

/** `concurrency` clients, each sending the operations in turn until stopped. */
export class Load {
  readonly samples: Sample[] = [];
  readonly #operations: readonly Operation[];
  readonly #concurrency: number;
  #running: Promise<void>[] = [];
  #stopped = false;

  constructor(operations: readonly Operation[], concurrency: number) {
    this.#operations = operations;
    this.#concurrency = concurrency;
  }

  start(): void {
    this.#stopped = false;
    this.#running = Array.from({ length: this.#concurrency }, (_, worker) => this.#worker(worker));
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    await Promise.all(this.#running);
  }

  /** Resolves once every operation has answered 2xx to a request sent at or after `since`. */
  async recovered(since: number, deadline: number, exempt: readonly string[] = []): Promise<void> {
    const pending = () =>
      this.#operations
        .map((op) => op.name)
        .filter((name) => !exempt.includes(name))
        .filter((name) => !this.samples.some((s) => s.op === name && s.startedAt >= since && ok(s)));
    while (pending().length > 0 && Date.now() < deadline) await sleep(50);
  }

  async #worker(worker: number): Promise<void> {
    // Each client starts at a different operation, so all of them are in flight at once.
    for (let i = worker; !this.#stopped; i++) {
      const op = this.#operations[i % this.#operations.length]!;
      const sample = await measure(op.name, () => op.send(worker));
      this.samples.push(sample);
      if (ok(sample)) op.acknowledged?.(sample.result!);
    }
  }
}

const ok = (sample: Sample) => sample.status >= 200 && sample.status < 300;

/** A GET of one path on each server, every `everyMs`, on a fresh connection (as a load balancer probes). */
export class Prober {
  readonly samples: Sample[] = [];
  #stopped = false;
  #running: Promise<void> | undefined;

  constructor(
    readonly targets: readonly { name: string; url: string }[],
    readonly path: string,
    readonly everyMs: number,
  ) {}

  start(): void {
    this.#stopped = false;
    this.#running = (async () => {
      while (!this.#stopped) {
        const round = this.targets.map((target) =>
          measure(`${target.name} ${this.path}`, () => guardedRequest(target.url, "GET", this.path, {})),
        );
        this.samples.push(...(await Promise.all(round)));
        await sleep(this.everyMs);
      }
    })();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#running;
  }
}

/** What went wrong in `samples`, one line each (empty: nothing). */
export function describeSample(sample: Sample): string {
  const at = new Date(sample.startedAt).toISOString().slice(11, 23);
  const body = sample.result?.text.slice(0, 300) ?? sample.error ?? "";
  return `${at} ${sample.op}: ${sample.status} in ${Math.round(sample.ms)} ms ${body}`;
}

/**
 * Every answer a client may see while a dependency fails: a 2xx, a 4xx the operation gives in
 * normal service too, or 503 `service_unavailable` in the error envelope with a whole-second
 * `Retry-After`; and each within ANSWER_WITHIN_MS. Answers the lines that break this.
 */
export function outageViolations(samples: readonly Sample[], operations: readonly Operation[]): string[] {
  const normal = new Map(operations.map((op) => [op.name, op.normal4xx ?? []]));
  const problems: string[] = [];
  for (const sample of samples) {
    const why: string[] = [];
    if (sample.ms > ANSWER_WITHIN_MS) why.push(`slower than ${ANSWER_WITHIN_MS} ms`);
    if (sample.status === 0) why.push("no HTTP answer");
    else if (sample.status === 503) why.push(...unavailableProblems(sample.result!));
    else if (sample.status >= 400 && !(normal.get(sample.op) ?? []).includes(sample.status)) {
      why.push(`unexpected ${sample.status}`);
    }
    if (why.length > 0) problems.push(`${why.join(", ")}: ${describeSample(sample)}`);
  }
  return problems;
}

/** What is wrong with a 503 as an outage answer (empty: it is a proper one). */
export function unavailableProblems(result: HttpResult): string[] {
  const why: string[] = [];
  if (!/^application\/json/.test(result.headers.get("content-type") ?? "")) why.push("503 not JSON");
  if (result.json?.error?.code !== "service_unavailable") why.push("503 without code service_unavailable");
  if (typeof result.json?.error?.message !== "string") why.push("503 without a message");
  if (!/^\d+$/.test(result.headers.get("retry-after") ?? "")) why.push("503 without a Retry-After in seconds");
  return why;
}

/**
 * Operations that did not serve again within RECOVER_WITHIN_MS of `backAt`: no 2xx answered by
 * then, or a failure among requests sent after it.
 */
export function recoveryViolations(
  samples: readonly Sample[],
  operations: readonly Operation[],
  backAt: number,
  exempt: readonly string[] = [],
): string[] {
  const problems: string[] = [];
  const by = backAt + RECOVER_WITHIN_MS;
  for (const op of operations) {
    if (exempt.includes(op.name)) continue;
    const after = samples.filter((s) => s.op === op.name && s.startedAt >= backAt);
    const first = after.find(ok);
    if (first === undefined) problems.push(`${op.name}: never served again after the dependency returned`);
    else if (first.startedAt + first.ms > by) {
      problems.push(`${op.name}: first served ${Math.round(first.startedAt + first.ms - backAt)} ms after the return`);
    }
    const normal = op.normal4xx ?? [];
    for (const late of after.filter((s) => s.startedAt >= by && !ok(s) && !normal.includes(s.status))) {
      problems.push(`${op.name}: still failing ${RECOVER_WITHIN_MS} ms after the return: ${describeSample(late)}`);
    }
  }
  return problems;
}

/** The slowest answer of each operation, for the test's log line. */
export function slowest(samples: readonly Sample[]): string {
  const max = new Map<string, number>();
  for (const s of samples) max.set(s.op, Math.max(max.get(s.op) ?? 0, s.ms));
  return [...max].map(([op, ms]) => `${op} ${Math.round(ms)}`).join(", ");
}

/** How many answers of each status, for the test's log line: `200: 512, 503: 31`. */
export function statuses(samples: readonly Sample[]): string {
  const counts = new Map<number, number>();
  for (const s of samples) counts.set(s.status, (counts.get(s.status) ?? 0) + 1);
  return [...counts]
    .sort(([a], [b]) => a - b)
    .map(([status, n]) => `${status}: ${n}`)
    .join(", ");
}
