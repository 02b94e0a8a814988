/**
 * Server-rendered HTML with escaping by default: every interpolated value is escaped unless it
 * is itself the output of `html`. Listings and labels are attacker-controlled text, so there is
 * no way to splice a raw string in by accident.
 */
export class SafeHtml {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value;
  }
}

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => ESCAPES[c] as string);
}

export type HtmlValue = SafeHtml | string | number | boolean | null | undefined | readonly HtmlValue[];

function render(value: HtmlValue): string {
  if (value === null || value === undefined || value === false) return "";
  if (value instanceof SafeHtml) return value.value;
  if (Array.isArray(value)) return value.map(render).join("");
  return escapeHtml(String(value));
}

export function html(strings: TemplateStringsArray, ...values: HtmlValue[]): SafeHtml {
  let out = strings[0] ?? "";
  for (let i = 0; i < values.length; i++) out += render(values[i] as HtmlValue) + (strings[i + 1] ?? "");
  return new SafeHtml(out);
}

/** The Content-Security-Policy of every page: nothing but this origin's own files. */
export const PAGE_CSP =
  "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'";

/** A page policy with some directives replaced or added. */
export function withDirectives(policy: string, overrides: Record<string, string>): string {
  const directives = new Map<string, string>();
  for (const part of policy.split(";")) {
    const [name, ...values] = part.trim().split(/\s+/);
    if (name) directives.set(name, values.join(" "));
  }
  for (const [name, value] of Object.entries(overrides)) directives.set(name, value);
  return [...directives].map(([name, value]) => (value ? `${name} ${value}` : name)).join("; ");
}

/** Headers every HTML page carries. */
export function pageHeaders(options: { personal: boolean }): Record<string, string> {
  return {
    "content-type": "text/html; charset=utf-8",
    "content-security-policy": PAGE_CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": options.personal ? "no-store" : "no-cache",
  };
}
