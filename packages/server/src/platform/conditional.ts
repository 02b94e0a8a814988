/**
 * Conditional reads (RFC 9110 §13): a strong entity tag made from the exact body bytes, and the
 * `If-None-Match` test that turns a read into 304 Not Modified.
 */
import { createHash } from "node:crypto";

/** `"…"`: SHA-256 of the body's UTF-8 bytes, so equal bytes give equal tags on every replica. */
export function entityTag(body: string): string {
  return `"${createHash("sha256").update(body, "utf8").digest("base64url")}"`;
}

/**
 * Whether `If-None-Match` names `etag` (or is `*`). The comparison is weak, as §13.1.2 requires:
 * `W/"x"` matches `"x"`. Unquoted entries match nothing.
 */
export function noneMatch(header: string | string[] | undefined, etag: string): boolean {
  if (header === undefined) return false;
  const opaque = etag.replace(/^W\//, "");
  for (const entry of (Array.isArray(header) ? header.join(",") : header).split(",")) {
    const tag = entry.trim();
    if (tag === "*" || tag.replace(/^W\//, "") === opaque) return true;
  }
  return false;
}
