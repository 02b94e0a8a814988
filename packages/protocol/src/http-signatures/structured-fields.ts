/**
 * RFC 8941 dictionaries as signature headers carry them, parsed in one pass over the characters.
 * `structured-headers` stays the reference: this parser takes the common shapes (integers, strings,
 * tokens, byte sequences, booleans) and hands anything else, and every error, to it, so a result
 * is always the one that library gives, except that a byte sequence may come as a `Uint8Array`
 * rather than an `ArrayBuffer` (read it with `byteSequence`). It also keeps the text of each inner
 * list when that text is already its serialisation, which the signature base needs (RFC 9421
 * §2.3) and which would otherwise be rebuilt item by item.
 */
import { parseDictionary as referenceParse, serializeInnerList, Token } from "structured-headers";
import type { BareItem, Dictionary, InnerList, Item } from "./sf-types.js";

export interface ParsedDictionary {
  readonly members: Dictionary;
  /** The serialisation of the inner-list member `key` (RFC 8941 §4.1.1.1). */
  innerListText(key: string, member: InnerList): string;
}

/** Thrown inside the fast parser when the input needs the reference parser. */
const HAND_OVER = Symbol("hand over");

const SP = 0x20;
const HTAB = 0x09;

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

function isLcAlpha(c: number): boolean {
  return c >= 0x61 && c <= 0x7a;
}

function isAlpha(c: number): boolean {
  return (c >= 0x41 && c <= 0x5a) || isLcAlpha(c);
}

// RFC 8941 key characters after the first: lcalpha, DIGIT, "_", "-", ".", "*".
function isKeyChar(c: number): boolean {
  return isLcAlpha(c) || isDigit(c) || c === 0x5f || c === 0x2d || c === 0x2e || c === 0x2a;
}

// tchar (RFC 9110 §5.6.2), plus ":" and "/", as tokens allow.
const TOKEN_CHARS = new Uint8Array(128);
for (const c of "!#$%&'*+-.^_`|~:/") TOKEN_CHARS[c.charCodeAt(0)] = 1;
for (let c = 0x30; c <= 0x39; c++) TOKEN_CHARS[c] = 1;
for (let c = 0x41; c <= 0x5a; c++) TOKEN_CHARS[c] = 1;
for (let c = 0x61; c <= 0x7a; c++) TOKEN_CHARS[c] = 1;

// The base64 alphabet (RFC 4648 §4), without padding.
const BASE64_CHARS = new Uint8Array(128);
for (const c of "+/") BASE64_CHARS[c.charCodeAt(0)] = 1;
for (let c = 0x30; c <= 0x39; c++) BASE64_CHARS[c] = 1;
for (let c = 0x41; c <= 0x5a; c++) BASE64_CHARS[c] = 1;
for (let c = 0x61; c <= 0x7a; c++) BASE64_CHARS[c] = 1;

/** Padded base64 (length a multiple of 4, at most two `=` at the end), which decodes alike everywhere. */
function isPaddedBase64(input: string, start: number, end: number): boolean {
  if ((end - start) % 4 !== 0) return false;
  let last = end;
  if (last > start && input.charCodeAt(last - 1) === 0x3d) last--;
  if (last > start && input.charCodeAt(last - 1) === 0x3d) last--;
  for (let i = start; i < last; i++) {
    const c = input.charCodeAt(i);
    if (c >= 128 || BASE64_CHARS[c] !== 1) return false;
  }
  return true;
}

class FastParser {
  pos = 0;
  /** Whether everything read since the last reset is written exactly as the serialiser would. */
  canonical = true;

  constructor(readonly input: string) {}

  code(): number {
    return this.input.charCodeAt(this.pos);
  }

  dictionary(): { members: Dictionary; texts: Map<string, string> } {
    const members: Dictionary = new Map();
    const texts = new Map<string, string>();
    const input = this.input;
    while (this.code() === SP) this.pos++;
    while (this.pos < input.length) {
      const key = this.key();
      if (this.code() === 0x3d /* = */) {
        this.pos++;
        if (this.code() === 0x28 /* ( */) {
          const start = this.pos;
          this.canonical = true;
          members.set(key, this.innerList());
          // A repeated key keeps its first place and its last value, as the reference does.
          if (this.canonical) texts.set(key, input.slice(start, this.pos));
          else texts.delete(key);
        } else {
          members.set(key, this.item());
          texts.delete(key);
        }
      } else {
        members.set(key, [true, this.parameters()]);
        texts.delete(key);
      }
      this.skipOws();
      if (this.pos >= input.length) break;
      if (this.code() !== 0x2c /* , */) throw HAND_OVER;
      this.pos++;
      this.skipOws();
      if (this.pos >= input.length) throw HAND_OVER;
    }
    return { members, texts };
  }

  skipOws(): void {
    for (let c = this.code(); c === SP || c === HTAB; c = this.code()) this.pos++;
  }

  key(): string {
    const input = this.input;
    const start = this.pos;
    const first = input.charCodeAt(start);
    if (!isLcAlpha(first) && first !== 0x2a) throw HAND_OVER;
    let i = start + 1;
    while (i < input.length && isKeyChar(input.charCodeAt(i))) i++;
    this.pos = i;
    return input.slice(start, i);
  }

