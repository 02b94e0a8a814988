/**
 * Child process: the baseline for the read benchmark. A plain `node:http` server that answers
 * `GET /v1/listings/{did}` with the same bytes and headers as the directory (bodies and their
 * entity tags read once from the store at start, then served from memory). The store is
 * `BASELINE_DATABASE_URL`: `sqlite:<path>` or a PostgreSQL URL. Prints `READY <port>`.
 */
import { createHash } from "node:crypto";
import { createServer } from "node:http";
import BetterSqlite3 from "better-sqlite3";
import pg from "pg";

const url = process.env.BASELINE_DATABASE_URL;
if (url === undefined) throw new Error("BASELINE_DATABASE_URL is required");

async function readBodies(): Promise<{ service_did: string; body: string }[]> {
  const sql = "select service_did, body from dir_listings";
  if (url!.startsWith("sqlite:")) {
    const db = new BetterSqlite3(url!.slice("sqlite:".length), { readonly: true });
    try {
      return db.prepare(sql).all() as { service_did: string; body: string }[];
    } finally {
      db.close();
    }
  }
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<{ service_did: string; body: string }>(sql)).rows;
  } finally {
    await client.end();
  }
}

const CORS = { "access-control-allow-origin": "*", "access-control-expose-headers": "ETag, Retry-After" };
const answers = new Map<string, { body: string; headers: Record<string, string | number> }>();
for (const row of await readBodies()) {
  answers.set(row.service_did, {
    body: row.body,
    headers: {
      ...CORS,
      "cache-control": "public, max-age=60, s-maxage=300",
      "content-type": "application/json; charset=utf-8",
      etag: `"${createHash("sha256").update(row.body, "utf8").digest("base64url")}"`,
      "content-length": Buffer.byteLength(row.body),
    },
  });
}

const PREFIX = "/v1/listings/";
const NOT_FOUND = JSON.stringify({ error: { code: "not_found", message: "no listing for that DID" } });
const server = createServer((req, res) => {
  const url = req.url ?? "";
  const answer = url.startsWith(PREFIX) ? answers.get(decodeURIComponent(url.slice(PREFIX.length))) : undefined;
  if (answer === undefined) {
    res.writeHead(404, {
      ...CORS,
      "content-type": "application/json; charset=utf-8",
      "content-length": Buffer.byteLength(NOT_FOUND),
    });
    res.end(NOT_FOUND);
    return;
  }
  res.writeHead(200, answer.headers);
  res.end(answer.body);
});
server.keepAliveTimeout = 72_000;
server.listen(0, "127.0.0.1", () => {
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no TCP address");
  process.stdout.write(`READY ${address.port}\n`);
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
