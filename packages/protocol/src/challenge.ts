/**
 * The `Proto` authentication challenge (upstream §5.7) and the `WWW-Authenticate` field it lives
 * in (RFC 9110 §11.6.1), which may hold other schemes' challenges too: a service appends ours and
 * keeps theirs; an agent finds ours among them and ignores parameters it does not know.
 */

import { ATTESTATION_HEADER } from "./attestation.js";

export const CHALLENGE_SCHEME = "Proto";

/** True when a request tried the protocol: it carries a signature or an attestation. */
export function attemptedProtocol(headers: Headers): boolean {
  return headers.has("signature") || headers.has("signature-input") || headers.has(ATTESTATION_HEADER);
}

export interface ProtoChallenge {
  /** The absolute URL of the service's discovery document. */
  discovery: string;
  /** The error code, only when the request attempted the protocol. */
  error?: string | undefined;
  /** Accepted attestors, for `attestation_required` and `invalid_attestation`. */
  attestors?: readonly string[] | undefined;
  /** Where the owner signs in, for `owner_authentication_required`. */
  ownerLogin?: string | undefined;
  /** The service DID. */
  realm?: string | undefined;
  /** For `insufficient_permission`: the permissions the request lacks (docs/authority.md). */
  permissions?: readonly string[] | undefined;
  /** For `insufficient_permission`: the `{trust_url}` of the attestor that can widen the grant. */
  attestor?: string | undefined;
}

