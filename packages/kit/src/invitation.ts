/** Owner invitation (upstream §7.2) and its atomic replacement (§7.3). */
import { protoError, type Recipient, recipientKey } from "@proto/protocol";
import type { Handler, KitCore } from "./core.js";
import { claimLink } from "./email.js";
import { jsonResponse } from "./http.js";
import { toAccountResource } from "./resource.js";
import type { AccountRecord } from "./store/types.js";
import { hashToken, isoTime, randomToken } from "./util.js";

/** The recipient of an invitation body: typed `recipient`, or the bare `email` shorthand (not both). */
function recipientOf(core: KitCore, body: Record<string, unknown>): Recipient {
  const hasEmail = body.email !== undefined;
  const hasRecipient = body.recipient !== undefined;
  if (hasEmail && hasRecipient) {
    throw protoError("malformed_request", { message: "send recipient or email, not both" });
  }
  let raw: unknown;
  if (hasEmail) {
    if (typeof body.email !== "string") throw protoError("malformed_request", { message: "email must be a string" });
    raw = { type: "email", value: body.email };
  } else {
    raw = body.recipient;
    if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
      throw protoError("malformed_request", { message: "recipient {type, value} (or email) is required" });
    }
  }
  const type = (raw as Record<string, unknown>).type;
  if (typeof type !== "string") throw protoError("malformed_request", { message: "recipient.type must be a string" });
  const accepted = core.options.recipientTypes;
  if (!accepted.includes(type)) {
    throw protoError("unsupported_recipient_type", {
      message: `this service accepts recipients of type ${accepted.join(", ")}`,
    });
  }
  try {
    return core.sessions.canonicalIdentity(raw);
  } catch (error) {
    throw protoError("malformed_request", {
      message: (error as Error).message.replace(/^invalid identity: /, "recipient: "),
    });
  }
}

const MAX_REDIRECT_URL_LENGTH = 2048;

/** `redirect_url`, only to an origin on the operator's allow-list (an open redirect otherwise). */
function redirectUrlOf(core: KitCore, value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  const refuse = (why: string) => protoError("malformed_request", { message: `redirect_url ${why}` });
  if (typeof value !== "string") throw refuse("must be a string");
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is refused
  if (value.length > MAX_REDIRECT_URL_LENGTH || /[\u0000-\u001f\u007f\\]/.test(value)) throw refuse("is not a URL");
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw refuse("must be an absolute URL");
  }
  if (url.username !== "" || url.password !== "") throw refuse("must not carry credentials");
  if (!core.options.redirectOrigins.includes(url.origin)) {
    throw refuse(`must be on an allowed origin (${core.options.redirectOrigins.join(", ")})`);
  }
  return url.href;
}

export function invitationHandler(core: KitCore): Handler {
  return async (request) => {
    const context = await core.authenticate(request, "owner_invitation");
    const body = context.json();
    const recipient = recipientOf(core, body);
    const redirectUrl = redirectUrlOf(core, body.redirect_url);
    if (context.record.claimedAt !== undefined) throw protoError("already_claimed");
    const now = core.now();
    const token = randomToken("clm_");
    const expiresAt = now + core.options.invitationTtlSeconds * 1000;
    // The mail goes first: when it cannot be sent, nothing is staged and a previous invitation
    // keeps working (the answer is 503, the agent tries again).
    const mailed = recipient.type === "email" && core.mail !== undefined;
    if (mailed) {
      await core.mail?.sendInvitation({ address: recipient.value, agentDid: context.record.did, token, expiresAt });
    }
    const invitation = await core.store.replaceInvitation({
      accountId: context.record.id,
      tokenHash: hashToken(token),
      recipient,
      recipientKey: recipientKey(recipient),
      redirectUrl,
      now,
      expiresAt,
    });
    const record: AccountRecord = { ...context.record, invitation };
    const account = toAccountResource(record, now, core.options.ttlSeconds);
    const claimUrl = claimLink(core.discovery.endpoints.claim_page, token);
    const expires = isoTime(invitation.expiresAt);
    if (core.onInvitation !== undefined) {
      try {
        await core.onInvitation({ account, recipient, claimUrl, token, expiresAt: expires, mailed });
      } catch (error) {
        core.onError(error);
      }
    }
    // The claim link goes to the agent only where following it proves nothing: for `email` the
    // link itself is the proof of the mailbox, so it travels by mail alone.
    return jsonResponse(202, {
      invitation_id: invitation.id,
      expires_at: expires,
      state: account.state,
      ...(recipient.type === "email" ? {} : { claim_url: claimUrl }),
    });
  };
}
