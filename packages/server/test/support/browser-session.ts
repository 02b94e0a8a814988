/**
 * Just enough of a browser to drive the attestor's server-rendered pages with fetch: one cookie
 * jar, forms posted as a browser posts them, redirects answered rather than followed, and the
 * hidden form fields (CSRF token, `next`, the sign-in token) read back off a page. Shared by the
 * suites that sign people in without a real browser.
 */
import { field } from "@proto/testkit";
import { type HttpResult, parseJsonBody } from "./http.js";

export { field };

/** What a page request answers: the response as read, where it redirects, and the cookies it set. */
export interface PageAnswer extends HttpResult {
  location: string | undefined;
  setCookies: string[];
}

export interface PageRequest {
  /** Sent as `application/x-www-form-urlencoded`, as a form is (pairs when a name repeats). */
  form?: Record<string, string> | [string, string][];
  json?: unknown;
  headers?: Record<string, string>;
}

/**
 * One browser's worth of cookies (one site, paths ignored). A target is a path on `base` or an
 * absolute URL; `headers` go with every request (a client address, say).
 */
export class Browserless {
  readonly cookies = new Map<string, string>();

  constructor(
    private readonly base: string,
    private readonly headers: Record<string, string> = {},
  ) {}

  cookie(name: string): string | undefined {
    return this.cookies.get(name);
  }

  async send(method: string, target: string, options: PageRequest = {}): Promise<PageAnswer> {
    const headers: Record<string, string> = { ...this.headers, ...options.headers };
    if (this.cookies.size > 0) {
      headers.cookie = [...this.cookies].map(([name, value]) => `${name}=${value}`).join("; ");
    }
    let body: string | undefined;
    if (options.form !== undefined) {
      body = new URLSearchParams(options.form).toString();
      headers["content-type"] = "application/x-www-form-urlencoded";
    } else if (options.json !== undefined) {
      body = JSON.stringify(options.json);
      headers["content-type"] = "application/json";
    }
    const url = target.startsWith("http") ? target : `${this.base}${target}`;
    const response = await fetch(url, { method, headers, redirect: "manual", ...(body === undefined ? {} : { body }) });
    const setCookies = response.headers.getSetCookie();
    for (const line of setCookies) this.#store(line);
    const text = await response.text();
    return {
      status: response.status,
      headers: response.headers,
      text,
      json: parseJsonBody(text),
      location: response.headers.get("location") ?? undefined,
      setCookies,
    };
  }

  get(target: string): Promise<PageAnswer> {
    return this.send("GET", target);
  }

  post(target: string, form: Record<string, string>): Promise<PageAnswer> {
    return this.send("POST", target, { form });
  }

  /** Keeps a `Set-Cookie`, or forgets the cookie when it is emptied or expired. */
  #store(line: string): void {
    const [pair = "", ...attributes] = line.split(";");
    const name = pair.slice(0, pair.indexOf("=")).trim();
    const value = pair.slice(pair.indexOf("=") + 1).trim();
    const expired = attributes.some(
      (a) =>
        /^\s*max-age=0\s*$/i.test(a) || (/^\s*expires=/i.test(a) && Date.parse(a.split("=")[1] ?? "") < Date.now()),
    );
    if (expired || value === "") this.cookies.delete(name);
    else this.cookies.set(name, value);
  }
}
