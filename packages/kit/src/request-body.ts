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
