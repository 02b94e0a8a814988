/**
 * Sends generated requests to a target at a given concurrency and keeps what came back: counts by
 * status, and each failing case once per route + mutation kinds + problem, with one example.
 */
import fc from "fast-check";
import { requestArbitrary } from "./generate.js";
import { judge } from "./oracle.js";
import { describeRequest, type FuzzRequest, type FuzzVocabulary, type RouteKind, toBytes } from "./request.js";
import { type FuzzRoute, routeKey } from "./routes.js";
import { sendRaw } from "./wire.js";

export interface FuzzTarget {
  name: string;
  /** `http://127.0.0.1:PORT` */
  url: string;
  routes: FuzzRoute[];
  kindOf(route: FuzzRoute): RouteKind;
  vocabulary: FuzzVocabulary;
  /** Headers that sign `request` (its final bytes) for the routes in `signable`. */
  sign?(request: FuzzRequest): Promise<[string, string][]>;
  signable?: string[];
  /** Where its redirects may lead besides its own URL (its public URL, an OpenID client, a provider). */
  redirectOrigins?: string[];
  /** Its health route (default `/healthz`); null: it has none, `normal()` alone tells. */
  healthPath?: string | null;
  /** Checks a random request cannot make (whole flows, e.g. a sign-in's redirect); answers problems. */
  probes?(): Promise<string[]>;
  /** A well-formed request that must still succeed; answers a problem, or undefined. */
  normal(): Promise<string | undefined>;
}

export interface FuzzFailure {
  key: string;
  route: string;
  problem: string;
  kinds: string;
  count: number;
  /** Index of the first example in the run (with the seed, it is generated again). */
  index: number;
  example: string;
}

export interface FuzzReport {
  target: string;
  seed: number;
  sent: number;
  byStatus: Map<string, number>;
  failures: Map<string, FuzzFailure>;
  /** Problems of the health checks after the run (`/healthz`, the target's normal request). */
  health: string[];
}

export interface FuzzOptions {
  seed: number;
  requests: number;
  concurrency?: number;
  /** Requests generated at a time (each batch from `seed + batch index`). */
  batch?: number;
  onProgress?: (report: FuzzReport) => void;
}

async function healthProblems(target: FuzzTarget): Promise<string[]> {
  const { hostname, port } = new URL(target.url);
  const problems: string[] = [];
  const path = target.healthPath === undefined ? "/healthz" : target.healthPath;
  if (path !== null) {
    const bytes = Buffer.from(`GET ${path} HTTP/1.1\r\nhost: ${hostname}:${port}\r\nconnection: close\r\n\r\n`);
    const result = await sendRaw(hostname, Number(port), bytes, "GET");
    if ("error" in result) problems.push(`${path}: ${result.error}`);
    else if (result.answer.status !== 200) problems.push(`${path} answered ${result.answer.status}`);
  }
  const normal = await target.normal();
  if (normal !== undefined) problems.push(`normal request: ${normal}`);
  return problems;
}

export async function fuzzTarget(target: FuzzTarget, options: FuzzOptions): Promise<FuzzReport> {
  const { hostname, port } = new URL(target.url);
  const arbitrary = requestArbitrary({
    routes: target.routes,
    kindOf: target.kindOf,
    vocabulary: target.vocabulary,
    host: `${hostname}:${port}`,
    signable: new Set(target.signable ?? []),
  });
  const report: FuzzReport = {
    target: target.name,
    seed: options.seed,
    sent: 0,
    byStatus: new Map(),
    failures: new Map(),
    health: [],
  };
  const origins = [new URL(target.url).origin, ...(target.redirectOrigins ?? []).map((url) => new URL(url).origin)];
  const batch = options.batch ?? 200;
  const concurrency = options.concurrency ?? 8;
  for (let start = 0; start < options.requests; start += batch) {
    const size = Math.min(batch, options.requests - start);
    const requests = fc.sample(arbitrary, { seed: options.seed + start / batch, numRuns: size });
    let next = 0;
    const send = async (request: FuzzRequest) => {
      const extra = request.sign && target.sign ? await target.sign(request) : [];
      const result = await sendRaw(hostname, Number(port), toBytes(request, extra), request.method);
      report.sent += 1;
      const status = "answer" in result ? String(result.answer.status) : "none";
      report.byStatus.set(status, (report.byStatus.get(status) ?? 0) + 1);
      return { extra, result, status, problem: judge(request, result, origins) };
    };
    type Sent = Awaited<ReturnType<typeof send>>;
    const record = (request: FuzzRequest, index: number, sent: Sent) => {
      const { extra, result, status, problem } = sent;
      if (problem === undefined) return;
      const kinds = request.kinds.filter((kind) => kind !== "session" && kind !== "signed").join(" + ");
      // Refused before routing, or off its route: the route it aimed at says nothing.
      const route = request.transport
        ? `(before routing, ${request.kind} routes)`
        : request.offRoute
          ? `(unknown path, ${request.kind} routes)`
          : routeKey(request.route);
      const key = `${route} | ${problem} | ${kinds}`;
      const known = report.failures.get(key);
      if (known !== undefined) {
        known.count += 1;
        return;
      }
      const body = "answer" in result ? result.answer.body.toString("utf8").slice(0, 300) : "";
      const signed = extra.length > 0 ? `\n  + ${extra.length} signature headers` : "";
      report.failures.set(key, {
        key,
        route,
        problem,
        kinds,
        count: 1,
        index,
        example: `${describeRequest(request)}${signed}\n  -> ${status} ${JSON.stringify(body)}`,
      });
    };
    const worker = async () => {
      while (next < requests.length) {
        const index = next++;
        const request = requests[index] as FuzzRequest;
        const sent = await send(request);
        if (sent.problem === undefined) continue;
        // With two mutations, each alone: the failure is kept under the one that suffices.
        let reproduced = false;
        for (const single of request.alone?.() ?? []) {
          const again = await send(single);
          record(single, start + index, again);
          reproduced ||= again.problem === sent.problem;
        }
        if (!reproduced) record(request, start + index, sent);
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    options.onProgress?.(report);
  }
  for (const problem of (await target.probes?.()) ?? []) {
    const key = `(probe) | ${problem}`;
    report.failures.set(key, { key, route: "(probe)", problem, kinds: "probe", count: 1, index: -1, example: problem });
  }
  report.health = await healthProblems(target);
  return report;
}

/** Counts by status, then every failing case (route, problem, kinds, count, one example). */
export function formatReport(report: FuzzReport): string {
  const statuses = [...report.byStatus].sort(([a], [b]) => a.localeCompare(b)).map(([s, n]) => `${s}: ${n}`);
  const lines = [
    `${report.target}: ${report.sent} requests (seed ${report.seed}); by status ${statuses.join(", ")}`,
    `${report.target}: ${report.failures.size} failing cases${report.health.length > 0 ? `; UNHEALTHY after the run: ${report.health.join("; ")}` : ""}`,
  ];
  const failures = [...report.failures.values()].sort(
    (a, b) => a.route.localeCompare(b.route) || a.problem.localeCompare(b.problem),
  );
  for (const failure of failures) {
    lines.push(
      `- ${failure.route} | ${failure.problem} | ${failure.kinds} (x${failure.count}, first at #${failure.index})`,
    );
    lines.push(failure.example.replace(/^/gm, "    "));
  }
  return lines.join("\n");
}
