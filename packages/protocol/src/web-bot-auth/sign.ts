/**
 * Sending Web Bot Auth: a signature tagged `web-bot-auth`, `keyid` the key's JWK thumbprint, covering
 * `Signature-Agent`. Ours also covers what the proto profile does (`@method`, `@target-uri`,
 * `content-digest`) and carries a nonce and a short lifetime, so that the same signature lets a proto
 * service on our kit treat the request as its account's when an attestation comes with it.
 */
import { createPublicKey, type KeyObject } from "node:crypto";
import { serializeDictionary } from "structured-headers";
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
import { SIGNATURE_AGENT_HEADER, WEB_BOT_AUTH_TAG } from "./verify.js";

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
  /**
   * How `Signature-Agent` is covered: the whole field (`"signature-agent"`, default), which every
   * verifier deployed today recomputes, or only this signature's member
   * (`"signature-agent";key="<label>"`, the -01 draft's form, which the npm `web-bot-auth` 0.1.3
   * verifier cannot recompute).
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

function webBotAuthSignature(
  request: Omit<RawRequest, "headers">,
  options: WebBotAuthSignOptions,
): { signature: MessageSignature; agentHeader: string; digest: string | undefined } {
  const label = options.label ?? "sig1";
  const body = bodyBytes(request.body);
  const digest = body === undefined ? undefined : contentDigest(body);
  const agentHeader = serializeDictionary({ [label]: [options.signatureAgent, new Map()] });
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
    options.agentCoverage === "member"
      ? [SIGNATURE_AGENT_HEADER, new Map([["key", label]])]
      : [SIGNATURE_AGENT_HEADER, new Map()],
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
  webBotAuth: Omit<WebBotAuthSignOptions, "label" | "privateKey">,
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
