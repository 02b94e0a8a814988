import { entityTag } from "../platform/conditional.js";

/** A serialised listing as single-listing reads send it: the bytes, their entity tag and length. */
export interface StoredBody {
  readonly text: string;
  /** Strong entity tag of the UTF-8 bytes (see platform/conditional.ts). */
  readonly etag: string;
  /** Length of the UTF-8 bytes. */
  readonly bytes: number;
}

export function storedBody(text: string): StoredBody {
  return { text, etag: entityTag(text), bytes: Buffer.byteLength(text) };
}

/**
 * What says whether cached listings can still be trusted: a number while they can (entries kept
 * under another number are dropped: the store changed in a way nobody named), undefined while
 * nothing may be cached at all (the change feed is away).
 */
export type CacheVersion = () => number | undefined;

/**
 * Serialised listings kept in memory for single-listing reads, so that a hit costs one map lookup
 * (body, entity tag and length computed once). An entry leaves when:
 * - this process writes the listing (`forget`, called after the write committed);
 * - another writer's change is reported (`forget` by DID, from PostgreSQL's notifications);
 * - `version()` changes (SQLite's data_version moved: any commit, of any process; a PostgreSQL
 *   listener connected again after missing what happened meanwhile) or is undefined (the feed
 *   is away: the cache is emptied, and reads go to the store until it is back).
 *
 * A read that waits on the store (PostgreSQL) is cached only if nothing was forgotten or dropped
 * while it ran: it may have read the row before a write that has been reported since.
 */
export class ListingBodyCache {
  readonly #maxBytes: number;
  readonly #version: CacheVersion;
  readonly #entries = new Map<string, StoredBody>();
  #bytes = 0;
  #cachedUnder: number | undefined;
  /** Moves whenever an entry may have gone stale; a read that began under an older one is not kept. */
  #epoch = 0;

  /** `maxBytes` bounds the memory held, strings counted as UTF-16 (oldest entries leave first). */
  constructor(maxBytes: number, version: CacheVersion) {
    this.#maxBytes = maxBytes;
    this.#version = version;
  }

  /** The cached listing, else `read`'s answer (cached when it is a listing). */
  get(
    serviceDid: string,
    read: (serviceDid: string) => string | undefined | Promise<string | undefined>,
  ): StoredBody | undefined | Promise<StoredBody | undefined> {
    const version = this.#version();
    if (version !== this.#cachedUnder) {
      this.clear();
      this.#cachedUnder = version;
    } else if (version !== undefined) {
      const cached = this.#entries.get(serviceDid);
      if (cached !== undefined) return cached;
    }
    const epoch = this.#epoch;
    const text = read(serviceDid);
    if (text instanceof Promise) return text.then((value) => this.#keep(serviceDid, value, version, epoch));
    return this.#keep(serviceDid, text, version, epoch);
  }

  /** Drops one listing: it was written (by this process, or by another that said so). */
  forget(serviceDid: string): void {
    this.#epoch++;
    const old = this.#entries.get(serviceDid);
    if (old === undefined) return;
    this.#entries.delete(serviceDid);
    this.#bytes -= entrySize(serviceDid, old);
  }

  /** Drops every listing. */
  clear(): void {
    this.#epoch++;
    this.#entries.clear();
    this.#bytes = 0;
  }

  #keep(
    serviceDid: string,
    text: string | undefined,
    version: number | undefined,
    epoch: number,
  ): StoredBody | undefined {
    if (text === undefined) return undefined;
    const body = storedBody(text);
    if (version === undefined || epoch !== this.#epoch || this.#version() !== version) return body;
    const size = entrySize(serviceDid, body);
    if (size > this.#maxBytes) return body;
    // Two reads of one listing may have run side by side: the later one replaces the earlier.
    const previous = this.#entries.get(serviceDid);
    if (previous !== undefined) {
      this.#entries.delete(serviceDid);
      this.#bytes -= entrySize(serviceDid, previous);
    }
    this.#bytes += size;
    this.#entries.set(serviceDid, body);
    for (const [did, old] of this.#entries) {
      if (this.#bytes <= this.#maxBytes) break;
      this.#entries.delete(did);
      this.#bytes -= entrySize(did, old);
    }
    return body;
  }
}

/** Objects around each entry (map slot, StoredBody, the 200 answer and its headers), roughly. */
const ENTRY_OVERHEAD_BYTES = 512;

function entrySize(serviceDid: string, body: StoredBody): number {
  return (serviceDid.length + body.text.length + body.etag.length) * 2 + ENTRY_OVERHEAD_BYTES;
}
