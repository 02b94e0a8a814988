/**
 * Listings as HTML. Everything a listing holds (title, description, tags, every member of the
 * discovery document) was written by whoever controls a host, so it only ever reaches the page
 * through the escaping `html` template, and becomes a link only when it is an http(s) URL.
 */
import { InvalidEndpointError, resolveEndpoint, SIGNED_ENDPOINTS } from "@proto/protocol";
import { type HtmlValue, html, type SafeHtml } from "../../platform/html.js";
import type { Listing, ListingStatus } from "../listing.js";
import { browsePath, listingApiPath, listingPagePath } from "./paths.js";
import { permissionsSection } from "./permissions.js";

/** Links to pages and documents the directory does not control. */
const EXTERNAL_REL = "noopener noreferrer nofollow";

export function parseListing(body: string): Listing {
  return JSON.parse(body) as Listing;
}

/** An absolute http(s) URL without credentials, normalised; anything else (`javascript:`, `data:`, …) is not a link. */
export function safeHttpUrl(value: unknown): string | undefined {
  if (typeof value !== "string" || value.length > 2048) return undefined;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return undefined;
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") return undefined;
  // `https://trusted.example@elsewhere.test/` reads as one host and goes to another.
  if (url.username !== "" || url.password !== "") return undefined;
  return url.href;
}

/** A link out when `value` is an http(s) URL, else the text itself. */
function outbound(value: string, text: HtmlValue = value): SafeHtml {
  const url = safeHttpUrl(value);
  return url === undefined ? html`<code>${text}</code>` : html`<a href="${url}" rel="${EXTERNAL_REL}">${text}</a>`;
}

/** The host (and port) the discovery document is served from. */
export function hostOf(listing: Listing): string {
  try {
    return new URL(listing.discovery_url).host;
  } catch {
    return listing.discovery_url;
  }
}

const isDidKey = (did: string) => did.startsWith("did:key:");

function time(value: string): SafeHtml {
  const ms = Date.parse(value);
  if (Number.isNaN(ms)) return html`${value}`;
  const iso = new Date(ms).toISOString();
  return html`<time datetime="${iso}">${iso.slice(0, 16).replace("T", " ")} UTC</time>`;
}

const STATUS_LABELS: Record<ListingStatus, string> = { active: "Active", stale: "Stale", deleted: "Deleted" };

function statusBadge(status: ListingStatus): SafeHtml {
  const label = STATUS_LABELS[status] ?? String(status);
  return html`<span class="badge ${status}" data-status="${status}">${label}</span>`;
}

function anchorBadge(did: string): SafeHtml | "" {
  return isDidKey(did)
    ? html`<span class="badge no-anchor" title="A did:key DID is not tied to any domain">No domain anchor</span>`
    : "";
}

function tagList(tags: readonly string[]): SafeHtml | "" {
  if (tags.length === 0) return "";
  return html`<ul class="tags" aria-label="Tags">${tags.map(
    (tag) => html`<li><a href="${browsePath({ tag })}" title="Listings tagged ${tag}">${tag}</a></li>`,
  )}</ul>`;
}

/** Where the service lives; for a did:key listing this host is all that ties it to anything. */
function hostLine(listing: Listing): SafeHtml {
  const host = hostOf(listing);
  return isDidKey(listing.service_did)
    ? html`<p class="host prominent">Served from <strong>${host}</strong></p>`
    : html`<p class="host"><span class="muted">Host</span> <strong>${host}</strong></p>`;
}

/** One listing in the browse list. */
export function listingCard(listing: Listing, index: number): SafeHtml {
  const host = hostOf(listing);
  const headingId = `listing-${index + 1}`;
  return html`<li><article class="card listing" aria-labelledby="${headingId}">
<h3 id="${headingId}"><a href="${listingPagePath(listing.service_did)}">${listing.title ?? host}</a></h3>
<p class="badges">${statusBadge(listing.status)}${anchorBadge(listing.service_did)}</p>
${hostLine(listing)}<p class="did"><span class="muted">DID</span> <code>${listing.service_did}</code></p>
${listing.description === null ? "" : html`<p class="description">${listing.description}</p>`}
${listing.status === "stale" ? html`<p class="muted">The directory has not reached this service lately; last fetched ${time(listing.fetched_at)}.</p>` : ""}
${tagList(listing.tags)}
</article></li>`;
}

