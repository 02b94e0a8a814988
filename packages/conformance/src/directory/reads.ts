/** Listing read probes (directory.md §GET /v1/listings, §GET /v1/listings/{service_did}, §Other). */
import { expectCacheControl, expectError, expectStatus, isObject, jsonObject } from "../checks.js";
import type { HttpResponse } from "../http.js";
import { check, type Probe, type ProbeContext, ProbeFailure, ProbeSkip, pass } from "../probe.js";
import { listingsUrl, listPage, walkListings } from "./walk.js";

const LIST_SECTION = "directory.md §GET /v1/listings";
const ITEM_SECTION = "directory.md §GET /v1/listings/{service_did}";
const STATUSES = ["active", "stale", "deleted"];

const firstPage = (context: ProbeContext): Promise<HttpResponse> =>
  context.memo("first-page", () => context.http.get(listingsUrl(context)));

const isText = (value: unknown): boolean => typeof value === "string";
const isTextOrNull = (value: unknown): boolean => value === null || typeof value === "string";

/** The listing's fields and their types (directory.md §Listing; absent title/description are null). */
function checkListing(listing: Record<string, unknown>, where: string, response: HttpResponse): void {
  const x = response.exchange;
  check(
    typeof listing.service_did === "string" && /^did:/.test(listing.service_did),
    `${where}: service_did must be a DID`,
    x,
  );
  check(
    isText(listing.discovery_url) && String(listing.discovery_url).startsWith("https://"),
    `${where}: discovery_url must be an https URL`,
    x,
  );
  check(isObject(listing.discovery_doc), `${where}: discovery_doc must be an object`, x);
  for (const field of ["fetched_at", "first_listed_at", "updated_at"]) {
    check(
      isText(listing[field]) && !Number.isNaN(Date.parse(String(listing[field]))),
      `${where}: ${field} must be an RFC 3339 time`,
      x,
    );
  }
  check(STATUSES.includes(String(listing.status)), `${where}: status must be active, stale or deleted`, x);
  check(
    Array.isArray(listing.tags) &&
      listing.tags.length <= 20 &&
      listing.tags.every((t) => typeof t === "string" && t.length <= 40),
    `${where}: tags must be at most 20 strings of at most 40 characters`,
    x,
  );
  check(
    isTextOrNull(listing.title) && String(listing.title ?? "").length <= 120,
    `${where}: title must be a string of at most 120 characters`,
    x,
  );
  check(
    isTextOrNull(listing.description) && String(listing.description ?? "").length <= 500,
    `${where}: description must be a string of at most 500 characters`,
    x,
  );
}

export const listRead: Probe = {
  id: "directory.listings.read",
  description: "GET /v1/listings is 200 JSON { listings, next_cursor } of well-formed listings",
  section: `${LIST_SECTION}; directory.md §Listing`,
  async run(context) {
    const response = await firstPage(context);
    const page = listPage(response, "GET /v1/listings");
    check(
      /^application\/json\b/i.test(response.headers["content-type"] ?? ""),
      "GET /v1/listings is not application/json",
      response.exchange,
    );
    check(
      page.listings.length <= 50,
      `the default page holds ${page.listings.length} listings, over the default limit 50`,
      response.exchange,
    );
    for (const [i, listing] of page.listings.entries()) checkListing(listing, `listings[${i}]`, response);
    return pass();
  },
};

export const listHeaders: Probe = {
  id: "directory.listings.headers",
  description: "GET /v1/listings has Cache-Control public, max-age=30, s-maxage=120 and CORS *",
  section: LIST_SECTION,
  async run(context) {
    const response = await firstPage(context);
    expectStatus(response, 200, "GET /v1/listings");
    expectCacheControl(response, { public: "", "max-age": "30", "s-maxage": "120" }, "GET /v1/listings");
    check(
      response.headers["access-control-allow-origin"] === "*",
      "GET /v1/listings must have Access-Control-Allow-Origin: *",
      response.exchange,
    );
    return pass();
  },
};

export const pagination: Probe = {
  id: "directory.listings.pagination",
  description: "walking next_cursor reaches null, no cursor and no listing repeats, pages respect limit",
  section: `${LIST_SECTION}; decisions.md §Directory 8`,
  async run(context) {
    const walk = await walkListings(context);
    if (walk.problem) throw new ProbeFailure(walk.problem.message, walk.problem.response.exchange);
    const seen = `${walk.listings.length} listings in ${walk.pages.length} pages of limit=${context.options.pageSize}`;
    if (!walk.complete)
      return pass(`stopped after ${context.options.maxPages} pages (--max-pages): ${seen}, not the end`);
    return pass(walk.pages.length < 2 ? `one page only (${seen}): no cursor to follow` : undefined);
  },
};

