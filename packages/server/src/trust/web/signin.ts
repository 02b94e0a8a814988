import type {} from "@fastify/csrf-protection";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Clock } from "../../platform/clock.js";
import { html, type SafeHtml } from "../../platform/html.js";
import { addressRateLimitKey, type RateLimiter, type RateLimitRule, rateLimitKey } from "../../platform/rate-limit.js";
import { hashToken, randomToken } from "../../platform/tokens.js";
import { type Mailer, OutboxMailer } from "../mail.js";
import type { OidcClient } from "../oidc/clients.js";
import type { TrustService } from "../service.js";
import { canonicalEmail } from "../service.js";
import { sendMessage, sendPage } from "./layout.js";
import { PASSKEY_SCRIPTS, passkeySigninPart } from "./passkeys.js";
import { type SessionManager, safeNext } from "./session.js";
import { signinContext } from "./signin-context.js";

export const MAGIC_LINK_TTL_SECONDS = 15 * 60;

export interface SigninLimits {
  emailPerIp: RateLimitRule;
  emailPerAddress: RateLimitRule;
  verifyPerIp: RateLimitRule;
}

export const DEFAULT_SIGNIN_LIMITS: SigninLimits = {
  emailPerIp: { name: "trust.signin_ip", limit: 10, windowSeconds: 60 },
  emailPerAddress: { name: "trust.signin_address", limit: 5, windowSeconds: 3600 },
  verifyPerIp: { name: "trust.signin_verify", limit: 30, windowSeconds: 60 },
};

/** Another way to sign in, offered as a button on the sign-in page (upstream OpenID provider). */
export interface SigninOption {
  label: string;
  /** GET path that starts it; `next` is appended. */
  path: string;
}

export interface SigninDeps {
  service: TrustService;
  sessions: SessionManager;
  mailer: Mailer;
  limiter: RateLimiter;
  clock: Clock;
  publicUrl: string;
  limits: SigninLimits;
  options: () => SigninOption[];
  /** The OpenID provider's clients, to name the service that sent someone to sign in. */
  oidcClients: readonly OidcClient[];
}

interface EmailForm {
  email?: string;
  next?: string;
  _csrf?: string;
}

function tooMany(reply: FastifyReply, retryAfter: number): FastifyReply {
  reply.header("retry-after", String(retryAfter));
  return sendMessage(reply, 429, "Too many attempts", `Please wait ${retryAfter} seconds and try again.`);
}

function signinForm(
  csrf: string,
  next: string,
  options: SigninOption[],
  context: SafeHtml | undefined,
  error?: string,
  passkeyRequired = false,
): SafeHtml {
  const others = options.map(
    (o) =>
      html`<p><a class="button secondary" href="${`${o.path}?next=${encodeURIComponent(next)}`}">Sign in with ${o.label}</a></p>`,
  );
  return html`<h1>Sign in</h1>
${context}
${
  passkeyRequired
    ? html`<p class="notice" id="passkey-required">To go on, sign in with a passkey: passkeys cannot be phished. No
passkey yet? Sign in by e-mail, add one on <a href="/account">your account page</a>, then come back.</p>`
    : ""
}
${passkeySigninPart(csrf, next)}
<p>We will e-mail you a link that signs you in.</p>
${error ? html`<p class="error" role="alert" id="email-error">${error}</p>` : ""}
<form method="post" action="/signin/email">
  <input type="hidden" name="_csrf" value="${csrf}">
  <input type="hidden" name="next" value="${next}">
  <label for="email">E-mail address</label>
  <input id="email" name="email" type="email" autocomplete="email webauthn" required maxlength="254"${
    error ? html` aria-invalid="true" aria-describedby="email-error"` : ""
  }>
  <div class="actions"><button type="submit">E-mail me a sign-in link</button></div>
</form>
${others.length > 0 ? html`<h2>Or</h2>${others}` : ""}`;
}

