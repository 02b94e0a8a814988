/**
 * A deliberately broken stand-in: a small node:http server that forwards every request to one of
 * our servers and lets a test rewrite the request's URL or the answer, so it violates exactly one
 * rule of the contract.
 */
import { createServer, type Server } from "node:http";

export interface Exchange {
  method: string;
  /** Path and query, as the client sent them. */
  path: string;
  headers: Record<string, string>;
  body: string;
}

export interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export interface Breakage {
  /** Rewrites the path and query forwarded upstream. */
  request?(exchange: Exchange): string | undefined;
  /** Rewrites the answer sent back (the upstream's, decoded). */
  response?(exchange: Exchange, answer: Answer): Answer | undefined | Promise<Answer | undefined>;
}

export interface StandIn {
  url: string;
  port: number;
  /** What the stand-in breaks from now on (nothing: it forwards faithfully). */
  breakWith(breakage: Breakage | undefined): void;
  close(): Promise<void>;
}

/** Headers a proxy recomputes: forwarding them would misdescribe a rewritten body. */
const HOP = new Set(["content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding"]);

export async function startStandIn(upstream: string, port = 0): Promise<StandIn> {
  let breakage: Breakage | undefined;
  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (typeof value === "string" && !HOP.has(name) && name !== "host") headers[name] = value;
    }
    const exchange: Exchange = {
      method: req.method ?? "GET",
      path: req.url ?? "/",
      headers,
      body: Buffer.concat(chunks).toString("utf8"),
    };
    const path = breakage?.request?.(exchange) ?? exchange.path;
    try {
      const upstreamResponse = await fetch(`${upstream}${path}`, {
        method: exchange.method,
        headers,
        ...(exchange.body === "" ? {} : { body: exchange.body }),
        redirect: "manual",
      });
      const answerHeaders: Record<string, string> = {};
      upstreamResponse.headers.forEach((value, name) => {
        if (!HOP.has(name)) answerHeaders[name] = value;
      });
      const original: Answer = {
        status: upstreamResponse.status,
        headers: answerHeaders,
        body: await upstreamResponse.text(),
      };
      const answer = (await breakage?.response?.(exchange, original)) ?? original;
      res.writeHead(answer.status, answer.headers);
      res.end(answer.body);
    } catch (error) {
      res.writeHead(502, { "content-type": "text/plain" });
      res.end(`stand-in: ${error instanceof Error ? error.message : String(error)}`);
    }
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no address");
  return {
    url: `http://127.0.0.1:${address.port}`,
    port: address.port,
    breakWith(next) {
      breakage = next;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Helpers for the breakage tables: JSON bodies edited in place. */
export function editJson(answer: Answer, edit: (body: Record<string, unknown>) => void): Answer {
  const body = JSON.parse(answer.body) as Record<string, unknown>;
  edit(body);
  return { ...answer, body: JSON.stringify(body) };
}

export const pathOf = (exchange: Exchange): string => exchange.path.split("?")[0] ?? "";
export const queryOf = (exchange: Exchange): URLSearchParams => new URLSearchParams(exchange.path.split("?")[1] ?? "");
export const bodyOf = (exchange: Exchange): Record<string, unknown> => {
  try {
    const parsed: unknown = JSON.parse(exchange.body);
    return typeof parsed === "object" && parsed !== null ? (parsed as Record<string, unknown>) : {};
  } catch {
    return {};
  }
};
