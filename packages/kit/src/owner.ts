/**
 * The owner's side: sign-in with an attestor, the accounts a person owns or was attested for, and
 * owner-binding operations (upstream §7.5, §8.2, §8.4), which need a fresh owner session.
 */
import { ownerAuthenticationRequired, protoError, sameOriginPath } from "@proto/protocol";
import type { Handler, KitCore } from "./core.js";
import { kitError } from "./errors.js";
import { jsonResponse, type KitRequest, redirectResponse } from "./http.js";
import { isJson, parseJsonObject, requireDidKey } from "./request-body.js";
import { accountExpiresAt, type OwnerAccountView, toOwnerAccountView } from "./resource.js";
import { identityKeys, type OwnerSession } from "./sessions.js";
import { OWNER_SPENDS_PER_ACCOUNT, spendsByAccount } from "./spend-view.js";
import type { AccountRecord, PersonRecord } from "./store/types.js";
import { isoTime } from "./util.js";

/** Where a sign-in returns: a path on this service's origin, else the owned accounts. */
function returnTo(core: KitCore, value: string | null): string {
  return sameOriginPath(value, core.origin) ?? `${core.ownerPath}/accounts`;
}

export function signInStartHandler(core: KitCore): Handler {
  return async (request) => {
    const params = request.url.searchParams;
    const candidates = core.attestors.signInAttestors();
    const name = params.get("attestor") ?? (candidates.length === 1 ? candidates[0]?.name : undefined);
    if (name === undefined) throw kitError("kit_unknown_attestor", "say which attestor to sign in with (attestor=...)");
    const { location, setCookie } = await core.signIn.start(name, returnTo(core, params.get("return_to")));
    return redirectResponse(location, [setCookie]);
  };
}

export function signInCallbackHandler(core: KitCore): Handler {
  return async (request) => {
    const result = await core.signIn.complete(request.url, request.headers);
    // Checked again on the way out: a row written by an older kit was held to a weaker rule.
    return redirectResponse(returnTo(core, result.returnTo), result.setCookies);
  };
}

export function signOutHandler(core: KitCore): Handler {
  return async (request) => {
    const session = await core.sessions.fromHeaders(request.headers);
    const cookie = session === undefined ? core.sessions.clearCookie() : await core.sessions.destroy(session);
    return jsonResponse(200, { ok: true }, { "set-cookie": [cookie] });
  };
}

async function requireSession(core: KitCore, request: KitRequest): Promise<OwnerSession> {
  const session = await core.sessions.fromHeaders(request.headers);
  if (session === undefined) throw ownerAuthenticationRequired({ hasSession: false, message: "sign in first" });
  return session;
}

function owns(session: OwnerSession, keys: Set<string>, record: AccountRecord): boolean {
  if (record.claimedAt === undefined) return false;
  if (record.ownerPersonId !== undefined && record.ownerPersonId === session.personId) return true;
  return record.ownerKey !== undefined && keys.has(record.ownerKey);
}

export function ownedAccountsHandler(core: KitCore): Handler {
  return async (request) => {
    const session = await requireSession(core, request);
    const person: PersonRecord | undefined =
      session.personId === undefined ? undefined : await core.store.findPerson(session.personId);
    const keys = identityKeys(session);
    const records = await core.store.listAccountsForPerson(session.personId, [...keys]);
    // What each agent spent under the person's grants (docs/authority.md), by grant.
    const spends = spendsByAccount(
      await core.store.listSpends(
        records.map((record) => record.id),
        OWNER_SPENDS_PER_ACCOUNT,
      ),
    );
    const accounts = records.map((record) => ({
      ...toOwnerAccountView(record, core.accountResource(record), owns(session, keys, record) ? "owner" : "attested"),
      spending: spends.get(record.id) ?? [],
    }));
    return jsonResponse(200, {
      person:
        person === undefined
          ? null
          : { id: person.id, issuer: person.issuer, subject: person.subject, created_at: isoTime(person.createdAt) },
      identities: session.identities,
      authenticated_at: session.authenticatedAt === undefined ? null : isoTime(session.authenticatedAt),
      accounts,
    });
  };
}

/** The body of an owner operation: JSON only (a cross-site form cannot send it without a preflight). */
function jsonBody(request: KitRequest): Record<string, unknown> {
  if (!isJson(request.headers)) {
    throw protoError("malformed_request", { message: "owner operations take a JSON body (application/json)" });
  }
  return parseJsonObject(request.body);
}

/**
 * Owner-binding operations (upstream §7.5, §8.2, §8.4), checked in this order: a session (401), the
 * account (404 `unknown_account`, 410 `account_expired`), CLAIMED (409 `not_claimed`), its owner
 * (403), authenticated within the freshness window (403 `owner_session_too_stale`).
 */