export interface BrowseView {
  search: string | undefined;
  tag: string | undefined;
  /** Whether this page continues an earlier one. */
  continued: boolean;
  listings: Listing[];
  nextPath: string | undefined;
}

export function browsePage(view: BrowseView): SafeHtml {
  const filtered = view.search !== undefined || view.tag !== undefined;
  const summary = [
    view.search === undefined ? "" : html` matching “${view.search}”`,
    view.tag === undefined ? "" : html` tagged “${view.tag}”`,
  ];
  const count = view.listings.length;
  return html`<h1>Service directory</h1>
<p class="muted">Services that speak the proto protocol and chose to be listed. Search titles and descriptions, or pick a tag.</p>
<form class="search" role="search" method="get" action="/">
<div><label for="search">Search</label>
<input type="search" id="search" name="search" maxlength="200" value="${view.search ?? ""}" autocomplete="off"></div>
<div><label for="tag">Tag</label>
<input type="text" id="tag" name="tag" maxlength="40" value="${view.tag ?? ""}" autocomplete="off" spellcheck="false"></div>
<div><button type="submit">Search</button></div>
</form>
<section aria-labelledby="results-heading">
<h2 id="results-heading">${filtered ? html`Listings${summary}` : "All listings"}${view.continued ? " (continued)" : ""}</h2>
<p class="muted" id="results-count">${
    count === 0
      ? filtered
        ? "No listing matches."
        : "No listings yet."
      : `${count} ${count === 1 ? "listing" : "listings"} on this page.`
  }${filtered ? html` <a href="/">Clear the search</a>` : ""}</p>
<ul class="listings">${view.listings.map((listing, i) => listingCard(listing, i))}</ul>
${
  view.nextPath !== undefined || view.continued
    ? html`<nav class="pagination" aria-label="Pages">${
        view.continued ? html`<a href="${browsePath({ search: view.search, tag: view.tag })}">First page</a>` : ""
      }${view.nextPath === undefined ? "" : html`<a href="${view.nextPath}" rel="next">Next page</a>`}</nav>`
    : ""
}
</section>`;
}

// ---- the detail page --------------------------------------------------------------------

const FEATURE_LABELS: Record<string, string> = {
  attestation: "Attestation",
  key_rotation: "Key rotation",
  attested_session: "Attested sessions",
};
const RECIPIENT_LABELS: Record<string, string> = {
  email: "E-mail",
  phone: "Phone",
  oidc: "OpenID Connect",
  did: "DID",
};
const UNCLAIMED_MODES: Record<string, string> = {
  free: "Free: agents may create unclaimed accounts",
  attested_only: "Attested only: unclaimed accounts need an attestation",
  denied: "Denied: no unclaimed accounts",
};
const ENDPOINT_LABELS: [key: string, label: string][] = [
  ["accounts", "Accounts"],
  ["owner_invitation", "Owner invitation"],
  ["claim_page", "Claim page"],
  ["claim_completion", "Claim completion"],
  ["key_rotation", "Key rotation"],
];

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);
const isPrimitive = (value: unknown) => value === null || ["string", "number", "boolean"].includes(typeof value);

/** Any JSON value, for people: URLs as links, lists as lists, the rest as JSON text. */
function jsonValue(value: unknown): SafeHtml {
  if (typeof value === "string") return outbound(value);
  if (isPrimitive(value)) return html`<code>${JSON.stringify(value)}</code>`;
  if (Array.isArray(value) && value.every(isPrimitive)) {
    return value.length === 0
      ? html`<span class="muted">none</span>`
      : html`<ul class="plain">${value.map((item) => html`<li>${jsonValue(item)}</li>`)}</ul>`;
  }
  return html`<pre>${JSON.stringify(value, null, 2)}</pre>`;
}

