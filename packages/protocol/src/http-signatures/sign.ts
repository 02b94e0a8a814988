import { type KeyObject, randomBytes, sign } from "node:crypto";
import { serializeDictionary } from "structured-headers";
import { privateKeyFromSeed } from "../ed25519.js";
import { contentDigest } from "./content-digest.js";
import { bodyBytes, normaliseTargetUri, type RawRequest } from "./message.js";
import {
  type CoveredComponent,
  type SignatureParams,
  serialiseParams,
  signatureBase,
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

export function randomNonce(): string {
  return randomBytes(16).toString("base64url");
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
  const components: CoveredComponent[] =
    digest === undefined ? ["@method", "@target-uri"] : ["@method", "@target-uri", "content-digest"];
  const paramsList = signatureParamsList(components, params);
  const serialised = serialiseParams(paramsList);
  const base = signatureBase(
    components,
    { method: request.method, targetUri: normaliseTargetUri(request.url), contentDigest: digest },
    serialised,
  );
  const key = options.privateKey instanceof Uint8Array ? privateKeyFromSeed(options.privateKey) : options.privateKey;
  const signature = sign(null, Buffer.from(base, "utf8"), key);
  const label = options.label ?? DEFAULT_SIGNATURE_LABEL;
  const headers: SignatureHeaders = {
    "signature-input": `${label}=${serialised}`,
    signature: serializeDictionary({ [label]: [signature, new Map()] }),
  };
  if (digest !== undefined) headers["content-digest"] = digest;
  return { headers, signatureBase: base, params };
}

/** Signs a Fetch API `Request`, returning a new one with the signature headers set. */
export async function signFetchRequest(request: Request, options: SignOptions): Promise<Request> {
  const body = new Uint8Array(await request.clone().arrayBuffer());
  const signed = signRequest({ method: request.method, url: request.url, body }, options);
  const headers = new Headers(request.headers);
  for (const [name, value] of Object.entries(signed.headers)) headers.set(name, value);
  return new Request(request, { headers, ...(body.length > 0 ? { body } : {}) });
}
