import { createServer, type Server } from "node:http";

/** The relying party's callback: a loopback page that records what the provider sent back. */
export async function startRelyingParty(): Promise<{ server: Server; url: string; hits: URL[] }> {
  const hits: URL[] = [];
  const server = createServer((request, response) => {
    hits.push(new URL(request.url ?? "/", "http://127.0.0.1"));
    response.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    response.end("<!doctype html><title>Shop</title><p>Back at the shop.</p>");
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no address");
  return { server, url: `http://127.0.0.1:${address.port}/callback`, hits };
}