  innerList(): InnerList {
    this.pos++;
    const items: Item[] = [];
    const input = this.input;
    while (this.pos < input.length) {
      let spaces = 0;
      while (this.code() === SP) {
        this.pos++;
        spaces++;
      }
      if (this.code() === 0x29 /* ) */) {
        if (spaces !== 0) this.canonical = false;
        this.pos++;
        return [items, this.parameters()];
      }
      if (spaces !== (items.length === 0 ? 0 : 1)) this.canonical = false;
      items.push(this.item());
      const next = this.code();
      if (next !== SP && next !== 0x29) throw HAND_OVER;
    }
    throw HAND_OVER;
  }

  item(): Item {
    const value = this.bareItem();
    return [value, this.parameters()];
  }

  parameters(): Map<string, BareItem> {
    const parameters = new Map<string, BareItem>();
    while (this.code() === 0x3b /* ; */) {
      this.pos++;
      if (this.code() === SP) {
        this.canonical = false;
        while (this.code() === SP) this.pos++;
      }
      const key = this.key();
      let value: BareItem = true;
      if (this.code() === 0x3d /* = */) {
        this.pos++;
        value = this.bareItem();
        // The serialiser writes a true parameter as its bare key.
        if (value === true) this.canonical = false;
      }
      const size = parameters.size;
      parameters.set(key, value);
      // A repeated key keeps one entry, which the serialiser writes once.
      if (parameters.size === size) this.canonical = false;
    }
    return parameters;
  }

  bareItem(): BareItem {
    const c = this.code();
    if (c === 0x2d || isDigit(c)) return this.integer();
    if (c === 0x22 /* " */) return this.string();
    if (isAlpha(c) || c === 0x2a) return this.token();
    if (c === 0x3a /* : */) return this.byteSequence();
    if (c === 0x3f /* ? */) return this.boolean();
    // Dates, display strings, and anything malformed: the reference parser's.
    throw HAND_OVER;
  }

  integer(): number {
    const input = this.input;
    let sign = 1;
    if (input.charCodeAt(this.pos) === 0x2d) {
      sign = -1;
      this.pos++;
    }
    const start = this.pos;
    let i = start;
    // At most 15 digits: the value is exact in a double.
    let value = 0;
    for (let c = input.charCodeAt(i); isDigit(c); c = input.charCodeAt(++i)) value = value * 10 + (c - 0x30);
    this.pos = i;
    const digits = i - start;
    // Decimals, and integers too long to hold, are the reference parser's.
    if (digits === 0 || digits > 15 || input.charCodeAt(i) === 0x2e) throw HAND_OVER;
    // Leading zeros and "-0" are written otherwise by the serialiser.
    if (input.charCodeAt(start) === 0x30 && (digits > 1 || sign === -1)) this.canonical = false;
    return sign * value;
  }

  string(): string {
    const input = this.input;
    const start = this.pos + 1;
    let escaped = false;
    for (let i = start; i < input.length; i++) {
      const c = input.charCodeAt(i);
      if (c === 0x22 /* " */) {
        this.pos = i + 1;
        const raw = input.slice(start, i);
        return escaped ? raw.replace(/\\(.)/g, "$1") : raw;
      }
      if (c === 0x5c /* \ */) {
        const next = input.charCodeAt(i + 1);
        if (next !== 0x5c && next !== 0x22) throw HAND_OVER;
        escaped = true;
        i++;
      } else if (c < 0x20 || c > 0x7e) {
        throw HAND_OVER;
      }
    }
    throw HAND_OVER;
  }

  token(): Token {
    const input = this.input;
    const start = this.pos;
    let i = start + 1;
    for (; i < input.length; i++) {
      const c = input.charCodeAt(i);
      if (c >= 128 || TOKEN_CHARS[c] !== 1) break;
    }
    this.pos = i;
    return new Token(input.slice(start, i));
  }

  byteSequence(): Uint8Array {
    const start = this.pos + 1;
    const end = this.input.indexOf(":", start);
    if (end === -1) throw HAND_OVER;
    // Other spellings of base64 are the reference parser's.
    if (!isPaddedBase64(this.input, start, end)) throw HAND_OVER;
    // Whether its text is the serialiser's depends on bits past the last byte: not worth checking.
    this.canonical = false;
    this.pos = end + 1;
    return Buffer.from(this.input.slice(start, end), "base64");
  }

  boolean(): boolean {
    const c = this.input.charCodeAt(this.pos + 1);
    if (c !== 0x30 && c !== 0x31) throw HAND_OVER;
    this.pos += 2;
    return c === 0x31;
  }
}

/** The bytes of a byte-sequence value, or undefined when the value is something else. */
export function byteSequence(value: BareItem | undefined): Uint8Array | undefined {
  if (value instanceof Uint8Array) return value;
  return value instanceof ArrayBuffer ? new Uint8Array(value) : undefined;
}

function serialised(texts: Map<string, string> | undefined) {
  return (key: string, member: InnerList) => texts?.get(key) ?? serializeInnerList(member);
}

/** The fast parser's reading, or undefined when the input is the reference parser's to read. */
export function parseDictionaryFast(input: string): { members: Dictionary; texts: Map<string, string> } | undefined {
  try {
    return new FastParser(input).dictionary();
  } catch (error) {
    if (error === HAND_OVER) return undefined;
    throw error;
  }
}

/** Parses a dictionary field value; throws the reference parser's error when it is malformed. */
export function parseDictionary(input: string): ParsedDictionary {
  const fast = parseDictionaryFast(input);
  if (fast !== undefined) return { members: fast.members, innerListText: serialised(fast.texts) };
  return { members: referenceParse(input), innerListText: serialised(undefined) };
}
