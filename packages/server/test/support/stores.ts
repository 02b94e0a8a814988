import { randomBytes } from "node:crypto";

/** The store variants a suite runs on: SQLite always, PostgreSQL and Redis when CI provides them. */
export interface StoreVariant {
  name: string;
  engine: "sqlite" | "postgres";
  redis: boolean;
}

export const POSTGRES_URL = process.env.TEST_POSTGRES_URL;
export const REDIS_URL = process.env.TEST_REDIS_URL;

export const STORE_VARIANTS: StoreVariant[] = [
  { name: "sqlite", engine: "sqlite", redis: false },
  ...(POSTGRES_URL ? [{ name: "postgres+redis", engine: "postgres" as const, redis: REDIS_URL !== undefined }] : []),
];

/** Printed once per run so a skipped engine is never silent. */
export function reportSkippedVariants(): void {
  if (!POSTGRES_URL) process.stdout.write("# TEST_POSTGRES_URL not set: PostgreSQL variants skipped\n");
  if (!REDIS_URL) process.stdout.write("# TEST_REDIS_URL not set: Redis variants skipped\n");
}

export type { TestDatabase } from "@proto/testkit";
export { createTestDatabase } from "@proto/testkit";

export function uniquePrefix(label: string): string {
  return `test:${label}:${randomBytes(6).toString("hex")}:`;
}
