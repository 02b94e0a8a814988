import { createHash, randomBytes, timingSafeEqual } from "node:crypto";

/** A prefixed random identifier (128 bits). */
export function randomId(prefix: string): string {
  return `${prefix}_${randomBytes(16).toString("base64url")}`;
}

/** A bearer secret (256 bits), base64url. */
export function randomToken(prefix = ""): string {
  return `${prefix}${randomBytes(32).toString("base64url")}`;
}

/** Secrets are stored only as their SHA-256. */
export function hashToken(token: string): string {
  return createHash("sha256").update(token, "utf8").digest("base64url");
}

export function safeEqual(a: string, b: string): boolean {
  const left = Buffer.from(a, "utf8");
  const right = Buffer.from(b, "utf8");
  return left.length === right.length && timingSafeEqual(left, right);
}

export function isoTime(ms: number): string {
  return new Date(ms).toISOString();
}
