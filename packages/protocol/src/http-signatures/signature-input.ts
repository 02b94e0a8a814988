/**
 * Reading `Signature-Input` and `Signature` (RFC 9421 §4) into candidate signatures, bounded
 * before any parsing, and the checks every profile shares: the time window and the signature.
 */
import { verify as ed25519Verify, type KeyObject } from "node:crypto";
import { isInnerList } from "structured-headers";
import { ED25519_SIGNATURE_LENGTH } from "../ed25519.js";
import { type ProtoError, protoError } from "../errors.js";
import { buildSignatureBase, ComponentError, type MessageComponents } from "./components.js";
import type { BareItem, Item } from "./sf-types.js";
import { byteSequence, type ParsedDictionary, parseDictionary } from "./structured-fields.js";
import { TargetUriError } from "./target-uri.js";

/** Bounds on what is parsed at all: a signature header of the profile is a few hundred bytes. */
export const MAX_SIGNATURE_HEADER_LENGTH = 8192;
export const MAX_SIGNATURE_VALIDITY_SECONDS = 300;
export const DEFAULT_SKEW_SECONDS = 60;

export interface CandidateSignature {
  label: string;
  components: Item[];
  params: Map<string, BareItem>;
  /** The inner list exactly as it must appear on the `@signature-params` line. */
  serialisedParams: string;
  signature: Uint8Array;
}

export function invalid(message: string): ProtoError {
  return protoError("invalid_signature", { message });
}

function parseHeader(name: string, value: string | undefined): ParsedDictionary {
  if (value === undefined) throw invalid(`missing ${name} header`);
  if (value.length > MAX_SIGNATURE_HEADER_LENGTH) throw invalid(`${name} header is too long`);
  try {
    return parseDictionary(value);
  } catch {
    throw invalid(`${name} is not a valid structured field`);
  }
}

// The last Signature-Input read: a server that first asks which profiles a request carries
// (`signatureProfiles`) and then verifies it reads the same value twice. What it holds is never
// modified by its readers.
let lastInput: { value: string; parsed: ParsedDictionary } | undefined;

/** `Signature-Input` parsed (bounded first); throws `invalid_signature` when it is unusable. */
export function parseSignatureInput(value: string | undefined): ParsedDictionary {
  if (value !== undefined && lastInput?.value === value) return lastInput.parsed;
  const parsed = parseHeader("Signature-Input", value);
  lastInput = { value: value as string, parsed };
  return parsed;
}

/** Every labelled signature input, in header order, with its signature when one is present. */
export function readSignatures(header: (name: string) => string | undefined): CandidateSignature[] {
  const inputs = parseSignatureInput(header("signature-input"));
  const signatures = parseHeader("Signature", header("signature")).members;
  if (inputs.members.size === 0) throw invalid("Signature-Input is empty");
  const candidates: CandidateSignature[] = [];
  for (const [label, input] of inputs.members) {
    const signatureItem = signatures.get(label);
    if (!isInnerList(input) || signatureItem === undefined || isInnerList(signatureItem)) continue;
    const signature = byteSequence(signatureItem[0]);
    if (signature === undefined) continue;
    candidates.push({
      label,
      components: input[0],
      params: input[1],
      serialisedParams: inputs.innerListText(label, input),
      signature,
    });
  }
  return candidates;
}

export interface TimeWindow {
  created: number;
  expires: number | undefined;
}

/**
 * `created` must not lie in the future and `expires` must not have passed (each with `skew`), and a
 * signature may not claim more than `maxValidity` seconds: one that never expires is refused.
 */
export function checkTimeWindow(window: TimeWindow, nowSeconds: number, skew: number, maxValidity: number): void {
  const { created, expires } = window;
  if (expires === undefined) throw invalid("expires is required");
  // A signature valid for no time at all (expires = created) is as malformed as one that ends before it starts.
  if (expires <= created || expires - created > maxValidity) {
    throw invalid(`expires must follow created, by at most ${maxValidity} seconds`);
  }
  if (created > nowSeconds + skew) throw invalid("signature is dated in the future");
  if (nowSeconds > expires + skew) throw protoError("expired_signature");
}

/** Builds the base from the request and checks the Ed25519 signature over it. */
export function checkEd25519(message: MessageComponents, candidate: CandidateSignature, publicKey: KeyObject): void {
  checkEd25519Base(signatureBase(message, candidate), candidate.signature, publicKey);
}

/** Checks an Ed25519 signature over a signature base already built. */
export function checkEd25519Base(base: string, signature: Uint8Array, publicKey: KeyObject): void {
  if (signature.length !== ED25519_SIGNATURE_LENGTH || !ed25519Verify(null, utf8(base), publicKey, signature)) {
    throw invalid("signature does not verify");
  }
}

/**
 * `checkEd25519Base` with the Ed25519 verification on libuv's thread pool, as Web Crypto does it:
 * under concurrent load the process verifies on more than one core, while a lone request pays a
 * thread hop (more CPU and latency than the synchronous check).
 */
export async function checkEd25519BaseOffloaded(
  base: string,
  signature: Uint8Array,
  publicKey: KeyObject,
): Promise<void> {
  if (signature.length !== ED25519_SIGNATURE_LENGTH) throw invalid("signature does not verify");
  // Its own buffer: the pool reads it after this function has returned.
  const bytes = Buffer.from(base, "utf8");
  const verified = await new Promise<boolean>((resolve, reject) =>
    ed25519Verify(null, bytes, publicKey, signature, (error, result) => (error ? reject(error) : resolve(result))),
  );
  if (!verified) throw invalid("signature does not verify");
}

function signatureBase(message: MessageComponents, candidate: CandidateSignature): string {
  try {
    return buildSignatureBase(message, candidate.components, candidate.serialisedParams);
  } catch (error) {
    if (error instanceof ComponentError || error instanceof TargetUriError) throw invalid(error.message);
    throw error;
  }
}

// The base's bytes go through one buffer, reused: verifying is synchronous, and a new buffer per
// request would cost about as much as everything else the base needs. The view of its first bytes
// is kept too, since bases of one client and route have one length.
let scratch = Buffer.allocUnsafeSlow(4096);
let view = scratch.subarray(0, 0);
const encoder = new TextEncoder();

function utf8(text: string): Buffer {
  // A UTF-16 code unit is at most three bytes of UTF-8.
  if (text.length * 3 > scratch.length) scratch = Buffer.allocUnsafeSlow(text.length * 3);
  const { written } = encoder.encodeInto(text, scratch);
  if (view.length !== written || view.buffer !== scratch.buffer) view = scratch.subarray(0, written);
  return view;
}
