/**
 * The routes a Fastify instance serves, read from `printRoutes({ commonPrefix: false })` so that a
 * route added tomorrow is fuzzed without anyone listing it. The printed tree nests path segments:
 * a line's path is its ancestors' segments followed by its own.
 */

export interface FuzzRoute {
  method: string;
  /** Fastify's pattern: `/v1/listings/:did`, `/docs/*`. */
  url: string;
}

/** The part of a Fastify instance this needs (testkit does not depend on Fastify). */
export interface RoutePrinter {
  printRoutes(options: { commonPrefix: boolean }): string;
}

const LINE = /^([│├└─\s]*)(.+?)(?: \(([A-Z, ]+)\))?$/u;

export function parseRouteTree(printed: string): FuzzRoute[] {
  const routes: FuzzRoute[] = [];
  const stack: { depth: number; path: string }[] = [];
  for (const line of printed.split("\n")) {
    if (line.trim() === "") continue;
    const match = LINE.exec(line);
    if (match === null) throw new Error(`unreadable route line ${JSON.stringify(line)}`);
    const depth = [...(match[1] ?? "")].length;
    while (stack.length > 0 && (stack.at(-1)?.depth ?? 0) >= depth) stack.pop();
    const path = `${stack.at(-1)?.path ?? ""}${match[2]}`;
    stack.push({ depth, path });
    for (const method of (match[3] ?? "").split(",").map((m) => m.trim())) {
      if (method !== "") routes.push({ method, url: path });
    }
  }
  return routes;
}

/** Every route of `app` (call after `ready()` or `listen()`), HEAD included where Fastify adds it. */
export function routesOf(app: RoutePrinter): FuzzRoute[] {
  return parseRouteTree(app.printRoutes({ commonPrefix: false }));
}

export const routeKey = (route: FuzzRoute) => `${route.method} ${route.url}`;
