import { request as nodeRequest } from "node:http";
import { Writable } from "node:stream";
import type { FastifyInstance } from "fastify";
import { Redis } from "ioredis";
import { REDIS_URL } from "./stores.js";

export interface HttpResult {
  status: number;
  headers: Headers;
  text: string;
  /** The parsed body (undefined when it is not JSON); tests read it field by field. */
  // biome-ignore lint/suspicious/noExplicitAny: response bodies of many shapes, asserted field by field
  json: any;
}

export interface RequestOptions {
  body?: unknown;
  /** Sent as is (for malformed JSON). */
  rawBody?: string | Buffer;
  headers?: Record<string, string>;
  token?: string;
  /** The local address to connect from (e.g. `127.0.0.2`): a second client, or a proxy, on this machine. */
  from?: string;
  /** Ends the request early (a guard against a server that never answers). */
  signal?: AbortSignal;
}

/** One request to a server under test: JSON in, status, headers, text and parsed JSON out. */
export async function httpRequest(
  baseUrl: string,
  method: string,
  path: string,
  options: RequestOptions = {},
): Promise<HttpResult> {
  const headers: Record<string, string> = { ...options.headers };
  let body: string | Buffer | undefined;
  if (options.rawBody !== undefined) body = options.rawBody;
  else if (options.body !== undefined) body = JSON.stringify(options.body);
  if (body !== undefined && headers["content-type"] === undefined) headers["content-type"] = "application/json";
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  if (options.from !== undefined) return requestFrom(options.from, `${baseUrl}${path}`, method, headers, body);
  const response = await fetch(`${baseUrl}${path}`, {
    method,
    headers,
    ...(body === undefined ? {} : { body }),
    ...(options.signal === undefined ? {} : { signal: options.signal }),
  });
  const text = await response.text();
  return { status: response.status, headers: response.headers, text, json: parseJsonBody(text) };
}

/** `fetch` cannot choose the local address; node:http can. */
function requestFrom(
  localAddress: string,
  url: string,
  method: string,
  headers: Record<string, string>,
  body: string | Buffer | undefined,
): Promise<HttpResult> {
  return new Promise((resolve, reject) => {
    const req = nodeRequest(url, { method, headers, localAddress }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("error", reject);
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        const received = new Headers();
        for (const [name, value] of Object.entries(res.headers)) {
          for (const item of Array.isArray(value) ? value : value === undefined ? [] : [value]) {
            received.append(name, item);
          }
        }
        resolve({ status: res.statusCode ?? 0, headers: received, text, json: parseJsonBody(text) });
      });
    });
    req.on("error", reject);
    req.end(body);
  });
}

/** A response body as JSON, or undefined when it is empty or not JSON. */
export function parseJsonBody(text: string): unknown {
  try {
    return text.length > 0 ? JSON.parse(text) : undefined;
  } catch {
    return undefined;
  }
}

/** Starts a built app on 127.0.0.1 (any free port unless given) and answers its base URL. */
export async function listenLocal(app: FastifyInstance, port = 0): Promise<string> {
  await app.listen({ port, host: "127.0.0.1" });
  const address = app.server.address();
  if (address === null || typeof address === "string") throw new Error("no address");
  return `http://127.0.0.1:${address.port}`;
}

/** A log destination that drops everything, so test output stays readable. */
export const quietLog = () =>
  new Writable({
    write(_chunk, _encoding, done) {
      done();
    },
  });

/** Removes every key a test run wrote under its prefix. */
export async function dropRedisPrefix(prefix: string): Promise<void> {
  if (!REDIS_URL) return;
  const redis = new Redis(REDIS_URL);
  try {
    const keys = await redis.keys(`${prefix}*`);
    if (keys.length > 0) await redis.del(...keys);
  } finally {
    redis.disconnect();
  }
}
