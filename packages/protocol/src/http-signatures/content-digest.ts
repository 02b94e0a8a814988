import { hash, timingSafeEqual } from "node:crypto";
import { isInnerList } from "structured-headers";
import { byteSequence, parseDictionary } from "./structured-fields.js";

const PREFIX = "sha-256=:";

/** RFC 9530 `Content-Digest` with sha-256, the one algorithm the proto profile uses. */
export function contentDigest(body: Uint8Array): string {
  return `${PREFIX}${hash("sha256", body, "base64")}:`;
}

/**
 * Checks a received `Content-Digest` against the body bytes. The header may list other
 * algorithms; sha-256 must be among them and must match.
 */
export function contentDigestMatches(header: string, body: Uint8Array): boolean {
  // As text: node's one-shot hash hands base64 back for a third of what a Buffer costs it.
  const expected = hash("sha256", body, "base64");
  // The header as every signer of the profile writes it, compared in place. A digest of the
  // request's own body is no secret, so comparing its text needs no constant-time comparison.
  // (Slices compare faster than `startsWith` at an offset.)
  if (
    header.length === PREFIX.length + expected.length + 1 &&
    header.charCodeAt(header.length - 1) === 0x3a /* : */ &&
    header.slice(PREFIX.length, -1) === expected &&
    header.slice(0, PREFIX.length) === PREFIX
  ) {
    return true;
  }
  let received: Uint8Array | undefined;
  try {
    const member = parseDictionary(header).members.get("sha-256");
    received = member === undefined || isInnerList(member) ? undefined : byteSequence(member[0]);
  } catch {
    return false;
  }
  if (received === undefined) return false;
  const bytes = Buffer.from(expected, "base64");
  return received.length === bytes.length && timingSafeEqual(received, bytes);
}
