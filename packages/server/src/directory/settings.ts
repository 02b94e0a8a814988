import type { RateLimitRule } from "../platform/rate-limit.js";

/** The spec's limits and lifetimes; each can be changed by the operator (see README). */
export interface DirectorySettings {
  challengeTtlSeconds: number;
  sessionTtlSeconds: number;
  hostChallengeCap: { limit: number; windowSeconds: number };
  revalidation: {
    intervalSeconds: number;
    staleAfterFailures: number;
    deleteAfterStaleSeconds: number;
    concurrency: number;
    /** How often the in-process scheduler looks for due listings (0: never). */
    tickSeconds: number;
  };
  /**
   * Memory for serialised listings served by single-listing reads (0: none). Used on SQLite
   * only, where any commit, by any process, invalidates it (see body-cache.ts).
   */
  readCacheBytes: number;
  rateLimits: {
    challenge: RateLimitRule;
    create: RateLimitRule;
    write: RateLimitRule;
    read: RateLimitRule;
    sitemap: RateLimitRule;
    /** The browse pages for people (`/`, `/listings/{did}`). */
    pages: RateLimitRule;
  };
}

export const DEFAULT_DIRECTORY_SETTINGS: DirectorySettings = {
  challengeTtlSeconds: 30 * 60,
  sessionTtlSeconds: 7 * 24 * 3600,
  hostChallengeCap: { limit: 10, windowSeconds: 3600 },
  revalidation: {
    intervalSeconds: 24 * 3600,
    staleAfterFailures: 3,
    deleteAfterStaleSeconds: 30 * 24 * 3600,
    concurrency: 8,
    tickSeconds: 60,
  },
  readCacheBytes: 64 * 1024 * 1024,
  rateLimits: {
    challenge: { name: "dir.challenge", limit: 30, windowSeconds: 60 },
    create: { name: "dir.create", limit: 10, windowSeconds: 60 },
    write: { name: "dir.write", limit: 30, windowSeconds: 60 },
    read: { name: "dir.read", limit: 600, windowSeconds: 60 },
    sitemap: { name: "dir.sitemap", limit: 60, windowSeconds: 60 },
    pages: { name: "dir.pages", limit: 120, windowSeconds: 60 },
  },
};
