import fastifyCookie from "@fastify/cookie";
import fastifyCsrf from "@fastify/csrf-protection";
import fastifyFormbody from "@fastify/formbody";
import type { FastifyInstance } from "fastify";
import type { Clock } from "../../platform/clock.js";
import { html } from "../../platform/html.js";
import { pageProblem } from "../../platform/page-errors.js";
import type { RateLimiter } from "../../platform/rate-limit.js";
import { trustApiIndex } from "../api-index.js";
import type { ServiceDeclarations } from "../authority/service-declarations.js";
import { type Mailer, OutboxMailer } from "../mail.js";
import type { OidcClient } from "../oidc/clients.js";
import { Passkeys } from "../passkeys.js";
import type { TrustService } from "../service.js";
import { accountRoutes } from "./account.js";
import { approvalPageRoutes } from "./approval-page.js";
import { registerAssets } from "./assets.js";
import { fallbackPages } from "./fallback-pages.js";
import { sendMessage } from "./layout.js";
import { linkPageRoutes } from "./link-page.js";
import { outboxPage } from "./outbox-page.js";
import { passkeyRoutes } from "./passkeys.js";
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
  /** The OpenID provider's clients, named on the sign-in page they send people to. */
  oidcClients?: readonly OidcClient[];
  /** Links are confirmed only in a session signed in with a passkey. */
  linkRequiresPasskey?: boolean;
  /** Services' declared permissions (descriptions on grant and approval pages). */
  declarations: ServiceDeclarations;
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
  // The forms' addresses, for a browser that asks for one by GET (refresh, Back, a pasted URL).
  const formPaths = new Set<string>();
  app.addHook("onRoute", (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    if (methods.includes("POST")) formPaths.add(route.url);
  });

  const apiErrors = app.errorHandler;
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
    oidcClients: options.oidcClients ?? [],
  });
  const passkeys = new Passkeys({
    db: options.service.database.db,
    clock: options.clock,
    publicUrl: options.publicUrl,
  });
  await app.register(passkeyRoutes, {
    passkeys,
    sessions: options.sessions,
    limiter: options.limiter,
    publicUrl: options.publicUrl,
  });
  await app.register(linkPageRoutes, {
    service: options.service,
    sessions: options.sessions,
    clock: options.clock,
    requirePasskey: options.linkRequiresPasskey ?? false,
  });
  await app.register(accountRoutes, {
    service: options.service,
    sessions: options.sessions,
    publicUrl: options.publicUrl,
    actions: options.accountActions,
    passkeys,
    clock: options.clock,
    declarations: options.declarations,
  });

  await app.register(approvalPageRoutes, {
    db: options.service.database.db,
    sessions: options.sessions,
    clock: options.clock,
    passkeys,
  });

  if (options.mailer instanceof OutboxMailer) outboxPage(app, options.mailer);
  await app.register(fallbackPages, {
    sessions: options.sessions,
    formPaths,
    apiErrors,
    apiIndex: trustApiIndex(options.publicUrl),
  });
}

export async function registerCookies(app: FastifyInstance): Promise<void> {
  await app.register(fastifyCookie);
}
