/**
 * The agent's own account at a service, in upstream's shapes: introspection (§6.5), explicit
 * signup (§6.4, which carries no `owner`) and the owner invitation (§7.2). Requests go through a `ServiceClient`, so they are
 * signed (and attested for `attested_only` services) like any other call.
 */
import { ServerError, type ServerErrorInit } from "./errors.js";
import { errorFromResponse, type HttpResponse, isOk, parseJson } from "./http.js";
import type { ServiceClient } from "./service.js";

export type AccountState = "UNCLAIMED" | "INVITED" | "CLAIMED" | "EXPIRED" | "ARCHIVED";

/** The account resource (upstream §6.5). */
export interface Account {
  account_id: string;
  agent_did: string;
  state: AccountState;
  created_at: string;
  /** Only while an unclaimed account has a TTL. */
  unclaimed_expires_at?: string;
  /** Only once CLAIMED: the verified identity of the owner. */
  owner: { identity: { type: string; value: unknown }; claimed_at: string; user_id?: string | null } | null;
}

/**
 * The answer to an explicit signup (upstream §6.4): the account without `owner` (a new account has
 * none; `getAccount` tells who owns an existing one).
 */
export type SignedUpAccount = Omit<Account, "owner">;

/** The answer to an owner invitation (upstream §7.2). */
export interface Invitation {
  invitation_id: string;
  expires_at: string;
  state: AccountState;
  /** For recipients who prove themselves by signing in (not `email`): the link to hand them. */
  claim_url?: string;
}

export type OwnerRecipient = { email: string } | { recipient: { type: string; value: unknown } };

const STATES = new Set(["UNCLAIMED", "INVITED", "CLAIMED", "EXPIRED", "ARCHIVED"]);
const serviceError = (init: ServerErrorInit) => new ServerError(init);

function invalid(response: HttpResponse, what: string): ServerError {
  return serviceError({
    status: response.status,
    code: "invalid_response",
    message: `the service's ${what} answer does not have the upstream shape`,
    url: response.url,
  });
}

/** The fields explicit signup and introspection share; `what` names the answer in the error. */
function readAccountFields(response: HttpResponse, what: string): Partial<Account> {
  const body = parseJson(response, serviceError) as Partial<Account> | null;
  if (
    body === null ||
    typeof body !== "object" ||
    typeof body.account_id !== "string" ||
    typeof body.agent_did !== "string" ||
    typeof body.state !== "string" ||
    !STATES.has(body.state) ||
    typeof body.created_at !== "string" ||
    (body.unclaimed_expires_at !== undefined && typeof body.unclaimed_expires_at !== "string")
  ) {
    throw invalid(response, what);
  }
  return body;
}

function readAccount(response: HttpResponse): Account {
  const body = readAccountFields(response, "account");
  if (!("owner" in body)) throw invalid(response, "account");
  return body as Account;
}

/** Only upstream §6.4's fields: whatever else a service adds is not passed on. */
function readSignup(response: HttpResponse): SignedUpAccount {
  const body = readAccountFields(response, "signup") as Account;
  return {
    account_id: body.account_id,
    agent_did: body.agent_did,
    state: body.state,
    created_at: body.created_at,
    ...(body.unclaimed_expires_at === undefined ? {} : { unclaimed_expires_at: body.unclaimed_expires_at }),
  };
}

async function exchange(client: ServiceClient, url: string, init: RequestInit): Promise<HttpResponse> {
  const { response } = await client.send(url, init);
  if (!isOk(response.status)) throw errorFromResponse(response, serviceError);
  return response;
}

/** `GET {accounts}/me`: the account this agent's key answers to (created by implicit signup). */
export async function getAccount(client: ServiceClient, signal?: AbortSignal): Promise<Account> {
  return readAccount(
    await exchange(client, client.endpoint("accounts", "/me"), { method: "GET", ...(signal ? { signal } : {}) }),
  );
}

/** `POST {accounts}`: explicit signup (201 created, 200 when it existed), in upstream §6.4's shape. */
export async function signUp(
  client: ServiceClient,
  options: { termsVersion?: string; signal?: AbortSignal } = {},
): Promise<SignedUpAccount> {
  const body = options.termsVersion === undefined ? {} : { terms_version: options.termsVersion };
  return readSignup(
    await exchange(client, client.endpoint("accounts"), {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
      ...(options.signal ? { signal: options.signal } : {}),
    }),
  );
}

/** `POST {owner_invitation}`: stages the person who may claim the account (202). */
export async function inviteOwner(
  client: ServiceClient,
  recipient: OwnerRecipient,
  options: { redirectUrl?: string; signal?: AbortSignal } = {},
): Promise<Invitation> {
  const body = {
    ...recipient,
    ...(options.redirectUrl === undefined ? {} : { redirect_url: options.redirectUrl }),
  };
  const response = await exchange(client, client.endpoint("owner_invitation"), {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    ...(options.signal ? { signal: options.signal } : {}),
  });
  const answer = parseJson(response, serviceError) as Partial<Invitation> | null;
  if (
    answer === null ||
    typeof answer !== "object" ||
    typeof answer.invitation_id !== "string" ||
    typeof answer.expires_at !== "string" ||
    typeof answer.state !== "string" ||
    (answer.claim_url !== undefined && typeof answer.claim_url !== "string")
  ) {
    throw invalid(response, "invitation");
  }
  return answer as Invitation;
}