export const badLimit: Probe = {
  id: "directory.listings.bad-limit",
  description: "limit outside 1-100 (0 and 101) is 400 invalid_request",
  section: `${LIST_SECTION}; directory.md §Errors`,
  async run(context) {
    for (const limit of ["0", "101"]) {
      expectError(
        await context.http.get(listingsUrl(context, { limit })),
        400,
        "invalid_request",
        `GET /v1/listings?limit=${limit}`,
      );
    }
    return pass();
  },
};

export const badFilter: Probe = {
  id: "directory.listings.bad-filter",
  description: "an unknown status and an updated_since that is not RFC 3339 are 400 invalid_request",
  section: `${LIST_SECTION}; directory.md §Errors`,
  async run(context) {
    const queries: Record<string, string>[] = [{ status: "proto-conformance" }, { updated_since: "yesterday" }];
    for (const query of queries) {
      const response = await context.http.get(listingsUrl(context, query));
      expectError(response, 400, "invalid_request", `GET /v1/listings?${new URLSearchParams(query)}`);
    }
    return pass();
  },
};

/** A cursor changed in one character (the middle one), so it is the same length and alphabet. */
function alter(cursor: string): string {
  const i = Math.floor(cursor.length / 2);
  const c = cursor[i] === "A" ? "B" : "A";
  return `${cursor.slice(0, i)}${c}${cursor.slice(i + 1)}`;
}

export const tamperedCursor: Probe = {
  id: "directory.listings.cursor.tampered",
  description: "a cursor that was not issued (garbage, or a real one altered) is 400 invalid_request",
  section: `${LIST_SECTION}; decisions.md §Directory 8`,
  async run(context) {
    const limit = String(context.options.pageSize);
    const garbage = await context.http.get(listingsUrl(context, { limit, cursor: "conformance-not-a-cursor" }));
    expectError(garbage, 400, "invalid_request", "GET /v1/listings with a garbage cursor");
    const walk = await walkListings(context);
    const real = walk.cursors[0];
    if (real === undefined)
      return pass("no real cursor to alter (one page of listings): only a garbage cursor was tried");
    const altered = await context.http.get(listingsUrl(context, { limit, cursor: alter(real) }));
    expectError(altered, 400, "invalid_request", "GET /v1/listings with an altered cursor");
    return pass();
  },
};

/** A filter probe: a query built from a listing the walk found, every answer must match. */
function filterProbe(
  id: string,
  description: string,
  pick: (
    listings: Record<string, unknown>[],
  ) =>
    | { query: Record<string, string>; matches: (l: Record<string, unknown>) => boolean; expected: string }
    | undefined,
  none: string,
): Probe {
  return {
    id,
    description,
    section: LIST_SECTION,
    async run(context) {
      const walk = await walkListings(context);
      const chosen = pick(walk.listings);
      if (chosen === undefined) throw new ProbeSkip(none);
      const response = await context.http.get(listingsUrl(context, { ...chosen.query, limit: "100" }));
      const page = listPage(response, `GET /v1/listings?${new URLSearchParams(chosen.query)}`);
      check(page.listings.length > 0, `no listing answered, though ${chosen.expected} exists`, response.exchange);
      const wrong = page.listings.find((l) => !chosen.matches(l));
      check(wrong === undefined, `listing ${String(wrong?.service_did)} does not match the filter`, response.exchange);
      return pass();
    },
  };
}

export const tagFilter = filterProbe(
  "directory.listings.filter.tag",
  "tag=T answers only listings tagged exactly T",
  (listings) => {
    const tag = listings.flatMap((l) => (Array.isArray(l.tags) ? l.tags : [])).find((t) => typeof t === "string");
    if (typeof tag !== "string") return undefined;
    return {
      query: { tag },
      matches: (l) => Array.isArray(l.tags) && l.tags.includes(tag),
      expected: `a listing tagged ${tag}`,
    };
  },
  "no listing has a tag to filter on",
);

