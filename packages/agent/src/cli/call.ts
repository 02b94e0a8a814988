/**
 * `proto call`: a signed (and, when the service needs it, attested) request. When the service
 * refuses for want of authority (403 `insufficient_permission` or `spend_limit_exceeded`), the
 * person is asked through the attestor; once they approve, a fresh token carries the widened grant
 * and the request is sent once more (docs/authority.md, "The agent's side").
 */
import { readFileSync } from "node:fs";
import { formatAmount, SPEND_PERIODS, type SpendLimit, type SpendPeriod } from "@proto/protocol";
import { acceptedAttestors } from "../accepted.js";
import type { Agent } from "../agent.js";
import type { Approval } from "../approvals.js";
import type { Attestation } from "../attestor.js";
import { type AuthorityError, explainToken } from "../authority.js";
import { AuthError, UsageError } from "../errors.js";
import type { HttpResponse } from "../http.js";
import { discoverService, ServiceClient, type ServiceDiscovery } from "../service.js";
import { type ApprovalAsk, askedText, requestAndWait } from "./approval.js";
import { amountArgument } from "./authority-text.js";
import { EXIT, errorLine, nextStepFor, type Output } from "./output.js";
import { inline } from "./terminal-text.js";

export interface CallOptions {
  method?: string;
  data?: string;
  header: string[];
  endpoint?: string;
  attestor?: string;
  webBotAuth?: boolean;
  webBotAuthOnly?: boolean;
  signatureAgent?: string;
  signatureAgentString?: boolean;
  /** The agent's words to the person when an approval is asked for. */
  reason?: string;
  /** `--no-wait` sets it false: print the approval link and stop. */
  wait: boolean;
  /** `--per-transaction AMOUNT`: the spend limit to ask for, in the currency's units. */
  perTransaction?: string;
  /** `--per-period AMOUNT[/day|week|month]`. */
  perPeriod?: PeriodAmount;
}

export interface PeriodAmount {
  amount: string;
  period?: SpendPeriod;
}

/** `--per-period`'s value: `100` or `100/month`. */
export function parsePeriodAmount(value: string): PeriodAmount {
  const [amount = "", period, ...rest] = value.split("/");
  const known = SPEND_PERIODS.find((each) => each === period);
  if (amount.trim() === "" || rest.length > 0 || (period !== undefined && known === undefined)) {
    throw new UsageError(
      "invalid_argument",
      `--per-period takes AMOUNT or AMOUNT/PERIOD (PERIOD: ${SPEND_PERIODS.join(", ")}), got ${JSON.stringify(value)}`,
    );
  }
  return { amount, ...(known === undefined ? {} : { period: known }) };
}

export interface CallContext {
  signal: AbortSignal;
  stdin: NodeJS.ReadStream;
}

