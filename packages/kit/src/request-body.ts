import { isDidKey, protoError } from "@proto/protocol";

/** The body as a JSON object; anything else is 400 `malformed_request`. */
export function parseJsonObject(body: Uint8Array | undefined): Record<string, unknown> {
  if (body === undefined || body.byteLength === 0)
    throw protoError("malformed_request", { message: "a JSON body is required" });
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(body).toString("utf8"));
  } catch {
    throw protoError("malformed_request", { message: "body is not valid JSON" });
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw protoError("malformed_request", { message: "body must be a JSON object" });
  }
  return value as Record<string, unknown>;
}

/**
 * How deep a JSON body handed to the application may nest. Nothing in an agent API needs more,
 * and much deeper values overflow the stack of recursive code downstream (`JSON.stringify` fails
 * near 5,000 levels): refused before any handler sees them.
 */
export const MAX_JSON_DEPTH = 64;

/** Whether the JSON text in `body` nests arrays and objects deeper than `max` (strings skipped). */
export function nestsDeeperThan(body: Uint8Array, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < body.length; i++) {
    const byte = body[i];
    if (inString) {
      // A backslash escapes the next byte; a quote ends the string.
      if (byte === 0x5c) i++;
      else if (byte === 0x22) inString = false;
    } else if (byte === 0x22) {
      inString = true;
    } else if (byte === 0x5b || byte === 0x7b) {
      if (++depth > max) return true;
    } else if (byte === 0x5d || byte === 0x7d) {
      depth--;
    }
  }
  return false;
}

export function isJson(headers: Headers): boolean {
  return /^application\/([a-z0-9.+-]*\+)?json\s*(;|$)/i.test(headers.get("content-type") ?? "");
}

export function isForm(headers: Headers): boolean {
  return /^application\/x-www-form-urlencoded\s*(;|$)/i.test(headers.get("content-type") ?? "");
}

export function requireDidKey(value: unknown, field: string): string {
  if (typeof value !== "string") throw protoError("malformed_request", { message: `${field} is required` });
  if (!isDidKey(value)) throw protoError("malformed_request", { message: `${field} must be an Ed25519 did:key` });
  return value;
}