/** One challenge of a `WWW-Authenticate` field: its scheme and its parameters (names lower-cased). */
export interface Challenge {
  scheme: string;
  token68?: string;
  params: Record<string, string>;
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

function paramValue(value: string): string {
  if (value.length > 0 && TOKEN.test(value)) return value;
  return `"${value.replace(/["\\]/g, (c) => `\\${c}`)}"`;
}

/** The challenge as a field value: `Proto discovery="https://…/.well-known/proto", error=…`. */
export function formatProtoChallenge(challenge: ProtoChallenge): string {
  const params: [string, string][] = [["discovery", challenge.discovery]];
  if (challenge.realm !== undefined) params.push(["realm", challenge.realm]);
  if (challenge.error !== undefined) params.push(["error", challenge.error]);
  // Present even when empty: "no attestor is accepted here" is an answer too.
  if (challenge.attestors !== undefined) params.push(["attestors", challenge.attestors.join(" ")]);
  if (challenge.ownerLogin !== undefined) params.push(["owner_login", challenge.ownerLogin]);
  if (challenge.permissions !== undefined) params.push(["permissions", challenge.permissions.join(" ")]);
  if (challenge.attestor !== undefined) params.push(["attestor", challenge.attestor]);
  return `${CHALLENGE_SCHEME} ${params.map(([name, value]) => `${name}=${paramValue(value)}`).join(", ")}`;
}

/**
 * Every challenge of one or more `WWW-Authenticate` field values. Lenient where senders differ
 * (spaces around `=`, quoted or bare values); a part it cannot read ends that challenge's
 * parameters rather than the whole parse.
 */
export function parseWwwAuthenticate(values: string | readonly string[] | null | undefined): Challenge[] {
  if (values === null || values === undefined) return [];
  const list = typeof values === "string" ? [values] : values;
  const challenges: Challenge[] = [];
  for (const value of list) challenges.push(...parseField(value));
  return challenges;
}

/** The `Proto` challenge among a response's challenges, if there is one. */
export function findProtoChallenge(values: string | readonly string[] | null | undefined): ProtoChallenge | undefined {
  const found = parseWwwAuthenticate(values).find(
    (challenge) => challenge.scheme.toLowerCase() === CHALLENGE_SCHEME.toLowerCase(),
  );
  if (found === undefined) return undefined;
  const { discovery, error, attestors, owner_login: ownerLogin, realm, permissions, attestor } = found.params;
  if (discovery === undefined) return undefined;
  return {
    discovery,
    ...(error === undefined ? {} : { error }),
    ...(attestors === undefined ? {} : { attestors: attestors.split(/\s+/).filter((a) => a.length > 0) }),
    ...(ownerLogin === undefined ? {} : { ownerLogin }),
    ...(realm === undefined ? {} : { realm }),
    ...(permissions === undefined ? {} : { permissions: permissions.split(/\s+/).filter((p) => p.length > 0) }),
    ...(attestor === undefined ? {} : { attestor }),
  };
}

/** Adds a challenge to a response's field values, keeping every other scheme's challenge in order. */
export function appendChallenge(existing: string | readonly string[] | undefined, challenge: string): string[] {
  if (existing === undefined) return [challenge];
  const list = typeof existing === "string" ? [existing] : [...existing];
  return [...list.filter((value) => value.trim().length > 0), challenge];
}

class Cursor {
  index = 0;
  constructor(readonly text: string) {}
  get done(): boolean {
    return this.index >= this.text.length;
  }
  peek(): string {
    return this.text[this.index] ?? "";
  }
  skipSpaces(): void {
    while (this.peek() === " " || this.peek() === "\t") this.index++;
  }
  token(): string {
    const start = this.index;
    while (!this.done && /[!#$%&'*+.^_`|~0-9A-Za-z-]/.test(this.peek())) this.index++;
    return this.text.slice(start, this.index);
  }
  quoted(): string | undefined {
    if (this.peek() !== '"') return undefined;
    this.index++;
    let out = "";
    while (!this.done) {
      const c = this.peek();
      this.index++;
      if (c === '"') return out;
      if (c === "\\" && !this.done) {
        out += this.peek();
        this.index++;
      } else {
        out += c;
      }
    }
    return undefined;
  }
  /** Skips to just past the next comma outside quotes (or the end). */
  skipItem(): void {
    while (!this.done && this.peek() !== ",") {
      if (this.peek() === '"') this.quoted();
      else this.index++;
    }
  }
}

function parseField(text: string): Challenge[] {
  const challenges: Challenge[] = [];
  const cursor = new Cursor(text);
  let current: Challenge | undefined;
  while (!cursor.done) {
    cursor.skipSpaces();
    if (cursor.peek() === ",") {
      cursor.index++;
      continue;
    }
    const start = cursor.index;
    const first = cursor.token();
    if (first.length === 0) {
      cursor.skipItem();
      current = undefined;
      continue;
    }
    const afterToken = cursor.index;
    cursor.skipSpaces();
    if (cursor.peek() === "=" && current !== undefined && !looksLikeToken68End(cursor)) {
      // `name=value` continuing the current challenge.
      cursor.index++;
      cursor.skipSpaces();
      const value = cursor.peek() === '"' ? cursor.quoted() : cursor.token();
      if (value !== undefined) current.params[first.toLowerCase()] = value;
      cursor.skipSpaces();
      if (cursor.peek() !== "," && !cursor.done) cursor.skipItem();
      continue;
    }
    // A new challenge: `scheme`, `scheme token68` or `scheme name=value`.
    cursor.index = afterToken;
    current = { scheme: first, params: {} };
    challenges.push(current);
    cursor.skipSpaces();
    if (cursor.done || cursor.peek() === ",") continue;
    const paramStart = cursor.index;
    const name = cursor.token();
    cursor.skipSpaces();
    if (name.length > 0 && cursor.peek() === "=" && !looksLikeToken68End(cursor)) {
      cursor.index++;
      cursor.skipSpaces();
      const value = cursor.peek() === '"' ? cursor.quoted() : cursor.token();
      if (value !== undefined) current.params[name.toLowerCase()] = value;
      cursor.skipSpaces();
      if (cursor.peek() !== "," && !cursor.done) cursor.skipItem();
      continue;
    }
    // token68: token characters plus `-._~+/` and trailing `=`.
    cursor.index = paramStart;
    const match = /^[A-Za-z0-9\-._~+/]+=*/.exec(text.slice(paramStart));
    if (match !== null) {
      current.token68 = match[0];
      cursor.index = paramStart + match[0].length;
    }
    cursor.skipItem();
    if (start === cursor.index) cursor.index++;
  }
  return challenges;
}

/** At `=`: true when it is the padding that ends a token68 (`=` then `,`, another `=`, or the end). */
function looksLikeToken68End(cursor: Cursor): boolean {
  let i = cursor.index;
  while (cursor.text[i] === "=") i++;
  const padding = i - cursor.index;
  while (cursor.text[i] === " " || cursor.text[i] === "\t") i++;
  return i >= cursor.text.length || cursor.text[i] === "," || padding > 1;
}
