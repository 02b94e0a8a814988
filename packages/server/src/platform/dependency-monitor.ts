import type { Dependency } from "./dependency.js";

export interface MonitorLog {
  warn(object: Record<string, unknown>, message: string): void;
  info(object: Record<string, unknown>, message: string): void;
}

/** A check that the dependency answers now; false or a rejection means it does not. */
export type Probe = () => Promise<boolean>;

interface State {
  errors: number;
  degradedMs: number;
  /** performance.now() when the current outage was first seen; undefined while up. */
  since: number | undefined;
  /** What the first failure of the current outage said. */
  reason: string | undefined;
  timer: NodeJS.Timeout | undefined;
}

/** How often a dependency seen failing is probed until it answers again. */
const PROBE_INTERVAL_MS = 1_000;

/**
 * What a service knows about the health of its dependencies: errors counted, time spent
 * degraded, one log line when an outage starts and one when it ends (not one per failed
 * request). Readiness asks it; metrics read it.
 */
export class DependencyMonitor {
  readonly #probes: ReadonlyMap<Dependency, Probe>;
  readonly #states = new Map<Dependency, State>();
  #log: MonitorLog | undefined;

  constructor(probes: Partial<Record<Dependency, Probe>>) {
    this.#probes = new Map(Object.entries(probes) as [Dependency, Probe][]);
    for (const dependency of this.#probes.keys()) {
      this.#states.set(dependency, { errors: 0, degradedMs: 0, since: undefined, reason: undefined, timer: undefined });
    }
  }

  /** Where outage starts and ends are logged (the service's logger, once it exists). */
  set log(log: MonitorLog) {
    this.#log = log;
    // An outage that began before the logger existed (Redis down while the service started).
    for (const [dependency, state] of this.#states) {
      if (state.since !== undefined) this.#warnStarted(dependency, state.reason);
    }
  }

  get dependencies(): Dependency[] {
    return [...this.#probes.keys()];
  }

  /** `dependency` failed a request; starts an outage unless one is already going on. */
  failed(dependency: Dependency, error?: unknown): void {
    const state = this.#states.get(dependency);
    if (state === undefined) return;
    state.errors += 1;
    if (state.since !== undefined) return;
    state.since = performance.now();
    state.reason = error instanceof Error ? error.message : undefined;
    this.#warnStarted(dependency, state.reason);
    state.timer = setInterval(() => void this.#probe(dependency), PROBE_INTERVAL_MS);
    state.timer.unref();
  }

  /** `dependency` answered: ends its outage, if one was going on. */
  recovered(dependency: Dependency): void {
    const state = this.#states.get(dependency);
    if (state?.since === undefined) return;
    const seconds = (performance.now() - state.since) / 1000;
    state.degradedMs += performance.now() - state.since;
    state.since = undefined;
    clearInterval(state.timer);
    state.timer = undefined;
    this.#log?.info({ dependency, seconds: Math.round(seconds * 10) / 10 }, `${dependency} available again`);
  }

  isDegraded(dependency: Dependency): boolean {
    return this.#states.get(dependency)?.since !== undefined;
  }

  /** Probes every dependency now and lists those that did not answer. */
  async unavailable(): Promise<Dependency[]> {
    const results = await Promise.all(
      this.dependencies.map(async (dependency) => [dependency, await this.#probe(dependency)] as const),
    );
    return results.filter(([, up]) => !up).map(([dependency]) => dependency);
  }

  errors(dependency: Dependency): number {
    return this.#states.get(dependency)?.errors ?? 0;
  }

  /** Seconds spent degraded so far, the current outage included. */
  degradedSeconds(dependency: Dependency): number {
    const state = this.#states.get(dependency);
    if (state === undefined) return 0;
    const current = state.since === undefined ? 0 : performance.now() - state.since;
    return (state.degradedMs + current) / 1000;
  }

  close(): void {
    for (const state of this.#states.values()) clearInterval(state.timer);
  }

  #warnStarted(dependency: Dependency, reason: string | undefined): void {
    this.#log?.warn({ dependency, reason }, `${dependency} unavailable: answering 503 where it is needed`);
  }

  async #probe(dependency: Dependency): Promise<boolean> {
    const probe = this.#probes.get(dependency);
    if (probe === undefined) return true;
    const up = await probe().catch(() => false);
    if (up) this.recovered(dependency);
    else if (!this.isDegraded(dependency)) this.failed(dependency);
    return up;
  }
}
