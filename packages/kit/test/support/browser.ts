import assert from "node:assert/strict";
import { field, link, unescapeHtml } from "@proto/testkit";
import type { FastifyInstance } from "fastify";
import type { Answer, TestAttestor } from "./attestor.js";

export { field, link };

/**
 * The attestor's consent form as a browser sends it on Allow: its hidden fields and the boxes
 * ticked as the page opened (a disabled box is never sent).
 */
export function allowedConsent(page: string): Record<string, string> {
  const form: Record<string, string> = { decision: "allow" };
  for (const m of page.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)) {
    form[m[1] as string] = unescapeHtml(m[2] as string);
  }
  for (const m of page.matchAll(/<input type="checkbox" name="([^"]+)" value="([^"]*)"([^>]*)>/g)) {
    const flags = m[3] as string;
    if (/\bchecked\b/.test(flags) && !/\bdisabled\b/.test(flags)) form[m[1] as string] = unescapeHtml(m[2] as string);
  }
  return form;
}

export interface PageAnswer extends Answer {
  url: string;
  location: string | undefined;
}

/**
 * One browser: a cookie jar per origin, redirects not followed on their own. Requests to a service
 * origin go to its Fastify app (inject); anything else over the network (the attestor).
 */
export class Browser {
  readonly jars = new Map<string, Map<string, string>>();

  constructor(private readonly services: Map<string, FastifyInstance>) {}

  cookie(origin: string, name: string): string | undefined {
    return this.jars.get(origin)?.get(name);
  }

  setCookie(origin: string, name: string, value: string): void {
    let jar = this.jars.get(origin);
    if (jar === undefined) {
      jar = new Map();
      this.jars.set(origin, jar);
    }
    jar.set(name, value);
  }

  async send(
    method: string,
    target: string,
    options: { form?: Record<string, string>; json?: unknown; headers?: Record<string, string> } = {},
  ): Promise<PageAnswer> {
    const url = new URL(target);
    const jar = this.jars.get(url.origin) ?? new Map<string, string>();
    this.jars.set(url.origin, jar);
    const headers: Record<string, string> = { ...options.headers };
    if (jar.size > 0) headers.cookie = [...jar].map(([name, value]) => `${name}=${value}`).join("; ");
    let body: string | undefined;
    if (options.form !== undefined) {
      body = new URLSearchParams(options.form).toString();
      headers["content-type"] = "application/x-www-form-urlencoded";
    } else if (options.json !== undefined) {
      body = JSON.stringify(options.json);
      headers["content-type"] = "application/json";
    }
    let status: number;
    let responseHeaders: Headers;
    let text: string;
    const app = this.services.get(url.origin);
    if (app !== undefined) {
      const response = await app.inject({
        method: method as "GET",
        url: `${url.pathname}${url.search}`,
        headers,
        ...(body === undefined ? {} : { payload: body }),
      });
      status = response.statusCode;
      responseHeaders = new Headers();
      for (const [name, value] of Object.entries(response.headers)) {
        if (value === undefined) continue;
        if (Array.isArray(value)) for (const v of value) responseHeaders.append(name, v);
        else responseHeaders.set(name, String(value));
      }
      text = response.body;
    } else {
      const response = await fetch(url, {
        method,
        headers,
        redirect: "manual",
        ...(body === undefined ? {} : { body }),
      });
      status = response.status;
      responseHeaders = response.headers;
      text = await response.text();
    }
    for (const line of responseHeaders.getSetCookie()) {
      const [pair = ""] = line.split(";");
      const name = pair.slice(0, pair.indexOf("=")).trim();
      const value = pair.slice(pair.indexOf("=") + 1).trim();
      if (value === "" || /max-age=0/i.test(line)) jar.delete(name);
      else jar.set(name, value);
    }
    let json: unknown;
    try {
      json = text.length > 0 ? JSON.parse(text) : undefined;
    } catch {
      json = undefined;
    }
    const location = responseHeaders.get("location") ?? undefined;
    return {
      status,
      headers: responseHeaders,
      text,
      json,
      url: url.href,
      location: location === undefined ? undefined : new URL(location, url).href,
    };
  }

  get(target: string) {
    return this.send("GET", target);
  }

  /**
   * Follows redirects from `target`; whenever the attestor asks the person to sign in, signs in as
   * `email` by the e-mail flow (sign-in page, mailed link, confirmation button). Answers the first
   * page that is not a redirect.
   */
  async follow(target: string, attestor: TestAttestor, email: string): Promise<PageAnswer> {
    let answer = await this.get(target);
    for (let hops = 0; hops < 12; hops++) {
      // A person's first sign-in to a service at the attestor asks first: press Allow.
      if (answer.status === 200 && answer.text.includes('action="/oidc/consent"')) {
        answer = await this.#allow(answer, attestor);
      }
      if (answer.status < 300 || answer.status >= 400 || answer.location === undefined) return answer;
      const next = new URL(answer.location);
      if (next.origin === attestor.url && next.pathname === "/signin") {
        answer = await this.#signInByEmail(next.href, attestor, email);
      } else {
        answer = await this.get(next.href);
      }
    }
    throw new Error("too many redirects");
  }

  /** Posts the consent page's form with Allow, as pressing the button does. */
  async #allow(page: PageAnswer, attestor: TestAttestor): Promise<PageAnswer> {
    return this.send("POST", `${attestor.url}/oidc/consent`, { form: allowedConsent(page.text) });
  }

  async #signInByEmail(signinUrl: string, attestor: TestAttestor, email: string): Promise<PageAnswer> {
    const page = await this.get(signinUrl);
    assert.equal(page.status, 200, page.text);
    const sent = await this.send("POST", `${attestor.url}/signin/email`, {
      form: { _csrf: field(page.text, "_csrf"), next: field(page.text, "next"), email },
    });
    assert.equal(sent.status, 200, sent.text);
    const confirm = await this.get(attestor.magicLink(email));
    assert.equal(confirm.status, 200, confirm.text);
    const done = await this.send("POST", `${attestor.url}/signin/email/verify`, {
      form: { _csrf: field(confirm.text, "_csrf"), token: field(confirm.text, "token") },
    });
    assert.equal(done.status, 303, done.text);
    return done;
  }
}
