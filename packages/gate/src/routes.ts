/** Which configured route a request falls under: the first whose prefix and methods match. */
import type { GateRoute } from "./config-types.js";

/** Whether `path` is under `prefix`: `/api/` takes `/api/x`; `/api` takes `/api` and `/api/x`, never `/apix`. */
export function underPrefix(path: string, prefix: string): boolean {
  if (prefix === "/") return true;
  if (prefix.endsWith("/")) return path.startsWith(prefix) || path === prefix.slice(0, -1);
  return path === prefix || path.startsWith(`${prefix}/`);
}

export function matchRoute(routes: readonly GateRoute[], method: string, path: string): GateRoute | undefined {
  for (const route of routes) {
    if (route.methods !== undefined && !route.methods.includes(method)) continue;
    if (underPrefix(path, route.path)) return route;
  }
  return undefined;
}
