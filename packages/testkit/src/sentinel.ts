import type { AddressInfo, Socket } from "node:net";
import { createServer } from "node:net";

export interface Sentinel {
  readonly port: number;
  readonly address: string;
  /** Connections accepted so far; an SSRF test asserts it stays 0. */
  readonly hits: number;
  close(): Promise<void>;
}

export interface SentinelOptions {
  /** Defaults to 127.0.0.1. */
  address?: string;
}

/**
 * A TCP listener that only counts connections. It speaks no protocol and drops every connection at
 * once, so a client that wrongly reaches it fails fast instead of waiting for a timeout.
 */
export async function startSentinel(options: SentinelOptions = {}): Promise<Sentinel> {
  const address = options.address ?? "127.0.0.1";
  let hits = 0;
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    hits += 1;
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    socket.on("error", () => {});
    socket.destroy();
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, address, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;

  let closing: Promise<void> | undefined;
  return {
    port,
    address,
    get hits() {
      return hits;
    },
    close() {
      closing ??= new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      });
      return closing;
    },
  };
}
