/**
 * Child process: the baseline for the read benchmark. A plain `node:http` server that answers
 * `GET /v1/listings/{did}` with the same bytes and headers as the directory (bodies read once
 * from the store at start, then served from memory). Prints `READY <port>`.
 */
import { createServer } from "node:http";
import BetterSqlite3 from "better-sqlite3";

const path = process.env.BASELINE_SQLITE_PATH;
if (path === undefined) throw new Error("BASELINE_SQLITE_PATH is required");
const db = new BetterSqlite3(path, { readonly: true });
const bodies = new Map<string, string>();
for (const row of db.prepare("select service_did, body from dir_listings").iterate() as Iterable<{
  service_did: string;
  body: string;
}>) {
  bodies.set(row.service_did, row.body);
}
db.close();

const PREFIX = "/v1/listings/";
const NOT_FOUND = JSON.stringify({ error: { code: "not_found", message: "no listing for that DID" } });
const server = createServer((req, res) => {
  const url = req.url ?? "";
  const body = url.startsWith(PREFIX) ? bodies.get(decodeURIComponent(url.slice(PREFIX.length))) : undefined;
  if (body === undefined) {
    res.writeHead(404, {
      "content-type": "application/json; charset=utf-8",
      "content-length": Buffer.byteLength(NOT_FOUND),
    });
    res.end(NOT_FOUND);
    return;
  }
  res.writeHead(200, {
    "access-control-allow-origin": "*",
    "cache-control": "public, max-age=60, s-maxage=300",
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(body),
  });
  res.end(body);
});
server.keepAliveTimeout = 72_000;
server.listen(0, "127.0.0.1", () => {
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no TCP address");
  process.stdout.write(`READY ${address.port}\n`);
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
