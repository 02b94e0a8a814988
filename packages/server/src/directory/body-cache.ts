/**
 * Serialised listings kept in memory for single-listing reads, valid only while the store has
 * seen no commit: every lookup first asks the store's change counter (SQLite's `data_version`,
 * which moves on a commit by any connection or process), and the whole cache is dropped when it
 * moved. Writes are rare beside reads, so a coarse drop costs little and cannot serve a stale
 * listing, whichever process wrote. Stores without such a counter (PostgreSQL, shared by
 * replicas) are read through, uncached.
 */
export class ListingBodyCache {
  readonly #maxBytes: number;
  readonly #changes: () => number;
  readonly #bodies = new Map<string, string>();
  #bytes = 0;
  #version: number | undefined;

  /** `maxBytes` bounds the UTF-16 size of the bodies held (oldest entries leave first). */
  constructor(maxBytes: number, changes: () => number) {
    this.#maxBytes = maxBytes;
    this.#changes = changes;
  }

  /**
   * The cached body, else `read`'s answer (cached when it is a body). The counter is read before
   * `read` runs: a commit between the two leaves a newer body under an older version, which the
   * next lookup drops, never an older body under a newer one.
   */
  get(serviceDid: string, read: () => string | undefined): string | undefined {
    const version = this.#changes();
    if (version !== this.#version) {
      this.#bodies.clear();
      this.#bytes = 0;
      this.#version = version;
    } else {
      const cached = this.#bodies.get(serviceDid);
      if (cached !== undefined) return cached;
    }
    const body = read();
    if (body !== undefined) this.#remember(serviceDid, body);
    return body;
  }

  #remember(serviceDid: string, body: string): void {
    const size = (serviceDid.length + body.length) * 2;
    if (size > this.#maxBytes) return;
    this.#bytes += size;
    this.#bodies.set(serviceDid, body);
    for (const [did, old] of this.#bodies) {
      if (this.#bytes <= this.#maxBytes) break;
      this.#bodies.delete(did);
      this.#bytes -= (did.length + old.length) * 2;
    }
  }
}
