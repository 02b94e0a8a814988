/**
 * For the soak only: with `SOAK_GC_SECONDS` set and the process started with `--expose-gc`, a full
 * garbage collection every that many seconds, so the resident memory the soak samples is what the
 * server retains rather than where V8's allocation sawtooth happens to stand (tens of MB between
 * major collections under load).
 */
export function collectGarbagePeriodically(): void {
  const seconds = Number(process.env.SOAK_GC_SECONDS);
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!(seconds > 0) || gc === undefined) return;
  setInterval(() => gc(), seconds * 1000).unref();
}
