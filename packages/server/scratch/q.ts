import { type DirectorySchema, directoryMigrations } from "../src/directory/migrations.js";
import { listListings } from "../src/directory/store.js";
import { openDatabase } from "../src/platform/database.js";

const url = process.argv[2] as string;
const cases = JSON.parse(process.argv[3] as string) as { search?: string; tag?: string; pages?: number }[];
const database = await openDatabase<DirectorySchema>(url, {
  migrations: directoryMigrations,
  migrationTable: "directory_migrations",
});
for (let round = 0; round < 3; round++) {
  for (const c of cases) {
    let after: { updatedAt: number; serviceDid: string } | undefined;
    const times: string[] = [];
    for (let p = 0; p < (c.pages ?? 1); p++) {
      const t = performance.now();
      const rows = await listListings(database.db, "postgres", {
        after,
        limit: 50,
        search: c.search,
        tag: c.tag,
        updatedSince: undefined,
        statuses: ["active", "stale"],
      });
      times.push(`${(performance.now() - t).toFixed(1)}`);
      const last = rows.at(-1);
      if (last === undefined || rows.length < 50) break;
      after = { updatedAt: last.updated_at, serviceDid: last.service_did };
    }
    console.log(round, JSON.stringify(c), times.join(" "));
  }
}
await database.close();
