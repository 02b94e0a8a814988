/**
 * What one request of an agent shows about the signing rules an agent follows (trust.md §POST
 * /v1/token signing rules, §Presentation; upstream core §5 through upstream.md): each check reads
 * the request as received and says whether it holds, without refusing anything itself.
 */
import { verify as ed25519Verify } from "node:crypto";
import { buildSignatureBase, type ComponentIdentifier, contentDigestMatches, didKeyToPublicKey } from "@proto/protocol";

/** A request as the stand-in received it. */
export interface ReceivedRequest {
  method: string;
  /** The request-target exactly as on the request line. */
  target: string;
  /** The public URL it was addressed to: the stand-in's public origin and `target`. */
  url: string;
  /** Header names lower-case, repeated fields joined with `, `. */
  headers: Record<string, string>;
  body: Buffer;
}

/** The profile's signature, read from `Signature-Input` and `Signature`. */
export interface ReadSignature {
  label: string;
  /** Component names, in order. */
  components: string[];
  /** Whether some component carries parameters (`;key=`, `;req`): not the profile. */
  componentParams: boolean;
  params: Map<string, string | number | boolean>;
  /** The inner list as it appears in `Signature-Input`, for the `@signature-params` line. */
  serialisedParams: string;
  signature: Buffer | undefined;
}

const PARAM = /^;([a-z*][a-z0-9_.*-]*)(?:=("(?:[^"\\]|\\.)*"|-?\d+|\?[01]|[A-Za-z*][^;\s,()"]*))?/;
const COMPONENT = /^"((?:[^"\\]|\\.)*)"((?:;[a-z*][a-z0-9_.*-]*(?:=(?:"(?:[^"\\]|\\.)*"|[^;\s)]+))?)*)/;

function paramValue(raw: string | undefined): string | number | boolean {
  if (raw === undefined) return true;
  if (raw.startsWith('"')) return raw.slice(1, -1).replace(/\\(.)/g, "$1");
  if (/^-?\d+$/.test(raw)) return Number(raw);
  if (raw === "?1") return true;
  if (raw === "?0") return false;
  return raw;
}

/**
 * The first member of `Signature-Input` and its `Signature`, read just enough to check the profile
 * (a full structured-field parser is the verifier's job; a header it cannot read here is reported
 * as unreadable).
 */