async function ownerOperation(
  core: KitCore,
  session: OwnerSession,
  record: AccountRecord | undefined,
): Promise<AccountRecord> {
  if (record === undefined) throw protoError("unknown_account", { message: "no account with this DID or id" });
  const expiresAt = accountExpiresAt(record, core.options.ttlSeconds);
  if (expiresAt !== undefined && core.now() >= expiresAt) {
    throw protoError("account_expired", { message: "this unclaimed account expired" });
  }
  if (record.claimedAt === undefined) throw protoError("not_claimed", { message: "the account has no owner yet" });
  if (!owns(session, identityKeys(session), record)) {
    throw ownerAuthenticationRequired({ hasSession: true, message: "you do not own this account" });
  }
  const freshness = core.options.freshnessSeconds;
  if (!core.sessions.isFresh(session, freshness)) {
    throw protoError("owner_session_too_stale", {
      message: `sign in again: this operation needs an authentication within ${freshness} seconds`,
    });
  }
  return record;
}

export interface RekeyResult {
  account_id: string;
  agent_did: string;
  old_revoked_at: string;
  state: string;
}

export interface RevocationResult {
  account_id: string;
  revoked_at: string;
}

/**
 * Owner re-key (upstream §8.2): binds a new agent key to a claimed account the session owns;
 * `account_id` and the owner stay, the old DID is revoked. Throws the upstream codes.
 */
export async function rekeyAccount(
  core: KitCore,
  session: OwnerSession,
  currentDid: unknown,
  newDid: unknown,
): Promise<RekeyResult> {
  const current = requireDidKey(currentDid, "current_account_did");
  const next = requireDidKey(newDid, "new_account_did");
  if (next === current) throw protoError("malformed_request", { message: "new_account_did is the current DID" });
  const record = await ownerOperation(core, session, await core.store.findAccountByDid(current));
  const now = core.now();
  const outcome = await core.store.rotateKey({
    accountId: record.id,
    fromDid: current,
    toDid: next,
    now,
    reason: "owner_rekeyed",
    unclaimedOnly: false,
  });
  if (outcome === "did_in_use") {
    throw protoError("already_claimed", { message: "new_account_did is already used by an account, or revoked" });
  }
  if (outcome === "stale") throw protoError("unknown_account", { message: "the account's key changed meanwhile" });
  const account = await ownerView(core, record.id);
  return {
    account_id: account.account_id,
    agent_did: account.agent_did,
    old_revoked_at: isoTime(now),
    state: account.state,
  };
}

/**
 * Owner revocation (upstream §8.4) of the agent key of a claimed account the session owns, named by
 * `account_id` or `agent_did` (one of them); idempotent, answering the first revocation's time.
 */
export async function revokeAccountKey(
  core: KitCore,
  session: OwnerSession,
  target: { account_id?: unknown; agent_did?: unknown },
): Promise<RevocationResult> {
  const { account_id: accountId, agent_did: agentDid } = target;
  if ((accountId === undefined) === (agentDid === undefined)) {
    throw protoError("malformed_request", { message: "send account_id or agent_did (one of them)" });
  }
  let found: AccountRecord | undefined;
  if (accountId !== undefined) {
    if (typeof accountId !== "string" || accountId.length === 0 || accountId.length > 128) {
      throw protoError("malformed_request", { message: "account_id must be a string" });
    }
    found = await core.store.findAccountById(accountId);
  } else {
    found = await core.store.findAccountByDid(requireDidKey(agentDid, "agent_did"));
  }
  const record = await ownerOperation(core, session, found);
  if (record.keyRevokedAt === undefined) {
    await core.store.revokeKey({ accountId: record.id, did: record.did, now: core.now(), reason: "owner_revoked" });
  }
  const after = await ownerView(core, record.id);
  return { account_id: after.account_id, revoked_at: after.key_revoked_at ?? isoTime(core.now()) };
}

/** `POST {key_rekey}` `{current_account_did, new_account_did}`: 200 the re-key result. */
export function keyRekeyHandler(core: KitCore): Handler {
  return async (request) => {
    const session = await requireSession(core, request);
    const body = jsonBody(request);
    return jsonResponse(200, await rekeyAccount(core, session, body.current_account_did, body.new_account_did));
  };
}

/** `POST {key_revocation}` `{account_id}` or `{agent_did}`: 200 `{account_id, revoked_at}`. */
export function keyRevocationHandler(core: KitCore): Handler {
  return async (request) => {
    const session = await requireSession(core, request);
    const body = jsonBody(request);
    return jsonResponse(200, await revokeAccountKey(core, session, body));
  };
}

async function ownerView(core: KitCore, accountId: string): Promise<OwnerAccountView> {
  const record = await core.store.findAccountById(accountId);
  if (record === undefined) throw new Error("account vanished");
  return toOwnerAccountView(record, core.accountResource(record), "owner");
}
