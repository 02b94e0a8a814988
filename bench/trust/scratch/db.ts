import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { openDatabase } from "../../../packages/server/src/platform/database.js";
import { type TrustSchema, trustMigrations } from "../../../packages/server/src/trust/migrations.js";
import * as store from "../../../packages/server/src/trust/store.js";

const url = process.argv[2] ?? `sqlite:${join(mkdtempSync(join(tmpdir(), "dbm-")), "t.db")}`;
const database = await openDatabase<TrustSchema>(url, { migrations: trustMigrations, migrationTable: "trust_migrations" });
const db = database.db;
const now = Date.now();
const A = 1000;
for (let i = 0; i < A; i++) {
  await store.insertHuman(db, `hum_${i}`, now);
  await store.upsertVerification(db, `hum_${i}`, "email", `p${i}@x`, now);
  await store.insertBinding(db, { id: `bnd_${i}`, human_id: `hum_${i}`, agent_did: `did:key:z${i}`, agent_label: null, created_at: now, last_mint_at: null, expires_at: now + 1e9, revoked_at: null });
}
const N = 10000;
async function bench(name: string, fn: (i: number) => Promise<unknown>) {
  for (let i = 0; i < 1000; i++) await fn(i);
  const c0 = process.cpuUsage(); const t0 = performance.now();
  for (let i = 0; i < N; i++) await fn(i);
  const wall = performance.now() - t0; const c = process.cpuUsage(c0);
  console.log(`${name.padEnd(28)} wall ${(wall * 1000 / N).toFixed(1)} µs/op  cpu ${((c.user + c.system) / N).toFixed(1)} µs/op (sys ${(c.system / N).toFixed(1)})`);
}
for (let r = 0; r < 2; r++) {
  await bench("latestBindingForAgent", (i) => store.latestBindingForAgent(db, `did:key:z${i % A}`));
  await bench("activeMethods", (i) => store.activeMethods(db, `hum_${i % A}`));
  await bench("recordMint", (i) => store.recordMint(db, `bnd_${i % A}`, now + i, now + i + 1e9));
}
await database.close();
