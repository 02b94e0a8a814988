import { type KeyObject, randomBytes, sign } from "node:crypto";
import { serializeDictionary } from "structured-headers";
import { privateKeyFromSeed } from "../ed25519.js";
import { buildSignatureBase, type ComponentIdentifier, type MessageComponents } from "./components.js";
import { contentDigest } from "./content-digest.js";
import { bodyBytes, headerReader, type RawRequest, signerTargetUri } from "./message.js";
import type { BareItem } from "./sf-types.js";
import {
  componentIdentifiers,
  protoParamEntries,
  type SignatureParams,
  serialiseParams,
  signatureParamsList,
} from "./signature-base.js";

export const DEFAULT_SIGNATURE_LABEL = "sig1";
/** How long a signature is valid when the caller does not say (the profile allows up to 300 s). */
export const DEFAULT_SIGNATURE_VALIDITY_SECONDS = 60;

export interface SignOptions {
  /** The agent DID (`did:key:z6Mk...`), sent as `keyid`. */
  keyid: string;
  /** The Ed25519 private key, or its 32-byte seed. */
  privateKey: KeyObject | Uint8Array;
  /** Unix seconds; defaults to the clock. Set with `expires` and `nonce` to reproduce a signature. */
  created?: number;
  expires?: number;
  /** Seconds from `created` to `expires` when `expires` is not given. */
  validitySeconds?: number;
  nonce?: string;
  /** Milliseconds since the epoch; an injectable clock. */
  now?: () => number;
  label?: string;
}

// A type alias, not an interface, so it is assignable to plain header records.
export type SignatureHeaders = {
  "signature-input": string;
  signature: string;
  /** Present exactly when the request has a body. */
  "content-digest"?: string;
};

export interface SignedRequest {
  headers: SignatureHeaders;
  /** The bytes that were signed, for debugging and conformance checks. */
  signatureBase: string;
  params: SignatureParams;
}

/** One signature over a message: its serialised `Signature-Input` member, value and base. */
export interface MessageSignature {
  label: string;
  input: string;
  signature: Uint8Array;
  base: string;
}

export function randomNonce(): string {
  return randomBytes(16).toString("base64url");
}

// RFC 9110 §9 methods are upper case on the wire; a lower-case `post` would be signed as given and
// fail everywhere, since clients send the standard methods upper-cased.
const STANDARD_METHODS = new Set(["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"]);

export function wireMethod(method: string): string {
  const upper = method.toUpperCase();
  return STANDARD_METHODS.has(upper) ? upper : method;
}

export function toPrivateKey(key: KeyObject | Uint8Array): KeyObject {
  return key instanceof Uint8Array ? privateKeyFromSeed(key) : key;
}

/** Signs any set of components with Ed25519 (RFC 9421 §3.1). */
export function signMessage(
  message: MessageComponents,
  components: readonly ComponentIdentifier[],
  params: ReadonlyArray<readonly [string, BareItem]>,
  privateKey: KeyObject | Uint8Array,
  label: string,
): MessageSignature {
  const input = serialiseParams(signatureParamsList(components, params));
  const base = buildSignatureBase(message, components, input);
  const signature = sign(null, Buffer.from(base, "utf8"), toPrivateKey(privateKey));
  return { label, input, signature: new Uint8Array(signature), base };
}

/** `Signature-Input` and `Signature` carrying one or more signatures, in the order given. */
export function signatureHeaderPair(signatures: readonly MessageSignature[]): {
  "signature-input": string;
  signature: string;
} {
  return {
    "signature-input": signatures.map((s) => `${s.label}=${s.input}`).join(", "),
    signature: serializeDictionary(
      Object.fromEntries(signatures.map((s) => [s.label, [Buffer.from(s.signature), new Map()]])),
    ),
  };
}

/** Signs a request under the proto RFC 9421 Ed25519 profile and returns the headers to send. */
export function signRequest(request: Omit<RawRequest, "headers">, options: SignOptions): SignedRequest {
  const body = bodyBytes(request.body);
  const created = options.created ?? Math.floor((options.now ?? Date.now)() / 1000);
  const params: SignatureParams = {
    created,
    expires: options.expires ?? created + (options.validitySeconds ?? DEFAULT_SIGNATURE_VALIDITY_SECONDS),
    nonce: options.nonce ?? randomNonce(),
    keyid: options.keyid,
    alg: "ed25519",
  };
  const digest = body === undefined ? undefined : contentDigest(body);
  const components = componentIdentifiers(
    digest === undefined ? ["@method", "@target-uri"] : ["@method", "@target-uri", "content-digest"],
  );
  const message: MessageComponents = {
    method: wireMethod(request.method),
    targetUri: signerTargetUri(request),
    header: headerReader(digest === undefined ? {} : { "content-digest": digest }),
  };
  const signed = signMessage(
    message,
    components,
    protoParamEntries(params),
    options.privateKey,
    options.label ?? DEFAULT_SIGNATURE_LABEL,
  );
  const headers: SignatureHeaders = signatureHeaderPair([signed]);
  if (digest !== undefined) headers["content-digest"] = digest;
  return { headers, signatureBase: signed.base, params };
}

/** Signs a Fetch API `Request`, returning a new one with the signature headers set. */
export async function signFetchRequest(request: Request, options: SignOptions): Promise<Request> {
  const body = new Uint8Array(await request.clone().arrayBuffer());
  const signed = signRequest({ method: request.method, url: request.url, body }, options);
  const headers = new Headers(request.headers);
  for (const [name, value] of Object.entries(signed.headers)) headers.set(name, value);
  // Fetch upper-cases only DELETE, GET, HEAD, OPTIONS, POST and PUT; a `patch` Request would go out
  // as `patch` while `PATCH` was signed, so the method sent is the one signed.
  return new Request(request, { method: wireMethod(request.method), headers, ...(body.length > 0 ? { body } : {}) });
}
