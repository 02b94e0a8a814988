import { createHash, hash, timingSafeEqual } from "node:crypto";
import { parseDictionary } from "./structured-fields.js";

/** RFC 9530 `Content-Digest` with sha-256, the one algorithm the proto profile uses. */
export function contentDigest(body: Uint8Array): string {
  return `sha-256=:${createHash("sha256").update(body).digest("base64")}:`;
}

/**
 * Checks a received `Content-Digest` against the body bytes. The header may list other
 * algorithms; sha-256 must be among them and must match.
 */
export function contentDigestMatches(header: string, body: Uint8Array): boolean {
  let digest: unknown;
  try {
    digest = parseDictionary(header).members.get("sha-256")?.[0];
  } catch {
    return false;
  }
  if (!(digest instanceof ArrayBuffer)) return false;
  const received = new Uint8Array(digest);
  const expected = hash("sha256", body, "buffer");
  return received.length === expected.length && timingSafeEqual(received, expected);
}
