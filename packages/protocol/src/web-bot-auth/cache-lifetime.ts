/**
 * How long a fetched key directory stays fresh, from its HTTP caching headers (RFC 9111 §4.2.1):
 * `Cache-Control: max-age`, else `Expires` minus `Date`, less `Age`; `no-store` and `no-cache` mean
 * none. The result is clamped between a floor and the operator's cap.
 */
import type { SafeResponseHeaders } from "../safe-fetch.js";

export interface LifetimeBounds {
  /** When the response says nothing. */
  defaultSeconds: number;
  /**
   * The least lifetime, whatever the response says: a directory that asks not to be cached would
   * otherwise be fetched for every signed request that names it.
   */
  floorSeconds: number;
  capSeconds: number;
}

const DELTA_SECONDS = /^\d{1,10}$/;

interface Directives {
  maxAge: number | undefined;
  /** no-store, no-cache, or a directive we cannot trust (a repeated or invalid max-age). */
  uncacheable: boolean;
}

function unquote(value: string): string {
  return value.length >= 2 && value.startsWith('"') && value.endsWith('"') ? value.slice(1, -1) : value;
}

function parseCacheControl(header: string | undefined): Directives {
  const directives: Directives = { maxAge: undefined, uncacheable: false };
  for (const part of (header ?? "").split(",")) {
    const equals = part.indexOf("=");
    const name = (equals === -1 ? part : part.slice(0, equals)).trim().toLowerCase();
    const value = equals === -1 ? undefined : unquote(part.slice(equals + 1).trim());
    if (name === "no-store" || name === "no-cache") directives.uncacheable = true;
    else if (name === "max-age") {
      // RFC 9111 §4.2.1: a repeated or invalid max-age makes the response stale.
      if (directives.maxAge !== undefined || value === undefined || !DELTA_SECONDS.test(value)) {
        directives.uncacheable = true;
      } else directives.maxAge = Number(value);
    }
  }
  return directives;
}

/** Seconds, or undefined when the header is absent; an unparsable date counts as already past. */
function expiresSeconds(headers: SafeResponseHeaders, nowMs: number): number | undefined {
  const expires = headers.expires;
  if (expires === undefined) return undefined;
  const expiresMs = Date.parse(expires);
  if (Number.isNaN(expiresMs)) return 0;
  const dateMs = headers.date === undefined ? Number.NaN : Date.parse(headers.date);
  return Math.max(0, Math.floor((expiresMs - (Number.isNaN(dateMs) ? nowMs : dateMs)) / 1000));
}

export function freshnessSeconds(headers: SafeResponseHeaders, nowMs: number, bounds: LifetimeBounds): number {
  const directives = parseCacheControl(headers["cache-control"]);
  let lifetime: number;
  if (directives.uncacheable) lifetime = 0;
  else lifetime = directives.maxAge ?? expiresSeconds(headers, nowMs) ?? bounds.defaultSeconds;
  const age = headers.age;
  if (age !== undefined && DELTA_SECONDS.test(age.trim())) lifetime -= Number(age.trim());
  return Math.min(bounds.capSeconds, Math.max(bounds.floorSeconds, lifetime));
}
