import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import { createServer } from "node:https";
import type { AddressInfo, Socket } from "node:net";
import { isIP, isIPv6 } from "node:net";
import { pipeline, Readable } from "node:stream";
import type { TLSSocket } from "node:tls";
import type { TestCA } from "./ca.js";

export const PROOF_PATH = "/.well-known/proto-registry-proof";
export const DISCOVERY_PATH = "/.well-known/proto";

/** What the directory's fetch cap is measured against; oversized bodies go past it. */
const BODY_CAP_BYTES = 64 * 1024;

/** May return a promise; a rejection becomes a 500 (or a destroyed socket once headers are out). */
export type RouteHandler = (req: IncomingMessage, res: ServerResponse) => unknown;

export interface ResponseSpec {
  /** Defaults to 200. */
  status?: number;
  /** Override the defaults, including `content-type`. */
  headers?: Record<string, string>;
  /**
   * A string is sent as `text/plain; charset=utf-8`, a Buffer as `application/octet-stream`, any
   * other object as JSON.
   */
  body?: string | Buffer | object;
}

export type Misbehaviour =
  | "wrong-content-type"
  | "trailing-newline"
  | "redirect"
  | "status-500"
  | "hang"
  | "oversized"
  | "slow-drip";

export interface MisbehaveOptions {
  /**
   * Body for `wrong-content-type` and `trailing-newline`. Defaults to the body of the response the
   * path served before, so `serveProof(token)` then `misbehave(PROOF_PATH, ...)` keeps the token.
   */
  body?: string | Buffer;
  /** The wrong type sent by `wrong-content-type`; defaults to `text/html; charset=utf-8`. */
  contentType?: string;
  /**
   * `Location` of `redirect`; defaults to `/moved` + path. When it is a path, the response the
   * original path served moves there, so a client that wrongly follows the redirect succeeds and
   * the test sees the second request in `host.requests`.
   */
  location?: string;
  /** Status of `redirect`; defaults to 302. */
  status?: number;
  /** Body length of `oversized`; defaults to 64 KiB + 1 KiB. */
  size?: number;
  /** Delay between the bytes of `slow-drip`; defaults to 100 ms. */
  intervalMs?: number;
}

export interface RecordedRequest {
  method: string;
  /** Path and query as sent. */
  path: string;
  headers: IncomingHttpHeaders;
  /** The TLS SNI name, to check a client pinned to an address still presented the hostname. */
  servername: string | undefined;
}

export interface HttpsHostOptions {
  ca: TestCA;
  /** Names (or IP literals) the certificate covers; the first is the default for `origin()`. */
  hostnames: string[];
  /** Defaults to 0 (any free port). */
  port?: number;
  /** Listen address; defaults to 127.0.0.1. */
  address?: string;
}

export interface HttpsHost {
  readonly port: number;
  /** The address the server listens on. */
  readonly address: string;
  readonly hostnames: readonly string[];
  /** Every request received, in order. */
  readonly requests: RecordedRequest[];
  /** Serves `path` (query ignored) until changed; replaces any earlier route or misbehaviour. */
  route(path: string, response: RouteHandler | ResponseSpec): void;
  unroute(path: string): void;
  misbehave(path: string, kind: Misbehaviour, options?: MisbehaveOptions): void;
  /** 200 `text/plain`, the token byte for byte, at the proof path. */
  serveProof(token: string): void;
  /** 200 `application/json` at the discovery path; a string is sent as is (for invalid JSON). */
  serveDiscovery(doc: unknown): void;
  /** `https://hostname:port`, for the first hostname by default. */
  origin(hostname?: string): string;
  /** `PROTO_FETCH_RESOLVE` value pinning every (non-IP) hostname at this port to the listen address. */
  resolveEntries(): string;
  /** Forgets routes and recorded requests, for reuse across tests. */
  reset(): void;
  /** Destroys every open socket, hanging and dripping ones included, then stops listening. */
  close(): Promise<void>;
}

type Route = { kind: "spec"; spec: ResponseSpec } | { kind: "handler"; handler: RouteHandler };

function encodeBody(body: ResponseSpec["body"]): { bytes: Buffer; contentType: string } | undefined {
  if (body === undefined) return undefined;
  if (typeof body === "string") return { bytes: Buffer.from(body, "utf8"), contentType: "text/plain; charset=utf-8" };
  if (Buffer.isBuffer(body)) return { bytes: body, contentType: "application/octet-stream" };
  return { bytes: Buffer.from(JSON.stringify(body), "utf8"), contentType: "application/json" };
}

function sendSpec(res: ServerResponse, spec: ResponseSpec): void {
  const encoded = encodeBody(spec.body);
  res.statusCode = spec.status ?? 200;
  if (encoded) res.setHeader("content-type", encoded.contentType);
  for (const [name, value] of Object.entries(spec.headers ?? {})) res.setHeader(name, value);
  res.end(encoded?.bytes);
}

function hostForUrl(hostname: string): string {
  return isIPv6(hostname) ? `[${hostname}]` : hostname;
}

/** A wildcard listen address cannot be connected to portably; loopback reaches it. */
function connectableAddress(address: string): string {
  if (address === "0.0.0.0") return "127.0.0.1";
  if (address === "::") return "::1";
  return address;
}

