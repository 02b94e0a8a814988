import { OUTAGE_RETRY_AFTER_SECONDS, unavailableDependency } from "@proto/protocol";
import { kitError } from "./errors.js";

/**
 * The store as the kit's endpoints see it: a call that fails because the database cannot serve
 * now (PostgreSQL refusing or dropping connections, shutting down, out of connections; SQLite's
 * write lock held past the busy timeout) throws 503 `kit_store_unavailable` with `Retry-After`,
 * which every adapter answers in the envelope or as a page. Any other error passes unchanged (a
 * bug stays a 500). Wrapped here, around any store, rather than in a store: stores do not know
 * HTTP, and an application's own store gets the same answers.
 */
export function answeringOutages<S extends object>(store: S): S {
  const calls = new Map<PropertyKey, unknown>();
  return new Proxy(store, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== "function") return value;
      let call = calls.get(property);
      if (call === undefined) {
        call = (...args: unknown[]) => {
          let result: unknown;
          try {
            result = value.apply(target, args);
          } catch (error) {
            throw asOutage(error);
          }
          return result instanceof Promise ? result.catch((error: unknown) => Promise.reject(asOutage(error))) : result;
        };
        calls.set(property, call);
      }
      return call;
    },
  });
}

function asOutage(error: unknown): unknown {
  if (unavailableDependency(error) === undefined) return error;
  return kitError("kit_store_unavailable", undefined, { retryAfter: OUTAGE_RETRY_AFTER_SECONDS, cause: error });
}