export async function signinRoutes(app: FastifyInstance, deps: SigninDeps): Promise<void> {
  const { service, sessions, mailer, limiter, clock } = deps;
  const db = service.database.db;
  const contextOf = (next: string) =>
    signinContext(next, { service, oidcClients: deps.oidcClients, now: () => clock.now() });

  app.get<{ Querystring: { next?: string; passkey?: string } }>("/signin", async (request, reply) => {
    const next = safeNext(request.query.next, deps.publicUrl);
    const required = request.query.passkey === "required";
    return sendPage(reply, {
      title: "Sign in",
      scripts: PASSKEY_SCRIPTS,
      body: signinForm(reply.generateCsrf(), next, deps.options(), await contextOf(next), undefined, required),
    });
  });

  app.post<{ Body: EmailForm }>("/signin/email", { preHandler: app.csrfProtection }, async (request, reply) => {
    const next = safeNext(request.body?.next, deps.publicUrl);
    const ip = await limiter.hit(deps.limits.emailPerIp, addressRateLimitKey(request.ip));
    if (!ip.allowed) return tooMany(reply, ip.retryAfterSeconds);
    let email: string;
    try {
      email = canonicalEmail(String(request.body?.email ?? ""));
    } catch {
      return sendPage(reply, {
        status: 400,
        title: "Sign in",
        scripts: PASSKEY_SCRIPTS,
        body: signinForm(
          reply.generateCsrf(),
          next,
          deps.options(),
          await contextOf(next),
          "Enter a valid e-mail address.",
        ),
      });
    }
    const perAddress = await limiter.hit(deps.limits.emailPerAddress, rateLimitKey("email", email));
    if (!perAddress.allowed) return tooMany(reply, perAddress.retryAfterSeconds);
    const token = randomToken("ml_", 32);
    const now = clock.now();
    await db
      .insertInto("trust_magic_links")
      .values({
        token_hash: hashToken(token),
        email,
        next,
        created_at: now,
        expires_at: now + MAGIC_LINK_TTL_SECONDS * 1000,
        used_at: null,
      })
      .execute();
    const link = `${deps.publicUrl}/signin/email/verify?token=${encodeURIComponent(token)}`;
    try {
      await mailer.send({
        to: email,
        subject: "Your sign-in link",
        text: `Open this link to sign in to proto trust:\n\n${link}\n\nIt works once, within ${MAGIC_LINK_TTL_SECONDS / 60} minutes. If you did not ask for it, ignore this mail.`,
        html: html`<p>Open this link to sign in to proto trust:</p><p><a href="${link}">Sign in</a></p><p>It works once, within ${MAGIC_LINK_TTL_SECONDS / 60} minutes. If you did not ask for it, ignore this mail.</p>`
          .value,
      });
    } catch (error) {
      request.log.error({ err: error }, "sign-in mail could not be sent");
    }
    // The same answer whether or not the address belongs to anyone: no account enumeration.
    return sendPage(reply, {
      title: "Check your e-mail",
      body: html`<h1>Check your e-mail</h1><p>If the address can receive mail, a sign-in link is on its way to
          <strong>${email}</strong>. It works once, within ${MAGIC_LINK_TTL_SECONDS / 60} minutes.</p>
${
  // Without SMTP nothing leaves the machine: say where the mail is.
  mailer instanceof OutboxMailer
    ? html`<p class="notice">Development: mail is not sent but kept in the
<a href="/dev/outbox">development outbox</a>. Open it to find your sign-in link.</p>`
    : ""
}`,
    });
  });

  // Opening the link only shows a button: link scanners that fetch it sign nobody in.
  app.get<{ Querystring: { token?: string } }>("/signin/email/verify", async (request, reply) => {
    const token = request.query.token ?? "";
    const row =
      token.length > 0 && token.length < 128
        ? await db
            .selectFrom("trust_magic_links")
            .selectAll()
            .where("token_hash", "=", hashToken(token))
            .executeTakeFirst()
        : undefined;
    if (row === undefined || row.used_at !== null || row.expires_at <= clock.now()) {
      return linkInvalid(reply);
    }
    return sendPage(reply, {
      title: "Sign in",
      body: html`<h1>Sign in</h1><p>Continue as <strong>${row.email}</strong>?</p>
<form method="post" action="/signin/email/verify">
  <input type="hidden" name="_csrf" value="${reply.generateCsrf()}">
  <input type="hidden" name="token" value="${token}">
  <div class="actions"><button type="submit">Sign in</button></div>
</form>`,
    });
  });

  app.post<{ Body: { token?: string; _csrf?: string } }>(
    "/signin/email/verify",
    { preHandler: app.csrfProtection },
    async (request, reply) => {
      const limit = await limiter.hit(deps.limits.verifyPerIp, addressRateLimitKey(request.ip));
      if (!limit.allowed) return tooMany(reply, limit.retryAfterSeconds);
      const token = String(request.body?.token ?? "");
      if (token.length === 0 || token.length >= 128) return linkInvalid(reply);
      const now = clock.now();
      const hash = hashToken(token);
      // Single use by one atomic update: of two concurrent submits only one signs in.
      const used = await db
        .updateTable("trust_magic_links")
        .set({ used_at: now })
        .where("token_hash", "=", hash)
        .where("used_at", "is", null)
        .where("expires_at", ">", now)
        .executeTakeFirst();
      if (Number(used.numUpdatedRows) !== 1) return linkInvalid(reply);
      const row = await db
        .selectFrom("trust_magic_links")
        .selectAll()
        .where("token_hash", "=", hash)
        .executeTakeFirstOrThrow();
      const humanId = await service.findOrCreateHuman("email", row.email);
      await sessions.signIn(request, reply, humanId, "email");
      return reply.redirect(safeNext(row.next, deps.publicUrl), 303);
    },
  );

  app.post("/signout", { preHandler: app.csrfProtection }, async (request: FastifyRequest, reply) => {
    await sessions.signOut(request, reply);
    return reply.redirect("/signin", 303);
  });
}

function linkInvalid(reply: FastifyReply): FastifyReply {
  return sendMessage(
    reply,
    410,
    "This sign-in link no longer works",
    "Sign-in links work once and only for 15 minutes. Ask for a new one.",
    html`<p><a class="button" href="/signin">Sign in again</a></p>`,
  );
}
