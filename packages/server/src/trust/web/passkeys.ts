import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import type {} from "@fastify/csrf-protection";
import type { AuthenticationResponseJSON, RegistrationResponseJSON } from "@simplewebauthn/server";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { html, type SafeHtml } from "../../platform/html.js";
import { addressRateLimitKey, type RateLimiter, type RateLimitRule } from "../../platform/rate-limit.js";
import { randomToken } from "../../platform/tokens.js";
import { MAX_PASSKEY_NAME, PASSKEY_CHALLENGE_TTL_SECONDS, PasskeyRefused, type Passkeys } from "../passkeys.js";
import { type HumanSession, type SessionManager, safeNext } from "./session.js";

export interface PasskeyRouteDeps {
  passkeys: Passkeys;
  sessions: SessionManager;
  limiter: RateLimiter;
  publicUrl: string;
}

/** Ceremonies per client address and minute (each writes a challenge row). */
const PASSKEY_LIMIT: RateLimitRule = { name: "trust.passkey_ip", limit: 30, windowSeconds: 60 };

/** The scripts a page with a passkey button loads: the WebAuthn helper, then ours. */
export const PASSKEY_SCRIPTS = ["/assets/webauthn.js", "/assets/passkeys.js"] as const;

const csrfOnly = {
  type: "object",
  properties: { _csrf: { type: "string", maxLength: 256 } },
} as const;

const registerBody = {
  type: "object",
  required: ["name", "response"],
  properties: {
    _csrf: { type: "string", maxLength: 256 },
    name: { type: "string", maxLength: MAX_PASSKEY_NAME * 4 },
    response: { type: "object" },
  },
} as const;

const signinBody = {
  type: "object",
  required: ["response"],
  properties: {
    _csrf: { type: "string", maxLength: 256 },
    next: { type: "string", maxLength: 2048 },
    response: { type: "object" },
  },
} as const;

const removeForm = {
  type: "object",
  required: ["id"],
  properties: { _csrf: { type: "string", maxLength: 256 }, id: { type: "string", minLength: 1, maxLength: 1024 } },
} as const;

/** The most a passkey confirmation (an assertion as JSON, in a form field) may be. */
export const MAX_PASSKEY_CONFIRMATION = 16 * 1024;

/** A confirmation ceremony belongs to the session that started it (never to a sign-in's cookie). */
const confirmationOf = (session: HumanSession) => `confirm:${session.idHash}`;

/**
 * Whether the signed-in person just confirmed something with one of their passkeys: `assertion`
 * is what the page's `data-passkey="confirm"` form posts. Undefined when it holds, else what to
 * tell them. Used for changes a session alone may not make (widening an agent's grant).
 */
export async function passkeyConfirmationProblem(
  passkeys: Passkeys,
  session: HumanSession,
  assertion: string,
): Promise<string | undefined> {
  let response: unknown;
  try {
    response = JSON.parse(assertion);
  } catch {
    return "The browser's answer is not well formed. Try again.";
  }
  if (typeof response !== "object" || response === null || Array.isArray(response)) {
    return "The browser's answer is not well formed. Try again.";
  }
  let humanId: string;
  try {
    humanId = await passkeys.authenticate(confirmationOf(session), response as AuthenticationResponseJSON);
  } catch (error) {
    if (error instanceof PasskeyRefused) return error.message;
    throw error;
  }
  return humanId === session.humanId ? undefined : "That passkey belongs to another account. Use one of yours.";
}

function refused(reply: FastifyReply, status: number, error: string, message: string): FastifyReply {
  return reply.code(status).header("cache-control", "no-store").send({ error, message });
}

/**
 * Passkeys on the attestor's pages: adding and removing them on `/account`, signing in with one on
 * `/signin`. The browser side is `/assets/passkeys.js` over SimpleWebAuthn's browser helper,
 * both served from this origin (the pages' CSP allows no other script).
 */
