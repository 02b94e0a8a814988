/**
 * A real SMTP server for tests that send mail (nodemailer): it keeps every message, decoded enough
 * to read what a person reads, and hands out the next one sent to an address.
 */
import { SMTPServer } from "smtp-server";

/** One message as the SMTP server received it, with the parts a person reads decoded. */
export interface ReceivedMail {
  /** Envelope recipients (RCPT TO). */
  rcptTo: string[];
  /** Envelope sender (MAIL FROM). */
  mailFrom: string | undefined;
  /** Header values, names lower-cased, folded lines joined. */
  headers: Map<string, string>;
  /** The decoded text/plain part (the whole body when the message is not multipart). */
  text: string;
  /** The decoded text/html part, when there is one. */
  html: string | undefined;
  raw: string;
}

export interface SmtpCollector {
  /** `smtp://127.0.0.1:PORT` for `SMTP_URL`. */
  url: string;
  mails: ReceivedMail[];
  /** The next mail to `to` not handed out yet; waits for it when it has not arrived. */
  nextMailTo(to: string): Promise<ReceivedMail>;
  close(): Promise<void>;
}

function splitHead(raw: string): { head: Map<string, string>; body: string } {
  const cut = raw.search(/\r?\n\r?\n/);
  const headText = cut === -1 ? raw : raw.slice(0, cut);
  const body = cut === -1 ? "" : raw.slice(cut).replace(/^\r?\n\r?\n/, "");
  const head = new Map<string, string>();
  for (const line of headText.replace(/\r?\n[ \t]+/g, " ").split(/\r?\n/)) {
    const colon = line.indexOf(":");
    if (colon > 0) head.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
  }
  return { head, body };
}

function decodeBody(body: string, encoding: string | undefined): string {
  switch ((encoding ?? "7bit").toLowerCase()) {
    case "quoted-printable":
      return Buffer.from(
        body
          .replace(/=\r?\n/g, "")
          .replace(/=([0-9A-Fa-f]{2})/g, (_m, hex: string) => String.fromCharCode(Number.parseInt(hex, 16))),
        "latin1",
      ).toString("utf8");
    case "base64":
      return Buffer.from(body.replace(/\s+/g, ""), "base64").toString("utf8");
    default:
      return body;
  }
}

/** A deliberately small MIME reader: enough for what nodemailer sends (multipart/alternative). */
export function parseMail(raw: string, rcptTo: string[] = [], mailFrom?: string): ReceivedMail {
  const { head, body } = splitHead(raw);
  let text = "";
  let htmlPart: string | undefined;
  const boundary = /boundary="?([^";]+)"?/i.exec(head.get("content-type") ?? "")?.[1];
  if (boundary === undefined) {
    text = decodeBody(body, head.get("content-transfer-encoding"));
  } else {
    for (const chunk of body.split(`--${boundary}`).slice(1)) {
      if (chunk.startsWith("--")) break;
      const part = splitHead(chunk.replace(/^\r?\n/, ""));
      const type = part.head.get("content-type") ?? "text/plain";
      const decoded = decodeBody(part.body.replace(/\r?\n$/, ""), part.head.get("content-transfer-encoding"));
      if (type.startsWith("text/html")) htmlPart = decoded;
      else if (type.startsWith("text/plain")) text = decoded;
    }
  }
  return { rcptTo, mailFrom, headers: head, text, html: htmlPart, raw };
}

/** A real SMTP server in the test process that keeps every message (no TLS, no authentication). */
export async function startSmtpCollector(): Promise<SmtpCollector> {
  const mails: ReceivedMail[] = [];
  const handedOut = new Set<ReceivedMail>();
  const waiters: { to: string; resolve: (mail: ReceivedMail) => void }[] = [];
  const matches = (mail: ReceivedMail, to: string) =>
    !handedOut.has(mail) && mail.rcptTo.some((r) => r.toLowerCase() === to.toLowerCase());

  const server = new SMTPServer({
    disabledCommands: ["STARTTLS", "AUTH"],
    authOptional: true,
    logger: false,
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on("data", (chunk: Buffer) => chunks.push(chunk));
      stream.on("end", () => {
        const mail = parseMail(
          Buffer.concat(chunks).toString("utf8"),
          session.envelope.rcptTo.map((r) => r.address),
          session.envelope.mailFrom === false ? undefined : session.envelope.mailFrom.address,
        );
        mails.push(mail);
        for (const waiter of [...waiters]) {
          if (matches(mail, waiter.to)) {
            handedOut.add(mail);
            waiters.splice(waiters.indexOf(waiter), 1);
            waiter.resolve(mail);
            break;
          }
        }
        callback();
      });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const address = server.server.address();
  if (address === null || typeof address === "string") throw new Error("no address");

  return {
    url: `smtp://127.0.0.1:${address.port}`,
    mails,
    nextMailTo(to) {
      const ready = mails.find((m) => matches(m, to));
      if (ready !== undefined) {
        handedOut.add(ready);
        return Promise.resolve(ready);
      }
      return new Promise((resolve) => waiters.push({ to, resolve }));
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** The first link in a mail's text part whose path is `pathname` (query included); throws, quoting the mail. */
export function linkIn(mail: ReceivedMail, pathname: string): string {
  for (const candidate of mail.text.match(/https?:\/\/[^\s<>"]+/g) ?? []) {
    if (new URL(candidate).pathname === pathname) return candidate;
  }
  throw new Error(`no link to ${pathname} in the mail:\n${mail.text}`);
}
