/** Strict base64url without padding (RFC 4648 §5), as every proto wire field uses it. */

const BASE64URL = /^[A-Za-z0-9_-]*$/;

export function encodeBase64url(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64url");
}

/**
 * Decodes base64url without padding, or returns undefined. Node's own decoder is lenient (it skips
 * foreign characters and accepts padding), so the alphabet, the length and the round trip are
 * checked here: a value has exactly one accepted spelling.
 */
export function decodeBase64url(text: string): Uint8Array | undefined {
  if (!BASE64URL.test(text) || text.length % 4 === 1) return undefined;
  const bytes = Buffer.from(text, "base64url");
  if (bytes.toString("base64url") !== text) return undefined;
  return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

export function isBase64url(text: string, minLength = 0): boolean {
  return text.length >= minLength && decodeBase64url(text) !== undefined;
}
