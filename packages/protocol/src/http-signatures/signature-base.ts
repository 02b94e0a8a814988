import { serializeInnerList } from "structured-headers";
import type { ComponentIdentifier } from "./components.js";
import type { BareItem, InnerList } from "./sf-types.js";

/** The signature parameters of the proto Ed25519 profile, in the order a signer emits them. */
export interface SignatureParams {
  created: number;
  expires: number;
  nonce: string;
  keyid: string;
  alg: "ed25519";
}

/** The components the proto profile covers: exactly these, plus `content-digest` with a body. */
export type CoveredComponent = "@method" | "@target-uri" | "content-digest";

export function componentIdentifiers(names: readonly string[]): ComponentIdentifier[] {
  return names.map((name) => [name, new Map()]);
}

/** The `Signature-Input` inner list: covered components, then parameters in the order given. */
export function signatureParamsList(
  components: readonly ComponentIdentifier[],
  params: ReadonlyArray<readonly [string, BareItem]>,
): InnerList {
  return [[...components], new Map(params.map(([name, value]) => [name, value]))];
}

export function protoParamEntries(params: SignatureParams): Array<[string, BareItem]> {
  return [
    ["created", params.created],
    ["expires", params.expires],
    ["nonce", params.nonce],
    ["keyid", params.keyid],
    ["alg", params.alg],
  ];
}

export function serialiseParams(list: InnerList): string {
  return serializeInnerList(list);
}