export async function passkeyRoutes(app: FastifyInstance, deps: PasskeyRouteDeps): Promise<void> {
  const { passkeys, sessions, limiter } = deps;
  const ceremonyCookie = sessions.secure ? "__Host-proto_webauthn" : "proto_webauthn";

  async function limited(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> {
    const hit = await limiter.hit(PASSKEY_LIMIT, addressRateLimitKey(request.ip));
    if (hit.allowed) return undefined;
    reply.header("retry-after", String(hit.retryAfterSeconds));
    return refused(reply, 429, "rate_limited", `Too many attempts. Wait ${hit.retryAfterSeconds} seconds.`);
  }

  function answerRefusal(reply: FastifyReply, error: unknown): FastifyReply {
    if (error instanceof PasskeyRefused) return refused(reply, 400, error.reason, error.message);
    throw error;
  }

  app.post(
    "/account/passkeys/options",
    { schema: { body: csrfOnly }, preHandler: app.csrfProtection },
    async (request, reply) => {
      const session = await sessions.current(request);
      if (session === undefined) return refused(reply, 401, "signed_out", "Sign in again to add a passkey.");
      const stop = await limited(request, reply);
      if (stop !== undefined) return stop;
      try {
        const label = await passkeys.accountLabel(session.humanId);
        const options = await passkeys.registrationOptions(session.humanId, label, session.idHash);
        return reply.header("cache-control", "no-store").send(options);
      } catch (error) {
        return answerRefusal(reply, error);
      }
    },
  );

  app.post<{ Body: { name: string; response: RegistrationResponseJSON } }>(
    "/account/passkeys",
    { schema: { body: registerBody }, preHandler: app.csrfProtection },
    async (request, reply) => {
      const session = await sessions.current(request);
      if (session === undefined) return refused(reply, 401, "signed_out", "Sign in again to add a passkey.");
      try {
        await passkeys.register(session.humanId, session.idHash, request.body.name, request.body.response);
      } catch (error) {
        return answerRefusal(reply, error);
      }
      return reply.header("cache-control", "no-store").send({ redirect: "/account?passkey=added" });
    },
  );

  // The options of a confirmation ceremony (passkeyConfirmationProblem checks its answer).
  app.post(
    "/account/passkeys/confirm/options",
    { schema: { body: csrfOnly }, preHandler: app.csrfProtection },
    async (request, reply) => {
      const session = await sessions.current(request);
      if (session === undefined) return refused(reply, 401, "signed_out", "Sign in again to confirm.");
      const stop = await limited(request, reply);
      if (stop !== undefined) return stop;
      const options = await passkeys.authenticationOptions(confirmationOf(session));
      return reply.header("cache-control", "no-store").send(options);
    },
  );

  app.post<{ Body: { id: string } }>(
    "/account/passkeys/remove",
    { schema: { body: removeForm }, preHandler: app.csrfProtection },
    async (request, reply) => {
      const session = await sessions.current(request);
      if (session === undefined) return reply.redirect("/signin?next=%2Faccount", 303);
      const removed = await passkeys.remove(session.humanId, request.body.id);
      return reply.redirect(removed ? "/account?passkey=removed" : "/account", 303);
    },
  );

  app.post(
    "/signin/passkey/options",
    { schema: { body: csrfOnly }, preHandler: app.csrfProtection },
    async (request, reply) => {
      const stop = await limited(request, reply);
      if (stop !== undefined) return stop;
      // The ceremony belongs to this browser: a challenge answered from another one is refused.
      const ceremony = randomToken("", 32);
      // Path "/": browsers refuse a `__Host-` cookie (the name over https) with any other path.
      reply.setCookie(ceremonyCookie, ceremony, {
        path: "/",
        httpOnly: true,
        sameSite: "strict",
        secure: sessions.secure,
        maxAge: PASSKEY_CHALLENGE_TTL_SECONDS,
      });
      const options = await passkeys.authenticationOptions(ceremony);
      return reply.header("cache-control", "no-store").send(options);
    },
  );

  app.post<{ Body: { next?: string; response: AuthenticationResponseJSON } }>(
    "/signin/passkey",
    { schema: { body: signinBody }, preHandler: app.csrfProtection },
    async (request, reply) => {
      const stop = await limited(request, reply);
      if (stop !== undefined) return stop;
      const ceremony = request.cookies[ceremonyCookie];
      if (ceremony === undefined || ceremony.length > 128)
        return refused(reply, 400, "challenge", "This sign-in expired. Try again.");
      let humanId: string;
      try {
        humanId = await passkeys.authenticate(ceremony, request.body.response);
      } catch (error) {
        return answerRefusal(reply, error);
      }
      reply.clearCookie(ceremonyCookie, {
        path: "/",
        httpOnly: true,
        sameSite: "strict",
        secure: sessions.secure,
      });
      await sessions.signIn(request, reply, humanId, "passkey");
      return reply.header("cache-control", "no-store").send({ redirect: safeNext(request.body.next, deps.publicUrl) });
    },
  );
}

/** The account page's passkey section: the list, a notice after a change, and the add form. */
export async function passkeySection(
  passkeys: Passkeys,
  humanId: string,
  csrf: string,
  query: unknown,
): Promise<SafeHtml> {
  const list = await passkeys.list(humanId);
  const done = (query as { passkey?: unknown } | undefined)?.passkey;
  const notice =
    done === "added"
      ? html`<p class="notice" role="status"><strong>Passkey added.</strong> You can now sign in with it, without e-mail.</p>`
      : done === "removed"
        ? html`<p class="notice" role="status"><strong>Passkey removed.</strong> It no longer signs you in.</p>`
        : "";
  const when = (ms: number | null) =>
    ms === null
      ? html`<span class="muted">never</span>`
      : html`<time datetime="${new Date(ms).toISOString()}">${new Date(ms).toISOString().slice(0, 16).replace("T", " ")} UTC</time>`;
  return html`<h2 id="passkeys">Passkeys</h2>
${notice}
<p>A passkey signs you in with your device's screen lock or security key, and cannot be phished.</p>
${
  list.length === 0
    ? html`<p class="muted">No passkey yet.</p>`
    : html`<ul class="services">${list.map(
        (p) => html`<li><strong>${p.name}</strong>
  <span class="muted">Added ${when(p.createdAt)} · last used ${when(p.lastUsedAt)}${p.backedUp ? " · synced" : ""}</span>
  <form method="post" action="/account/passkeys/remove"><input type="hidden" name="_csrf" value="${csrf}"><input type="hidden" name="id" value="${p.id}">
  <button class="danger" type="submit">Remove<span class="visually-hidden"> ${p.name}</span></button></form></li>`,
      )}</ul>`
}
<form id="passkey-add" data-passkey="register" hidden>
  <input type="hidden" name="_csrf" value="${csrf}">
  <label for="passkey-name">Name of the new passkey</label>
  <input id="passkey-name" name="name" type="text" required maxlength="${MAX_PASSKEY_NAME}" placeholder="e.g. My laptop" autocomplete="off">
  <div class="actions"><button type="submit">Add a passkey</button></div>
  <p id="passkey-add-status" aria-live="polite"></p>
</form>
<p class="muted" data-passkey-unsupported>Adding a passkey needs a browser with passkeys and JavaScript.</p>`;
}

/** The sign-in page's passkey button (shown by the script when the browser has passkeys). */
export function passkeySigninPart(csrf: string, next: string): SafeHtml {
  return html`<form id="passkey-signin" data-passkey="signin" hidden>
  <input type="hidden" name="_csrf" value="${csrf}">
  <input type="hidden" name="next" value="${next}">
  <div class="actions"><button type="submit">Sign in with a passkey</button></div>
  <p id="passkey-signin-status" aria-live="polite"></p>
  <h2>Or by e-mail</h2>
</form>`;
}

const require = createRequire(import.meta.url);
/** SimpleWebAuthn's browser helper, served as it ships (the global `SimpleWebAuthnBrowser`). */
export const WEBAUTHN_SCRIPT = readFileSync(
  // The bundle is not among the package's exports: found beside its CommonJS entry.
  join(dirname(require.resolve("@simplewebauthn/browser")), "..", "dist", "bundle", "index.umd.min.js"),
  "utf8",
);

/** Drives the passkey forms; without it (or without passkeys) they stay hidden. */
export const PASSKEY_SCRIPT = `
(() => {
  const lib = window.SimpleWebAuthnBrowser;
  if (!lib || !lib.browserSupportsWebAuthn()) return;
  for (const el of document.querySelectorAll("[data-passkey-unsupported]")) el.hidden = true;
  const post = async (url, body) => {
    const response = await fetch(url, { method: "POST", credentials: "same-origin",
      headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const answer = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(answer.message || "Something went wrong. Try again.");
    return answer;
  };
  const say = (error) => error && (error.name === "NotAllowedError" || error.name === "AbortError")
    ? "Cancelled, or no passkey was chosen in time." : (error && error.message) || String(error);
  const wire = (form, run) => {
    if (!form) return;
    form.hidden = false;
    const status = form.querySelector("[aria-live]");
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const button = form.querySelector("button");
      button.disabled = true;
      status.textContent = "Follow your browser's prompt.";
      try {
        const answer = await run(form);
        if (answer && answer.redirect) window.location.assign(answer.redirect);
      } catch (error) {
        status.textContent = say(error);
        button.disabled = false;
      }
    });
  };
  wire(document.getElementById("passkey-add"), async (form) => {
    const _csrf = form.elements._csrf.value;
    const optionsJSON = await post("/account/passkeys/options", { _csrf });
    const response = await lib.startRegistration({ optionsJSON });
    return post("/account/passkeys", { _csrf, name: form.elements.name.value, response });
  });
  // A change that needs a passkey: the form is posted as it is, with the ceremony's answer.
  wire(document.getElementById("passkey-confirm"), async (form) => {
    const optionsJSON = await post("/account/passkeys/confirm/options", { _csrf: form.elements._csrf.value });
    const response = await lib.startAuthentication({ optionsJSON });
    form.elements.passkey.value = JSON.stringify(response);
    form.submit();
  });
  // The browser's autofill offers this site's passkeys in the e-mail field (conditional
  // mediation); pressing the button instead cancels this ceremony and starts its own.
  const signin = document.getElementById("passkey-signin");
  const email = document.getElementById("email");
  if (signin && email && lib.browserSupportsWebAuthnAutofill) {
    lib.browserSupportsWebAuthnAutofill().then(async (available) => {
      if (!available) return;
      const _csrf = signin.elements._csrf.value;
      // Nobody asked for this ceremony yet: if it cannot start, the page just has no autofill.
      const optionsJSON = await post("/signin/passkey/options", { _csrf }).catch(() => undefined);
      if (!optionsJSON) return;
      try {
        const response = await lib.startAuthentication({ optionsJSON, useBrowserAutofill: true });
        const answer = await post("/signin/passkey", { _csrf, next: signin.elements.next.value, response });
        window.location.assign(answer.redirect);
      } catch (error) {
        if (error && (error.name === "AbortError" || error.name === "NotAllowedError")) return;
        signin.querySelector("[aria-live]").textContent = say(error);
      }
    });
  }
  wire(signin, async (form) => {
    const _csrf = form.elements._csrf.value;
    const optionsJSON = await post("/signin/passkey/options", { _csrf });
    const response = await lib.startAuthentication({ optionsJSON });
    return post("/signin/passkey", { _csrf, next: form.elements.next.value, response });
  });
})();
`;
