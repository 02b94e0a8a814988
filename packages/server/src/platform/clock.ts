/**
 * The application's notion of "now". Everything time-dependent (rate-limit windows, lifetimes,
 * expiries) reads it through a Clock so tests can move time forward instead of sleeping.
 */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
}

export const systemClock: Clock = Object.freeze({
  now: (): number => Date.now(),
});

/**
 * A clock that runs at the pace of its base but can be pushed forward, backing the
 * `/__test/clock` hook. It never goes backwards: windows and expiries already handed out must not
 * reopen.
 */
export class AdjustableClock implements Clock {
  readonly #base: Clock;
  #offsetMs = 0;

  constructor(base: Clock = systemClock) {
    this.#base = base;
  }

  now(): number {
    return this.#base.now() + this.#offsetMs;
  }

  advance(seconds: number): void {
    if (!Number.isFinite(seconds) || seconds < 0) {
      throw new RangeError("advance() takes a finite, non-negative number of seconds");
    }
    // Whole milliseconds keep now() an integer, like Date.now().
    this.#offsetMs += Math.round(seconds * 1000);
  }

  get offsetSeconds(): number {
    return this.#offsetMs / 1000;
  }
}
