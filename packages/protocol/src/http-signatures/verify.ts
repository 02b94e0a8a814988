import { verify as ed25519Verify } from "node:crypto";
import { type InnerList, type Item, isInnerList, parseDictionary, serializeInnerList } from "structured-headers";
import { DidKeyError, didKeyToPublicKey } from "../did-key.js";
import { ED25519_SIGNATURE_LENGTH } from "../ed25519.js";
import { ProtoError, protoError } from "../errors.js";
import type { NonceStore } from "../nonce-store.js";
import { contentDigestMatches } from "./content-digest.js";
import {
  bodyBytes,
  fromRaw,
  headerReader,
  normaliseTargetUri,
  type RawRequest,
  type SignedMessage,
} from "./message.js";
import { type CoveredComponent, signatureBase } from "./signature-base.js";

export const DEFAULT_SKEW_SECONDS = 60;
export const MAX_SIGNATURE_VALIDITY_SECONDS = 300;
/** The body cap of proto services' JSON endpoints. */
const DEFAULT_MAX_BODY_BYTES = 64 * 1024;
/** Bounds on what is parsed at all: a signature header of the profile is a few hundred bytes. */
const MAX_HEADER_LENGTH = 8192;
const MAX_NONCE_LENGTH = 256;
const PARAM_NAMES = new Set(["created", "expires", "nonce", "keyid", "alg", "tag"]);

export interface RequestVerifierOptions {
  /** Where `(keyid, nonce)` pairs are remembered; share one across replicas (Redis). */
  nonceStore: NonceStore;
  /** Tolerated clock difference in seconds (default 60). */
  skewSeconds?: number;
  /** Milliseconds since the epoch; an injectable clock. */
  now?: () => number;
  /** Revocation list lookup, consulted before any signature work. */
  isRevoked?: (keyid: string) => boolean | Promise<boolean>;
  /** Which signature to verify when a request carries several (default: the first). */
  label?: string;
  /** Largest body a Fetch `Request` may carry (default 64 KiB); larger is 413 `payload_too_large`. */
  maxBodyBytes?: number;
}

export interface VerifiedRequest {
  /** The agent DID that signed the request. */
  keyid: string;
  created: number;
  expires: number;
  nonce: string;
  label: string;
  /** The body bytes that were checked against `Content-Digest` (undefined when none). */
  body: Uint8Array | undefined;
}

export interface FetchVerifyOptions {
  /** The URL the client signed, when the server sees another one (a proxy in front). */
  url?: string;
}

export interface RequestVerifier {
  /** Verifies a raw request or a Fetch `Request`; throws a `ProtoError` with the reserved code. */
  verify(request: RawRequest | Request, options?: FetchVerifyOptions): Promise<VerifiedRequest>;
}

interface ParsedSignature {
  label: string;
  components: CoveredComponent[];
  serialisedParams: string;
  created: number;
  expires: number;
  nonce: string;
  keyid: string;
  signature: Uint8Array;
}

function invalid(message: string): ProtoError {
  return protoError("invalid_signature", { message });
}

function parseHeaderDictionary(name: string, value: string | undefined): Map<string, Item | InnerList> {
  if (value === undefined) throw invalid(`missing ${name} header`);
  if (value.length > MAX_HEADER_LENGTH) throw invalid(`${name} header is too long`);
  try {
    return parseDictionary(value);
  } catch {
    throw invalid(`${name} is not a valid structured field`);
  }
}

function readComponents(items: Item[], hasBody: boolean): CoveredComponent[] {
  const expected: CoveredComponent[] = hasBody
    ? ["@method", "@target-uri", "content-digest"]
    : ["@method", "@target-uri"];
  const seen = new Set<string>();
  for (const [name, params] of items) {
    if (typeof name !== "string" || params.size > 0) throw invalid("covered components must be plain names");
    if (!(expected as string[]).includes(name) || seen.has(name)) {
      throw invalid(`covered component ${String(name)} is not allowed here`);
    }
    seen.add(name);
  }
  if (seen.size !== expected.length) {
    throw invalid(`covered components must be exactly ${expected.join(", ")}`);
  }
  return items.map(([name]) => name as CoveredComponent);
}

function parseSignature(message: SignedMessage, preferredLabel: string | undefined): ParsedSignature {
  const inputs = parseHeaderDictionary("Signature-Input", message.header("signature-input"));
  const signatures = parseHeaderDictionary("Signature", message.header("signature"));
  const label = preferredLabel ?? inputs.keys().next().value;
  if (label === undefined) throw invalid("Signature-Input is empty");
  const input = inputs.get(label);
  const signatureItem = signatures.get(label);
  if (input === undefined || !isInnerList(input)) throw invalid(`no signature input labelled ${label}`);
  if (signatureItem === undefined || isInnerList(signatureItem) || !(signatureItem[0] instanceof ArrayBuffer)) {
    throw invalid(`no signature labelled ${label}`);
  }
  const [items, params] = input;
  for (const name of params.keys()) {
    if (!PARAM_NAMES.has(name)) throw invalid(`signature parameter ${name} is not allowed`);
  }
  const created = params.get("created");
  const expires = params.get("expires");
  const nonce = params.get("nonce");
  const keyid = params.get("keyid");
  const alg = params.get("alg");
  if (!Number.isInteger(created) || !Number.isInteger(expires)) throw invalid("created and expires must be integers");
  if (typeof nonce !== "string" || nonce.length === 0 || nonce.length > MAX_NONCE_LENGTH) {
    throw invalid("nonce must be a non-empty string");
  }
  if (typeof keyid !== "string") throw invalid("keyid must be a string");
  if (alg !== "ed25519") throw invalid('alg must be "ed25519"');
  return {
    label,
    components: readComponents(items, message.body !== undefined),
    serialisedParams: serializeInnerList(input),
    created: created as number,
    expires: expires as number,
    nonce,
    keyid,
    signature: new Uint8Array(signatureItem[0]),
  };
}

