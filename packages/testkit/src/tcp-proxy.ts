import { connect, createServer, type Server, type Socket } from "node:net";

/**
 * A TCP relay on loopback in front of a server (PostgreSQL, an attestor's key set), whose link the
 * test can break: `cut` closes every connection and refuses new ones; `stall` stops relaying bytes
 * without closing anything (a network partition: neither side hears from the other); `restore`
 * undoes either.
 */
export interface TcpProxy {
  port: number;
  /** Connections accepted so far. */
  readonly accepted: number;
  cut(): void;
  stall(): void;
  restore(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(targetHost: string, targetPort: number): Promise<TcpProxy> {
  let mode: "open" | "cut" | "stalled" = "open";
  let accepted = 0;
  const pairs = new Set<[Socket, Socket]>();
  const server: Server = createServer((client) => {
    accepted++;
    if (mode === "cut") {
      client.destroy();
      return;
    }
    const upstream = connect(targetPort, targetHost);
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    const end = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on("error", end).on("close", end);
    upstream.on("error", end).on("close", end);
    client.pipe(upstream);
    upstream.pipe(client);
    if (mode === "stalled") {
      client.pause();
      upstream.pause();
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no TCP address");
  return {
    port: address.port,
    get accepted() {
      return accepted;
    },
    cut() {
      mode = "cut";
      for (const [client, upstream] of pairs) {
        client.destroy();
        upstream.destroy();
      }
      pairs.clear();
    },
    stall() {
      mode = "stalled";
      for (const [client, upstream] of pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
      }
    },
    restore() {
      const wasStalled = mode === "stalled";
      mode = "open";
      if (!wasStalled) return;
      for (const [client, upstream] of pairs) {
        client.pipe(upstream);
        upstream.pipe(client);
      }
    },
    async close() {
      for (const [client, upstream] of pairs) {
        client.destroy();
        upstream.destroy();
      }
      pairs.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
