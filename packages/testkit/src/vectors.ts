import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * The shared reference vectors live beside the project checkout (`../shared/vectors`), never
 * inside it. `PROTO_VECTORS_DIR` points elsewhere when needed.
 */
export function vectorsDir(): string {
  const fromEnv = process.env.PROTO_VECTORS_DIR;
  if (fromEnv) return resolve(fromEnv);
  const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
  return resolve(repoRoot, "../shared/vectors");
}

export interface VectorFile<T> {
  file: string;
  vector: T;
}

export interface VectorFolder<T> {
  /** The vectors, empty when the folder is absent. */
  vectors: VectorFile<T>[];
  /** Why there are none: a one-line reason to print as the skip reason. */
  skipReason: string | undefined;
}

export function loadVectors<T>(folder: string): VectorFolder<T> {
  const dir = join(vectorsDir(), folder);
  if (!existsSync(dir)) {
    return { vectors: [], skipReason: `reference vectors not found at ${dir} (set PROTO_VECTORS_DIR)` };
  }
  const files = readdirSync(dir)
    .filter((f) => f.endsWith(".json"))
    .sort();
  const vectors = files.map((file) => ({ file, vector: JSON.parse(readFileSync(join(dir, file), "utf8")) as T }));
  if (vectors.length === 0) return { vectors, skipReason: `no vectors in ${dir}` };
  return { vectors, skipReason: undefined };
}

export function loadVectorFile<T>(name: string): T | undefined {
  const path = join(vectorsDir(), name);
  return existsSync(path) ? (JSON.parse(readFileSync(path, "utf8")) as T) : undefined;
}
