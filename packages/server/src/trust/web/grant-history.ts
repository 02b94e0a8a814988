/**
 * A grant's history as its person reads it: granted, changed, used up, revoked, newest first,
 * each with when, how it was approved (passkey or session, and the agent's request when there
 * was one) and what it changed. "Used up" is not stored: it is when an expiry passed before the
 * next change, read off the events.
 */
import type { DiscoveryPermissions, SpendLimit } from "@proto/protocol";
import { spendLimitPhrase as limitPhrase } from "@proto/protocol";
import { html, type SafeHtml } from "../../platform/html.js";
import { diffGrant } from "../authority/changes.js";
import type { GrantEvent } from "../authority/grants.js";
import { date } from "./dates.js";
import { endDay } from "./grant-form.js";

type Entry = { kind: "event"; event: GrantEvent; previous: GrantEvent | undefined } | { kind: "used_up"; at: number };

/** The entries of `events` (newest first, as grantHistory answers), with the expiries that passed. */
function entries(events: readonly GrantEvent[], now: number): Entry[] {
  const oldestFirst = [...events].reverse();
  const out: Entry[] = [];
  oldestFirst.forEach((event, i) => {
    const previous = i > 0 ? oldestFirst[i - 1] : undefined;
    out.push({ kind: "event", event, previous });
    const next = oldestFirst[i + 1];
    const until = next === undefined ? now : next.at;
    if (event.kind !== "revoked" && event.expiresAt !== null && event.expiresAt <= until) {
      out.push({ kind: "used_up", at: event.expiresAt });
    }
  });
  return out.reverse();
}

const HEADINGS = { granted: "Granted", changed: "Changed", revoked: "Revoked" } as const;

function how(event: GrantEvent): SafeHtml {
  const method = event.method === "passkey" ? "with a passkey" : "with your signed-in session";
  const verb = event.kind === "revoked" ? "Revoked" : "Approved";
  return html`<span class="muted">${verb} ${method}${
    event.approvalId === null ? "" : html` · <a href="/approvals/${event.approvalId}">the agent's request</a>`
  }</span>`;
}

function limitLine(
  label: (name: string) => string,
  before: SpendLimit | undefined,
  after: SpendLimit | undefined,
): string {
  const name = label((after ?? before)?.permission ?? "");
  if (after === undefined) return `${name}: limit removed, no spending`;
  return before === undefined
    ? `${name}: ${limitPhrase(after)}`
    : `${name}: ${limitPhrase(after)} (was ${limitPhrase(before)})`;
}

/** What an event set or changed, in lines. */
function changes(entry: Extract<Entry, { kind: "event" }>, label: (name: string) => string): string[] {
  const { event, previous } = entry;
  if (event.kind === "revoked") return [];
  // Granted anew (first, or after a revocation): everything it holds.
  if (event.kind === "granted" || previous === undefined) {
    const limited = new Map(event.spendLimits.map((limit) => [limit.permission, limit]));
    const lines = event.permissions.map((name) => {
      const limit = limited.get(name);
      return limit === undefined ? label(name) : limitLine(label, undefined, limit);
    });
    if (lines.length === 0) lines.push("No permission");
    if (event.expiresAt !== null) lines.push(`Last day ${endDay(event.expiresAt)}`);
    return lines;
  }
  const diff = diffGrant(previous, event, {});
  const lines = [
    ...diff.added.map((name) => `Added: ${label(name)}`),
    ...diff.removed.map((name) => `Removed: ${label(name)}`),
  ];
  for (const change of diff.limits) lines.push(limitLine(label, change.before, change.after));
  if (diff.expiryChanged)
    lines.push(event.expiresAt === null ? "End date removed" : `Last day set to ${endDay(event.expiresAt)}`);
  return lines.length === 0 ? ["Nothing changed"] : lines;
}

/** The history section's list. */
export function historyList(
  events: readonly GrantEvent[],
  declared: DiscoveryPermissions | undefined,
  now: number,
): SafeHtml {
  const label = (name: string) => {
    const description = declared?.[name]?.description;
    return description === undefined ? name : `${description} (${name})`;
  };
  return html`<ol class="history" reversed>${entries(events, now).map((entry) => {
    if (entry.kind === "used_up") {
      return html`<li><p><strong>Used up</strong> ${date(entry.at)}</p>
      <p class="muted">The last day passed: the agent had the service's default permissions again and could not spend.</p></li>`;
    }
    const lines = changes(entry, label);
    return html`<li><p><strong>${HEADINGS[entry.event.kind]}</strong> ${date(entry.event.at)}</p>
      <p>${how(entry.event)}</p>
      ${lines.length === 0 ? "" : html`<ul>${lines.map((line) => html`<li>${line}</li>`)}</ul>`}</li>`;
  })}</ol>`;
}
