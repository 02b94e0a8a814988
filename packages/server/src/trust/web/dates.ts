import { html, type SafeHtml } from "../../platform/html.js";

/** A moment on a page: minutes in UTC, machine-readable in `datetime`; "never" for none. */
export function date(ms: number | null): SafeHtml {
  return ms === null
    ? html`<span class="muted">never</span>`
    : html`<time datetime="${new Date(ms).toISOString()}">${new Date(ms).toISOString().slice(0, 16).replace("T", " ")} UTC</time>`;
}
