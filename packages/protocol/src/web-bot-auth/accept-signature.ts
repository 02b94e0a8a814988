/** RFC 9421 §5: what a verifier asks a client to sign. */
import { serializeDictionary } from "structured-headers";
import type { Item } from "../http-signatures/sf-types.js";

/**
 * RFC 9421 §5.1: the signatures this service would accept, one member per profile: the proto
 * profile (`proto`) and a Web Bot Auth signature that binds the request (`web-bot-auth`).
 */
export function acceptSignature(hasBody: boolean): string {
  const digest = hasBody ? ["content-digest"] : [];
  const item = (name: string): Item => [name, new Map()];
  return serializeDictionary({
    proto: [
      ["@method", "@target-uri", ...digest].map(item),
      new Map<string, string | boolean>([
        ["created", true],
        ["expires", true],
        ["nonce", true],
        ["alg", "ed25519"],
      ]),
    ],
    "web-bot-auth": [
      ["@method", "@target-uri", "@authority", "signature-agent", ...digest].map(item),
      new Map<string, string | boolean>([
        ["created", true],
        ["expires", true],
        ["nonce", true],
        ["alg", "ed25519"],
        ["tag", "web-bot-auth"],
      ]),
    ],
  });
}
