/**
 * Runs many small calls as few batches: a call made while `maxInFlight` batches are out waits for
 * one of them and joins the next batch, so under load each round trip carries every call that
 * arrived meanwhile, and a lone call goes out at once (no timer, no added latency when idle).
 * Two calls with the same key never share a batch: the later one waits for the next, so a batch
 * may assume its keys are distinct (one UPDATE per row).
 */
export interface CoalescerOptions<I, O> {
  /** Answers one result per item, in the items' order; a throw fails every call of the batch. */
  run(items: readonly I[]): Promise<readonly O[]>;
  /** Calls whose keys are equal go to different batches. */
  key(item: I): string;
  maxInFlight: number;
  maxBatch: number;
}

interface Pending<I, O> {
  item: I;
  resolve(value: O): void;
  reject(error: unknown): void;
}

export class Coalescer<I, O> {
  readonly #options: CoalescerOptions<I, O>;
  #queue: Pending<I, O>[] = [];
  #inFlight = 0;

  constructor(options: CoalescerOptions<I, O>) {
    this.#options = options;
  }

  call(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.#queue.push({ item, resolve, reject });
      this.#drain();
    });
  }

  #drain(): void {
    const { maxInFlight, maxBatch, key } = this.#options;
    while (this.#inFlight < maxInFlight && this.#queue.length > 0) {
      const batch: Pending<I, O>[] = [];
      const rest: Pending<I, O>[] = [];
      const keys = new Set<string>();
      for (const pending of this.#queue) {
        const k = key(pending.item);
        if (batch.length < maxBatch && !keys.has(k)) {
          keys.add(k);
          batch.push(pending);
        } else {
          rest.push(pending);
        }
      }
      this.#queue = rest;
      this.#send(batch);
    }
  }

  #send(batch: Pending<I, O>[]): void {
    this.#inFlight++;
    let outcome: Promise<readonly O[]>;
    try {
      outcome = this.#options.run(batch.map((p) => p.item));
    } catch (error) {
      outcome = Promise.reject(error);
    }
    outcome
      .then(
        (results) => {
          if (results.length !== batch.length) throw new Error("a batch answered the wrong number of results");
          for (const [i, p] of batch.entries()) p.resolve(results[i]!);
        },
        (error: unknown) => {
          for (const p of batch) p.reject(error);
        },
      )
      .catch((error: unknown) => {
        for (const p of batch) p.reject(error);
      })
      .finally(() => {
        this.#inFlight--;
        this.#drain();
      });
  }
}
