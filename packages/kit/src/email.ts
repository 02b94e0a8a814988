/**
 * The e-mail ceremony (upstream §7.2, §7.7.1, §12.3, §12.6): the kit mails the recipient of an
 * `email` invitation a link to the claim page; opening it changes nothing (mail scanners fetch
 * links); pressing "Continue as <address>" spends the link, once, for an owner session holding
 * that address; the claim form then completes the claim as for any other recipient.
 */
import { isLoopbackHostname, ProtoError, protoError, rateLimitExceeded, recipientKey } from "@proto/protocol";
import { claimable } from "./claim.js";
import { KitConfigError } from "./config-error.js";
import type { Handler, KitCore } from "./core.js";
import { kitError } from "./errors.js";
import { type KitRequest, redirectResponse } from "./http.js";
import {
  DEFAULT_MAILS_PER_RECIPIENT_PER_HOUR,
  DevelopmentOutbox,
  invitationMail,
  type KitMailer,
  type KitMailOptions,
  SmtpMailer,
} from "./mailer.js";
import { outboxPage } from "./pages.js";
import type { RateLimiter } from "./rate-limit.js";
import { isForm } from "./request-body.js";
import { identityKeys } from "./sessions.js";
import { hashToken } from "./util.js";

/** How long an agent is asked to wait after the mail could not be handed over. */
export const MAIL_RETRY_AFTER_SECONDS = 60;

const MAIL_WINDOW_SECONDS = 3600;

/** The claim link of a token: `{claim_page}?token=`. */
export function claimLink(claimPage: string, token: string): string {
  const url = new URL(claimPage);
  url.searchParams.set("token", token);
  return url.href;
}

/** Sends the invitation mails: one transport, a per-address hourly cap, failures as 503. */
export class InvitationMailer {
  readonly outbox: DevelopmentOutbox | undefined;
  readonly #mailer: KitMailer;
  readonly #perHour: number;

  private constructor(
    mailer: KitMailer,
    perHour: number,
    private readonly deps: {
      claimPage: string;
      serviceName: string;
      limiter: RateLimiter;
      now: () => number;
      onError: (error: unknown) => void;
    },
  ) {
    this.#mailer = mailer;
    this.#perHour = perHour;
    this.outbox = mailer instanceof DevelopmentOutbox ? mailer : undefined;
  }

  /**
   * The mailer of the options, checked: exactly one transport; the outbox never in production; a
   * link on https (or a loopback host in development) and on the kit's own claim page, whose
   * pages run the ceremony.
   */
  static fromOptions(
    options: KitMailOptions,
    deps: {
      origin: string;
      claimPage: string;
      serviceName: string;
      limiter: RateLimiter;
      now: () => number;
      onError: (e: unknown) => void;
    },
  ): InvitationMailer {
    const chosen = [options.smtpUrl, options.mailer, options.developmentOutbox || undefined].filter(
      (value) => value !== undefined,
    );
    if (chosen.length !== 1)
      throw new KitConfigError("mail", "mail: give exactly one of smtpUrl (with from), mailer, developmentOutbox");
    if (options.developmentOutbox === true && process.env.NODE_ENV === "production") {
      throw new KitConfigError(
        "mail.developmentOutbox",
        "mail.developmentOutbox is for development: it is refused when NODE_ENV is production",
      );
    }
    const claimPage = new URL(deps.claimPage);
    if (claimPage.origin !== deps.origin) {
      throw new KitConfigError(
        "mail",
        "mail: the e-mail ceremony runs on the kit's claim page; with claim_page on another origin, deliver links with onInvitation",
      );
    }
    // Upstream §12.6: the link itself travels over HTTPS.
    if (claimPage.protocol !== "https:" && !isLoopbackHostname(claimPage.hostname)) {
      throw new KitConfigError("mail", "mail: claim links must be https (plain http only for localhost)");
    }
    const perHour = options.perRecipientPerHour ?? DEFAULT_MAILS_PER_RECIPIENT_PER_HOUR;
    if (!Number.isInteger(perHour) || perHour < 1 || perHour > 1000) {
      throw new KitConfigError(
        "mail.perRecipientPerHour",
        "mail.perRecipientPerHour must be an integer from 1 to 1000",
      );
    }
    let mailer: KitMailer;
    if (options.smtpUrl !== undefined) mailer = new SmtpMailer(options.smtpUrl, options.from ?? "");
    else if (options.mailer !== undefined) mailer = options.mailer;
    else mailer = new DevelopmentOutbox(deps.now);
    return new InvitationMailer(mailer, perHour, {
      claimPage: deps.claimPage,
      serviceName: deps.serviceName,
      limiter: deps.limiter,
      now: deps.now,
      onError: deps.onError,
    });
  }

