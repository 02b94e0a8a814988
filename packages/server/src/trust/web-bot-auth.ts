/**
 * The attestor's Web Bot Auth key directory (draft-ietf-webbotauth-httpsig-protocol, "Key
 * Distribution and Discovery"): a JWK Set of the agent keys whose person published them on
 * `/account`, at the well-known URI an agent names in its `Signature-Agent` header. A site that
 * checks Web Bot Auth fetches it to verify the agent's request signatures, and so learns that
 * the key is linked to a person at this attestor.
 *
 * The draft RECOMMENDS signing the directory response with each listed key (one signature per
 * key, tag `http-message-signatures-directory`), proving that whoever serves the directory holds
 * the keys. The attestor cannot: it never holds an agent's private key. Its responses are
 * unsigned, and a verifier that requires the proof will not accept this directory.
 */
import {
  decodeDidKey,
  jwkThumbprint,
  KEY_DIRECTORY_MEDIA_TYPE,
  KEY_DIRECTORY_PATH,
  publicKeyFromRaw,
} from "@proto/protocol";

export const WBA_DIRECTORY_PATH = KEY_DIRECTORY_PATH;

/** The media type the draft requires at the well-known URI (no parameters: some verifiers compare it whole). */
export const WBA_DIRECTORY_MEDIA_TYPE = KEY_DIRECTORY_MEDIA_TYPE;

/**
 * Five minutes: a withdrawn or revoked key leaves verifiers' caches within it, and the draft asks
 * verifiers to honour ordinary HTTP caching rather than fetch per request.
 */
export const WBA_DIRECTORY_CACHE_CONTROL = "public, max-age=300";

/** One agent key as the directory lists it (RFC 7517, RFC 8037). */
export interface DirectoryKey {
  kty: "OKP";
  crv: "Ed25519";
  /** The RFC 7638 thumbprint, which the draft requires at the well-known URI: the `keyid` agents sign with. */
  kid: string;
  x: string;
  use: "sig";
}

/** Where the attestor at `publicUrl` serves its directory: the `Signature-Agent` value agents send. */
export function wbaDirectoryUrl(publicUrl: string): string {
  return `${publicUrl}${WBA_DIRECTORY_PATH}`;
}

/** The directory entry of an agent's `did:key`; undefined for a DID that carries no Ed25519 key. */
export function directoryKeyOf(agentDid: string): DirectoryKey | undefined {
  if (!agentDid.startsWith("did:key:")) return undefined;
  let raw: Uint8Array;
  try {
    raw = decodeDidKey(agentDid);
  } catch {
    return undefined;
  }
  const x = Buffer.from(raw).toString("base64url");
  return { kty: "OKP", crv: "Ed25519", kid: jwkThumbprint(publicKeyFromRaw(raw)), x, use: "sig" };
}

/** Whether an agent's key is one the directory can list (a `did:key`; a `did:web` key lives elsewhere). */
export function isPublishable(agentDid: string): boolean {
  return directoryKeyOf(agentDid) !== undefined;
}

/** The directory body: exactly these bytes are served and tagged (ETag). */
export function renderDirectory(keys: readonly DirectoryKey[]): string {
  return JSON.stringify({ keys });
}
