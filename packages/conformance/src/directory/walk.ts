/**
 * The listing walk: `GET /v1/listings` page after page to the end (or to the page bound), shared by
 * the pagination, filter and single-read probes so a deployment is walked once per run.
 */
import { expectStatus, isObject, jsonObject } from "../checks.js";
import type { HttpResponse } from "../http.js";
import { check, type ProbeContext } from "../probe.js";

export interface Walk {
  pages: HttpResponse[];
  listings: Record<string, unknown>[];
  /** Every next_cursor seen, in order. */
  cursors: string[];
  /** False when the walk stopped at the page bound before next_cursor was null. */
  complete: boolean;
  /** Set when a page broke a rule: the failure the pagination probe reports. */
  problem?: { message: string; response: HttpResponse };
}

export const listingsUrl = (context: ProbeContext, query: Record<string, string> = {}): string => {
  const params = new URLSearchParams(query).toString();
  return `${context.baseUrl}/v1/listings${params ? `?${params}` : ""}`;
};

/** The body of a list page, checked for `{ listings: [...], next_cursor: string | null }`. */
export function listPage(
  response: HttpResponse,
  what: string,
): { listings: Record<string, unknown>[]; next: string | null } {
  expectStatus(response, 200, what);
  const body = jsonObject(response, what);
  check(Array.isArray(body.listings), `${what}: listings is not an array`, response.exchange);
  check(
    body.next_cursor === null || typeof body.next_cursor === "string",
    `${what}: next_cursor must be a string or null`,
    response.exchange,
  );
  check(body.listings.every(isObject), `${what}: every listing must be an object`, response.exchange);
  return { listings: body.listings as Record<string, unknown>[], next: body.next_cursor as string | null };
}

export const walkListings = (context: ProbeContext): Promise<Walk> =>
  context.memo("walk", async () => {
    const walk: Walk = { pages: [], listings: [], cursors: [], complete: false };
    const seenDids = new Set<string>();
    let cursor: string | null = null;
    const limit = String(context.options.pageSize);
    while (walk.pages.length < context.options.maxPages) {
      const response: HttpResponse = await context.http.get(
        listingsUrl(context, cursor ? { limit, cursor } : { limit }),
      );
      walk.pages.push(response);
      const page = listPage(response, `GET /v1/listings page ${walk.pages.length}`);
      if (page.listings.length > context.options.pageSize) {
        walk.problem = { message: `a page holds ${page.listings.length} listings, over limit=${limit}`, response };
        return walk;
      }
      for (const listing of page.listings) {
        const did = String(listing.service_did);
        if (seenDids.has(did)) {
          walk.problem = { message: `listing ${did} came twice in one walk`, response };
          return walk;
        }
        seenDids.add(did);
        walk.listings.push(listing);
      }
      if (page.next === null) {
        walk.complete = true;
        return walk;
      }
      if (walk.cursors.includes(page.next)) {
        walk.problem = { message: `next_cursor repeated an earlier cursor (${page.next.slice(0, 80)})`, response };
        return walk;
      }
      walk.cursors.push(page.next);
      cursor = page.next;
    }
    return walk;
  });
