import type { Position } from "./cursor.js";
import type { ListingStatus } from "./listing.js";

/** One page of the list endpoint, as the store answers it (both engines). */
export interface ListQuery {
  after: Position | undefined;
  limit: number;
  search: string | undefined;
  tag: string | undefined;
  updatedSince: number | undefined;
  /** Statuses to include. */
  statuses: readonly ListingStatus[];
}

/** What the list endpoint needs of a row: its bytes and its position. */
export interface ListedRow {
  body: string;
  updated_at: number;
  service_did: string;
}

/** `term` as a `LIKE` pattern's literal text: `%`, `_` and the escape character escaped (`ESCAPE '\\'`). */
export function escapeLike(term: string): string {
  return term.replace(/[\\%_]/g, (c) => `\\${c}`);
}
