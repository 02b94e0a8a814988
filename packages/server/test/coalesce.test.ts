import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Coalescer } from "../src/platform/coalesce.js";

interface Gate {
  items: readonly string[];
  open(results?: readonly string[]): void;
  fail(error: Error): void;
}

/** A coalescer whose batches wait until the test opens them, recording what each carried. */
function gated(maxInFlight: number, maxBatch = 100) {
  const batches: Gate[] = [];
  const coalescer = new Coalescer<string, string>({
    run: (items) =>
      new Promise((resolve, reject) => {
        batches.push({
          items,
          open: (results) => resolve(results ?? items.map((item) => `done:${item}`)),
          fail: reject,
        });
      }),
    key: (item) => item.split("#")[0]!,
    maxInFlight,
    maxBatch,
  });
  return { coalescer, batches };
}

describe("Coalescer", () => {
  test("a lone call goes out at once; calls made while the slots are taken share the next batch", async () => {
    const { coalescer, batches } = gated(1);
    const first = coalescer.call("a");
    assert.deepEqual(
      batches.map((b) => b.items),
      [["a"]],
    );
    const later = ["b", "c", "d"].map((item) => coalescer.call(item));
    assert.equal(batches.length, 1, "nothing more is sent while the only slot is taken");
    batches[0]!.open();
    assert.equal(await first, "done:a");
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(batches[1]?.items, ["b", "c", "d"]);
    batches[1]!.open();
    assert.deepEqual(await Promise.all(later), ["done:b", "done:c", "done:d"]);
  });

  test("calls with the same key never share a batch, and keep their order", async () => {
    const { coalescer, batches } = gated(1);
    const blocker = coalescer.call("x");
    const calls = ["a#1", "b#1", "a#2", "a#3", "b#2"].map((item) => coalescer.call(item));
    batches[0]!.open();
    await blocker;
    for (let i = 1; i < 4; i++) {
      await new Promise((r) => setImmediate(r));
      batches[i]!.open();
    }
    await Promise.all(calls);
    assert.deepEqual(
      batches.slice(1).map((b) => b.items),
      [["a#1", "b#1"], ["a#2", "b#2"], ["a#3"]],
    );
  });

  test("at most maxInFlight batches at once, each at most maxBatch calls", async () => {
    const { coalescer, batches } = gated(2, 2);
    const calls = ["a", "b", "c", "d", "e", "f", "g"].map((item) => coalescer.call(item));
    assert.deepEqual(
      batches.map((b) => b.items),
      [["a"], ["b"]],
      "the first two calls take both slots",
    );
    batches[0]!.open();
    batches[1]!.open();
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(
      batches.slice(2).map((b) => b.items),
      [
        ["c", "d"],
        ["e", "f"],
      ],
    );
    batches[2]!.open();
    batches[3]!.open();
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(batches[4]?.items, ["g"]);
    batches[4]!.open();
    assert.equal((await Promise.all(calls)).length, 7);
  });

  test("a failed batch fails each of its calls, and the next batch still runs", async () => {
    const { coalescer, batches } = gated(1);
    const blocker = coalescer.call("x");
    const failing = ["a", "b"].map((item) => coalescer.call(item));
    batches[0]!.open();
    await blocker;
    await new Promise((r) => setImmediate(r));
    const next = coalescer.call("c");
    batches[1]!.fail(new Error("database gone"));
    for (const call of failing) await assert.rejects(call, /database gone/);
    await new Promise((r) => setImmediate(r));
    batches[2]!.open();
    assert.equal(await next, "done:c");
  });

  test("a batch that answers the wrong number of results fails its calls", async () => {
    const { coalescer, batches } = gated(1);
    const call = coalescer.call("a");
    batches[0]!.open([]);
    await assert.rejects(call, /wrong number of results/);
  });
});
