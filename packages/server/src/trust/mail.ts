import nodemailer from "nodemailer";

export interface Mail {
  to: string;
  subject: string;
  text: string;
  html?: string;
}

export interface Mailer {
  send(mail: Mail): Promise<void>;
  close(): void;
}

/** Mail over SMTP (`SMTP_URL`, e.g. `smtp://user:pass@host:587`). */
export function smtpMailer(url: string, from: string): Mailer {
  const transport = nodemailer.createTransport(url);
  return {
    async send(mail) {
      await transport.sendMail({ from, ...mail });
    },
    close: () => transport.close(),
  };
}

export interface OutboxEntry extends Mail {
  sentAt: string;
}

/**
 * Development without SMTP: mails are kept in memory (the newest 50) for the developer to read at
 * `/dev/outbox`. Nothing of the mail is logged, since it carries a sign-in link.
 */
export class OutboxMailer implements Mailer {
  readonly entries: OutboxEntry[] = [];
  constructor(private readonly onSend: (to: string) => void) {}
  async send(mail: Mail): Promise<void> {
    this.entries.unshift({ ...mail, sentAt: new Date().toISOString() });
    this.entries.length = Math.min(this.entries.length, 50);
    this.onSend(mail.to);
  }
  close(): void {}
}
