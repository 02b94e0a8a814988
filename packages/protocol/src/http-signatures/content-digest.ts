import { createHash, hash, timingSafeEqual } from "node:crypto";
import { isInnerList } from "structured-headers";
import { byteSequence, parseDictionary } from "./structured-fields.js";

/** RFC 9530 `Content-Digest` with sha-256, the one algorithm the proto profile uses. */
export function contentDigest(body: Uint8Array): string {
  return `sha-256=:${createHash("sha256").update(body).digest("base64")}:`;
}

/**
 * Checks a received `Content-Digest` against the body bytes. The header may list other
 * algorithms; sha-256 must be among them and must match.
 */
export function contentDigestMatches(header: string, body: Uint8Array): boolean {
  const expected = hash("sha256", body, "buffer");
  // The header as every signer of the profile writes it. A digest of the request's own body is no
  // secret, so comparing its text needs no constant-time comparison.
  if (header === `sha-256=:${expected.toString("base64")}:`) return true;
  let received: Uint8Array | undefined;
  try {
    const member = parseDictionary(header).members.get("sha-256");
    received = member === undefined || isInnerList(member) ? undefined : byteSequence(member[0]);
  } catch {
    return false;
  }
  if (received === undefined) return false;
  return received.length === expected.length && timingSafeEqual(received, expected);
}
