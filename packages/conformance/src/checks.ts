/** Checks several probes share: statuses, the error envelope, cache directives. */
import type { HttpResponse } from "./http.js";
import { check } from "./probe.js";

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

export function expectStatus(response: HttpResponse, status: number, what: string): void {
  check(
    response.status === status,
    response.status === 0
      ? `${what}: no answer (${response.exchange.error ?? "unknown"})`
      : `${what}: expected ${status}, got ${response.status}`,
    response.exchange,
  );
}

/** The JSON body as an object, or a failure saying it is not one. */
export function jsonObject(response: HttpResponse, what: string): Record<string, unknown> {
  check(isObject(response.json), `${what}: the body is not a JSON object`, response.exchange);
  return response.json;
}

/** Status, JSON content type and `{ error: { code, message } }` with the expected code. */
export function expectError(response: HttpResponse, status: number, code: string, what: string): void {
  expectStatus(response, status, what);
  check(
    /^application\/json\b/i.test(response.headers["content-type"] ?? ""),
    `${what}: the error is not application/json (content-type ${response.headers["content-type"] ?? "absent"})`,
    response.exchange,
  );
  const body = jsonObject(response, what);
  const error = body.error;
  check(isObject(error), `${what}: the body is not the error envelope { error: { code, message } }`, response.exchange);
  check(
    typeof error.code === "string" && typeof error.message === "string",
    `${what}: error.code and error.message must be strings`,
    response.exchange,
  );
  check(error.code === code, `${what}: expected error code ${code}, got ${String(error.code)}`, response.exchange);
}

/** The directives of a `Cache-Control` value, names lower-case (`max-age` → `300`, `public` → ``). */
export function cacheDirectives(value: string | undefined): Map<string, string> {
  const directives = new Map<string, string>();
  for (const part of (value ?? "").split(",")) {
    const [name, ...rest] = part.trim().split("=");
    if (name) directives.set(name.toLowerCase(), rest.join("=").replace(/^"|"$/g, ""));
  }
  return directives;
}

/** Each expected directive is present with its value (`""` for a bare one such as `public`). */
export function expectCacheControl(response: HttpResponse, expected: Record<string, string>, what: string): void {
  const value = response.headers["cache-control"];
  const directives = cacheDirectives(value);
  for (const [name, wanted] of Object.entries(expected)) {
    const got = directives.get(name);
    check(
      got !== undefined && got === wanted,
      `${what}: Cache-Control must have ${wanted === "" ? name : `${name}=${wanted}`} (got ${value ?? "no Cache-Control"})`,
      response.exchange,
    );
  }
}
