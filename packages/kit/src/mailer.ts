/**
 * Mail for the e-mail ceremony (upstream §7.7.1, §12.6): a transport (`KitMailer`) and the
 * invitation mail itself. Nothing of a mail is logged anywhere: its link is the proof of the mailbox.
 */
import nodemailer from "nodemailer";
import { KitConfigError } from "./config-error.js";
import { escapeHtml, humanTime } from "./pages.js";

export interface KitMail {
  to: string;
  subject: string;
  text: string;
  html: string;
}

/** Where the kit hands its mails. Throwing means "not sent": the invitation is then not staged. */
export interface KitMailer {
  send(mail: KitMail): Promise<void>;
  close?(): void | Promise<void>;
}

/**
 * How the kit delivers `email` invitations: exactly one of `smtpUrl` (with `from`), `mailer` or
 * `developmentOutbox`.
 */
export interface KitMailOptions {
  /** `smtp://user:pass@host:587` or `smtps://…:465`: mail through this server (nodemailer). */
  smtpUrl?: string;
  /** The From of the mails (`"Notes <no-reply@notes.example>"`); required with `smtpUrl`. */
  from?: string;
  /** Your own transport instead of SMTP. */
  mailer?: KitMailer;
  /**
   * Development only: mails stay in memory (the newest 50) and are shown at
   * `{ownerPath}/dev/outbox`. `createKit` refuses it when `NODE_ENV` is `production`.
   */
  developmentOutbox?: boolean;
  /** Invitation mails one address receives per hour at most (default 5); more: 429 `rate_limit_exceeded`. */
  perRecipientPerHour?: number;
}

export const DEFAULT_MAILS_PER_RECIPIENT_PER_HOUR = 5;

/**
 * Mail over SMTP with nodemailer. The timeouts are short because an agent's request waits for the
 * hand-over (nodemailer's defaults wait minutes).
 */
export class SmtpMailer implements KitMailer {
  readonly #transport: ReturnType<typeof nodemailer.createTransport>;
  readonly #from: string;

  constructor(url: string, from: string) {
    if (!/^smtps?:\/\//.test(url)) throw new Error("mail.smtpUrl must start with smtp:// or smtps://");
    if (from.trim() === "") throw new KitConfigError("mail.from", "mail.from is required with mail.smtpUrl");
    this.#transport = nodemailer.createTransport({
      url,
      connectionTimeout: 10_000,
      greetingTimeout: 10_000,
      socketTimeout: 20_000,
    });
    this.#from = from;
  }

  async send(mail: KitMail): Promise<void> {
    await this.#transport.sendMail({ from: this.#from, ...mail });
  }

  close(): void {
    this.#transport.close();
  }
}

export interface OutboxEntry extends KitMail {
  sentAt: number;
}

/** Development without SMTP: the newest 50 mails, in memory, for `{ownerPath}/dev/outbox`. */
export class DevelopmentOutbox implements KitMailer {
  readonly entries: OutboxEntry[] = [];

  constructor(private readonly now: () => number = Date.now) {}

  async send(mail: KitMail): Promise<void> {
    this.entries.unshift({ ...mail, sentAt: this.now() });
    this.entries.length = Math.min(this.entries.length, 50);
  }
}

export interface InvitationMailInput {
  to: string;
  agentDid: string;
  /** The service as people know it (the host of its public URL). */
  serviceName: string;
  link: string;
  expiresAt: number;
}

/**
 * The invitation mail: which agent asks, the link, when it expires, and that ignoring it is safe.
 * No account context beyond the agent's DID (upstream §12.6).
 */
export function invitationMail(input: InvitationMailInput): KitMail {
  const expires = humanTime(input.expiresAt);
  const subject = `An agent asks you to be its owner on ${input.serviceName}`;
  const text = [
    "Hello,",
    "",
    `An agent asked ${input.serviceName} to make ${input.to} its owner. The agent is`,
    input.agentDid,
    "",
    "To see the request and decide, open this link:",
    input.link,
    "",
    `The link signs you in once and works until ${expires}.`,
    "",
    "If you do not know this agent, ignore this mail: nothing happens unless you open the link and confirm.",
    "",
    `-- ${input.serviceName}`,
    "",
  ].join("\n");
  const p = 'style="margin:0 0 1em"';
  const html = `<!doctype html><html lang="en"><body style="font-family:system-ui,sans-serif;line-height:1.5;max-width:36rem">
<p ${p}>Hello,</p>
<p ${p}>An agent asked ${escapeHtml(input.serviceName)} to make ${escapeHtml(input.to)} its owner. The agent is<br><code style="word-break:break-all">${escapeHtml(input.agentDid)}</code></p>
<p ${p}><a href="${escapeHtml(input.link)}">See the request and decide</a></p>
<p ${p}>The link signs you in once and works until ${escapeHtml(expires)}.</p>
<p ${p}>If you do not know this agent, ignore this mail: nothing happens unless you open the link and confirm.</p>
<p ${p}>-- ${escapeHtml(input.serviceName)}</p>
</body></html>`;
  return { to: input.to, subject, text, html };
}
