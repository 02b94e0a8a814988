/**
 * The mail that tells a person their agent asks for more. It names the agent and the service, says
 * what is asked in the service's own descriptions, quotes the agent's reason as the agent's words,
 * and links to the approval page. It carries nothing secret: the page needs the person's session.
 */

import { spendLimitPhrase as limitPhrase } from "@proto/protocol";
import { html } from "../../platform/html.js";
import type { Mail, Mailer } from "../mail.js";
import type { Db } from "../store.js";
import type { Approval } from "./approvals.js";

/** The person's e-mail address in force, if they have one (people may sign in otherwise). */
export async function personEmail(db: Db, humanId: string): Promise<string | undefined> {
  const row = await db
    .selectFrom("trust_verifications")
    .select("subject")
    .where("human_id", "=", humanId)
    .where("method", "=", "email")
    .where("revoked_at", "is", null)
    .executeTakeFirst();
  return row?.subject;
}

/** Control characters, DEL, C1 and line or paragraph separators: what no subject line may hold. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: refusing control characters is the point
const LINE_BREAKING = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]+/gu;

/** Text an agent chose, safe in a subject line: one line, no control characters, bounded. */
function oneLine(text: string, max: number): string {
  const clean = text.replace(LINE_BREAKING, " ").trim();
  const chars = [...clean];
  return chars.length <= max ? clean : `${chars.slice(0, max - 1).join("")}…`;
}

/** What the agent asks, one line each: `notes:delete: Delete your notes`. */
export function askedLines(approval: Approval): string[] {
  const limited = new Set(approval.spendLimits.map((limit) => limit.permission));
  const lines = approval.permissions
    .filter((name) => !limited.has(name))
    .map((name) => `${name}: ${approval.declared[name]?.description ?? "(no description)"}`);
  for (const limit of approval.spendLimits) {
    const description = approval.declared[limit.permission]?.description ?? "(no description)";
    lines.push(`${limit.permission}: ${description}, ${limitPhrase(limit)}`);
  }
  return lines;
}

export function approvalMail(approval: Approval, to: string, agentLabel: string | null, publicUrl: string): Mail {
  const agent =
    agentLabel === null || agentLabel.trim() === "" ? "Your agent" : `Your agent “${oneLine(agentLabel, 60)}”`;
  const service = new URL(approval.serviceUrl).host;
  const link = `${publicUrl}/approvals/${approval.id}`;
  const minutes = Math.max(1, Math.round((approval.expiresAt - approval.createdAt) / 60000));
  const lines = askedLines(approval);
  const text = [
    `${agent} asks for more at ${service} (${approval.aud}).`,
    "",
    "It asks for:",
    ...lines.map((line) => `- ${line}`),
    "",
    `Your agent says: “${approval.reason}”`,
    "(These are your agent's words, not proto trust's.)",
    "",
    `Review it, then approve or decline, within ${minutes} minutes:`,
    link,
    "",
    "Nothing changes unless you approve. If you do not recognise this request, decline it.",
  ].join("\n");
  return {
    to,
    subject: `${agent} asks for more at ${service}`,
    text,
    html: html`<p>${agent} asks for more at <strong>${service}</strong> (<code>${approval.aud}</code>).</p>
<p>It asks for:</p>
<ul>${lines.map((line) => html`<li>${line}</li>`)}</ul>
<p>Your agent says: “${approval.reason}”<br><small>These are your agent's words, not proto trust's.</small></p>
<p><a href="${link}">Review the request</a> and approve or decline it within ${minutes} minutes.</p>
<p>Nothing changes unless you approve. If you do not recognise this request, decline it.</p>`.value,
  };
}

export interface TellDeps {
  db: Db;
  mailer: Mailer;
  publicUrl: string;
}

/** Mails the person about a new request, when they have an address; the page and /account show it anyway. */
export async function tellPerson(deps: TellDeps, approval: Approval, agentLabel: string | null): Promise<void> {
  const to = await personEmail(deps.db, approval.humanId);
  if (to === undefined) return;
  await deps.mailer.send(approvalMail(approval, to, agentLabel, deps.publicUrl));
}
