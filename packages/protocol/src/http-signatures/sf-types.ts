/**
 * Structured field values (RFC 9651 §3) in the shapes structured-headers gives and takes, declared
 * here instead of imported from it. Its declaration files name the DOM's `BufferSource`: a
 * declaration of ours that imported them would fail to type-check (TS2304) in every Node project
 * without the "DOM" lib that keeps skipLibCheck off. The values stay structured-headers' own.
 */

/** A Token or a Display String, which structured-headers represents as objects: the text is `toString()`. */
export interface StringObject {
  toString(): string;
}

/**
 * An Integer or Decimal, String, Token, Byte Sequence (an `ArrayBuffer` when parsed; any bytes when
 * serialised), Boolean, Date or Display String.
 */
export type BareItem = number | string | boolean | Date | ArrayBuffer | ArrayBufferView | StringObject;
export type Parameters = Map<string, BareItem>;
export type Item = [BareItem, Parameters];
export type InnerList = [Item[], Parameters];
export type Dictionary = Map<string, Item | InnerList>;
