import { generateKeyPairSync, type KeyObject, randomBytes } from "node:crypto";
import { createServer } from "node:net";
import { encodeDidKey, rawPublicKey } from "@proto/protocol";
import { createTestDatabase as createSharedTestDatabase } from "@proto/testkit";

/** The store variants a suite runs on: SQLite always, PostgreSQL when `TEST_POSTGRES_URL` is set. */
export const POSTGRES_URL = process.env.TEST_POSTGRES_URL;
export const ENGINES: ("sqlite" | "postgres")[] = ["sqlite", ...(POSTGRES_URL ? (["postgres"] as const) : [])];

let reported = false;
/** Printed once per run so a skipped engine is never silent. */
export function reportSkippedEngines(): void {
  if (reported) return;
  reported = true;
  if (!POSTGRES_URL) process.stdout.write("# TEST_POSTGRES_URL not set: PostgreSQL variants skipped\n");
}

/** A database of its own for one suite (see `@proto/testkit`). */
export const createTestDatabase = (engine: "sqlite" | "postgres") => createSharedTestDatabase(engine, "proto_kit");
export type { TestDatabase } from "@proto/testkit";

/** A clock tests move forward; the attestor and every kit of a suite read it. */
export class TestClock {
  #offsetMs = 0;
  now = (): number => Date.now() + this.#offsetMs;
  nowSeconds(): number {
    return Math.floor(this.now() / 1000);
  }
  advance(seconds: number): void {
    this.#offsetMs += Math.round(seconds * 1000);
  }
  /** Moves to one second past the start of the next window of `seconds` (fresh rate-limit windows). */
  alignTo(seconds: number): void {
    const windowMs = seconds * 1000;
    this.advance((windowMs - (this.now() % windowMs) + 1000) / 1000);
  }
}

export interface Agent {
  did: string;
  privateKey: KeyObject;
  publicKeyB64: string;
}

export function newAgent(): Agent {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const raw = rawPublicKey(publicKey);
  return { did: encodeDidKey(raw), privateKey, publicKeyB64: Buffer.from(raw).toString("base64url") };
}

/** A port nobody listens on right now (the attestor's public URL must be known before it starts). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === "string") throw new Error("no address");
  return address.port;
}

let counter = 0;
export const emailAddress = (label: string) => `${label}-${++counter}-${randomBytes(3).toString("hex")}@mail.test`;
