import type { FastifyRequest } from "fastify";

/** The quality a media range in an `Accept` header gives `type` (`text/html`), 0 when none matches. */
function qualityOf(accept: string, type: string): number {
  const [major] = type.split("/");
  let best = -1;
  let specificity = -1;
  for (const part of accept.slice(0, 1024).split(",")) {
    const [range = "", ...params] = part.trim().toLowerCase().split(";");
    const rangeSpecificity = range === type ? 2 : range === `${major}/*` ? 1 : range === "*/*" ? 0 : -1;
    if (rangeSpecificity < specificity || rangeSpecificity < 0) continue;
    const q = params.map((p) => p.trim()).find((p) => p.startsWith("q="));
    const quality = q === undefined ? 1 : Number(q.slice(2));
    specificity = rangeSpecificity;
    best = Number.isFinite(quality) ? quality : 0;
  }
  return Math.max(best, 0);
}

/**
 * Whether a request comes from a person's browser: it names `text/html` itself and prefers it to
 * JSON. API clients (no `Accept`, `*\/*`, or `application/json`) keep the JSON envelope.
 */
export function acceptsHtml(request: FastifyRequest): boolean {
  const accept = request.headers.accept;
  if (typeof accept !== "string" || !/text\/html/i.test(accept)) return false;
  const htmlQuality = qualityOf(accept, "text/html");
  return (
    htmlQuality > 0 && htmlQuality > (/application\/json/i.test(accept) ? qualityOf(accept, "application/json") : 0)
  );
}
