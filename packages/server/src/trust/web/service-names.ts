import { parseDid } from "@proto/protocol";
import { shortenDid } from "./link-page.js";

/**
 * A name a person recognises for a service DID (`aud`): the host and path a `did:web` names
 * (`did:web:example.com%3A8443:shop` is `example.com:8443/shop`), else the shortened DID.
 *
 * The attestor knows no directory (it has no directory URL in its configuration), so it cannot
 * look up a listing's title; the host is the readable name it has. When the attestor is given a
 * directory, a title from there would go first.
 */
export function serviceName(aud: string): string {
  const parsed = parseDid(aud);
  if (!parsed.ok || parsed.did.method !== "web") return shortenDid(aud);
  const host = parsed.did.host.toLowerCase();
  return parsed.did.path.length === 0 ? host : `${host}/${parsed.did.path.join("/")}`;
}