export const searchFilter = filterProbe(
  "directory.listings.filter.search",
  "search=S answers only listings whose title or description contains S, case-insensitively",
  (listings) => {
    const title = listings.map((l) => l.title).find((t): t is string => typeof t === "string" && /[A-Za-z]{3}/.test(t));
    const word = title?.match(/[A-Za-z]{3,}/)?.[0];
    if (word === undefined) return undefined;
    // Sent in another case than stored: the match is case-insensitive.
    const search = word === word.toUpperCase() ? word.toLowerCase() : word.toUpperCase();
    const has = (v: unknown) => typeof v === "string" && v.toLowerCase().includes(search.toLowerCase());
    return {
      query: { search },
      matches: (l) => has(l.title) || has(l.description),
      expected: `a listing titled "${title}"`,
    };
  },
  "no listing has a title to search for",
);

export const statusFilter = filterProbe(
  "directory.listings.filter.status",
  "status=S answers only listings with that status",
  (listings) => {
    const status = listings
      .map((l) => l.status)
      .find((s): s is string => typeof s === "string" && STATUSES.includes(s));
    if (status === undefined) return undefined;
    return { query: { status }, matches: (l) => l.status === status, expected: `a listing with status ${status}` };
  },
  "no listing to take a status from",
);

export const updatedSinceFilter = filterProbe(
  "directory.listings.filter.updated-since",
  "updated_since=T answers only listings with updated_at >= T",
  (listings) => {
    const times = listings
      .map((l) => l.updated_at)
      .filter((t): t is string => typeof t === "string" && !Number.isNaN(Date.parse(t)));
    const since = times.sort((a, b) => Date.parse(a) - Date.parse(b))[Math.floor(times.length / 2)];
    if (since === undefined) return undefined;
    return {
      query: { updated_since: since },
      matches: (l) => typeof l.updated_at === "string" && Date.parse(l.updated_at) >= Date.parse(since),
      expected: `a listing updated at ${since}`,
    };
  },
  "no listing to take an updated_at from",
);

/** The first listing of the walk, read on its own. */
const itemRead = (context: ProbeContext) =>
  context.memo("item", async () => {
    const walk = await walkListings(context);
    const did = walk.listings.find((l) => typeof l.service_did === "string")?.service_did;
    if (typeof did !== "string") throw new ProbeSkip("the directory has no listing to read");
    return { did, response: await context.http.get(`${context.baseUrl}/v1/listings/${encodeURIComponent(did)}`) };
  });

export const itemReadProbe: Probe = {
  id: "directory.listing.read",
  description: "GET /v1/listings/{service_did} of a listed DID is 200 with that listing",
  section: ITEM_SECTION,
  async run(context) {
    const { did, response } = await itemRead(context);
    expectStatus(response, 200, `GET /v1/listings/${did}`);
    const body = jsonObject(response, "the listing");
    check(body.service_did === did, `the listing read is ${String(body.service_did)}, not ${did}`, response.exchange);
    checkListing(body, "the listing", response);
    return pass();
  },
};

export const itemHeaders: Probe = {
  id: "directory.listing.headers",
  description: "a single listing has Cache-Control public, max-age=60, s-maxage=300 and CORS *",
  section: ITEM_SECTION,
  async run(context) {
    const { did, response } = await itemRead(context);
    expectStatus(response, 200, `GET /v1/listings/${did}`);
    expectCacheControl(response, { public: "", "max-age": "60", "s-maxage": "300" }, "GET /v1/listings/{service_did}");
    check(
      response.headers["access-control-allow-origin"] === "*",
      "a single listing must have Access-Control-Allow-Origin: *",
      response.exchange,
    );
    return pass();
  },
};

export const itemUnknown: Probe = {
  id: "directory.listing.unknown",
  description: "GET /v1/listings/{service_did} of an unlisted DID is 404 not_found",
  section: `${ITEM_SECTION}; directory.md §Errors`,
  async run(context) {
    const did = "did:web:proto-conformance.invalid";
    const response = await context.http.get(`${context.baseUrl}/v1/listings/${encodeURIComponent(did)}`);
    expectError(response, 404, "not_found", `GET /v1/listings/${did}`);
    return pass();
  },
};

export const sitemap: Probe = {
  id: "directory.sitemap",
  description: "GET /sitemap.xml is 200 XML",
  section: "directory.md §Other",
  async run(context) {
    const response = await context.http.get(`${context.baseUrl}/sitemap.xml`);
    expectStatus(response, 200, "GET /sitemap.xml");
    // The contract does not show the body; an XML media type and an XML document are the least of it.
    check(
      /\bxml\b/i.test(response.headers["content-type"] ?? ""),
      "GET /sitemap.xml is not an XML media type",
      response.exchange,
    );
    check(
      /^\s*<(\?xml|urlset|sitemapindex)\b/.test(response.text),
      "GET /sitemap.xml is not an XML document",
      response.exchange,
    );
    return pass();
  },
};
