import { createHash, randomBytes, timingSafeEqual } from "node:crypto";

/** A bearer or one-time token: a fixed prefix and `bytes` of CSPRNG output in base64url. */
export function randomToken(prefix: string, bytes: number): string {
  return `${prefix}${randomBytes(bytes).toString("base64url")}`;
}

/**
 * Tokens are stored only as their SHA-256: they carry at least 128 bits of entropy, so a fast
 * hash is enough, and a leaked table grants nothing.
 */
export function hashToken(token: string): string {
  return createHash("sha256").update(token, "utf8").digest("base64url");
}

/** Compares two secrets without leaking, through timing, where they first differ. */
export function constantTimeEqual(a: string, b: string): boolean {
  const left = createHash("sha256").update(a, "utf8").digest();
  const right = createHash("sha256").update(b, "utf8").digest();
  return timingSafeEqual(left, right) && a.length === b.length;
}
