import { randomBytes } from "node:crypto";

/**
 * A set of 64-bit fingerprints with an expiry each, in flat typed arrays (open addressing,
 * linear probing): 12 bytes a slot instead of a string key and a Map entry (~150 bytes), and no
 * garbage per insert. Nothing is deleted: the owner drops a whole set once everything in it has
 * expired, and may hand its arrays to the next set (`reset`).
 */
export class FingerprintSet {
  // Three words a slot, side by side so a probe reads one cache line: the fingerprint's high and
  // low halves, and its expiry in milliseconds after `base` (a set spans a short stretch of expiry
  // time, so 32 bits suffice).
  #slots: Uint32Array;
  #mask: number;
  #count = 0;
  base = 0;

  constructor(capacity = 1024) {
    const size = 2 ** Math.ceil(Math.log2(Math.max(16, capacity)));
    this.#slots = new Uint32Array(size * 3);
    this.#mask = size - 1;
  }

  get count(): number {
    return this.#count;
  }

  /** Empties the set, keeping its arrays, for a new stretch of expiry time starting at `base`. */
  reset(base: number): void {
    if (this.#count > 0) this.#slots.fill(0);
    this.#count = 0;
    this.base = base;
  }

  /** The expiry stored with a fingerprint (absolute milliseconds), or -1 when absent. */
  expiryOf(high: number, low: number): number {
    const slots = this.#slots;
    const mask = this.#mask;
    let slot = low & mask;
    for (;;) {
      const at = slot * 3;
      const h = slots[at] as number;
      const l = slots[at + 1] as number;
      if (h === high && l === low) return this.base + (slots[at + 2] as number);
      if (h === 0 && l === 0) return -1;
      slot = (slot + 1) & mask;
    }
  }

  /** Records a fingerprint (never both halves zero) or moves its expiry; true when it is new. */
  put(high: number, low: number, expiry: number): boolean {
    if ((this.#count + 1) * 2 > this.#mask + 1) this.#grow();
    const slots = this.#slots;
    const mask = this.#mask;
    let slot = low & mask;
    for (;;) {
      const at = slot * 3;
      const h = slots[at] as number;
      const l = slots[at + 1] as number;
      const empty = h === 0 && l === 0;
      if (empty || (h === high && l === low)) {
        slots[at] = high;
        slots[at + 1] = low;
        slots[at + 2] = expiry - this.base;
        if (empty) this.#count += 1;
        return empty;
      }
      slot = (slot + 1) & mask;
    }
  }

  #grow(): void {
    const old = this.#slots;
    const size = (this.#mask + 1) * 2;
    this.#slots = new Uint32Array(size * 3);
    this.#mask = size - 1;
    this.#count = 0;
    for (let at = 0; at < old.length; at += 3) {
      const high = old[at] as number;
      const low = old[at + 1] as number;
      if (high !== 0 || low !== 0) this.put(high, low, this.base + (old[at + 2] as number));
    }
  }
}

/**
 * A keyed 64-bit hash of two strings (and the boundary between them), written to `out`. Two
 * multiplicative lanes seeded per process. Not a cryptographic hash, and it need not be: a
 * collision makes a store answer "seen" for a pair it never saw (a refusal, never an acceptance),
 * and a caller who could engineer one only refuses its own requests, since another key's nonces
 * are unknown to it. With a million live pairs the odds of a chance collision are about 1 in 10^13.
 */
export class PairHasher {
  readonly #seedHigh: number;
  readonly #seedLow: number;
  // The lanes after the last `first` and the boundary: one client's requests share their keyid,
  // and its 56 characters would otherwise be hashed again for every nonce.
  #first: string | undefined;
  #firstA = 0;
  #firstB = 0;
  high = 0;
  low = 0;

  constructor(seed: Uint8Array = randomBytes(8)) {
    const view = new DataView(seed.buffer, seed.byteOffset, seed.byteLength);
    this.#seedHigh = view.getUint32(0);
    this.#seedLow = view.getUint32(4);
  }

  hash(first: string, second: string): void {
    let a: number;
    let b: number;
    if (first === this.#first) {
      a = this.#firstA;
      b = this.#firstB;
    } else {
      a = this.#seedHigh ^ 0x811c9dc5;
      b = this.#seedLow ^ 0x9747b28c;
      for (let i = 0; i < first.length; i++) {
        const c = first.charCodeAt(i);
        a = Math.imul(a ^ c, 0x01000193);
        b = Math.imul(b ^ c, 0x5bd1e995);
        b ^= b >>> 13;
      }
      // The boundary: ("ab", "c") and ("a", "bc") hash apart.
      a = Math.imul(a ^ 0x10000, 0x01000193);
      b = Math.imul(b ^ 0x10000, 0x5bd1e995);
      this.#first = first;
      this.#firstA = a;
      this.#firstB = b;
    }
    for (let i = 0; i < second.length; i++) {
      const c = second.charCodeAt(i);
      a = Math.imul(a ^ c, 0x01000193);
      b = Math.imul(b ^ c, 0x5bd1e995);
      b ^= b >>> 13;
    }
    a = finalMix(a ^ Math.imul(first.length + 1, 0x9e3779b1) ^ second.length);
    b = finalMix(b ^ a);
    this.high = a >>> 0;
    // Zero in both halves marks an empty slot.
    this.low = b >>> 0 || 1;
  }
}

function finalMix(h: number): number {
  let x = h;
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2ae35);
  x ^= x >>> 16;
  return x;
}
