/**
 * RFC 9421 §2: the value of each covered component of a request, and the signature base built
 * from them (§2.5). Derived components come from the target URI as received (target-uri.ts);
 * fields are normalised as §2.1 says.
 */
import { isInnerList, parseDictionary, serializeInnerList, serializeItem } from "structured-headers";
import type { BareItem, InnerList, Item } from "./sf-types.js";
import { splitTargetUri, type TargetUriParts } from "./target-uri.js";

/** A request as signatures see it. */
export interface MessageComponents {
  method: string;
  /** The canonical target URI (see `canonicalTargetUri`), path and query exactly as received. */
  targetUri: string;
  /** A field's values, combined and normalised as §2.1 says; undefined when absent. */
  header(name: string): string | undefined;
  /** For a response: the request it answers, which components flagged `req` come from (§2.4). */
  request?: MessageComponents;
}

/** A covered component: its name and parameters, as `Signature-Input` lists it. */
export type ComponentIdentifier = Item;

export class ComponentError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ComponentError";
  }
}

const DERIVED = new Set(["@method", "@target-uri", "@authority", "@scheme", "@request-target", "@path", "@query"]);
const FIELD_NAME = /^[a-z0-9!#$%&'*+.^_`|~-]+$/;
const LINE_BREAK = /[\r\n]/;

/** §2.1 for a field sent on one line: trimmed, obsolete line folding replaced by one space. */
export function normaliseFieldValue(value: string): string {
  return (value.includes("\n") ? value.replace(/\r?\n[ \t]+/g, " ") : value).trim();
}

/** §2.1: each value trimmed, obsolete line folding replaced by one space, lines joined with `, `. */
export function normaliseFieldValues(values: readonly string[]): string {
  return values.length === 1 ? normaliseFieldValue(values[0] as string) : values.map(normaliseFieldValue).join(", ");
}

// A component name with nothing to escape: printable ASCII without `"` or `\`.
const PLAIN_NAME = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

/** A covered component as `Signature-Input` and the signature base write it. */
function serialiseComponent(identifier: ComponentIdentifier): string {
  const [name, params] = identifier;
  // The common case, a plain name without parameters, is the name in quotes.
  if (typeof name === "string" && params.size === 0 && PLAIN_NAME.test(name)) return `"${name}"`;
  return serializeItem(identifier);
}

/** The target URI's parts, split at most once per signature base, and only when a component needs them. */
interface TargetParts {
  uri: string;
  parts: TargetUriParts | undefined;
}

function split(target: TargetParts): TargetUriParts {
  target.parts ??= splitTargetUri(target.uri);
  return target.parts;
}

function derivedValue(name: string, message: MessageComponents, target: TargetParts): string {
  switch (name) {
    case "@method":
      return message.method;
    case "@target-uri":
      return message.targetUri;
    case "@authority":
      return split(target).authority;
    case "@scheme":
      return split(target).scheme;
    case "@request-target": {
      const { path, query, hasQuery } = split(target);
      return hasQuery ? `${path}${query}` : path;
    }
    case "@path":
      return split(target).path;
    default:
      return split(target).query;
  }
}

function dictionaryMember(name: string, value: string, key: BareItem): string {
  if (typeof key !== "string") throw new ComponentError(`the key parameter of ${name} must be a string`);
  let member: Item | InnerList | undefined;
  try {
    member = parseDictionary(value).get(key);
  } catch {
    throw new ComponentError(`${name} is not a structured dictionary`);
  }
  if (member === undefined) throw new ComponentError(`${name} has no member ${key}`);
  return isInnerList(member) ? serializeInnerList(member) : serializeItem(member);
}

/** The value of one covered component; throws `ComponentError` when the request cannot supply it. */
export function componentValue(
  message: MessageComponents,
  identifier: ComponentIdentifier,
  target: TargetParts = { uri: message.targetUri, parts: undefined },
): string {
  const [name, rawParams] = identifier;
  if (typeof name !== "string") throw new ComponentError("a component name must be a string");
  if (rawParams.get("req") === true) {
    if (message.request === undefined) throw new ComponentError(`${name};req needs the request a response answers`);
    const params = new Map(rawParams);
    params.delete("req");
    return componentValue(message.request, [name, params]);
  }
  const params = rawParams;
  if (name.startsWith("@")) {
    if (!DERIVED.has(name)) throw new ComponentError(`derived component ${name} is not supported`);
    if (params.size > 0) throw new ComponentError(`derived component ${name} takes no parameters`);
    return derivedValue(name, message, target);
  }
  if (!FIELD_NAME.test(name)) throw new ComponentError(`component ${name} is not a lower-case field name`);
  for (const param of params.keys()) {
    if (param !== "key") throw new ComponentError(`component parameter ${param} is not supported`);
  }
  const value = message.header(name);
  if (value === undefined) throw new ComponentError(`covered field ${name} is absent`);
  const key = params.get("key");
  return key === undefined ? value : dictionaryMember(name, value, key);
}

/**
 * The §2.5 signature base: one line per covered component, then `@signature-params` carrying the
 * inner list exactly as serialised in `Signature-Input`.
 */
export function buildSignatureBase(
  message: MessageComponents,
  components: readonly ComponentIdentifier[],
  serialisedParams: string,
): string {
  const target: TargetParts = { uri: message.targetUri, parts: undefined };
  const seen = new Set<string>();
  let base = "";
  for (const identifier of components) {
    const serialised = serialiseComponent(identifier);
    if (seen.has(serialised)) throw new ComponentError(`component ${serialised} is covered twice`);
    seen.add(serialised);
    const value = componentValue(message, identifier, target);
    // A line break would forge further lines of the base.
    if (LINE_BREAK.test(value)) throw new ComponentError(`component ${serialised} holds a line break`);
    base += `${serialised}: ${value}\n`;
  }
  return `${base}"@signature-params": ${serialisedParams}`;
}
