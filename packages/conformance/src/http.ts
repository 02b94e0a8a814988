/**
 * Every request a probe sends goes through here: each has a timeout and a bound on how much of
 * the answer is read (a deployment under test must not be able to hang or flood the checker), and
 * a 429 is honoured by waiting its `Retry-After` (bounded) and trying again, with the wait noted
 * in the probe's result.
 */

/** What a failure report shows of a body. */
export const EXCERPT_BYTES = 2048;

export interface HttpExchange {
  method: string;
  url: string;
  requestHeaders: Record<string, string>;
  /** The request body, cut to an excerpt. */
  requestBody?: string;
  /** 0 when no answer came (timeout, refused connection). */
  status: number;
  /** Response headers, names lower-case. */
  headers: Record<string, string>;
  /** The response body, cut to an excerpt. */
  bodyExcerpt: string;
  /** Why no answer came, when none did. */
  error?: string;
}

export interface HttpResponse {
  status: number;
  headers: Record<string, string>;
  /** The whole body as read (up to the size bound). */
  text: string;
  /** The body parsed as JSON, or undefined when it is not JSON. */
  json: unknown;
  exchange: HttpExchange;
}

export interface RequestInit {
  headers?: Record<string, string>;
  /** A string is sent as is; anything else is sent as JSON. */
  body?: unknown;
}

export interface HttpClientOptions {
  timeoutMs?: number;
  maxBodyBytes?: number;
  /** The longest `Retry-After` honoured; a longer one is waited this long. */
  maxRetryAfterSeconds?: number;
  /** How many times one request is retried after a 429. */
  maxRetries?: number;
  /** Waits; injected so tests never sleep. */
  wait?: (ms: number) => Promise<void>;
  fetch?: typeof fetch;
}

const excerpt = (text: string): string =>
  Buffer.byteLength(text) <= EXCERPT_BYTES
    ? text
    : `${Buffer.from(text).subarray(0, EXCERPT_BYTES).toString("utf8")}… (${Buffer.byteLength(text)} bytes)`;

async function readBounded(response: Response, maxBytes: number): Promise<string> {
  if (response.body === null) return "";
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > maxBytes) {
      await reader.cancel();
      throw new Error(`the response body is larger than ${maxBytes} bytes`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString("utf8");
}

export class HttpClient {
  /** Rate-limit waits since the last `takeNotes()`: the runner puts them in the probe's result. */
  private notes: string[] = [];
  private readonly timeoutMs: number;
  private readonly maxBodyBytes: number;
  private readonly maxRetryAfterSeconds: number;
  private readonly maxRetries: number;
  private readonly wait: (ms: number) => Promise<void>;
  private readonly fetchImpl: typeof fetch;

  constructor(options: HttpClientOptions = {}) {
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.maxBodyBytes = options.maxBodyBytes ?? 1024 * 1024;
    this.maxRetryAfterSeconds = options.maxRetryAfterSeconds ?? 30;
    this.maxRetries = options.maxRetries ?? 3;
    this.wait = options.wait ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
    this.fetchImpl = options.fetch ?? fetch;
  }

  takeNotes(): string[] {
    const notes = this.notes;
    this.notes = [];
    return notes;
  }

  get(url: string, headers: Record<string, string> = {}): Promise<HttpResponse> {
    return this.request("GET", url, { headers });
  }

  post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<HttpResponse> {
    return this.request("POST", url, { body, headers });
  }

  async request(method: string, url: string, init: RequestInit = {}): Promise<HttpResponse> {
    const headers: Record<string, string> = { ...init.headers };
    let body: string | undefined;
    if (init.body !== undefined) {
      body = typeof init.body === "string" ? init.body : JSON.stringify(init.body);
      if (!Object.keys(headers).some((name) => name.toLowerCase() === "content-type")) {
        headers["content-type"] = "application/json";
      }
    }
    for (let attempt = 0; ; attempt++) {
      const response = await this.once(method, url, headers, body);
      if (response.status !== 429 || attempt >= this.maxRetries) return response;
      const seconds = Math.min(this.retryAfterSeconds(response.headers["retry-after"]), this.maxRetryAfterSeconds);
      this.notes.push(
        `429 on ${method} ${url}: waited ${seconds} s (Retry-After ${response.headers["retry-after"] ?? "absent"})`,
      );
      await this.wait(seconds * 1000);
    }
  }

  /** Whole seconds, or an HTTP date; absent or unreadable waits one second, so a retry still backs off. */
  private retryAfterSeconds(value: string | undefined): number {
    if (value === undefined) return 1;
    if (/^\d+$/.test(value.trim())) return Number(value.trim());
    const date = Date.parse(value);
    return Number.isNaN(date) ? 1 : Math.max(0, Math.ceil((date - Date.now()) / 1000));
  }

  private async once(
    method: string,
    url: string,
    headers: Record<string, string>,
    body: string | undefined,
  ): Promise<HttpResponse> {
    const exchange: HttpExchange = {
      method,
      url,
      requestHeaders: headers,
      ...(body === undefined ? {} : { requestBody: excerpt(body) }),
      status: 0,
      headers: {},
      bodyExcerpt: "",
    };
    try {
      const response = await this.fetchImpl(url, {
        method,
        headers,
        ...(body === undefined ? {} : { body }),
        redirect: "manual",
        signal: AbortSignal.timeout(this.timeoutMs),
      });
      exchange.status = response.status;
      response.headers.forEach((value, name) => {
        exchange.headers[name] = value;
      });
      const text = await readBounded(response, this.maxBodyBytes);
      exchange.bodyExcerpt = excerpt(text);
      let json: unknown;
      try {
        json = text === "" ? undefined : JSON.parse(text);
      } catch {
        json = undefined;
      }
      return { status: response.status, headers: exchange.headers, text, json, exchange };
    } catch (error) {
      exchange.error = describeError(error);
      return { status: 0, headers: {}, text: "", json: undefined, exchange };
    }
  }
}

function describeError(error: unknown): string {
  if (error instanceof Error) {
    if (error.name === "TimeoutError") return "no answer within the timeout";
    const cause = (error as Error & { cause?: unknown }).cause;
    return cause instanceof Error ? `${error.message}: ${cause.message}` : error.message;
  }
  return String(error);
}
