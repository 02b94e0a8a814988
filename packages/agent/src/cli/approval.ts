/**
 * Asking the person for more authority from the command line: the approval request, its link and
 * QR code, and the wait (a spinner on a terminal, JSON lines on stderr with `--json`).
 */
import { type SpendLimit, spendLimitPhrase } from "@proto/protocol";
import type { Approval } from "../approvals.js";
import type { AttestorClient } from "../attestor.js";
import { Interrupted, type Output, Spinner } from "./output.js";
import { showLink } from "./show-link.js";
import { inline } from "./terminal-text.js";

export interface ApprovalAsk {
  attestor: AttestorClient;
  aud: string;
  serviceUrl: string;
  permissions: string[];
  spendLimits: SpendLimit[];
  reason: string;
}

/** What is asked for, in a person's words: `notes:delete` and `purchase up to 50.00 EUR a transaction`. */
export function askedText(ask: Pick<ApprovalAsk, "permissions" | "spendLimits">): string {
  const limited = new Set(ask.spendLimits.map((limit) => limit.permission));
  return [
    ...ask.permissions.filter((name) => !limited.has(name)),
    ...ask.spendLimits.map((limit) => `${limit.permission} ${spendLimitPhrase(limit)}`),
  ].join(", ");
}

function minutesLeft(expiresAt: string): number {
  return Math.max(0, Math.round((Date.parse(expiresAt) - Date.now()) / 60_000));
}

/**
 * Sends the approval request and shows its link; with `wait`, polls until the person answers and
 * returns the answered approval (approved, declined or expired), else the pending one.
 */
export async function requestAndWait(
  ask: ApprovalAsk,
  wait: boolean,
  out: Output,
  signal: AbortSignal,
): Promise<Approval> {
  const requested = await ask.attestor.requestApproval({
    aud: ask.aud,
    serviceUrl: ask.serviceUrl,
    permissions: ask.permissions,
    spendLimits: ask.spendLimits,
    reason: ask.reason,
    signal,
  });
  out.print(`Asking the person for ${inline(askedText(ask))}, in the agent's words: "${inline(ask.reason)}"`);
  await showLink(
    out,
    requested.url ?? "",
    `Open this link to approve it (it expires in ${minutesLeft(requested.expiresAt)} minutes):`,
    {
      event: "approval_requested",
      approval_id: requested.id,
      approval_url: requested.url,
      expires_at: requested.expiresAt,
      interval: requested.interval ?? null,
    },
  );
  if (!wait) return requested;

  const spinner = out.interactive ? new Spinner(out.stdout) : undefined;
  const text = (approval: Approval) =>
    `waiting for the person to approve (${minutesLeft(approval.expiresAt)} min left; Ctrl-C stops waiting)`;
  if (spinner) spinner.start(text(requested));
  else out.event({ event: "waiting", via: "poll", approval_id: requested.id }, "Waiting for the person to approve...");
  try {
    return await ask.attestor.waitForApproval(requested.id, {
      ...(requested.interval === undefined ? {} : { interval: requested.interval }),
      aud: ask.aud,
      signal,
      onPoll: ({ approval }) => spinner?.update(text(approval)),
    });
  } catch (error) {
    if (error instanceof Interrupted) {
      spinner?.stop();
      out.note(
        `Stopped waiting. The request stays open until ${requested.expiresAt}: once the person approves it, run the same command again.`,
      );
    }
    throw error;
  } finally {
    spinner?.stop();
  }
}