  /**
   * Mails the claim link of an `email` invitation, before it is staged: a mail that cannot be
   * handed over is 503 `kit_mail_unavailable` (Retry-After) and nothing changes; too many mails
   * to one address within the hour is 429 `rate_limit_exceeded`.
   */
  async sendInvitation(input: { address: string; agentDid: string; token: string; expiresAt: number }): Promise<void> {
    const bucket = `invitation_mail ${hashToken(recipientKey({ type: "email", value: input.address }))}`;
    const decision = await this.deps.limiter.hit(bucket, this.#perHour, MAIL_WINDOW_SECONDS, this.deps.now());
    if (!decision.allowed) {
      throw rateLimitExceeded(decision.retryAfterSeconds, "this address was sent too many invitations within the hour");
    }
    const mail = invitationMail({
      to: input.address,
      agentDid: input.agentDid,
      serviceName: this.deps.serviceName,
      link: claimLink(this.deps.claimPage, input.token),
      expiresAt: input.expiresAt,
    });
    try {
      await this.#mailer.send(mail);
    } catch (error) {
      // The operator hears why; the link is in no error message (it travels in the mail's body only).
      this.deps.onError(new Error(`proto kit: an invitation mail was not sent: ${(error as Error)?.message ?? error}`));
      throw new ProtoError(
        "kit_mail_unavailable",
        503,
        "the invitation mail could not be sent; nothing was staged, try again later",
        { retryAfter: MAIL_RETRY_AFTER_SECONDS },
      );
    }
  }

  async close(): Promise<void> {
    await this.#mailer.close?.();
  }
}

/**
 * A form post from the kit's own pages: `Origin` is this origin (browsers send it on every POST;
 * the pages' `strict-origin` referrer policy keeps it), or, without one, `Sec-Fetch-Site: same-origin`.
 * There is no session yet to carry a form token.
 */
function fromOwnPage(core: KitCore, request: KitRequest): boolean {
  const origin = request.headers.get("origin");
  if (origin !== null) return origin === core.origin;
  return request.headers.get("sec-fetch-site") === "same-origin";
}

/** `POST {ownerPath}/email-signin` (form `token`): the button of the claim page of an `email` invitation. */
export function emailSignInHandler(core: KitCore): Handler {
  return async (request) => {
    if (!fromOwnPage(core, request)) {
      throw kitError("kit_csrf", "This form was not sent from this service's page. Open the link from the mail again.");
    }
    if (!isForm(request.headers)) throw protoError("malformed_request", { message: "send the claim page's form" });
    const params = new URLSearchParams(Buffer.from(request.body ?? new Uint8Array()).toString("utf8"));
    const token = params.get("token") ?? "";
    const claim = await claimable(core, token);
    if (claim.recipient.type !== "email") {
      throw protoError("malformed_request", { message: "this invitation is not for an e-mail address" });
    }
    const back = claimLink(core.discovery.endpoints.claim_page, token);
    const backPath = new URL(back);
    const location = `${backPath.pathname}${backPath.search}`;
    const current = await core.sessions.fromHeaders(request.headers);
    // A stale copy of the page (back button, a second press): the person already holds this
    // address, recently; nothing to spend.
    if (
      current !== undefined &&
      identityKeys(current).has(claim.recipientKey) &&
      core.sessions.isFresh(current, core.options.freshnessSeconds)
    ) {
      return redirectResponse(location);
    }
    const now = core.now();
    if (!(await core.store.markEmailSignIn(claim.invitationId, now))) {
      await claimable(core, token); // replaced or expired meanwhile: say so
      throw kitError("kit_link_used");
    }
    if (current !== undefined) await core.sessions.destroy(current);
    const { setCookie } = await core.sessions.create({ identities: [claim.recipient], authenticatedAt: now });
    return redirectResponse(location, [setCookie]);
  };
}

/** `GET {ownerPath}/dev/outbox`: mounted only with `mail.developmentOutbox`, never in production. */
export function outboxHandler(outbox: DevelopmentOutbox, serviceName: string): Handler {
  return async () => outboxPage(outbox.entries, serviceName);
}
