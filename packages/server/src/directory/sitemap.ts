import { listingPagePath } from "./pages/paths.js";
import type { DirectoryService } from "./service.js";

/** The sitemap protocol's limit of URLs per file. */
export const SITEMAP_PAGE_SIZE = 50_000;

function escapeXml(value: string): string {
  return value.replace(
    /[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;" })[c] as string,
  );
}

/** A listing's page for people (the JSON is one link away from it). */
export function listingPageUrl(publicUrl: string, serviceDid: string): string {
  return `${publicUrl}${listingPagePath(serviceDid)}`;
}

/**
 * `/sitemap.xml`: a urlset of the pages of active listings, or, past 50,000 of them, a sitemap index whose
 * parts are `/sitemap.xml?page=N`. Undefined for a page that does not exist.
 */
export async function renderSitemap(
  service: DirectoryService,
  publicUrl: string,
  page: number | undefined,
): Promise<string | undefined> {
  const total = await service.countActive();
  const pages = Math.max(1, Math.ceil(total / SITEMAP_PAGE_SIZE));
  const head = '<?xml version="1.0" encoding="UTF-8"?>\n';
  if (page === undefined && pages > 1) {
    const parts = Array.from(
      { length: pages },
      (_, i) => `  <sitemap><loc>${escapeXml(`${publicUrl}/sitemap.xml?page=${i + 1}`)}</loc></sitemap>\n`,
    );
    return `${head}<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n${parts.join("")}</sitemapindex>\n`;
  }
  const index = (page ?? 1) - 1;
  if (index >= pages) return undefined;
  const rows = await service.sitemapPage(index * SITEMAP_PAGE_SIZE, SITEMAP_PAGE_SIZE);
  const urls = rows.map(
    (row) =>
      `  <url><loc>${escapeXml(listingPageUrl(publicUrl, row.service_did))}</loc><lastmod>${new Date(row.updated_at).toISOString()}</lastmod></url>\n`,
  );
  return `${head}<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n${urls.join("")}</urlset>\n`;
}