function tooLarge(maxBodyBytes: number): ProtoError {
  return new ProtoError("payload_too_large", 413, `request bodies are limited to ${maxBodyBytes} bytes`);
}

/** Reads a body without ever holding more than the cap, whatever Content-Length claims. */
async function readCapped(request: Request, maxBodyBytes: number): Promise<Uint8Array> {
  const declared = Number(request.headers.get("content-length") ?? "0");
  if (declared > maxBodyBytes) throw tooLarge(maxBodyBytes);
  const stream = request.clone().body;
  if (stream === null) return new Uint8Array(0);
  const chunks: Uint8Array[] = [];
  let total = 0;
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > maxBodyBytes) {
      // Not awaited: cancelling one branch of a cloned body settles only when both are.
      reader.cancel().catch(() => undefined);
      throw tooLarge(maxBodyBytes);
    }
    chunks.push(value);
  }
  return new Uint8Array(Buffer.concat(chunks));
}

async function fromFetchRequest(
  request: Request,
  url: string | undefined,
  maxBodyBytes: number,
): Promise<SignedMessage> {
  const bytes = await readCapped(request, maxBodyBytes);
  return {
    method: request.method,
    targetUri: normaliseTargetUri(url ?? request.url),
    header: headerReader(request.headers),
    body: bodyBytes(bytes),
  };
}

/**
 * A verifier for the proto RFC 9421 profile. The order of checks is fixed: parse and profile,
 * key resolution, revocation, time window, content digest, signature, then replay, so that a
 * nonce is remembered only for a request that proved its signer.
 */
export function createRequestVerifier(options: RequestVerifierOptions): RequestVerifier {
  const skew = options.skewSeconds ?? DEFAULT_SKEW_SECONDS;
  const now = options.now ?? Date.now;
  const maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;

  async function verifyMessage(message: SignedMessage): Promise<VerifiedRequest> {
    const parsed = parseSignature(message, options.label);
    let publicKey: ReturnType<typeof didKeyToPublicKey>;
    try {
      publicKey = didKeyToPublicKey(parsed.keyid);
    } catch (error) {
      if (error instanceof DidKeyError) throw invalid(`keyid is not a usable did:key (${error.message})`);
      throw error;
    }
    if (options.isRevoked !== undefined && (await options.isRevoked(parsed.keyid))) {
      throw protoError("revoked_key");
    }
    const nowSeconds = Math.floor(now() / 1000);
    // A signature valid for no time at all (expires = created) is as malformed as one that ends before it starts.
    if (parsed.expires <= parsed.created || parsed.expires - parsed.created > MAX_SIGNATURE_VALIDITY_SECONDS) {
      throw invalid(`expires must follow created, by at most ${MAX_SIGNATURE_VALIDITY_SECONDS} seconds`);
    }
    if (parsed.created > nowSeconds + skew) throw invalid("signature is dated in the future");
    if (nowSeconds > parsed.expires + skew) throw protoError("expired_signature");

    let digestHeader: string | undefined;
    if (message.body !== undefined) {
      digestHeader = message.header("content-digest")?.trim();
      if (digestHeader === undefined || digestHeader.length > MAX_HEADER_LENGTH) {
        throw invalid("missing Content-Digest header");
      }
      if (!contentDigestMatches(digestHeader, message.body)) throw invalid("Content-Digest does not match the body");
    }
    const base = signatureBase(
      parsed.components,
      { method: message.method, targetUri: message.targetUri, contentDigest: digestHeader },
      parsed.serialisedParams,
    );
    if (
      parsed.signature.length !== ED25519_SIGNATURE_LENGTH ||
      !ed25519Verify(null, Buffer.from(base, "utf8"), publicKey, parsed.signature)
    ) {
      throw invalid("signature does not verify");
    }
    const ttl = parsed.expires + skew - nowSeconds;
    if (!(await options.nonceStore.seen(parsed.keyid, parsed.nonce, ttl, parsed.created))) {
      throw protoError("replayed_nonce");
    }
    return {
      keyid: parsed.keyid,
      created: parsed.created,
      expires: parsed.expires,
      nonce: parsed.nonce,
      label: parsed.label,
      body: message.body,
    };
  }

  return {
    async verify(request, fetchOptions = {}) {
      let message: SignedMessage;
      if (request instanceof Request) {
        message = await fromFetchRequest(request, fetchOptions.url, maxBodyBytes);
      } else {
        try {
          message = fromRaw(fetchOptions.url === undefined ? request : { ...request, url: fetchOptions.url });
        } catch {
          throw invalid("request URL is not absolute");
        }
      }
      return verifyMessage(message);
    },
  };
}
