/**
 * The owner's side: sign-in with an attestor, the accounts a person owns or was attested for, and
 * owner-binding operations (upstream §7.5, §8.2, §8.4), which need a fresh owner session.
 */
import { ownerAuthenticationRequired, protoError, sameOriginPath } from "@proto/protocol";
import type { Handler, KitCore } from "./core.js";
import { kitError } from "./errors.js";
import { jsonResponse, type KitRequest, redirectResponse } from "./http.js";
import { isJson, parseJsonObject, requireDidKey } from "./request-body.js";
import { type OwnerAccountView, toOwnerAccountView } from "./resource.js";
import { identityKeys, type OwnerSession } from "./sessions.js";
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
    const accounts = records.map((record) =>
      toOwnerAccountView(record, core.accountResource(record), owns(session, keys, record) ? "owner" : "attested"),
    );
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

async function ownerView(core: KitCore, accountId: string): Promise<OwnerAccountView> {
  const record = await core.store.findAccountById(accountId);
  if (record === undefined) throw new Error("account vanished");
  return toOwnerAccountView(record, core.accountResource(record), "owner");
}

/** Owner-binding operations: a session (401), a CLAIMED account (409), its owner (403), fresh (403). */
async function ownerOperation(
  core: KitCore,
  request: KitRequest,
): Promise<{ session: OwnerSession; record: AccountRecord; body: Record<string, unknown> }> {
  const session = await requireSession(core, request);
  if (!isJson(request.headers)) {
    throw protoError("malformed_request", { message: "owner operations take a JSON body (application/json)" });
  }
  const body = parseJsonObject(request.body);
  const did = requireDidKey(body.did, "did");
  const record = await core.store.findAccountByDid(did);
  if (record === undefined) {
    throw ownerAuthenticationRequired({ hasSession: true, message: "you do not own an account with this DID" });
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
  return { session, record, body };
}

export function ownerRevokeHandler(core: KitCore): Handler {
  return async (request) => {
    const { record } = await ownerOperation(core, request);
    if (record.keyRevokedAt === undefined) {
      await core.store.revokeKey({ accountId: record.id, did: record.did, now: core.now(), reason: "owner_revoked" });
    }
    return jsonResponse(200, { account: await ownerView(core, record.id) });
  };
}

export function ownerRekeyHandler(core: KitCore): Handler {
  return async (request) => {
    const { record, body } = await ownerOperation(core, request);
    const newDid = requireDidKey(body.new_account_did, "new_account_did");
    if (newDid === record.did) throw protoError("malformed_request", { message: "new_account_did is the current DID" });
    const outcome = await core.store.rotateKey({
      accountId: record.id,
      fromDid: record.did,
      toDid: newDid,
      now: core.now(),
      reason: "owner_rekeyed",
      unclaimedOnly: false,
    });
    if (outcome === "did_in_use") throw kitError("kit_did_in_use");
    if (outcome === "stale") throw kitError("kit_did_in_use", "the account's key changed meanwhile; reload");
    return jsonResponse(200, { account: await ownerView(core, record.id) });
  };
}
