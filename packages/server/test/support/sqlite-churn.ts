/**
 * Run as a child process by sqlite-handle.test.ts: opens, uses and closes SQLite connections the
 * way the servers and their tests do, many times over, yielding to the event loop between rounds
 * so that V8's scheduled collections run. Prints the number of connections kept and exits 0.
 */
import { SqliteHandle, sqliteHandlesKept } from "@proto/protocol";
import BetterSqlite3 from "better-sqlite3";

const rounds = Number(process.argv[2] ?? "100");
const perRound = Number(process.argv[3] ?? "100");

for (let round = 0; round < rounds; round++) {
  for (let i = 0; i < perRound; i++) {
    const db = new SqliteHandle(new BetterSqlite3(":memory:"));
    db.exec("pragma foreign_keys = ON");
    db.exec("create table t (a integer)");
    for (let j = 0; j < 10; j++) db.prepare(`insert into t values (${j})`).run();
    db.prepare("insert into t values (?)").run([round]);
    [...db.prepare("select a from t where a > ?").iterate([3])];
    db.prepare("select count(*) as n from t").get();
    db.close();
  }
  await new Promise((resolve) => setImmediate(resolve));
}
process.stdout.write(`${sqliteHandlesKept()}\n`);
