import type { ListingRow } from "./migrations.js";

export type ListingStatus = "active" | "stale" | "deleted";
export const LISTING_STATUSES: readonly ListingStatus[] = ["active", "stale", "deleted"];

/** The public shape of a listing: nothing internal ever reaches a reader (decisions §7, §11). */
export interface Listing {
  service_did: string;
  discovery_url: string;
  discovery_doc: Record<string, unknown>;
  fetched_at: string;
  first_listed_at: string;
  updated_at: string;
  status: ListingStatus;
  tags: string[];
  title: string | null;
  description: string | null;
  _meta: Record<string, never>;
}

export const rfc3339 = (ms: number): string => new Date(ms).toISOString();

type PublicFields = Pick<
  ListingRow,
  | "service_did"
  | "discovery_url"
  | "discovery_doc"
  | "fetched_at"
  | "first_listed_at"
  | "updated_at"
  | "status"
  | "tags"
  | "title"
  | "description"
>;

export function toListing(row: PublicFields): Listing {
  return {
    service_did: row.service_did,
    discovery_url: row.discovery_url,
    discovery_doc: JSON.parse(row.discovery_doc) as Record<string, unknown>,
    fetched_at: rfc3339(row.fetched_at),
    first_listed_at: rfc3339(row.first_listed_at),
    updated_at: rfc3339(row.updated_at),
    status: row.status as ListingStatus,
    tags: JSON.parse(row.tags) as string[],
    title: row.title,
    description: row.description,
    _meta: {},
  };
}

/**
 * The listing serialised once, when it is written, and stored beside it: reads send these bytes
 * as they are, so a read costs one indexed lookup and no JSON work.
 */
export function listingBody(row: PublicFields): string {
  return JSON.stringify(toListing(row));
}
