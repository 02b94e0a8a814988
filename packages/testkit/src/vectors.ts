import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * The reference vectors ship with @proto/protocol (`packages/protocol/vectors`), so a clean clone
 * runs every conformance test. `PROTO_VECTORS_DIR` points at another copy (another implementation's,
 * or a newer draft) without editing the repository.
 */
export function vectorsDir(): string {
  const fromEnv = process.env.PROTO_VECTORS_DIR;
  if (fromEnv) return resolve(fromEnv);
  // This file is packages/testkit/src/vectors.ts; the protocol package is its neighbour.
  return resolve(dirname(fileURLToPath(import.meta.url)), "../../protocol/vectors");
}

export interface VectorFile<T> {
  file: string;
  vector: T;
}

export interface VectorFolder<T> {
  /** The vectors, empty only when an overriding folder lacks them. */
  vectors: VectorFile<T>[];
  /** Why there are none: a one-line reason to print as the skip reason. */
  skipReason: string | undefined;
}

/**
 * A missing path is a skip only under `PROTO_VECTORS_DIR` (another set may hold fewer folders);
 * in the repository's own copy it means a broken checkout, and running fewer tests would hide it.
 */
function missing(path: string): string {
  if (!process.env.PROTO_VECTORS_DIR) {
    throw new Error(`reference vectors missing at ${path}: they ship in packages/protocol/vectors`);
  }
  return `reference vectors not found at ${path} (PROTO_VECTORS_DIR is set)`;
}

export function loadVectors<T>(folder: string): VectorFolder<T> {
  const dir = join(vectorsDir(), folder);
  if (!existsSync(dir)) return { vectors: [], skipReason: missing(dir) };
  const files = readdirSync(dir)
    .filter((f) => f.endsWith(".json"))
    .sort();
  const vectors = files.map((file) => ({ file, vector: JSON.parse(readFileSync(join(dir, file), "utf8")) as T }));
  if (vectors.length === 0) return { vectors, skipReason: missing(`${dir}/*.json`) };
  return { vectors, skipReason: undefined };
}

export function loadVectorFile<T>(name: string): T | undefined {
  const path = join(vectorsDir(), name);
  if (!existsSync(path)) {
    missing(path);
    return undefined;
  }
  return JSON.parse(readFileSync(path, "utf8")) as T;
}
