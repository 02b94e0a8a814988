import { DidKeyError, didKeyToPublicKey } from "../did-key.js";
import { ProtoError, protoError } from "../errors.js";
import type { NonceStore } from "../nonce-store.js";
import type { ComponentIdentifier } from "./components.js";
import { contentDigestMatches } from "./content-digest.js";
import { bodyBytes, fromRaw, headerReader, type RawRequest, type SignedMessage } from "./message.js";
import {
  type CandidateSignature,
  checkEd25519,
  checkEd25519Offloaded,
  checkTimeWindow,
  DEFAULT_SKEW_SECONDS,
  invalid,
  MAX_SIGNATURE_HEADER_LENGTH,
  MAX_SIGNATURE_VALIDITY_SECONDS,
  readSignatures,
} from "./signature-input.js";
import { canonicalTargetUri, fetchTargetUri, TargetUriError } from "./target-uri.js";

export { DEFAULT_SKEW_SECONDS, MAX_SIGNATURE_VALIDITY_SECONDS };

/** The body cap of proto services' JSON endpoints. */
const DEFAULT_MAX_BODY_BYTES = 64 * 1024;
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

interface ProtoSignature {
  candidate: CandidateSignature;
  created: number;
  expires: number;
  nonce: string;
  keyid: string;
}

const PLAIN_COMPONENTS = ["@method", "@target-uri"];
const BODY_COMPONENTS = ["@method", "@target-uri", "content-digest"];

function checkComponents(items: readonly ComponentIdentifier[], hasBody: boolean): void {
  const expected = hasBody ? BODY_COMPONENTS : PLAIN_COMPONENTS;
  // Each expected name once: a bit per name.
  let seen = 0;
  for (const [name, params] of items) {
    if (typeof name !== "string" || params.size > 0) throw invalid("covered components must be plain names");
    const index = expected.indexOf(name);
    if (index === -1 || (seen & (1 << index)) !== 0) {
      throw invalid(`covered component ${String(name)} is not allowed here`);
    }
    seen |= 1 << index;
  }
  if (seen !== (1 << expected.length) - 1) {
    throw invalid(`covered components must be exactly ${expected.join(", ")}`);
  }
}

function chooseCandidate(candidates: CandidateSignature[], label: string | undefined): CandidateSignature {
  if (label !== undefined) {
    const chosen = candidates.find((c) => c.label === label);
    if (chosen === undefined) throw invalid(`no signature labelled ${label}`);
    return chosen;
  }
  const chosen =
    candidates.find((c) => {
      const keyid = c.params.get("keyid");
      return typeof keyid === "string" && keyid.startsWith("did:key:");
    }) ?? candidates[0];
  if (chosen === undefined) throw invalid("no labelled signature with a matching Signature-Input");
  return chosen;
}

function parseSignature(message: SignedMessage, preferredLabel: string | undefined): ProtoSignature {
  const candidate = chooseCandidate(readSignatures(message.header), preferredLabel);
  const params = candidate.params;
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
  checkComponents(candidate.components, message.body !== undefined);
  return { candidate, created: created as number, expires: expires as number, nonce, keyid };
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
    checkTimeWindow(parsed, nowSeconds, skew, MAX_SIGNATURE_VALIDITY_SECONDS);
    if (message.body !== undefined) {
      const digestHeader = message.header("content-digest");
      if (digestHeader === undefined || digestHeader.length > MAX_SIGNATURE_HEADER_LENGTH) {
        throw invalid("missing Content-Digest header");
      }
      if (!contentDigestMatches(digestHeader, message.body)) throw invalid("Content-Digest does not match the body");
    }
    if (offload) await checkEd25519Offloaded(message, parsed.candidate, publicKey);
    else checkEd25519(message, parsed.candidate, publicKey);
    const ttl = parsed.expires + skew - nowSeconds;
    if (!(await nonceStore.seen(parsed.keyid, parsed.nonce, ttl, parsed.created))) {
      throw protoError("replayed_nonce");
    }
    return {
      keyid: parsed.keyid,
      created: parsed.created,
      expires: parsed.expires,
      nonce: parsed.nonce,
      label: parsed.candidate.label,
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
