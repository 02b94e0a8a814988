/**
 * Sending Web Bot Auth: a signature tagged `web-bot-auth`, `keyid` the key's JWK thumbprint, covering
 * `Signature-Agent`. By default in the working group's form (draft-ietf-webbotauth-httpsig-protocol-00):
 * a dictionary whose member, keyed by the signature's label, names where the keys are (an origin
 * for a well-known directory, else the JWK Set, typed `jwks_uri`), and the signature covers only
 * that member, `"signature-agent";key="<label>"`. The older bare string, covered whole, is what
 * deployed verifiers read today; it stays an option. Ours also covers what the proto profile does (`@method`, `@target-uri`,
 * `content-digest`) and carries a nonce and a short lifetime, so that the same signature lets a proto
 * service on our kit treat the request as its account's when an attestation comes with it.
 */
import { createPublicKey, type KeyObject } from "node:crypto";
import { serializeDictionary, serializeItem, Token } from "structured-headers";
import type { MessageComponents } from "../http-signatures/components.js";
import { contentDigest } from "../http-signatures/content-digest.js";
import { bodyBytes, headerReader, type RawRequest, signerTargetUri } from "../http-signatures/message.js";
import {
  DEFAULT_SIGNATURE_VALIDITY_SECONDS,
  type MessageSignature,
  randomNonce,
  type SignOptions,
  signatureHeaderPair,
  signMessage,
  signRequest,
  toPrivateKey,
  wireMethod,
} from "../http-signatures/sign.js";
import { componentIdentifiers } from "../http-signatures/signature-base.js";
import { jwkThumbprint } from "./directory-keys.js";
import { KEY_DIRECTORY_PATH } from "./key-directory.js";
import { SIGNATURE_AGENT_HEADER, WEB_BOT_AUTH_TAG } from "./verify.js";

/** `dictionary`: the working group's form (default); `string`: the older bare string. */
export type SignatureAgentForm = "dictionary" | "string";

export interface WebBotAuthSignOptions {
  /** The Ed25519 private key, or its 32-byte seed. */
  privateKey: KeyObject | Uint8Array;
  /** The key directory URL the agent's key is published at (the attestor's, for our agents). */
  signatureAgent: string;
  label?: string;
  created?: number;
  expires?: number;
  validitySeconds?: number;
  nonce?: string;
  now?: () => number;
  /** How `Signature-Agent` is spelled (default `dictionary`). */
  signatureAgentForm?: SignatureAgentForm;
  /**
   * In the dictionary form, what the signature covers: its own member
   * (`"signature-agent";key="<label>"`, default, as the draft requires) or the whole field, which
   * verifiers without member support (the npm `web-bot-auth` 0.1.3) recompute. The string form is
   * always covered whole.
   */
  agentCoverage?: "field" | "member";
}

// A type alias, not an interface, so it is assignable to plain header records.
export type WebBotAuthHeaders = {
  "signature-agent": string;
  "signature-input": string;
  signature: string;
  "content-digest"?: string;
};

/**
 * The dictionary member naming a key directory: a directory at an origin's well-known path is named
 * by the origin (-00's `directory` type, the default), any other URL is the JWK Set (`jwks_uri`).
 */
function agentMember(signatureAgent: string): [string, Map<string, Token>] {
  const url = new URL(signatureAgent);
  if (url.protocol !== "https:") throw new RangeError("the Signature-Agent must be an https URL");
  if ((url.pathname === KEY_DIRECTORY_PATH || url.pathname === "/") && url.search === "" && url.hash === "") {
    return [url.origin, new Map()];
  }
  return [signatureAgent, new Map([["type", new Token("jwks_uri")]])];
}

function agentField(options: WebBotAuthSignOptions, label: string): { header: string; keyed: boolean } {
  if (options.signatureAgentForm === "string") {
    return { header: serializeItem([options.signatureAgent, new Map()]), keyed: false };
  }
  return {
    header: serializeDictionary({ [label]: agentMember(options.signatureAgent) }),
    keyed: options.agentCoverage !== "field",
  };
}

