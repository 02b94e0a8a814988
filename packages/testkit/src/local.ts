import { createServer } from "node:net";
import { Writable } from "node:stream";

/** A TCP port free on 127.0.0.1 a moment ago (for a server that must know its URL before it listens). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === "string") throw new Error("no address");
  return address.port;
}

/** A stream that drops what is written: the log of a server whose output the test does not read. */
export function quietStream(): Writable {
  return new Writable({
    write(_chunk, _encoding, done) {
      done();
    },
  });
}
