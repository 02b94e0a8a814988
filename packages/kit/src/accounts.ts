/**
 * Explicit signup (upstream §6.4), introspection (§6.5) and pre-claim key rotation (§8.1), each
 * answering exactly the fields upstream shows (upstream.md rule 2).
 */
import { protoError } from "@proto/protocol";
import type { Handler, KitCore } from "./core.js";
import { kitError } from "./errors.js";
import { jsonResponse } from "./http.js";
import { requireDidKey } from "./request-body.js";
import { type AccountResource, type KeyRotationAnswer, toSignupAnswer } from "./resource.js";
import { isoTime } from "./util.js";

export async function reloadAccount(core: KitCore, accountId: string): Promise<AccountResource> {
  const record = await core.store.findAccountById(accountId);
  if (record === undefined) throw new Error("account vanished");
  return core.accountResource(record);
}

export function signupHandler(core: KitCore): Handler {
  return async (request) => {
    const context = await core.authenticate(request, "accounts.signup", true);
    return jsonResponse(context.created ? 201 : 200, toSignupAnswer(context.account));
  };
}

export function introspectionHandler(core: KitCore): Handler {
  return async (request) => {
    const context = await core.authenticate(request, "accounts.me");
    return jsonResponse(200, context.account);
  };
}

export function keyRotationHandler(core: KitCore): Handler {
  return async (request) => {
    const context = await core.authenticate(request, "key_rotation");
    if (context.record.claimedAt !== undefined) {
      throw protoError("owner_binding_blocked", {
        message: "the account is claimed: only its owner can rotate the key",
      });
    }
    const newDid = requireDidKey(context.json().new_account_did, "new_account_did");
    if (newDid === context.did)
      throw protoError("malformed_request", { message: "new_account_did is the current DID" });
    const now = core.now();
    const outcome = await core.store.rotateKey({
      accountId: context.record.id,
      fromDid: context.did,
      toDid: newDid,
      now,
      reason: "rotated",
      unclaimedOnly: true,
    });
    if (outcome === "did_in_use") throw kitError("kit_did_in_use");
    if (outcome === "stale")
      throw protoError("owner_binding_blocked", { message: "the account was claimed meanwhile" });
    const account = await reloadAccount(core, context.record.id);
    const answer: KeyRotationAnswer = {
      account_id: account.account_id,
      agent_did: account.agent_did,
      old_revoked_at: isoTime(now),
    };
    return jsonResponse(200, answer);
  };
}
