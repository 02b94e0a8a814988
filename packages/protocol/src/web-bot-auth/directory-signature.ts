/**
 * Signed key directory responses (draft-ietf-webbotauth-httpsig-protocol, "Validating the Domain
 * Binding"): each signature tagged `http-message-signatures-directory` covers
 * `("@authority";req "content-digest")` and is made with a key the directory itself lists, which
 * shows that whoever serves the directory at that authority holds the key.
 */
import { verify as ed25519Verify, type KeyObject } from "node:crypto";
import { isInnerList, parseDictionary, serializeInnerList, serializeItem } from "structured-headers";
import { ED25519_SIGNATURE_LENGTH } from "../ed25519.js";
import { buildSignatureBase, ComponentError, type MessageComponents } from "../http-signatures/components.js";
import { contentDigestMatches } from "../http-signatures/content-digest.js";
import { headerReader } from "../http-signatures/message.js";
import type { Dictionary, InnerList, Item } from "../http-signatures/sf-types.js";
import { fetchTargetUri, TargetUriError } from "../http-signatures/target-uri.js";
import type { SafeResponseHeaders } from "../safe-fetch.js";
import { KeyDirectoryError } from "./key-directory-error.js";

export const DIRECTORY_SIGNATURE_TAG = "http-message-signatures-directory";

/** A signature header of a directory response is a few hundred bytes per key. */
const MAX_SIGNATURE_HEADER_LENGTH = 8192;
/** Tolerated clock difference with the directory's host, in seconds. */
const SKEW_SECONDS = 60;
const REQUIRED_COMPONENTS = ['"@authority";req', '"content-digest"'];

export interface DirectoryResponse {
  /** The URL that was fetched: its authority is what `"@authority";req` signs. */
  url: string;
  headers: SafeResponseHeaders;
  body: Uint8Array;
}

function badSignature(message: string): KeyDirectoryError {
  return new KeyDirectoryError("bad_signature", `the key directory's signature is invalid: ${message}`);
}

function parseField(name: string, value: string): Dictionary {
  if (value.length > MAX_SIGNATURE_HEADER_LENGTH) throw badSignature(`${name} is too long`);
  try {
    return parseDictionary(value);
  } catch {
    throw badSignature(`${name} is not a structured dictionary`);
  }
}

function checkComponents(components: readonly Item[]): void {
  const covered = components.map((component) => serializeItem(component));
  const exact =
    covered.length === REQUIRED_COMPONENTS.length && REQUIRED_COMPONENTS.every((name) => covered.includes(name));
  if (!exact) throw badSignature(`it must cover exactly ${REQUIRED_COMPONENTS.join(" ")}`);
}

function checkSignature(
  label: string,
  input: InnerList,
  signatures: Dictionary,
  response: DirectoryResponse,
  message: MessageComponents,
  keys: ReadonlyMap<string, KeyObject>,
  nowSeconds: number,
): void {
  const [components, params] = input;
  checkComponents(components);
  const created = params.get("created");
  const expires = params.get("expires");
  const keyid = params.get("keyid");
  const alg = params.get("alg");
  if (!Number.isInteger(created)) throw badSignature("created must be an integer");
  if (expires !== undefined && !Number.isInteger(expires)) throw badSignature("expires must be an integer");
  if ((created as number) > nowSeconds + SKEW_SECONDS) throw badSignature("it is dated in the future");
  if (expires !== undefined && nowSeconds > (expires as number) + SKEW_SECONDS) throw badSignature("it has expired");
  if (alg !== undefined && alg !== "ed25519") throw badSignature('alg must be "ed25519"');
  if (typeof keyid !== "string") throw badSignature("keyid must be a string");
  const publicKey = keys.get(keyid);
  if (publicKey === undefined) throw badSignature("keyid is not the thumbprint of a key in the directory");

  const digest = message.header("content-digest");
  if (digest === undefined || !contentDigestMatches(digest, response.body)) {
    throw badSignature("Content-Digest does not match the body");
  }
  const signature = signatures.get(label);
  if (signature === undefined || isInnerList(signature) || !(signature[0] instanceof ArrayBuffer)) {
    throw badSignature(`no signature labelled ${label}`);
  }
  const bytes = new Uint8Array(signature[0]);
  let base: string;
  try {
    base = buildSignatureBase(message, components, serializeInnerList(input));
  } catch (error) {
    if (error instanceof ComponentError || error instanceof TargetUriError) throw badSignature(error.message);
    throw error;
  }
  if (bytes.length !== ED25519_SIGNATURE_LENGTH || !ed25519Verify(null, Buffer.from(base, "utf8"), publicKey, bytes)) {
    throw badSignature("it does not verify");
  }
}

/**
 * Checks every signature of the response tagged for directories: `signed` when there is at least
 * one and all hold, `unsigned` when there is none (signatures with other tags are not ours to judge).
 * Throws `bad_signature` for any tagged signature that fails, or for signature fields that do not
 * parse, since then whether one is present cannot be told.
 */
export function checkDirectorySignatures(
  response: DirectoryResponse,
  keys: ReadonlyMap<string, KeyObject>,
  nowSeconds: number,
): "signed" | "unsigned" {
  const header = headerReader(response.headers);
  const inputField = header("signature-input");
  if (inputField === undefined) return "unsigned";
  const inputs = parseField("Signature-Input", inputField);
  const tagged = [...inputs].filter(
    (entry): entry is [string, InnerList] =>
      isInnerList(entry[1]) && entry[1][1].get("tag") === DIRECTORY_SIGNATURE_TAG,
  );
  if (tagged.length === 0) return "unsigned";
  const signatures = parseField("Signature", header("signature") ?? "");
  const targetUri = fetchTargetUri(response.url);
  // Only `"@authority";req` and `content-digest` are ever derived: the request carries the
  // authority, the response its own fields. A response has no target of its own, so none is used.
  const request: MessageComponents = { method: "GET", targetUri, header: () => undefined };
  const message: MessageComponents = { method: "GET", targetUri, header, request };
  for (const [label, input] of tagged) checkSignature(label, input, signatures, response, message, keys, nowSeconds);
  return "signed";
}
