import fastifyCookie from "@fastify/cookie";
import fastifyCsrf from "@fastify/csrf-protection";
import fastifyFormbody from "@fastify/formbody";
import type { FastifyInstance } from "fastify";
import type { Clock } from "../../platform/clock.js";
import { html } from "../../platform/html.js";
import { pageProblem } from "../../platform/page-errors.js";
import type { RateLimiter } from "../../platform/rate-limit.js";
import { type Mailer, OutboxMailer } from "../mail.js";
import type { TrustService } from "../service.js";
import { accountRoutes } from "./account.js";
import { registerAssets } from "./assets.js";
import { sendMessage, sendPage } from "./layout.js";
import { linkPageRoutes } from "./link-page.js";
import type { SessionManager } from "./session.js";
import { DEFAULT_SIGNIN_LIMITS, type SigninOption, signinRoutes } from "./signin.js";

export interface HumanPagesOptions {
  service: TrustService;
  sessions: SessionManager;
  mailer: Mailer;
  limiter: RateLimiter;
  clock: Clock;
  publicUrl: string;
  /** Sign-in methods besides e-mail, and actions on the account page, added by other modules. */
  signinOptions: () => SigninOption[];
  accountActions: () => { label: string; path: string }[];
}

/**
 * The pages people use: sign-in, the link confirmation page, the account page. Forms are
 * CSRF-protected (a secret in an HttpOnly SameSite cookie, a token in each form).
 */
export async function humanPages(app: FastifyInstance, options: HumanPagesOptions): Promise<void> {
  await app.register(fastifyFormbody, { bodyLimit: 64 * 1024 });
  await app.register(fastifyCsrf, {
    cookieKey: options.sessions.csrfCookieName,
    cookieOpts: { path: "/", sameSite: "lax", httpOnly: true, secure: options.sessions.secure, signed: false },
    getToken: (request) => (request.body as { _csrf?: string } | undefined)?._csrf,
  });
  registerAssets(app);

  // Errors on pages are pages, not JSON, with the status of the client's mistake.
  app.setErrorHandler((error: Error & { code?: string; statusCode?: number }, request, reply) => {
    const problem = pageProblem(error, app.outageError);
    if (problem !== undefined) {
      if (problem.retryAfterSeconds !== undefined) reply.header("retry-after", String(problem.retryAfterSeconds));
      // Every dead end offers a way on: the account page (or sign-in, for someone signed out).
      const onward = html`<p><a class="button" href="/account">Go to your account</a></p>`;
      return sendMessage(reply, problem.status, problem.title, problem.message, onward);
    }
    request.log.error({ err: error }, "page failed");
    return sendMessage(reply, 500, "Something went wrong", "Please try again in a moment.");
  });

  await app.register(signinRoutes, {
    service: options.service,
    sessions: options.sessions,
    mailer: options.mailer,
    limiter: options.limiter,
    clock: options.clock,
    publicUrl: options.publicUrl,
    limits: DEFAULT_SIGNIN_LIMITS,
    options: options.signinOptions,
  });
  await app.register(linkPageRoutes, { service: options.service, sessions: options.sessions, clock: options.clock });
  await app.register(accountRoutes, {
    service: options.service,
    sessions: options.sessions,
    publicUrl: options.publicUrl,
    actions: options.accountActions,
  });

  const mailer = options.mailer;
  if (mailer instanceof OutboxMailer) {
    app.get("/dev/outbox", async (_request, reply) =>
      sendPage(reply, {
        title: "Development outbox",
        body: html`<h1>Development outbox</h1>
<p class="muted">SMTP_URL is not set, so mail is kept here instead of being sent. This page does not exist in production.</p>
${mailer.entries.length === 0 ? html`<p>No mail yet.</p>` : ""}
${mailer.entries.map(
  (m) => html`<section class="card"><p><strong>To:</strong> ${m.to}<br><strong>Subject:</strong> ${m.subject}<br>
  <span class="muted">${m.sentAt}</span></p><pre>${m.text}</pre></section>`,
)}`,
      }),
    );
  }
}

export async function registerCookies(app: FastifyInstance): Promise<void> {
  await app.register(fastifyCookie);
}