export function readSignature(headers: Record<string, string>): ReadSignature | string {
  const input = headers["signature-input"];
  const signatureHeader = headers.signature;
  if (input === undefined && signatureHeader === undefined) return "no Signature-Input and no Signature header";
  if (input === undefined) return "no Signature-Input header";
  if (signatureHeader === undefined) return "no Signature header";
  const member = /^\s*([a-z*][a-z0-9_.*-]*)=\(/.exec(input);
  if (member === null) return `Signature-Input is not a labelled inner list: ${input.slice(0, 200)}`;
  const label = member[1] ?? "";
  let rest = input.slice(member[0].length - 1);
  const listStart = rest;
  rest = rest.slice(1).trimStart();
  const components: string[] = [];
  let componentParams = false;
  while (!rest.startsWith(")")) {
    const component = COMPONENT.exec(rest);
    if (component === null) return `Signature-Input components are unreadable: ${input.slice(0, 200)}`;
    components.push((component[1] ?? "").replace(/\\(.)/g, "$1"));
    if ((component[2] ?? "") !== "") componentParams = true;
    rest = rest.slice(component[0].length).trimStart();
  }
  rest = rest.slice(1);
  const params = new Map<string, string | number | boolean>();
  for (;;) {
    const param = PARAM.exec(rest);
    if (param === null) break;
    params.set(param[1] ?? "", paramValue(param[2]));
    rest = rest.slice(param[0].length);
  }
  const serialisedParams = listStart.slice(0, listStart.length - rest.length);
  const signatureMember = new RegExp(`(?:^|,)\\s*${label.replace(/[.*]/g, "\\$&")}=:([A-Za-z0-9+/=]*):`).exec(
    signatureHeader,
  );
  return {
    label,
    components,
    componentParams,
    params,
    serialisedParams,
    signature: signatureMember === null ? undefined : Buffer.from(signatureMember[1] ?? "", "base64"),
  };
}

/** The most a signature may claim (trust.md §POST /v1/token; decisions.md §Trust attestor 1). */
export const MAX_VALIDITY_SECONDS = 300;
/** The skew tolerance of the profile (upstream core §5.6; decisions.md §Trust attestor 1). */
export const SKEW_SECONDS = 60;

/** `undefined` when the rule holds, else what broke it. */
export type Finding = string | undefined;

/**
 * The covered components are exactly the required ones, as upstream's conformance document asks of
 * both sides (a service rejects "extra or missing components"): an agent that covers more is
 * refused by conforming services, so it fails here too.
 */
export function checkComponents(signature: ReadSignature, hasBody: boolean): Finding {
  const required = hasBody ? ["@method", "@target-uri", "content-digest"] : ["@method", "@target-uri"];
  const missing = required.filter((name) => !signature.components.includes(name));
  const covered = `covers (${signature.components.map((c) => `"${c}"`).join(" ")})`;
  if (missing.length > 0) {
    return `the signature ${covered}: ${missing.join(", ")} missing${hasBody ? " (the request has a body)" : ""}`;
  }
  const extra = [...new Set(signature.components.filter((name) => !required.includes(name)))];
  if (extra.length > 0) {
    return `the signature ${covered}: ${extra.join(", ")} not among the required components (exactly ${required.join(", ")})`;
  }
  if (signature.componentParams) return `the signature ${covered} with component parameters the profile has not`;
  if (new Set(signature.components).size !== signature.components.length)
    return `the signature ${covered}: a component twice`;
  return undefined;
}

export function checkParams(signature: ReadSignature): Finding {
  const p = signature.params;
  const problems: string[] = [];
  for (const name of ["created", "expires"]) {
    if (!Number.isInteger(p.get(name))) problems.push(`${name} is ${p.has(name) ? "not an integer" : "missing"}`);
  }
  const nonce = p.get("nonce");
  if (typeof nonce !== "string" || nonce === "")
    problems.push(`nonce is ${p.has("nonce") ? "not a string" : "missing"}`);
  const keyid = p.get("keyid");
  if (typeof keyid !== "string") problems.push(`keyid is ${p.has("keyid") ? "not a string" : "missing"}`);
  else if (!keyid.startsWith("did:key:")) problems.push(`keyid ${keyid} is not a did:key`);
  else {
    try {
      didKeyToPublicKey(keyid);
    } catch {
      problems.push(`keyid ${keyid} is not an Ed25519 did:key`);
    }
  }
  const alg = p.get("alg");
  if (alg !== "ed25519") problems.push(alg === undefined ? "alg is missing" : `alg is ${String(alg)}, not ed25519`);
  return problems.length === 0 ? undefined : problems.join("; ");
}

/** `expires - created` in (0, 300], `created` not in the future and `expires` not past (60 s skew each). */
export function checkWindow(signature: ReadSignature, nowSeconds: number): Finding {
  const created = signature.params.get("created");
  const expires = signature.params.get("expires");
  if (typeof created !== "number" || typeof expires !== "number") return undefined;
  if (expires <= created) return `expires (${expires}) does not follow created (${created})`;
  if (expires - created > MAX_VALIDITY_SECONDS)
    return `expires - created is ${expires - created} s (at most ${MAX_VALIDITY_SECONDS})`;
  if (created > nowSeconds + SKEW_SECONDS)
    return `created is ${created - nowSeconds} s in the future (skew ${SKEW_SECONDS} s)`;
  if (nowSeconds > expires + SKEW_SECONDS)
    return `expires passed ${nowSeconds - expires} s before the request came (skew ${SKEW_SECONDS} s)`;
  return undefined;
}

/** A `Content-Digest` with a body that is the body's; none without a body. */
export function checkDigest(request: ReceivedRequest): { withBody?: Finding; bodyless?: Finding } {
  const header = request.headers["content-digest"];
  if (request.body.length === 0) {
    return {
      bodyless: header === undefined ? undefined : `a request without a body carries Content-Digest: ${header}`,
    };
  }
  if (header === undefined) return { withBody: "a request with a body carries no Content-Digest" };
  return {
    withBody: contentDigestMatches(header, request.body)
      ? undefined
      : `Content-Digest ${header} is not the sha-256 of the ${request.body.length}-byte body`,
  };
}

/** The Ed25519 signature over the base built from the request as received (its `@target-uri` included). */
export function checkVerifies(signature: ReadSignature, request: ReceivedRequest): Finding {
  const keyid = signature.params.get("keyid");
  if (typeof keyid !== "string") return "no keyid to verify with";
  let publicKey: ReturnType<typeof didKeyToPublicKey>;
  try {
    publicKey = didKeyToPublicKey(keyid);
  } catch {
    return `keyid ${keyid} is not an Ed25519 did:key`;
  }
  if (signature.signature === undefined) return `Signature has no member ${signature.label}`;
  let base: string;
  try {
    base = buildSignatureBase(
      { method: request.method, targetUri: request.url, header: (name) => request.headers[name] },
      signature.components.map((name): ComponentIdentifier => [name, new Map()]),
      signature.serialisedParams,
    );
  } catch (error) {
    return `the signature base cannot be built: ${error instanceof Error ? error.message : String(error)}`;
  }
  return ed25519Verify(null, Buffer.from(base, "utf8"), publicKey, signature.signature)
    ? undefined
    : `the signature does not verify over @method ${request.method} and @target-uri ${request.url} with ${keyid}`;
}
