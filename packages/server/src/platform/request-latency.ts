/**
 * The request latency histogram, counted in plain arrays and handed to prom-client only when the
 * registry is read. prom-client's own `observe` builds a labels object, a closure and a hash string
 * per call: on a cached read that was as much work as the read, and garbage on every request.
 * Here a request walks three maps keyed by strings it already has (route pattern, method) and the
 * status number, then bumps one bucket: nothing is allocated once a series exists.
 */

/** One sample as a prom-client Registry prints it. */
export interface RegistryValue {
  labels: Record<string, string | number>;
  value: number;
  metricName: string;
}

interface Series {
  readonly method: string;
  readonly route: string;
  readonly status: string;
  /** Per bucket (not cumulative): observations <= bounds[i] and > bounds[i - 1]; the last is +Inf. */
  readonly buckets: Float64Array;
  sum: number;
  count: number;
}

/** What a prom-client Registry reads from a metric object (`registerMetric`). */
export interface RegistryMetric {
  readonly name: string;
  readonly help: string;
  readonly type: "histogram";
  readonly aggregator: "sum";
  get(): Promise<{ name: string; help: string; type: "histogram"; values: RegistryValue[]; aggregator: "sum" }>;
  reset(): void;
}

export class RequestLatencyHistogram implements RegistryMetric {
  readonly type = "histogram" as const;
  readonly aggregator = "sum" as const;
  readonly #bounds: readonly number[];
  readonly #series = new Map<string, Map<string, Map<number, Series>>>();

  constructor(
    readonly name: string,
    readonly help: string,
    bounds: readonly number[],
  ) {
    this.#bounds = [...bounds].sort((a, b) => a - b);
  }

  observe(method: string, route: string, status: number, seconds: number): void {
    if (!Number.isFinite(seconds)) return;
    let byMethod = this.#series.get(route);
    if (byMethod === undefined) {
      byMethod = new Map();
      this.#series.set(route, byMethod);
    }
    let byStatus = byMethod.get(method);
    if (byStatus === undefined) {
      byStatus = new Map();
      byMethod.set(method, byStatus);
    }
    let series = byStatus.get(status);
    if (series === undefined) {
      series = {
        method,
        route,
        status: String(status),
        buckets: new Float64Array(this.#bounds.length + 1),
        sum: 0,
        count: 0,
      };
      byStatus.set(status, series);
    }
    const bounds = this.#bounds;
    let i = 0;
    while (i < bounds.length && seconds > (bounds[i] as number)) i++;
    (series.buckets as Float64Array)[i] = ((series.buckets as Float64Array)[i] as number) + 1;
    series.sum += seconds;
    series.count += 1;
  }

  /** Every series as prom-client's histogram gives it: cumulative `_bucket`s with `le`, `_sum`, `_count`. */
  async get(): ReturnType<RegistryMetric["get"]> {
    const values: RegistryValue[] = [];
    for (const byMethod of this.#series.values()) {
      for (const byStatus of byMethod.values()) {
        for (const series of byStatus.values()) {
          const labels = { method: series.method, route: series.route, status: series.status };
          let cumulative = 0;
          this.#bounds.forEach((bound, i) => {
            cumulative += series.buckets[i] as number;
            values.push({ labels: { ...labels, le: bound }, value: cumulative, metricName: `${this.name}_bucket` });
          });
          values.push({ labels: { ...labels, le: "+Inf" }, value: series.count, metricName: `${this.name}_bucket` });
          values.push({ labels, value: series.sum, metricName: `${this.name}_sum` });
          values.push({ labels, value: series.count, metricName: `${this.name}_count` });
        }
      }
    }
    return { name: this.name, help: this.help, type: "histogram", values, aggregator: "sum" };
  }

  reset(): void {
    this.#series.clear();
  }
}
