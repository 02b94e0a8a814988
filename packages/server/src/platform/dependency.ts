/**
 * Failures of what a service depends on (its database, Redis), told apart from bugs: a client
 * gets 503 `service_unavailable` with `Retry-After` for these, 500 only for the rest. What counts
 * as an outage is decided in @proto/protocol, which the service kit uses too.
 */
import {
  type Dependency,
  DependencyUnavailable,
  OUTAGE_RETRY_AFTER_SECONDS,
  unavailableDependency,
} from "@proto/protocol";

export { type Dependency, DependencyUnavailable, OUTAGE_RETRY_AFTER_SECONDS, unavailableDependency };

/** The reserved code of every dependency outage (see docs/operations.md, "When a dependency fails"). */
export const SERVICE_UNAVAILABLE = "service_unavailable";

/** `error` as a DependencyUnavailable when it is one, undefined otherwise. */
export function asDependencyUnavailable(error: unknown): DependencyUnavailable | undefined {
  if (error instanceof DependencyUnavailable) return error;
  const dependency = unavailableDependency(error);
  if (dependency === undefined) return undefined;
  return new DependencyUnavailable(
    dependency,
    dependency === "redis"
      ? "a shared store is unavailable; retry shortly"
      : "the database is unavailable; retry shortly",
    OUTAGE_RETRY_AFTER_SECONDS,
    { cause: error },
  );
}

/** Runs `work`, turning every error of a Redis call into DependencyUnavailable("redis"). */
export async function viaRedis<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    if (error instanceof DependencyUnavailable) throw error;
    throw new DependencyUnavailable(
      "redis",
      "a shared store is unavailable; retry shortly",
      OUTAGE_RETRY_AFTER_SECONDS,
      {
        cause: error,
      },
    );
  }
}
