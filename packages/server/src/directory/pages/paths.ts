/** A listing's page for people: the DID as one path segment, decoded once by the router (decisions §10). */
export function listingPagePath(serviceDid: string): string {
  return `/listings/${encodeURIComponent(serviceDid)}`;
}

/** The same listing in the JSON API. */
export function listingApiPath(serviceDid: string): string {
  return `/v1/listings/${encodeURIComponent(serviceDid)}`;
}

/** The browse page with these filters (and cursor); empty values are left out. */
export function browsePath(query: {
  search?: string | undefined;
  tag?: string | undefined;
  cursor?: string | undefined;
}) {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined && value !== "") params.set(name, value);
  }
  const encoded = params.toString();
  return encoded === "" ? "/" : `/?${encoded}`;
}