/** A list of known words (labelled) and unknown ones (as sent). */
function labelledList(values: unknown, labels: Record<string, string>, absent: string): SafeHtml {
  if (!Array.isArray(values)) return values === undefined ? html`<p>${absent}</p>` : jsonValue(values);
  if (values.length === 0) return html`<p>${absent}</p>`;
  return html`<ul class="plain">${values.map((value) =>
    typeof value === "string" && Object.hasOwn(labels, value)
      ? html`<li>${labels[value]} <code>${value}</code></li>`
      : html`<li>${jsonValue(value)}</li>`,
  )}</ul>`;
}

function members(record: Record<string, unknown>, known: [key: string, label: string][]): SafeHtml {
  const knownKeys = new Set(known.map(([key]) => key));
  const rows = known
    .filter(([key]) => record[key] !== undefined)
    .map(([key, label]) => html`<dt>${label}</dt><dd>${jsonValue(record[key])}</dd>`);
  const others = Object.entries(record)
    .filter(([key]) => !knownKeys.has(key))
    .map(([key, value]) => html`<dt><code>${key}</code></dt><dd>${jsonValue(value)}</dd>`);
  return html`<dl>${rows}${others}</dl>`;
}

function count(value: unknown, unit: string): SafeHtml {
  if (typeof value !== "number" || !Number.isFinite(value)) return jsonValue(value);
  return html`${value.toLocaleString("en-US")} ${unit}`;
}

function duration(seconds: number): string {
  const [amount, unit] = seconds >= 86400 ? [seconds / 86400, "day"] : [seconds / 3600, "hour"];
  const rounded = Number(amount.toFixed(1));
  return `${rounded.toLocaleString("en-US")} ${unit}${rounded === 1 ? "" : "s"}`;
}

const SIGNED = new Set<string>(SIGNED_ENDPOINTS);

/** The endpoint as resolved against the discovery document's origin, or undefined when it is no URL. */
function resolved(discoveryUrl: string, value: string): URL | undefined {
  try {
    return resolveEndpoint(discoveryUrl, value);
  } catch (error) {
    if (error instanceof InvalidEndpointError || error instanceof TypeError) return undefined;
    throw error;
  }
}

/**
 * An endpoint as published (a path, or an absolute URL), saying when it lies on another host than
 * the discovery document's. The claim page is for people, so it is a link (a path resolved against
 * the discovery host); the others take signed POSTs from agents, so they are text, never links.
 */
function endpointValue(key: string, value: unknown, discoveryUrl: string): SafeHtml {
  if (typeof value !== "string") return jsonValue(value);
  const url = resolved(discoveryUrl, value);
  if (url === undefined) return key === "claim_page" ? outbound(value) : html`<code>${value}</code>`;
  const web = url.protocol === "https:" || url.protocol === "http:";
  const elsewhere =
    web && url.host !== hostOfUrl(discoveryUrl)
      ? html` <span class="muted other-host">on another host, ${url.host}</span>`
      : "";
  if (key === "claim_page") return html`${outbound(url.href, value)}${elsewhere}`;
  return html`<code>${value}</code>${elsewhere}`;
}

function hostOfUrl(value: string): string {
  try {
    return new URL(value).host;
  } catch {
    return value;
  }
}

function endpointList(endpoints: Record<string, unknown>, discoveryUrl: string): SafeHtml {
  const rows = ENDPOINT_LABELS.filter(([key]) => endpoints[key] !== undefined).map(
    ([key, label]) =>
      html`<dt>${label}</dt><dd>${
        SIGNED.has(key) || key === "claim_page"
          ? endpointValue(key, endpoints[key], discoveryUrl)
          : jsonValue(endpoints[key])
      }</dd>`,
  );
  const knownKeys = new Set(ENDPOINT_LABELS.map(([key]) => key));
  const others = Object.entries(endpoints)
    .filter(([key]) => !knownKeys.has(key))
    .map(([key, value]) => html`<dt><code>${key}</code></dt><dd>${jsonValue(value)}</dd>`);
  return html`<dl>${rows}${others}</dl>`;
}

/**
 * The service's MCP endpoint (`mcp`, docs/discovery-mcp.md), resolved as an agent resolves it: the
 * address to give an MCP client. The endpoint takes posts with a token, so it is text, not a link;
 * its metadata is a document to read.
 */
