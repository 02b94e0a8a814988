/** The claim page and claim completion (upstream §7.4): binding an owner to an account. */
import { invitationNotFound, ownerAuthenticationRequired, protoError, type Recipient } from "@proto/protocol";
import { reloadAccount } from "./accounts.js";
import type { Handler, KitCore } from "./core.js";
import { kitError } from "./errors.js";
import { jsonResponse, redirectResponse } from "./http.js";
import { claimedPage, claimPage } from "./pages.js";
import { isForm, isJson, parseJsonObject } from "./request-body.js";
import { accountExpiresAt, toClaimAnswer } from "./resource.js";
import { identityKeys } from "./sessions.js";
import type { AccountRecord } from "./store/types.js";
import { hashToken, safeEqual } from "./util.js";

const MAX_CLAIM_TOKEN_LENGTH = 256;

export interface Claimable {
  account: AccountRecord;
  invitationId: string;
  recipientKey: string;
  recipient: Recipient;
  expiresAt: number;
  redirectUrl: string | undefined;
  /** When the e-mail link of this invitation was used to sign in (it works once). */
  signedInAt: number | undefined;
}

/** The invitation a claim token names, checked in the order clients can act on. */
export async function claimable(core: KitCore, token: unknown): Promise<Claimable> {
  if (typeof token !== "string" || token.length === 0) {
    throw protoError("malformed_request", { message: "token is required" });
  }
  if (token.length > MAX_CLAIM_TOKEN_LENGTH) throw invitationNotFound();
  const invitation = await core.store.findInvitationByTokenHash(hashToken(token));
  if (invitation === undefined) throw invitationNotFound();
  const account = await core.store.findAccountById(invitation.accountId);
  if (account === undefined) throw invitationNotFound();
  if (account.claimedAt !== undefined) throw protoError("already_claimed");
  const now = core.now();
  const accountExpiry = accountExpiresAt(account, core.options.ttlSeconds);
  if (accountExpiry !== undefined && now >= accountExpiry) {
    throw protoError("account_expired", { message: "this unclaimed account expired" });
  }
  if (invitation.status === "replaced") {
    throw protoError("invitation_expired", { message: "this invitation was replaced by a newer one" });
  }
  if (invitation.status !== "pending" || invitation.expiresAt <= now) {
    throw protoError("invitation_expired", { message: "this invitation expired" });
  }
  return {
    account,
    invitationId: invitation.id,
    recipientKey: invitation.recipientKey,
    recipient: invitation.recipient,
    expiresAt: invitation.expiresAt,
    redirectUrl: invitation.redirectUrl,
    signedInAt: invitation.signedInAt,
  };
}

/** Where the claim page's "Continue as <address>" button posts (the e-mail ceremony, `email.ts`). */
export const EMAIL_SIGNIN_PATH = "/email-signin";

export function claimPageHandler(core: KitCore): Handler {
  return async (request) => {
    const token = request.url.searchParams.get("token") ?? "";
    if (token.length === 0) throw invitationNotFound({ message: "the claim link has no token" });
    const claim = await claimable(core, token);
    const session = await core.sessions.fromHeaders(request.headers);
    const here = `${request.url.pathname}${request.url.search}`;
    return claimPage({
      serviceName: core.options.serviceName,
      attestorName: (issuer) => core.attestors.get(issuer)?.displayName ?? issuer,
      agentDid: claim.account.did,
      recipient: claim.recipient,
      expiresAt: claim.expiresAt,
      completionPath: `${core.discovery.endpoints.claim_completion}/${encodeURIComponent(token)}`,
      session:
        session === undefined
          ? undefined
          : {
              csrf: session.csrf,
              identities: session.identities,
              isRecipient: identityKeys(session).has(claim.recipientKey),
              fresh: core.sessions.isFresh(session, core.options.freshnessSeconds),
            },
      signInLinks: core.attestors.signInAttestors().map((attestor) => ({
        label: attestor.displayName,
        href: `${core.ownerPath}/signin?${new URLSearchParams({ attestor: attestor.name, return_to: here })}`,
      })),
      // An e-mail recipient proves the address with the mailed link (an attestor's sign-in names
      // a pseudonymous subject, never an address).
      emailSignIn:
        claim.recipient.type === "email"
          ? { action: `${core.ownerPath}${EMAIL_SIGNIN_PATH}`, token, used: claim.signedInAt !== undefined }
          : undefined,
    });
  };
}

/** The token of `POST {claim_completion}/<token>`: the last path segment. */
function pathToken(pathname: string): string {
  const segment = pathname.slice(pathname.lastIndexOf("/") + 1);
  try {
    return decodeURIComponent(segment);
  } catch {
    throw invitationNotFound();
  }
}

/**
 * `POST {claim_completion}/<token>` (upstream §7.4): JSON for clients, a page (or the invitation's
 * `redirect_url`) for the claim page's form; errors in the same format as the request.
 */
export function claimCompletionHandler(core: KitCore): Handler {
  return async (request) => {
    const form = isForm(request.headers);
    try {
      const token = pathToken(request.url.pathname);
      let csrf: string | undefined;
      if (form) {
        const params = new URLSearchParams(Buffer.from(request.body ?? new Uint8Array()).toString("utf8"));
        csrf = params.get("csrf") ?? undefined;
      } else if (request.body !== undefined && request.body.byteLength > 0) {
        if (!isJson(request.headers)) {
          throw protoError("malformed_request", { message: "send JSON (application/json), a form, or no body" });
        }
        parseJsonObject(request.body);
      }
      const claim = await claimable(core, token);
      const session = await core.sessions.fromHeaders(request.headers);
      if (session === undefined) {
        throw ownerAuthenticationRequired({ hasSession: false, message: "sign in to claim this account" });
      }
      // A form post must carry the session's form token (cross-site forms cannot read it).
      if (form && (csrf === undefined || !safeEqual(csrf, session.csrf))) throw kitError("kit_csrf");
      const freshness = core.options.freshnessSeconds;
      if (!core.sessions.isFresh(session, freshness)) {
        throw protoError("owner_session_too_stale", {
          message: `sign in again: claiming needs an authentication within ${freshness} seconds`,
        });
      }
      if (!identityKeys(session).has(claim.recipientKey)) {
        throw ownerAuthenticationRequired({
          hasSession: true,
          message: "you are signed in as someone other than the invitation's recipient",
        });
      }
      const claimed = await core.store.claim({
        invitationId: claim.invitationId,
        accountId: claim.account.id,
        ownerKey: claim.recipientKey,
        ownerRecipient: claim.recipient,
        ownerPersonId: session.personId,
        now: core.now(),
      });
      if (!claimed) {
        // Lost a race with a replacement, an expiry or another claim: report what holds now.
        await claimable(core, token);
        throw protoError("already_claimed");
      }
      const account = await reloadAccount(core, claim.account.id);
      if (!form) return jsonResponse(200, toClaimAnswer(account));
      if (claim.redirectUrl !== undefined) return redirectResponse(claim.redirectUrl);
      return claimedPage({
        serviceName: core.options.serviceName,
        agentDid: account.agent_did,
        claimedAt: core.now(),
        ownerPage: core.options.ownerPage,
      });
    } catch (error) {
      return form ? core.errorPage(error, request) : core.errorResponse(error, request);
    }
  };
}
