import { serializeInnerList } from "structured-headers";
import { ComponentError, type ComponentIdentifier } from "./components.js";
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

const LINE_START: Record<CoveredComponent, string> = {
  "@method": '"@method": ',
  "@target-uri": '"@target-uri": ',
  "content-digest": '"content-digest": ',
};
const NEXT_LINE_START: Record<CoveredComponent, string> = {
  "@method": '\n"@method": ',
  "@target-uri": '\n"@target-uri": ',
  "content-digest": '\n"content-digest": ',
};
const PARAMS_LINE_START = '\n"@signature-params": ';

/**
 * The signature base of the profile's components (§2.5), each covered once, in the order given:
 * the lines `buildSignatureBase` writes for them, without its general component lookup. `digest`
 * is the request's `Content-Digest`, needed when it is covered. Throws `ComponentError` as
 * `buildSignatureBase` does.
 */
export function profileSignatureBase(
  components: readonly CoveredComponent[],
  method: string,
  targetUri: string,
  digest: string | undefined,
  serialisedParams: string,
): string {
  let base = "";
  for (let i = 0; i < components.length; i++) {
    const name = components[i] as CoveredComponent;
    const value = name === "@method" ? method : name === "@target-uri" ? targetUri : digest;
    if (value === undefined) throw new ComponentError(`covered field ${name} is absent`);
    // A line break would forge further lines of the base.
    if (hasLineBreak(value)) throw new ComponentError(`component "${name}" holds a line break`);
    // Each line's fixed start is one string: fewer pieces for the engine to join.
    base = i === 0 ? LINE_START[name] + value : base + NEXT_LINE_START[name] + value;
  }
  return components.length === 0
    ? `"@signature-params": ${serialisedParams}`
    : base + PARAMS_LINE_START + serialisedParams;
}

function hasLineBreak(value: string): boolean {
  return value.indexOf("\n") !== -1 || value.indexOf("\r") !== -1;
}
