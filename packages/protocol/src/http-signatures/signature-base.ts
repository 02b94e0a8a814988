import { type InnerList, type Item, serializeInnerList } from "structured-headers";

/** The signature parameters of the proto Ed25519 profile, in the order a signer emits them. */
export interface SignatureParams {
  created: number;
  expires: number;
  nonce: string;
  keyid: string;
  alg: "ed25519";
}

export type CoveredComponent = "@method" | "@target-uri" | "content-digest";

export function signatureParamsList(components: readonly CoveredComponent[], params: SignatureParams): InnerList {
  const items: Item[] = components.map((c) => [c, new Map()]);
  return [
    items,
    new Map<string, string | number>([
      ["created", params.created],
      ["expires", params.expires],
      ["nonce", params.nonce],
      ["keyid", params.keyid],
      ["alg", params.alg],
    ]),
  ];
}

/**
 * The RFC 9421 §2.5 signature base: one line per covered component, then `@signature-params`
 * carrying the serialised inner list exactly as it appears in `Signature-Input`.
 */
export function signatureBase(
  components: readonly CoveredComponent[],
  values: { method: string; targetUri: string; contentDigest: string | undefined },
  serialisedParams: string,
): string {
  let base = "";
  for (const component of components) {
    let value: string | undefined;
    if (component === "@method") value = values.method;
    else if (component === "@target-uri") value = values.targetUri;
    else value = values.contentDigest;
    if (value === undefined) throw new Error(`no value for covered component ${component}`);
    base += `"${component}": ${value}\n`;
  }
  return `${base}"@signature-params": ${serialisedParams}`;
}

export function serialiseParams(list: InnerList): string {
  return serializeInnerList(list);
}