/** Runs the call and answers the exit code. */
export async function runCall(
  agent: Agent,
  url: string,
  options: CallOptions,
  out: Output,
  context: CallContext,
): Promise<number> {
  const headers = new Headers();
  for (const header of options.header) {
    const colon = header.indexOf(":");
    if (colon <= 0) throw new UsageError("invalid_header", `header ${JSON.stringify(header)} is not 'Name: value'`);
    headers.append(header.slice(0, colon).trim(), header.slice(colon + 1).trim());
  }
  const body = options.data === undefined ? undefined : await readData(options.data, context.stdin);
  if (body !== undefined && !headers.has("content-type")) headers.set("content-type", "application/json");
  const method = (options.method ?? (body === undefined ? "GET" : "POST")).toUpperCase();
  if (body !== undefined && (method === "GET" || method === "HEAD")) {
    throw new UsageError("invalid_argument", `a ${method} request cannot have a body (--data)`);
  }
  if (options.webBotAuth === true && options.webBotAuthOnly === true) {
    throw new UsageError("invalid_argument", "give --web-bot-auth or --web-bot-auth-only, not both");
  }
  const mode =
    options.webBotAuthOnly === true
      ? "single"
      : options.webBotAuth === true || options.signatureAgent !== undefined
        ? "both"
        : undefined;
  const form = options.signatureAgentString === true ? "string" : undefined;
  const webBotAuth = agent.webBotAuth(mode, options.attestor, options.signatureAgent, form);
  const discovery = await discoverService(url, { signal: context.signal });
  const attestors = agent.attestors(options.attestor);
  const client = new ServiceClient(discovery, {
    identity: agent.identity,
    ...(attestors === undefined ? {} : { attestor: attestors }),
    ...(webBotAuth === undefined ? {} : { webBotAuth }),
  });
  const target = options.endpoint === undefined ? url : endpointTarget(client, options.endpoint);
  const init = { method, headers, ...(body === undefined ? {} : { body }), signal: context.signal };
  const called = requestUrl(target, client.origin);
  const document = (response: HttpResponse, attested: boolean) => ({
    url: called,
    status: response.status,
    ok: response.status >= 200 && response.status < 300,
    service_did: discovery.did,
    attested,
    web_bot_auth: webBotAuth === undefined ? null : webBotAuth,
    content_type: response.headers.get("content-type"),
    body: parseBody(response),
  });

  const first = await client.send(target, init);
  const refusal = first.refusal;
  const asking =
    refusal === undefined ? undefined : await approvalAsk(agent, client, refusal, options, `${method} ${called}`);
  const ask = asking !== undefined && "ask" in asking ? asking.ask : undefined;
  if (refusal === undefined || ask === undefined) {
    out.result(document(first.response, first.attested), responseLines(first.response));
    return refusedExit(first.response, out, asking !== undefined && "hint" in asking ? asking.hint : undefined);
  }

  out.print(`HTTP ${first.response.status} ${first.response.statusText}: ${inline(refusalText(refusal))}`.trim());
  out.event({ event: "refused", code: refusal.code, missing: refusal.missing, spend: refusal.spend ?? null });
  // The refused token cannot do this: whatever the person answers, the next call mints anew.
  ask.attestor.tokenCache.delete(ask.attestor.url, agent.did, discovery.did);
  const approval = await requestAndWait(ask, options.wait, out, context.signal);
  const approvalDocument = (answered: Approval) => ({
    approval_id: answered.id,
    approval_url: answered.url ?? null,
    status: answered.status,
    expires_at: answered.expiresAt,
  });
  if (approval.status === "pending") {
    if (out.json) out.result({ ...document(first.response, first.attested), approval: approvalDocument(approval) }, []);
    out.warn(
      errorLine({
        code: "approval_pending",
        message: `the person has not answered yet; once they approve at ${approval.url ?? "the link"}, run this \`proto call\` again`,
      }),
    );
    return EXIT.pending;
  }
  if (approval.status !== "approved") {
    const what = askedText(ask);
    throw approval.status === "declined"
      ? new AuthError("approval_declined", `the person declined the request for ${what} at ${discovery.did}`)
      : new AuthError(
          "approval_expired",
          `the person did not answer the request for ${what} at ${discovery.did} in time; nothing changed (run the call again to ask anew)`,
        );
  }
  out.event(
    {
      event: "approved",
      approval_id: approval.id,
      grant:
        approval.grant === undefined ? null : { grant_id: approval.grant.id, permissions: approval.grant.permissions },
    },
    "Approved. Sending the request again with a fresh token.",
  );
  const retried = await client.send(target, init, { attest: true, fresh: true });
  out.result(
    { ...document(retried.response, retried.attested), approval: approvalDocument(approval) },
    responseLines(retried.response),
  );
  return refusedExit(retried.response, out, undefined);
}

/** The service's refusal in words: what the person has not granted, or the limit it ran into. */
function refusalText(refusal: AuthorityError): string {
  if (refusal.code === "insufficient_permission") {
    return `the person has not granted ${refusal.missing.join(", ")} here`;
  }
  const spend = refusal.spend;
  if (spend === undefined) return "over a spend limit the person set";
  const which = spend.limit === "per_transaction" ? "a transaction" : `a ${spend.period ?? "period"}`;
  return `over the limit the person set on ${spend.permission} for ${which}; ${formatAmount(spend.remaining, spend.currency)} remains`;
}

const LIMIT_FLAGS = "--per-transaction AMOUNT and/or --per-period AMOUNT[/day|week|month]";

/**
 * What to ask the person for after `refusal`; or, when there is nothing to ask yet, what the
 * caller can add: a spending permission or a higher limit is asked for only with the limit the
 * caller wants (a spending permission without a limit allows no spending).
 */
async function approvalAsk(
  agent: Agent,
  client: ServiceClient,
  refusal: AuthorityError,
  options: CallOptions,
  call: string,
): Promise<{ ask: ApprovalAsk } | { hint: string } | undefined> {
  const discovery = client.discovery;
  const spendFlags = options.perTransaction !== undefined || options.perPeriod !== undefined;
  const spending = spendingTarget(refusal, discovery);
  if (refusal.code === "spend_limit_exceeded" && spending === undefined) return undefined;
  if (refusal.code === "insufficient_permission" && refusal.missing.length === 0) return undefined;
  if (spending !== undefined && !spendFlags) {
    const remaining =
      refusal.spend === undefined ? "" : `; ${formatAmount(refusal.spend.remaining, spending.currency)} remains`;
    return {
      hint:
        refusal.code === "spend_limit_exceeded"
          ? `to ask the person for a higher limit, run the call again with ${LIMIT_FLAGS} (in ${spending.currency}${remaining})`
          : `${spending.permission} spends money: to ask the person for it, run the call again with ${LIMIT_FLAGS} (in ${spending.currency})`,
    };
  }
  // The token the service refused: whose grant it carries, and the limits to start from.
  const token = await client.attestor?.attestationFor(discovery.did, acceptedAttestors(discovery.document.billing));
  const attestor = agent.attestorFor(refusal, token?.attestor_url);
  const spendLimits: SpendLimit[] = [];
  if (spendFlags) {
    if (spending === undefined) {
      throw new UsageError(
        "invalid_argument",
        "--per-transaction and --per-period ask for a spend limit, and the service refused no (single) spending permission",
      );
    }
    spendLimits.push(limitFromFlags(spending, currentLimit(token, spending), refusal, options));
  }
  const permissions = refusal.code === "insufficient_permission" ? refusal.missing : [];
  const reason = options.reason ?? defaultReason(call);
  return { ask: { attestor, aud: discovery.did, serviceUrl: discovery.origin, permissions, spendLimits, reason } };
}

