/** The directory service over a bench store, in this process (no HTTP): for timing `list`. */

import { type DirectorySchema, directoryMigrations } from "../../../packages/server/src/directory/migrations.js";
import { DirectoryService } from "../../../packages/server/src/directory/service.js";
import { DEFAULT_DIRECTORY_SETTINGS } from "../../../packages/server/src/directory/settings.js";
import { systemClock } from "../../../packages/server/src/platform/clock.js";
import { type Database, openDatabase } from "../../../packages/server/src/platform/database.js";

export async function openService(
  url: string,
): Promise<{ service: DirectoryService; database: Database<DirectorySchema> }> {
  const database = await openDatabase<DirectorySchema>(url, {
    migrations: directoryMigrations,
    migrationTable: "directory_migrations",
  });
  const service = new DirectoryService({
    database,
    clock: systemClock,
    fetcher: {
      get: async () => {
        throw new Error("the benchmark does not fetch");
      },
    },
    settings: DEFAULT_DIRECTORY_SETTINGS,
  });
  return { service, database };
}