function mcpSection(mcp: unknown, discoveryUrl: string): SafeHtml {
  if (mcp === undefined) return html`<p>Does not advertise an MCP endpoint.</p>`;
  if (!isRecord(mcp)) return jsonValue(mcp);
  const address = (value: unknown, link: boolean): SafeHtml => {
    if (typeof value !== "string") return jsonValue(value);
    const url = resolved(discoveryUrl, value);
    if (url === undefined) return html`<code>${value}</code>`;
    const elsewhere =
      url.host !== hostOfUrl(discoveryUrl)
        ? html` <span class="muted other-host">on another host, ${url.host}</span>`
        : "";
    return html`${link ? outbound(url.href) : html`<code>${url.href}</code>`}${elsewhere}`;
  };
  return html`<dl>
<dt>MCP endpoint</dt><dd>${address(mcp.url, false)}</dd>
${mcp.resource_metadata === undefined ? "" : html`<dt>Protected resource metadata</dt><dd>${address(mcp.resource_metadata, true)}</dd>`}
${Object.entries(mcp)
  .filter(([key]) => key !== "url" && key !== "resource_metadata")
  .map(([key, value]) => html`<dt><code>${key}</code></dt><dd>${jsonValue(value)}</dd>`)}
</dl>`;
}

function discoverySection(doc: Record<string, unknown>, discoveryUrl: string): SafeHtml {
  const endpoints = isRecord(doc.endpoints) ? doc.endpoints : {};
  const limits = doc.limits;
  const billing = doc.billing;
  const x402 = doc.x402;
  return html`<h3 id="d-protocol">Protocol</h3>
<dl>
<dt>Protocol version</dt><dd>${jsonValue(doc.proto_version)}</dd>
<dt>Signature algorithms</dt><dd>${jsonValue(doc.signature_algorithms)}</dd>
</dl>
<h3 id="d-endpoints">Endpoints</h3>
<p class="muted">An endpoint is a path on the host this document is served from, or a full address, which may name another host. Agents send signed requests to all but the claim page, which is for people.</p>
${endpointList(endpoints, discoveryUrl)}
${endpoints.key_rotation === undefined ? html`<p class="muted">No key rotation endpoint.</p>` : ""}
<h3 id="d-mcp">MCP</h3>
${mcpSection(doc.mcp, discoveryUrl)}
${permissionsSection(doc.permissions)}
<h3 id="d-features">Features</h3>
${labelledList(doc.features, FEATURE_LABELS, "None advertised (two-step invitation is always supported).")}
<h3 id="d-recipients">Recipient types</h3>
${labelledList(doc.recipient_types, RECIPIENT_LABELS, "Not declared: e-mail only.")}
<h3 id="d-billing">Billing</h3>
${
  isRecord(billing)
    ? html`<dl>
<dt>Unclaimed accounts</dt><dd>${
        typeof billing.unclaimed_mode === "string" && Object.hasOwn(UNCLAIMED_MODES, billing.unclaimed_mode)
          ? html`${UNCLAIMED_MODES[billing.unclaimed_mode]} <code>${billing.unclaimed_mode}</code>`
          : jsonValue(billing.unclaimed_mode)
      }</dd>
<dt>Accepted attestors</dt><dd>${
        billing.accepted_attestors === undefined
          ? html`<span class="muted">None declared</span>`
          : jsonValue(billing.accepted_attestors)
      }</dd>
${Object.entries(billing)
  .filter(([key]) => key !== "unclaimed_mode" && key !== "accepted_attestors")
  .map(([key, value]) => html`<dt><code>${key}</code></dt><dd>${jsonValue(value)}</dd>`)}
</dl>`
    : billing === undefined
      ? html`<p>Not declared.</p>`
      : jsonValue(billing)
}
<h3 id="d-limits">Limits</h3>
${
  isRecord(limits)
    ? html`<dl>
<dt>Unclaimed accounts per hour</dt><dd>${count(limits.unclaimed_rate_limit_per_hour, "per hour")}</dd>
<dt>Unclaimed accounts expire</dt><dd>${
        limits.unclaimed_ttl_seconds === undefined
          ? "Never"
          : typeof limits.unclaimed_ttl_seconds === "number"
            ? html`after ${count(limits.unclaimed_ttl_seconds, "seconds")} (${duration(limits.unclaimed_ttl_seconds)})`
            : jsonValue(limits.unclaimed_ttl_seconds)
      }</dd>
${Object.entries(limits)
  .filter(([key]) => key !== "unclaimed_rate_limit_per_hour" && key !== "unclaimed_ttl_seconds")
  .map(([key, value]) => html`<dt><code>${key}</code></dt><dd>${jsonValue(value)}</dd>`)}
</dl>`
    : limits === undefined
      ? html`<p>None declared.</p>`
      : jsonValue(limits)
}
<h3 id="d-x402">x402 payments</h3>
${
  isRecord(x402)
    ? members(x402, [
        ["facilitator", "Facilitator"],
        ["networks", "Networks"],
        ["assets", "Assets"],
        ["payment_endpoint", "Payment endpoint"],
      ])
    : x402 === undefined
      ? html`<p>Does not advertise HTTP 402 payments.</p>`
      : jsonValue(x402)
}
<details><summary>The discovery document as JSON</summary>
<pre>${JSON.stringify(doc, null, 2)}</pre>
</details>`;
}

