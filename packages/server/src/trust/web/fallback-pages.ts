import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { acceptsHtml } from "../../platform/accepts-html.js";
import { type ApiIndex, apiIndexResponder, homeResponses } from "../../platform/api-index.js";
import { html } from "../../platform/html.js";
import { DOCS_PATH } from "../../platform/openapi.js";
import { sendMessage, sendPage } from "./layout.js";
import type { SessionManager } from "./session.js";

export interface FallbackDeps {
  sessions: SessionManager;
  /** The route patterns of the forms people post to (they have no page of their own to show). */
  formPaths: ReadonlySet<string>;
  /** The API's error handler: what answers a request refused before the fallback (JSON). */
  apiErrors: FastifyInstance["errorHandler"];
  /** What `/` answers a client that does not ask for HTML. */
  apiIndex: ApiIndex;
}

/** Whether `path` is one of the forms' route patterns (`/account/bindings/:id/revoke`). */
function isFormPath(path: string, patterns: ReadonlySet<string>): boolean {
  if (patterns.has(path)) return true;
  const segments = path.split("/");
  for (const pattern of patterns) {
    const parts = pattern.split("/");
    if (parts.length === segments.length && parts.every((part, i) => part.startsWith(":") || part === segments[i])) {
      return true;
    }
  }
  return false;
}

/** Where someone lands who asks for a form's address (a refresh or Back after posting it). */
function pageForForm(path: string): string {
  return path.startsWith("/signin") || path === "/signout" ? "/signin" : "/account";
}

/**
 * Pages for people where the API has none: a landing page at `/`, the form pages a browser asks
 * for by GET, and a 404 page for unknown paths. Anything but a browser asking for HTML gets the
 * API's index at `/` and the API's JSON 404 elsewhere (`reply.callNotFound()`).
 */
export async function fallbackPages(app: FastifyInstance, deps: FallbackDeps): Promise<void> {
  const hidden = { schema: { hide: true } };
  // These routes stand in for "no route": a request refused on the way (a control character, a
  // bad query) is answered as the API answers it, unless a browser asked for a page.
  const pageErrors = app.errorHandler;
  app.setErrorHandler((error, request, reply) =>
    (acceptsHtml(request) ? pageErrors : deps.apiErrors).call(app, error, request, reply),
  );

  const apiIndex = apiIndexResponder(deps.apiIndex);
  const home = {
    schema: {
      summary: "The start page, or the API's index",
      description: "A browser gets the start page for people; `curl` and other clients get a JSON index of the API.",
      tags: ["operations"],
      response: homeResponses("the start page"),
    },
  };
  app.get("/", home, async (request, reply) => {
    const answered = apiIndex(request, reply);
    if (answered !== undefined) return answered;
    const signedIn = (await deps.sessions.current(request)) !== undefined;
    return sendPage(reply, {
      title: "An attestor for AI agents",
      personal: signedIn,
      ...(signedIn ? { signedIn: { csrf: reply.generateCsrf() } } : {}),
      body: html`<h1>proto trust</h1>
<p>This attestor vouches that a verified person stands behind an AI agent, without telling services who the person is.
Link your agent to your account here; services it uses can then ask this attestor for a signed statement.</p>
<div class="actions">
  ${signedIn ? html`<a class="button" href="/account">Your account</a>` : html`<a class="button" href="/signin?next=%2Faccount">Sign in</a>`}
</div>
<h2>What you can do here</h2>
<ul>
  <li><a href="/account">Your account</a>: the agents linked to you, and revoking them.</li>
  <li><a href="${DOCS_PATH}">The API documentation</a>, for developers of agents and services.</li>
</ul>`,
    });
  });

  app.get("/*", hidden, async (request: FastifyRequest, reply: FastifyReply) => {
    if (!acceptsHtml(request)) return reply.callNotFound();
    const path = request.url.split("?")[0] ?? "/";
    if (isFormPath(path, deps.formPaths)) return reply.redirect(pageForForm(path), 303);
    return sendMessage(
      reply,
      404,
      "Page not found",
      "There is no page at this address. Check that you opened the whole link.",
      html`<div class="actions"><a class="button" href="/">Go to the start page</a><a class="button secondary" href="/account">Your account</a></div>`,
    );
  });
}