function webBotAuthSignature(
  request: Omit<RawRequest, "headers">,
  options: WebBotAuthSignOptions,
): { signature: MessageSignature; agentHeader: string; digest: string | undefined } {
  const label = options.label ?? "sig1";
  const body = bodyBytes(request.body);
  const digest = body === undefined ? undefined : contentDigest(body);
  const agent = agentField(options, label);
  const agentHeader = agent.header;
  const created = options.created ?? Math.floor((options.now ?? Date.now)() / 1000);
  const expires = options.expires ?? created + (options.validitySeconds ?? DEFAULT_SIGNATURE_VALIDITY_SECONDS);
  const privateKey = toPrivateKey(options.privateKey);
  const keyid = jwkThumbprint(createPublicKey(privateKey));
  const components = componentIdentifiers([
    "@method",
    "@target-uri",
    "@authority",
    ...(digest === undefined ? [] : ["content-digest"]),
  ]);
  components.push(
    agent.keyed ? [SIGNATURE_AGENT_HEADER, new Map([["key", label]])] : [SIGNATURE_AGENT_HEADER, new Map()],
  );
  const fields: Record<string, string> = { [SIGNATURE_AGENT_HEADER]: agentHeader };
  if (digest !== undefined) fields["content-digest"] = digest;
  const message: MessageComponents = {
    method: wireMethod(request.method),
    targetUri: signerTargetUri(request),
    header: headerReader(fields),
  };
  const signature = signMessage(
    message,
    components,
    [
      ["created", created],
      ["expires", expires],
      ["nonce", options.nonce ?? randomNonce()],
      ["keyid", keyid],
      ["alg", "ed25519"],
      ["tag", WEB_BOT_AUTH_TAG],
    ],
    privateKey,
    label,
  );
  return { signature, agentHeader, digest };
}

/** One Web Bot Auth signature over a request: the headers to send. */
export function signWebBotAuth(
  request: Omit<RawRequest, "headers">,
  options: WebBotAuthSignOptions,
): { headers: WebBotAuthHeaders; signatureBase: string; keyid: string } {
  const { signature, agentHeader, digest } = webBotAuthSignature(request, options);
  const headers: WebBotAuthHeaders = { "signature-agent": agentHeader, ...signatureHeaderPair([signature]) };
  if (digest !== undefined) headers["content-digest"] = digest;
  const keyid = jwkThumbprint(createPublicKey(toPrivateKey(options.privateKey)));
  return { headers, signatureBase: signature.base, keyid };
}

/**
 * Two signatures by one key: the proto profile's (`sig1`, keyid the did:key), which every proto
 * service verifies, and a Web Bot Auth one (`sig2`) for the CDNs and sites in between. Verifiers
 * that take one signature only (the npm `web-bot-auth` 0.1.3) refuse the pair; `signWebBotAuth`
 * alone serves them, and our kit accepts either.
 */
export function signProtoAndWebBotAuth(
  request: Omit<RawRequest, "headers">,
  proto: SignOptions,
  webBotAuth: Omit<WebBotAuthSignOptions, "label" | "privateKey" | "created" | "expires">,
): WebBotAuthHeaders {
  const first = signRequest(request, { ...proto, label: proto.label ?? "sig1" });
  const { signature, agentHeader } = webBotAuthSignature(request, {
    ...webBotAuth,
    privateKey: proto.privateKey,
    label: "sig2",
    created: first.params.created,
    expires: first.params.expires,
  });
  const [input, value] = [first.headers["signature-input"], first.headers.signature];
  const second = signatureHeaderPair([signature]);
  const headers: WebBotAuthHeaders = {
    "signature-agent": agentHeader,
    "signature-input": `${input}, ${second["signature-input"]}`,
    signature: `${value}, ${second.signature}`,
  };
  if (first.headers["content-digest"] !== undefined) headers["content-digest"] = first.headers["content-digest"];
  return headers;
}