/** The listing in full. */
export function listingPage(listing: Listing): SafeHtml {
  const host = hostOf(listing);
  const did = listing.service_did;
  const doc = isRecord(listing.discovery_doc) ? listing.discovery_doc : {};
  return html`<p><a href="/">← All listings</a></p>
<article aria-labelledby="listing-title">
<h1 id="listing-title">${listing.title ?? host}</h1>
<p class="badges">${statusBadge(listing.status)}${anchorBadge(did)}</p>
${hostLine(listing)}
${
  isDidKey(did)
    ? html`<p class="notice no-anchor" id="no-anchor">No domain anchor: this service is identified by a <code>did:key</code>, which is not tied to any domain. All that links it to a place is the host its discovery document is served from, <strong>${host}</strong>. Make sure that is the service you mean.</p>`
    : ""
}
${
  listing.status === "stale"
    ? html`<p class="notice stale">Stale: the directory has failed to fetch this service's discovery document several times in a row. What is shown is the document as last fetched.</p>`
    : listing.status === "deleted"
      ? html`<p class="notice deleted">Deleted: this listing was withdrawn or has been unreachable for a long time. It is kept so that mirrors learn of the deletion.</p>`
      : ""
}
${listing.description === null ? "" : html`<p class="description">${listing.description}</p>`}
<section aria-labelledby="h-listing">
<h2 id="h-listing">Listing</h2>
<dl class="card">
<dt>Service DID</dt><dd><code>${did}</code></dd>
<dt>Host</dt><dd>${host}</dd>
<dt>Status</dt><dd>${STATUS_LABELS[listing.status] ?? listing.status}</dd>
<dt>Tags</dt><dd>${listing.tags.length === 0 ? html`<span class="muted">None</span>` : tagList(listing.tags)}</dd>
<dt>First listed</dt><dd>${time(listing.first_listed_at)}</dd>
<dt>Last fetched</dt><dd>${time(listing.fetched_at)}</dd>
<dt>Updated</dt><dd>${time(listing.updated_at)}</dd>
</dl>
<p class="actions">
<a class="button" href="${listingApiPath(did)}" type="application/json">Listing as JSON</a>
${
  safeHttpUrl(listing.discovery_url) === undefined
    ? ""
    : html`<a class="button secondary" href="${safeHttpUrl(listing.discovery_url)}" rel="${EXTERNAL_REL}">Live discovery document</a>`
}
</p>
</section>
<section aria-labelledby="h-discovery">
<h2 id="h-discovery">Discovery document</h2>
<p class="muted">As last fetched from ${outbound(listing.discovery_url)}, ${time(listing.fetched_at)}.</p>
${discoverySection(doc, listing.discovery_url)}
</section>
</article>`;
}
