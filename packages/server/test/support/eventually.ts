import { setTimeout as pause } from "node:timers/promises";

/**
 * Runs `attempt` until it returns true, for at most `withinMs`: for what the contract promises
 * within a time ("a change is visible at every replica within one second"). The short pauses
 * between attempts only keep the loop from spinning; nothing is assumed about how long the
 * awaited thing takes, and the deadline is the contract's.
 */
export async function within(withinMs: number, what: string, attempt: () => Promise<boolean>): Promise<void> {
  const deadline = performance.now() + withinMs;
  for (;;) {
    if (await attempt()) return;
    if (performance.now() > deadline) throw new Error(`not within ${withinMs} ms: ${what}`);
    await pause(10);
  }
}
