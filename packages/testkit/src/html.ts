/**
 * Reading server-rendered pages without a browser: the few HTML entities the services escape,
 * hidden form fields and links. Tests that drive sign-in and consent pages over plain HTTP use it.
 */

export function unescapeHtml(value: string): string {
  return value
    .replaceAll("&quot;", '"')
    .replaceAll("&#39;", "'")
    .replaceAll("&lt;", "<")
    .replaceAll("&gt;", ">")
    .replaceAll("&amp;", "&");
}

/** The value of a hidden form field on a page; throws, quoting the page, when there is none. */
export function field(page: string, name: string): string {
  const match = new RegExp(`name="${name}" value="([^"]*)"`).exec(page);
  if (match === null) throw new Error(`no ${name} field on the page:\n${page}`);
  return unescapeHtml(match[1] as string);
}

/** The first link whose href starts with `prefix`; throws, quoting the page, when there is none. */
export function link(page: string, prefix: string): string {
  const match = new RegExp(`href="(${prefix.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}[^"]*)"`).exec(page);
  if (match === null) throw new Error(`no link to ${prefix} on the page:\n${page}`);
  return unescapeHtml(match[1] as string);
}
