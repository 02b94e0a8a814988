/**
 * Prometheus metrics. Each service owns one `prom-client` Registry (never the global default),
 * so the directory and the attestor can run in one process without their metrics colliding;
 * every series carries `service="directory"|"trust"`.
 *
 * `GET /metrics` exists only when `METRICS_TOKEN` is set, and answers only to
 * `Authorization: Bearer $METRICS_TOKEN` (compared in constant time): without the variable the
 * path is an ordinary 404, so nothing about the process leaks from the public port.
 */
import { readFileSync } from "node:fs";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { Counter, collectDefaultMetrics, Gauge, type Metric, Registry } from "prom-client";
import type { DependencyMonitor } from "./dependency-monitor.js";
import { ApiError } from "./errors.js";
import { sendError } from "./http.js";
import { RequestLatencyHistogram } from "./request-latency.js";
import { constantTimeEqual } from "./tokens.js";

export const METRICS_PATH = "/metrics";

/** Request latency buckets, in seconds: cached reads take milliseconds, outbound fetches up to 5 s. */
const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** The route label of a request no route matched (its raw URL is never a label). */
export const UNMATCHED_ROUTE = "unmatched";

/** What the HTTP layer reports after every response (see `createHttpServer`). */
export interface RequestObserver {
  /** `route` is the route pattern (`/v1/listings/:did`), undefined when no route matched. */
  observeRequest(method: string, route: string | undefined, status: number, seconds: number): void;
}

export class ServiceMetrics implements RequestObserver {
  readonly registry = new Registry();
  readonly #latency: RequestLatencyHistogram;
  readonly #rateLimited: Counter<"scope">;

  constructor(readonly service: string) {
    this.registry.setDefaultLabels({ service });
    collectDefaultMetrics({ register: this.registry });
    // Each request is observed once, in the histogram (counted outside prom-client: see
    // request-latency.ts); the request counter is its `_count`, carried over at each scrape.
    const latency = new RequestLatencyHistogram(
      "proto_http_request_duration_seconds",
      "Time from receiving a request to finishing its response, by method, route pattern and status.",
      LATENCY_BUCKETS,
    );
    // The registry reads any object with a name and get(); prom-client's typings name only its classes.
    this.registry.registerMetric(latency as unknown as Metric);
    this.#latency = latency;
    const counted = new Map<string, number>();
    new Counter({
      name: "proto_http_requests_total",
      help: "HTTP requests answered, by method, route pattern and status.",
      labelNames: ["method", "route", "status"],
      registers: [this.registry],
      async collect() {
        for (const value of (await latency.get()).values) {
          if (value.metricName !== "proto_http_request_duration_seconds_count") continue;
          const labels = value.labels as Record<"method" | "route" | "status", string>;
          const key = `${labels.method} ${labels.route} ${labels.status}`;
          const delta = value.value - (counted.get(key) ?? 0);
          if (delta <= 0) continue;
          counted.set(key, value.value);
          this.inc({ method: labels.method, route: labels.route, status: labels.status }, delta);
        }
      },
    });
    this.#rateLimited = new Counter({
      name: "proto_rate_limit_rejections_total",
      help: "Hits a rate limit denied, by rule (scope); most become 429 responses.",
      labelNames: ["scope"],
      registers: [this.registry],
    });
    new Gauge({
      name: "proto_process_resident_memory_bytes",
      help: "Resident memory by kind (Linux): anon is the process's own (heap, caches), file is mapped file pages (code, SQLite's mapped database) the kernel can reclaim, shmem is shared memory.",
      labelNames: ["kind"],
      registers: [this.registry],
      collect() {
        for (const [kind, bytes] of residentMemory()) this.set({ kind }, bytes);
      },
    });
  }

  observeRequest(method: string, route: string | undefined, status: number, seconds: number): void {
    this.#latency.observe(method, route ?? UNMATCHED_ROUTE, status, seconds);
  }

  /**
   * Series read from `monitor` at each scrape: errors per dependency, whether it is up now, and
   * the seconds spent degraded (what to alert on: see docs/operations.md).
   */
  watchDependencies(monitor: DependencyMonitor): void {
    const reported = new Map<string, { errors: number; seconds: number }>();
    const last = (dependency: string) => reported.get(dependency) ?? { errors: 0, seconds: 0 };
    new Counter({
      name: "proto_dependency_errors_total",
      help: "Requests and probes that failed because a dependency (database, redis) did not answer.",
      labelNames: ["dependency"],
      registers: [this.registry],
      collect() {
        for (const dependency of monitor.dependencies) {
          const errors = monitor.errors(dependency);
          this.inc({ dependency }, errors - last(dependency).errors);
          reported.set(dependency, { ...last(dependency), errors });
        }
      },
    });
    new Counter({
      name: "proto_dependency_degraded_seconds_total",
      help: "Seconds spent with a dependency unavailable.",
      labelNames: ["dependency"],
      registers: [this.registry],
      collect() {
        for (const dependency of monitor.dependencies) {
          const seconds = monitor.degradedSeconds(dependency);
          this.inc({ dependency }, seconds - last(dependency).seconds);
          reported.set(dependency, { ...last(dependency), seconds });
        }
      },
    });
    new Gauge({
      name: "proto_dependency_up",
      help: "1 while the dependency answers, 0 during an outage.",
      labelNames: ["dependency"],
      registers: [this.registry],
      collect() {
        for (const dependency of monitor.dependencies) this.set({ dependency }, monitor.isDegraded(dependency) ? 0 : 1);
      },
    });
  }

  /** One denied hit of the rate-limit rule named `scope` (e.g. `dir.read`, `trust.token_binding`). */
  rateLimited(scope: string): void {
    this.#rateLimited.inc({ scope });
  }
}

/** `RssAnon`, `RssFile` and `RssShmem` of this process from /proc/self/status; none off Linux. */
function residentMemory(): [string, number][] {
  let status: string;
  try {
    status = readFileSync("/proc/self/status", "utf8");
  } catch {
    return [];
  }
  const kinds: [string, number][] = [];
  for (const [kind, field] of [
    ["anon", "RssAnon"],
    ["file", "RssFile"],
    ["shmem", "RssShmem"],
  ] as const) {
    const kb = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status)?.[1];
    if (kb !== undefined) kinds.push([kind, Number(kb) * 1024]);
  }
  return kinds;
}

function bearerToken(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  if (header === undefined) return undefined;
  return /^Bearer +([\x21-\x7e]{1,512})$/i.exec(header.trim())?.[1];
}

/**
 * `GET /metrics` on `app`, behind `token`; nothing at all when `token` is undefined. Hidden from
 * the OpenAPI document.
 */
export function registerMetricsRoute(app: FastifyInstance, metrics: ServiceMetrics, token: string | undefined): void {
  if (token === undefined) return;
  app.get(METRICS_PATH, { schema: { hide: true } }, async (request: FastifyRequest, reply: FastifyReply) => {
    const presented = bearerToken(request);
    if (presented === undefined || !constantTimeEqual(presented, token)) {
      reply.header("www-authenticate", 'Bearer realm="metrics"');
      return sendError(reply, new ApiError(401, "unauthorized", "a valid metrics token is required"));
    }
    const body = await metrics.registry.metrics();
    return reply.header("cache-control", "no-store").type(metrics.registry.contentType).send(body);
  });
}