/** The spending permission a limit is asked for: the refused one, or the one missing that declares a currency. */
function spendingTarget(
  refusal: AuthorityError,
  discovery: ServiceDiscovery,
): { permission: string; currency: string } | undefined {
  if (refusal.spend !== undefined) return { permission: refusal.spend.permission, currency: refusal.spend.currency };
  const declared = discovery.document.permissions ?? {};
  const spending = refusal.missing.flatMap((name) => {
    const currency = Object.hasOwn(declared, name) ? declared[name]?.currency : undefined;
    return typeof currency === "string" ? [{ permission: name, currency }] : [];
  });
  return spending.length === 1 ? spending[0] : undefined;
}

function currentLimit(
  token: Attestation | undefined,
  spending: { permission: string; currency: string },
): SpendLimit | undefined {
  if (token === undefined) return undefined;
  return explainToken(token.jwt).grant?.spendLimits.find(
    (limit) => limit.permission === spending.permission && limit.currency === spending.currency,
  );
}

/** The limit asked for: the flags over the limit in force (a limit is replaced whole). */
function limitFromFlags(
  spending: { permission: string; currency: string },
  current: SpendLimit | undefined,
  refusal: AuthorityError,
  options: CallOptions,
): SpendLimit {
  const { currency } = spending;
  const limit: SpendLimit = { ...spending };
  const perTransaction =
    options.perTransaction === undefined
      ? current?.perTransaction
      : amountArgument(options.perTransaction, currency, "--per-transaction");
  if (perTransaction !== undefined) limit.perTransaction = perTransaction;
  if (options.perPeriod !== undefined) {
    limit.perPeriod = amountArgument(options.perPeriod.amount, currency, "--per-period");
    limit.period = options.perPeriod.period ?? current?.period ?? refusal.spend?.period ?? "month";
  } else if (current?.perPeriod !== undefined && current.period !== undefined) {
    limit.perPeriod = current.perPeriod;
    limit.period = current.period;
  }
  return limit;
}

/** `proto call DELETE https://notes.example/notes/3`, kept to the reason's 200 characters. */
function defaultReason(call: string): string {
  const reason = `proto call ${call}`;
  return reason.length <= 200 ? reason : `${reason.slice(0, 199)}…`;
}

function parseBody(response: HttpResponse): unknown {
  const text = new TextDecoder().decode(response.body);
  try {
    return text.length > 0 ? JSON.parse(text) : null;
  } catch {
    return text;
  }
}

function responseLines(response: HttpResponse): string[] {
  const text = new TextDecoder().decode(response.body);
  return [
    `HTTP ${response.status} ${response.statusText}`.trim(),
    ...(text.length > 0 ? [text.replace(/\n$/, "")] : []),
  ];
}

/** A non-2xx answer's line on stderr (and what to do next), and its exit code. */
function refusedExit(response: HttpResponse, out: Output, hint: string | undefined): number {
  if (response.status < 300) return EXIT.ok;
  const envelope = parseBody(response) as { error?: { code?: unknown; message?: unknown } } | null;
  const code = typeof envelope?.error?.code === "string" ? envelope.error.code : `http_${response.status}`;
  const message =
    typeof envelope?.error?.message === "string"
      ? envelope.error.message
      : `the service answered HTTP ${response.status} ${response.statusText}`.trim();
  out.warn(errorLine({ code, message: message.replace(/\s+/g, " ") }));
  const next = hint ?? nextStepFor(code);
  if (next !== undefined) out.warn(`proto: ${next}`);
  return response.status === 401 || response.status === 403 ? EXIT.auth : EXIT.server;
}

/** `accounts/me` → the resolved `accounts` endpoint with `/me` appended to its path. */
function endpointTarget(client: ServiceClient, spec: string): string {
  const slash = spec.indexOf("/");
  return slash < 0 ? client.endpoint(spec) : client.endpoint(spec.slice(0, slash), spec.slice(slash));
}

/** The URL a request went to, without its query (which may hold tokens), as the call result names it. */
function requestUrl(target: string, origin: string): string {
  const url = new URL(target, `${origin}/`);
  url.search = "";
  url.hash = "";
  return url.href;
}

async function readData(data: string, stdin: NodeJS.ReadStream): Promise<Uint8Array> {
  if (data === "@-") {
    const chunks: Buffer[] = [];
    for await (const chunk of stdin) chunks.push(Buffer.from(chunk as Buffer));
    return new Uint8Array(Buffer.concat(chunks));
  }
  if (data.startsWith("@")) {
    try {
      return new Uint8Array(readFileSync(data.slice(1)));
    } catch (error) {
      throw new UsageError("invalid_data", `cannot read ${data.slice(1)}: ${(error as Error).message}`);
    }
  }
  return new TextEncoder().encode(data);
}
