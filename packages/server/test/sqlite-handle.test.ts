/**
 * SQLite connections survive the garbage collector on every Node line.
 *
 * better-sqlite3 12's native objects abort a Node 24 process when a scheduled collection (outside
 * any JavaScript context) destroys them: `Assertion failed: (env) != nullptr`. SqliteHandle keeps
 * them reachable. The child below churns through connections with a 1 MiB young generation, which
 * makes V8 schedule such collections constantly: without the handle it aborts on Node 24 every
 * time (a thousand connections are enough), with it it exits cleanly on every line.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { SqliteHandle, sqliteHandlesKept } from "@proto/protocol";
import BetterSqlite3 from "better-sqlite3";

const CHURN = fileURLToPath(new URL("./support/sqlite-churn.ts", import.meta.url));

describe("SqliteHandle", () => {
  test("a thousand connections opened, used and closed under constant collection: the process lives", () => {
    const child = spawnSync(
      process.execPath,
      [
        "--min-semi-space-size=1",
        "--max-semi-space-size=1",
        "--conditions=source",
        "--import",
        "tsx",
        CHURN,
        "5",
        "200",
      ],
      { encoding: "utf8", timeout: 120_000 },
    );
    assert.equal(child.stderr.includes("Assertion failed"), false, child.stderr);
    assert.equal(child.signal, null, `the child ended by ${child.signal}: ${child.stderr}`);
    assert.equal(child.status, 0, child.stderr);
    assert.equal(child.stdout.trim(), "1000", "every connection is kept");
  });

  test("one statement per SQL text, its rows by all, get, iterate; run reports changes", () => {
    const db = new SqliteHandle(new BetterSqlite3(":memory:"));
    try {
      db.exec("create table t (a integer not null)");
      const insert = db.prepare("insert into t values (?)");
      assert.equal(insert.reader, false);
      assert.equal(db.prepare("insert into t values (?)"), insert, "the same text gives the same statement");
      assert.deepEqual(insert.run([1]), { changes: 1, lastInsertRowid: 1 });
      insert.run([2]);
      const select = db.prepare("select a from t where a >= ? order by a");
      assert.equal(select.reader, true);
      assert.deepEqual(select.all([1]), [{ a: 1 }, { a: 2 }]);
      assert.deepEqual(select.get([2]), { a: 2 });
      assert.deepEqual([...select.iterate([1])], [{ a: 1 }, { a: 2 }]);
      assert.deepEqual(db.prepare("select count(*) as n from t").get(), { n: 2 });
    } finally {
      db.close();
    }
  });

  test("transactions, pragmas and functions without better-sqlite3's own helpers", () => {
    const db = new SqliteHandle(new BetterSqlite3(":memory:"));
    try {
      db.exec("pragma foreign_keys = ON");
      assert.deepEqual(db.prepare("pragma foreign_keys").get(), { foreign_keys: 1 });
      db.function("shout", (value) => (typeof value === "string" ? value.toUpperCase() : value));
      assert.deepEqual(db.prepare("select shout(?) as s").get(["ok"]), { s: "OK" });
      assert.equal(db.inTransaction, false);
      db.exec("begin");
      assert.equal(db.inTransaction, true);
      db.exec("rollback");
      assert.equal(db.inTransaction, false);
    } finally {
      db.close();
    }
  });

  test("a closed connection stays counted: nothing native is left to the collector", () => {
    const before = sqliteHandlesKept();
    const db = new SqliteHandle(new BetterSqlite3(":memory:"));
    db.prepare("select 1").get();
    db.close();
    assert.equal(sqliteHandlesKept(), before + 1);
    assert.throws(() => db.prepare("select 2"), /not open/);
  });
});