export async function startHttpsHost(options: HttpsHostOptions): Promise<HttpsHost> {
  const hostnames = [...options.hostnames];
  if (hostnames.length === 0) throw new Error("startHttpsHost() needs at least one hostname");
  const { certPem, keyPem } = await options.ca.issue(hostnames);

  const routes = new Map<string, Route>();
  const requests: RecordedRequest[] = [];
  // Raw and TLS sockets both: a socket still in its handshake is not yet an HTTP connection, so
  // server.closeAllConnections() alone would leave it open and keep the test runner alive.
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();

  const server = createServer({ key: keyPem, cert: certPem }, (req, res) => {
    const path = req.url ?? "/";
    requests.push({
      method: req.method ?? "GET",
      path,
      headers: req.headers,
      servername: (req.socket as TLSSocket).servername || undefined,
    });
    const route = routes.get(path.split("?")[0] ?? path);
    if (!route) {
      sendSpec(res, { status: 404, body: "not found" });
      return;
    }
    if (route.kind === "spec") {
      sendSpec(res, route.spec);
      return;
    }
    Promise.resolve()
      .then(() => route.handler(req, res))
      .catch((error: unknown) => {
        // A failing handler is a bug in the test; a 500 keeps it visible without crashing the runner.
        if (!res.headersSent) sendSpec(res, { status: 500, body: `handler failed: ${String(error)}` });
        else res.destroy();
      });
  });
  const track = (socket: Socket): void => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  };
  server.on("connection", track);
  server.on("secureConnection", track);
  // Clients that give up mid-handshake are expected in fetch tests, not errors worth surfacing.
  server.on("tlsClientError", () => {});

  const listenAddress = options.address ?? "127.0.0.1";
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, listenAddress, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const target = connectableAddress(listenAddress);

  function previousBody(path: string): { bytes: Buffer; contentType: string } | undefined {
    const route = routes.get(path);
    return route?.kind === "spec" ? encodeBody(route.spec.body) : undefined;
  }

  function misbehave(path: string, kind: Misbehaviour, opts: MisbehaveOptions = {}): void {
    const previous = previousBody(path);
    const body = opts.body !== undefined ? Buffer.from(opts.body) : (previous?.bytes ?? Buffer.from("misbehaving"));
    switch (kind) {
      case "wrong-content-type":
        routes.set(path, {
          kind: "spec",
          spec: { body, headers: { "content-type": opts.contentType ?? "text/html; charset=utf-8" } },
        });
        return;
      case "trailing-newline":
        routes.set(path, {
          kind: "spec",
          spec: { body: Buffer.concat([body, Buffer.from("\n")]), headers: { "content-type": "text/plain" } },
        });
        return;
      case "redirect": {
        const location = opts.location ?? `/moved${path}`;
        const moved = routes.get(path);
        if (location.startsWith("/") && moved && !routes.has(location)) routes.set(location, moved);
        routes.set(path, {
          kind: "spec",
          spec: { status: opts.status ?? 302, headers: { location }, body: "moved" },
        });
        return;
      }
      case "status-500":
        routes.set(path, { kind: "spec", spec: { status: 500, body: "internal error" } });
        return;
      case "hang":
        // Reading the request and never answering: the socket stays open until the client gives up or close().
        routes.set(path, { kind: "handler", handler: () => {} });
        return;
      case "oversized": {
        const size = opts.size ?? BODY_CAP_BYTES + 1024;
        const contentType = previous?.contentType ?? "text/plain";
        routes.set(path, {
          kind: "handler",
          handler: (_req, res) => {
            // No content-length: the client has to enforce its cap while streaming, not from a header.
            res.writeHead(200, { "content-type": contentType });
            pipeline(Readable.from(chunks(size)), res, () => {});
          },
        });
        return;
      }
      case "slow-drip": {
        const intervalMs = opts.intervalMs ?? 100;
        routes.set(path, {
          kind: "handler",
          handler: (_req, res) => {
            res.writeHead(200, { "content-type": "text/plain" });
            res.flushHeaders();
            const timer = setInterval(() => res.write("."), intervalMs);
            timers.add(timer);
            res.once("close", () => {
              clearInterval(timer);
              timers.delete(timer);
            });
          },
        });
        return;
      }
    }
  }

  let closing: Promise<void> | undefined;
  function close(): Promise<void> {
    closing ??= new Promise<void>((resolve) => {
      for (const timer of timers) clearInterval(timer);
      timers.clear();
      server.close(() => resolve());
      for (const socket of sockets) socket.destroy();
      server.closeAllConnections();
    });
    return closing;
  }

  return {
    port,
    address: listenAddress,
    hostnames,
    requests,
    route(path, response) {
      routes.set(
        path,
        typeof response === "function" ? { kind: "handler", handler: response } : { kind: "spec", spec: response },
      );
    },
    unroute(path) {
      routes.delete(path);
    },
    misbehave,
    serveProof(token) {
      routes.set(PROOF_PATH, { kind: "spec", spec: { body: token, headers: { "content-type": "text/plain" } } });
    },
    serveDiscovery(doc) {
      const body = typeof doc === "string" ? doc : JSON.stringify(doc);
      routes.set(DISCOVERY_PATH, { kind: "spec", spec: { body, headers: { "content-type": "application/json" } } });
    },
    origin(hostname = hostnames[0] ?? target) {
      return `https://${hostForUrl(hostname)}:${port}`;
    },
    resolveEntries() {
      return hostnames
        .filter((name) => isIP(name) === 0)
        .map((name) => `${name}:${port}:${hostForUrl(target)}`)
        .join(",");
    },
    reset() {
      routes.clear();
      requests.length = 0;
    },
    close,
  };
}

function* chunks(total: number): Generator<Buffer> {
  const chunk = Buffer.alloc(16 * 1024, "a");
  for (let sent = 0; sent < total; sent += chunk.length) {
    yield total - sent >= chunk.length ? chunk : chunk.subarray(0, total - sent);
  }
}
