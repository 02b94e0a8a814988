import { linkIn, type ReceivedMail } from "@proto/testkit/smtp";

export { type ReceivedMail, type SmtpCollector, startSmtpCollector } from "@proto/testkit/smtp";

/** The sign-in link of the attestor's magic-link mail. */
export const magicLinkOf = (mail: ReceivedMail): string => linkIn(mail, "/signin/email/verify");
