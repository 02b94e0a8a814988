/**
 * Server records as lines for a person: a listing, an account. Every field came from a server
 * (a directory anyone may run, a service), so each is kept to its line with control characters
 * shown as escapes: a title cannot clear the screen or forge the next listing.
 */
import type { Account } from "../account.js";
import type { Listing } from "../directory.js";
import { block, inline } from "./terminal-text.js";

/** A listing's head line (`status did  title  [tags]`), and with `full` its other fields. */
export function describeListing(listing: Listing, full: boolean): string[] {
  const tags = listing.tags.map(inline).join(", ");
  const head = `${inline(listing.status).padEnd(7)} ${inline(listing.service_did)}  ${
    listing.title === null ? "(untitled)" : inline(listing.title)
  }${listing.tags.length > 0 ? `  [${tags}]` : ""}`;
  if (!full) return [head];
  return [
    head,
    // Free text may run over lines (the directory allows line breaks): each one indented, escapes visible.
    ...(listing.description
      ? block(listing.description)
          .split("\n")
          .map((line) => `  ${line}`)
      : []),
    `  discovery ${inline(listing.discovery_url)}`,
    `  listed ${inline(listing.first_listed_at)}, updated ${inline(listing.updated_at)}, fetched ${inline(listing.fetched_at)}`,
  ];
}

/** `proto account show`: the account's state, dates and owner. */
export function describeAccount(acct: Account): string[] {
  return [
    `${inline(acct.state)} account ${inline(acct.account_id)} for ${inline(acct.agent_did)}`,
    `  created   ${inline(acct.created_at)}`,
    ...(acct.unclaimed_expires_at === undefined
      ? []
      : [`  expires   ${inline(acct.unclaimed_expires_at)} unless claimed`]),
    ...(acct.owner === null
      ? []
      : [`  owner     ${describeIdentity(acct.owner.identity)} since ${inline(acct.owner.claimed_at)}`]),
  ];
}

/** A recipient identity in one line: `e-mail alice@example.com`, `oidc https://issuer subject`. */
export function describeIdentity(identity: { type: string; value: unknown }): string {
  const value = identity.value;
  if (typeof value === "string") return inline(`${identity.type} ${value}`);
  if (typeof value === "object" && value !== null && "issuer" in value && "sub" in value) {
    return inline(`${identity.type} ${String(value.issuer)} ${String(value.sub)}`);
  }
  return inline(`${identity.type} ${JSON.stringify(value)}`);
}
