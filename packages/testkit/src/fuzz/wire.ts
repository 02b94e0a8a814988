/**
 * HTTP/1.1 over a bare socket, so a request can be as broken as a hostile client makes it
 * (duplicate Content-Length, no Host, raw bytes in the target) where fetch would refuse to send it.
 * One connection per request, closed by the server after its answer (`Connection: close`); a
 * request never claims more body than it sends, so the server never waits for more.
 */
import { connect } from "node:net";

export interface RawAnswer {
  status: number;
  /** Header names in lower case; repeated headers keep every value. */
  headers: Map<string, string[]>;
  body: Buffer;
}

export type RawResult = { answer: RawAnswer } | { error: string };

export function header(answer: RawAnswer, name: string): string | undefined {
  return answer.headers.get(name)?.join(", ");
}

function decodeChunked(data: Buffer): Buffer {
  const parts: Buffer[] = [];
  let offset = 0;
  while (offset < data.length) {
    const end = data.indexOf("\r\n", offset);
    if (end < 0) break;
    const size = Number.parseInt(data.subarray(offset, end).toString("latin1").split(";")[0] ?? "", 16);
    if (!Number.isFinite(size) || size === 0) break;
    parts.push(data.subarray(end + 2, end + 2 + size));
    offset = end + 2 + size + 2;
  }
  return Buffer.concat(parts);
}

/** The first answer in `data` (what the server wrote before closing), or why there is none. */
export function parseAnswer(data: Buffer, method: string): RawResult {
  // Interim answers (`100 Continue` to `Expect: 100-continue`) precede the real one.
  while (/^HTTP\/1\.[01] 1\d\d /.test(data.subarray(0, 16).toString("latin1"))) {
    const end = data.indexOf("\r\n\r\n");
    if (end < 0) break;
    data = data.subarray(end + 4);
  }
  const split = data.indexOf("\r\n\r\n");
  if (split < 0) return { error: data.length === 0 ? "connection closed without an answer" : "truncated answer" };
  const [statusLine = "", ...lines] = data.subarray(0, split).toString("latin1").split("\r\n");
  const status = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1];
  if (status === undefined) return { error: `bad status line ${JSON.stringify(statusLine.slice(0, 80))}` };
  const headers = new Map<string, string[]>();
  for (const line of lines) {
    const colon = line.indexOf(":");
    if (colon <= 0) continue;
    const name = line.slice(0, colon).trim().toLowerCase();
    headers.set(name, [...(headers.get(name) ?? []), line.slice(colon + 1).trim()]);
  }
  let body = data.subarray(split + 4);
  const code = Number(status);
  if (method === "HEAD" || code === 204 || code === 304) body = Buffer.alloc(0);
  else if (headers.get("transfer-encoding")?.some((v) => /chunked/i.test(v))) body = decodeChunked(body);
  else {
    const length = headers.get("content-length")?.[0];
    if (length !== undefined && /^\d+$/.test(length)) body = body.subarray(0, Number(length));
  }
  return { answer: { status: code, headers, body } };
}

/** Sends `bytes` to host:port and reads until the server closes (or `timeoutMs` passes). */
export function sendRaw(
  host: string,
  port: number,
  bytes: Buffer,
  method: string,
  timeoutMs = 15_000,
): Promise<RawResult> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let settled = false;
    const socket = connect({ host, port });
    const finish = (why?: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      const parsed = parseAnswer(Buffer.concat(chunks), method);
      // A server may reset after answering (a body it would not read): the answer still counts.
      resolve("answer" in parsed || why === undefined ? parsed : { error: why });
    };
    const timer = setTimeout(() => finish(`no answer within ${timeoutMs} ms`), timeoutMs);
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    socket.on("end", () => finish());
    socket.on("close", () => finish());
    socket.on("error", (error: NodeJS.ErrnoException) => finish(`socket error ${error.code ?? error.message}`));
    socket.on("connect", () => {
      // No half-close: Node's server would end the connection before an asynchronous handler answers.
      socket.write(bytes);
    });
  });
}
