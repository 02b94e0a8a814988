import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { after, before, describe as suite, test } from "node:test";
import {
  escapeXml,
  formatJson,
  formatJunit,
  formatTable,
  HttpClient,
  type Probe,
  ProbeFailure,
  type ProbeResult,
  runProbes,
} from "../src/index.js";
import { OPTIONS } from "./support/run.js";

/** A server answering each request with what the test queued (or 200 "ok"); it records the paths. */
async function scripted(): Promise<{
  url: string;
  queue: ((res: import("node:http").ServerResponse) => void)[];
  close(): Promise<void>;
}> {
  const queue: ((res: import("node:http").ServerResponse) => void)[] = [];
  const server: Server = createServer((_req, res) => {
    const next = queue.shift();
    if (next) next(res);
    else {
      res.writeHead(200, { "content-type": "application/json" });
      res.end('{"ok":true}');
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no address");
  return {
    url: `http://127.0.0.1:${address.port}`,
    queue,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const probe = (id: string, run: Probe["run"], writes = false): Probe => ({
  id,
  description: `probe ${id}`,
  section: "test §1",
  writes,
  run,
});

suite("the runner and its HTTP client", () => {
  let server: Awaited<ReturnType<typeof scripted>>;
  before(async () => {
    server = await scripted();
  });
  after(() => server.close());

  const getOk: Probe["run"] = async (context) => {
    const response = await context.http.get(`${context.baseUrl}/x`);
    if (response.status !== 200) throw new ProbeFailure(`got ${response.status}`, response.exchange);
    return { status: "pass", message: "" };
  };

  test("a 429 is waited out (Retry-After, bounded to 30 s) through the injected wait and noted", async () => {
    const tooMany = (retryAfter: string) => (res: import("node:http").ServerResponse) => {
      res.writeHead(429, { "retry-after": retryAfter, "content-type": "application/json" });
      res.end('{"error":{"code":"rate_limited","message":"slow down"}}');
    };
    server.queue.push(tooMany("7"), tooMany("999"));
    const waits: number[] = [];
    const http = new HttpClient({ wait: async (ms) => void waits.push(ms) });
    const [result] = await runProbes([probe("a", getOk)], { baseUrl: server.url, http, options: OPTIONS });
    assert.equal(result?.status, "pass");
    assert.deepEqual(waits, [7000, 30_000]);
    assert.equal(result?.notes.length, 2);
    assert.match(result?.notes[0] ?? "", /429 on GET .*\/x: waited 7 s \(Retry-After 7\)/);
    assert.match(result?.notes[1] ?? "", /waited 30 s \(Retry-After 999\)/);
  });

  test("a 429 that persists is given up after the retries and fails the probe with it", async () => {
    for (let i = 0; i < 5; i++) {
      server.queue.push((res) => {
        res.writeHead(429, { "retry-after": "1" });
        res.end();
      });
    }
    const http = new HttpClient({ wait: async () => {}, maxRetries: 2 });
    const [result] = await runProbes([probe("a", getOk)], { baseUrl: server.url, http, options: OPTIONS });
    assert.equal(result?.status, "fail");
    assert.equal(result?.exchange?.status, 429);
    server.queue.length = 0;
  });

  test("a probe that throws is a failure with the message, and the next probe still runs", async () => {
    const http = new HttpClient();
    const results = await runProbes(
      [
        probe("boom", async () => {
          throw new TypeError("cannot read x of undefined");
        }),
        probe("after", getOk),
      ],
      { baseUrl: server.url, http, options: OPTIONS },
    );
    assert.deepEqual(
      results.map((r) => [r.id, r.status, r.message]),
      [
        ["boom", "fail", "the probe stopped: cannot read x of undefined"],
        ["after", "pass", ""],
      ],
    );
  });

  test("a writing probe runs only with write on", async () => {
    let ran = 0;
    const writer = probe(
      "w",
      async () => {
        ran++;
        return { status: "pass", message: "" };
      },
      true,
    );
    const http = new HttpClient();
    const [skipped] = await runProbes([writer], { baseUrl: server.url, http, options: OPTIONS });
    assert.equal(skipped?.status, "skipped");
    assert.match(skipped?.message ?? "", /--write/);
    assert.equal(ran, 0);
    const [passed] = await runProbes([writer], { baseUrl: server.url, http, options: { ...OPTIONS, write: true } });
    assert.equal(passed?.status, "pass");
    assert.equal(ran, 1);
  });

  test("a response over the size bound, and one that never comes, are answers with an error, not hangs", async () => {
    server.queue.push((res) => {
      res.writeHead(200);
      res.end("x".repeat(5000));
    });
    const small = new HttpClient({ maxBodyBytes: 1000 });
    const big = await small.get(`${server.url}/big`);
    assert.equal(big.status, 0);
    assert.match(big.exchange.error ?? "", /larger than 1000 bytes/);

    server.queue.push(() => {
      // Never answers: the client's timeout ends it.
    });
    const impatient = new HttpClient({ timeoutMs: 50 });
    const silent = await impatient.get(`${server.url}/silent`);
    assert.equal(silent.status, 0);
    assert.equal(silent.exchange.error, "no answer within the timeout");
  });

  test("a failure's body excerpt is bounded to about 2 KB", async () => {
    server.queue.push((res) => {
      res.writeHead(500, { "content-type": "text/plain" });
      res.end("y".repeat(10_000));
    });
    const response = await new HttpClient().get(`${server.url}/long`);
    assert.equal(response.text.length, 10_000);
    assert.ok(response.exchange.bodyExcerpt.length < 2100);
    assert.match(response.exchange.bodyExcerpt, /… \(10000 bytes\)$/);
  });
});

const RESULTS: ProbeResult[] = [
  { id: "x.pass", description: "passes", section: "s §1", status: "pass", message: "", notes: [] },
  {
    id: "x.fail",
    description: 'fails <badly> & "loudly"',
    section: "s §2",
    status: "fail",
    message: "expected 200, got 500 <oops>",
    exchange: {
      method: "GET",
      url: "http://h/x?a=1&b=2",
      requestHeaders: {},
      status: 500,
      headers: { "content-type": "text/plain", "cache-control": "no-store" },
      bodyExcerpt: "it broke ]]> \u0001",
    },
    notes: ["429 on GET http://h/x: waited 2 s (Retry-After 2)"],
  },
  { id: "x.skip", description: "skips", section: "s §3", status: "skipped", message: "needs --write", notes: [] },
];

suite("reports", () => {
  test("the table: a row per probe, the failure's exchange below it, skips with reasons, the summary", () => {
    const table = formatTable(RESULTS);
    const lines = table.split("\n");
    assert.match(lines[0] ?? "", /^id\s+result\s+description$/);
    assert.match(lines[1] ?? "", /^x\.pass\s+pass\s+passes$/);
    assert.match(lines[2] ?? "", /^x\.fail\s+FAIL\s+fails <badly>/);
    assert.match(lines[3] ?? "", /^x\.skip\s+skip\s+skips$/);
    assert.match(
      table,
      /x\.fail \(s §2\)\n {2}expected 200, got 500 <oops>\n {4}sent: GET http:\/\/h\/x\?a=1&b=2\n {4}got: 500\n {4}content-type: text\/plain\n {4}cache-control: no-store\n {4}body: it broke/,
    );
    assert.match(table, /note: 429 on GET/);
    assert.match(table, /skipped:\n {2}x\.skip: needs --write/);
    assert.ok(table.endsWith("\n1 passed, 1 failed, 1 skipped\n"));
  });

  test("JSON: the mode, the target, the summary and every result", () => {
    const parsed = JSON.parse(formatJson("attestor", "https://t", RESULTS)) as Record<string, unknown>;
    assert.equal(parsed.mode, "attestor");
    assert.deepEqual(parsed.summary, { passed: 1, failed: 1, skipped: 1 });
    assert.deepEqual(parsed.results, JSON.parse(JSON.stringify(RESULTS)));
  });

  test("JUnit: one testcase per probe, failure and skipped marked, text escaped", () => {
    const xml = formatJunit("attestor", RESULTS);
    assert.match(xml, /^<\?xml version="1.0" encoding="UTF-8"\?>\n<testsuites tests="3" failures="1" skipped="1">/);
    assert.equal(xml.match(/<testcase /g)?.length, 3);
    assert.match(
      xml,
      /<testcase classname="proto-conformance attestor" name="x\.fail">\n {6}<failure message="expected 200, got 500 &lt;oops&gt;">/,
    );
    assert.match(xml, /sent: GET http:\/\/h\/x\?a=1&amp;b=2/);
    assert.match(xml, /it broke \]\]&gt; \ufffd/);
    assert.match(xml, /<skipped message="needs --write"\/>/);
    assert.ok(!xml.includes("\u0001"), "no control character");
    assert.equal(escapeXml(`<a href="x">'&'</a>`), "&lt;a href=&quot;x&quot;&gt;&apos;&amp;&apos;&lt;/a&gt;");
  });
});
