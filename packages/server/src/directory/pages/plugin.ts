import type { FastifyError, FastifyInstance, FastifyReply } from "fastify";
import { apiIndexResponder, homeResponses } from "../../platform/api-index.js";
import { ApiError } from "../../platform/errors.js";
import { rateLimitHook } from "../../platform/http.js";
import { InputRuleError } from "../../platform/input-rules.js";
import { pageProblem } from "../../platform/page-errors.js";
import type { RateLimiter } from "../../platform/rate-limit.js";
import { directoryApiIndex } from "../api-index.js";
import type { DirectoryService } from "../service.js";
import type { DirectorySettings } from "../settings.js";
import { registerAssets } from "./assets.js";
import { sendMessage, sendPage } from "./layout.js";
import { browsePath, listingPagePath } from "./paths.js";
import { browsePage, hostOf, listingPage, parseListing } from "./render.js";

export interface DirectoryPagesOptions {
  service: DirectoryService;
  limiter: RateLimiter;
  settings: DirectorySettings;
  publicUrl: string;
}

/** Listings per browse page. */
export const BROWSE_PAGE_SIZE = 20;

const browseQuery = {
  type: "object",
  properties: {
    search: { type: "string", maxLength: 200 },
    tag: { type: "string", maxLength: 40 },
    cursor: { type: "string", maxLength: 4096 },
  },
} as const;

interface BrowseQuery {
  search?: string;
  tag?: string;
  cursor?: string;
}

/** Form fields arrive padded or empty; the query the API would run has neither. */
function field(value: string | undefined): string | undefined {
  const trimmed = value?.trim();
  return trimmed === undefined || trimmed === "" ? undefined : trimmed;
}

/**
 * The browse pages for people (issue 9): `/` searches and filters through the very queries of
 * `GET /v1/listings`, `/listings/{did}` shows one listing in full. Server-rendered, no script, the
 * stylesheet served here, every value escaped, a rate limit of their own, errors as pages.
 */
export async function directoryPages(app: FastifyInstance, options: DirectoryPagesOptions): Promise<void> {
  const { service } = options;
  const limit = rateLimitHook(options.limiter, options.settings.rateLimits.pages);
  registerAssets(app);

  // Errors on these routes are pages too; the JSON API keeps its envelope (this handler is
  // encapsulated in the plugin).
  app.setErrorHandler((error: FastifyError, request, reply: FastifyReply) => {
    if (error instanceof ApiError && error.status === 429) {
      const seconds = Math.max(1, Math.ceil(error.retryAfterSeconds ?? 1));
      reply.header("retry-after", String(seconds));
      return sendMessage(
        reply,
        429,
        "Too many requests",
        `Too many pages were loaded from your address in a short time. Wait ${seconds} ${seconds === 1 ? "second" : "seconds"}, then reload.`,
      );
    }
    const searching = request.routeOptions.url === "/";
    if (searching && (error instanceof InputRuleError || error.validation !== undefined)) {
      return sendMessage(
        reply,
        400,
        "This search cannot be run",
        "Searches are limited to 200 characters and tags to 40, each given once, without control characters.",
      );
    }
    if (searching && error instanceof ApiError && error.code === "invalid_request") {
      return sendMessage(
        reply,
        400,
        "This link does not work",
        "The page address was changed, or its “Next page” position belongs to another search. Start again from the first page.",
      );
    }
    const problem = pageProblem(error, app.outageError);
    if (problem !== undefined) {
      if (problem.retryAfterSeconds !== undefined) reply.header("retry-after", String(problem.retryAfterSeconds));
      return sendMessage(reply, problem.status, problem.title, problem.message);
    }
    request.log.error({ err: error }, "page failed");
    return sendMessage(reply, 500, "Something went wrong", "Please try again in a moment.");
  });

  const apiIndex = apiIndexResponder(directoryApiIndex(options.publicUrl));
  app.get<{ Querystring: BrowseQuery }>(
    "/",
    {
      schema: {
        summary: "Browse listings, or the API's index",
        description:
          "A browser gets the page that searches and filters the listings (the queries of `GET /v1/listings`); `curl` and other clients get a JSON index of the API. The query is read by the page only.",
        querystring: browseQuery,
        response: homeResponses("the browse page"),
      },
      onRequest: limit,
    },
    async (request, reply) => {
      const answered = apiIndex(request, reply);
      if (answered !== undefined) return answered;
      const search = field(request.query.search);
      const tag = field(request.query.tag);
      const cursor = field(request.query.cursor);
      const page = await service.list({ cursor, limit: BROWSE_PAGE_SIZE, search, tag, includeDeleted: false });
      const title =
        search === undefined && tag === undefined ? "Listings" : `Search: ${[search, tag].filter(Boolean).join(", ")}`;
      return sendPage(reply, {
        title,
        // Result pages past the first, and searches, are not for search engines: the sitemap is.
        noindex: cursor !== undefined || search !== undefined || tag !== undefined,
        body: browsePage({
          search,
          tag,
          continued: cursor !== undefined,
          listings: page.bodies.map(parseListing),
          nextPath: page.nextCursor === null ? undefined : browsePath({ search, tag, cursor: page.nextCursor }),
        }),
      });
    },
  );

  app.get<{ Params: { did: string } }>("/listings/:did", { onRequest: limit }, async (request, reply) => {
    // Decoded once by the router, as for `GET /v1/listings/{did}` (decisions §10); the router
    // refuses parameters over its maxParamLength (2048) with 414 before this runs.
    const did = request.params.did;
    const body = did === "" ? undefined : (await service.get(did))?.text;
    if (body === undefined) {
      return sendMessage(reply, 404, "No such listing", "The directory has no listing for that DID.");
    }
    const listing = parseListing(body);
    return sendPage(reply, {
      title: listing.title ?? hostOf(listing),
      canonical: `${options.publicUrl}${listingPagePath(listing.service_did)}`,
      noindex: listing.status === "deleted",
      body: listingPage(listing),
    });
  });
}
