import { createHash, timingSafeEqual } from "node:crypto";
import { invalidRequest } from "../platform/errors.js";

/** The position after the last listing of a page, in list order (`updated_at`, `service_did`). */
export interface Position {
  updatedAt: number;
  serviceDid: string;
}

const MAX_CURSOR_LENGTH = 4096;

/**
 * A cursor is the keyset position plus a check value bound to the query's filters, so a cursor
 * that was altered, or reused with other filters, is refused instead of silently skipping or
 * repeating listings. The encoding is opaque to clients and may change.
 */
function check(payload: string, filters: string): Buffer {
  return createHash("sha256").update(filters).update("\n").update(payload).digest().subarray(0, 12);
}

export function encodeCursor(position: Position, filters: string): string {
  const payload = JSON.stringify([position.updatedAt, position.serviceDid]);
  return `${Buffer.from(payload).toString("base64url")}.${check(payload, filters).toString("base64url")}`;
}

export function decodeCursor(cursor: string, filters: string): Position {
  const bad = () => invalidRequest("cursor is not valid for this query; start again without it");
  if (cursor.length > MAX_CURSOR_LENGTH || !/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/.test(cursor)) throw bad();
  const [encodedPayload, encodedCheck] = cursor.split(".") as [string, string];
  const payload = Buffer.from(encodedPayload, "base64url").toString("utf8");
  const received = Buffer.from(encodedCheck, "base64url");
  const expected = check(payload, filters);
  // Both parts must be in canonical form: base64url decoding ignores stray trailing characters and
  // bits, so an altered cursor could otherwise still decode to the same bytes.
  if (
    Buffer.from(payload).toString("base64url") !== encodedPayload ||
    received.toString("base64url") !== encodedCheck ||
    received.length !== expected.length ||
    !timingSafeEqual(received, expected)
  ) {
    throw bad();
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(payload);
  } catch {
    throw bad();
  }
  if (
    !Array.isArray(parsed) ||
    parsed.length !== 2 ||
    !Number.isSafeInteger(parsed[0]) ||
    typeof parsed[1] !== "string"
  ) {
    throw bad();
  }
  return { updatedAt: parsed[0] as number, serviceDid: parsed[1] as string };
}
