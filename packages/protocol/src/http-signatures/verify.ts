import { DidKeyError, didKeyToPublicKey } from "../did-key.js";
import { ProtoError, protoError } from "../errors.js";
import type { NonceStore } from "../nonce-store.js";
import { ComponentError } from "./components.js";
import { contentDigestMatches } from "./content-digest.js";
import { bodyBytes, fromRaw, headerReader, type RawRequest, type SignedMessage } from "./message.js";
import { type ProfileSignature, readProfileSignature } from "./profile-reader.js";
import { profileSignatureBase } from "./signature-base.js";
import {
  checkEd25519Base,
  checkEd25519BaseOffloaded,
  checkTimeWindow,
  DEFAULT_SKEW_SECONDS,
  invalid,
  MAX_SIGNATURE_HEADER_LENGTH,
  MAX_SIGNATURE_VALIDITY_SECONDS,
} from "./signature-input.js";
import { canonicalTargetUri, fetchTargetUri, TargetUriError } from "./target-uri.js";

export { DEFAULT_SKEW_SECONDS, MAX_SIGNATURE_VALIDITY_SECONDS };

/** The body cap of proto services' JSON endpoints. */
const DEFAULT_MAX_BODY_BYTES = 64 * 1024;

export interface RequestVerifierOptions {
  /** Where `(keyid, nonce)` pairs are remembered; share one across replicas (Redis). */
  nonceStore: NonceStore;
  /** Tolerated clock difference in seconds (default 60). */
  skewSeconds?: number;
  /** Milliseconds since the epoch; an injectable clock. */
  now?: () => number;
  /** Revocation list lookup, consulted before any signature work. */
  isRevoked?: (keyid: string) => boolean | Promise<boolean>;
  /**
   * Which signature to verify when a request carries several. Default: the first whose `keyid` is a
   * `did:key` (so a Web Bot Auth signature beside it is ignored), else the first.
   */
  label?: string;
  /** Largest body a Fetch `Request` may carry (default 64 KiB); larger is 413 `payload_too_large`. */
  maxBodyBytes?: number;
  /**
   * Verify Ed25519 on libuv's thread pool (default false). A server that verifies many requests at
   * once then uses more than one core for it; each request alone costs more CPU and a thread hop.
   */
  offloadVerification?: boolean;
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
  /**
   * Where this request's nonce is remembered, instead of the verifier's store: one that does
   * more in the same round trip (counts the client's rate limit with it, say). Same contract.
   */
  nonceStore?: NonceStore;
}

export interface RequestVerifier {
  /** Verifies a raw request or a Fetch `Request`; throws a `ProtoError` with the reserved code. */
  verify(request: RawRequest | Request, options?: FetchVerifyOptions): Promise<VerifiedRequest>;
}

function signatureBase(message: SignedMessage, signature: ProfileSignature, digest: string | undefined): string {
  try {
    return profileSignatureBase(
      signature.components,
      message.method,
      message.targetUri,
      digest,
      signature.serialisedParams,
    );
  } catch (error) {
    if (error instanceof ComponentError) throw invalid(error.message);
    throw error;
  }
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
    // The runtime already serialised `request.url`; an override is what the server received, as given.
    targetUri: url === undefined ? fetchTargetUri(request.url) : canonicalTargetUri(url),
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
  const offload = options.offloadVerification === true;

  async function verifyMessage(message: SignedMessage, nonceStore: NonceStore): Promise<VerifiedRequest> {
    const parsed = readProfileSignature(message.header, message.body !== undefined, options.label);
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
    checkTimeWindow(parsed, nowSeconds, skew, MAX_SIGNATURE_VALIDITY_SECONDS);
    let digest: string | undefined;
    if (message.body !== undefined) {
      digest = message.header("content-digest");
      if (digest === undefined || digest.length > MAX_SIGNATURE_HEADER_LENGTH) {
        throw invalid("missing Content-Digest header");
      }
      if (!contentDigestMatches(digest, message.body)) throw invalid("Content-Digest does not match the body");
    }
    const base = signatureBase(message, parsed, digest);
    if (offload) await checkEd25519BaseOffloaded(base, parsed.signature, publicKey);
    else checkEd25519Base(base, parsed.signature, publicKey);
    const ttl = parsed.expires + skew - nowSeconds;
    if (!(await nonceStore.seen(parsed.keyid, parsed.nonce, ttl, parsed.created))) {
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

  /** What reading the request threw, as the caller gets it: an unusable URL is the signature's fault. */
  function readError(error: unknown): unknown {
    return error instanceof TargetUriError || error instanceof TypeError
      ? invalid(`the request's target URI is unusable (${error.message})`)
      : error;
  }

  return {
    verify(request, fetchOptions = {}) {
      const nonceStore = fetchOptions.nonceStore ?? options.nonceStore;
      if (request instanceof Request) {
        return fromFetchRequest(request, fetchOptions.url, maxBodyBytes).then(
          (message) => verifyMessage(message, nonceStore),
          (error: unknown) => {
            throw readError(error);
          },
        );
      }
      let message: SignedMessage;
      try {
        message = fromRaw(fetchOptions.url === undefined ? request : { ...request, url: fetchOptions.url });
      } catch (error) {
        return Promise.reject(readError(error));
      }
      // A plain request's checks run now, in the caller's turn: one promise, not one per layer.
      return verifyMessage(message, nonceStore);
    },
  };
}
