/**
 * Reads configuration from the environment, collecting every problem so an operator sees them
 * all at once, each naming the variable and what it expects.
 */
export class ConfigError extends Error {
  override readonly name = "ConfigError";
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
  }
}

export type Env = Readonly<Record<string, string | undefined>>;

export class EnvReader {
  readonly problems: string[] = [];
  constructor(readonly env: Env) {}

  string(name: string): string | undefined {
    const value = this.env[name];
    return value === undefined || value.trim() === "" ? undefined : value.trim();
  }

  flag(name: string): boolean {
    const value = this.string(name);
    if (value === undefined) return false;
    if (["1", "true", "yes", "on"].includes(value.toLowerCase())) return true;
    if (["0", "false", "no", "off"].includes(value.toLowerCase())) return false;
    this.problems.push(`${name} must be 1 or 0 (got ${JSON.stringify(value)})`);
    return false;
  }

  integer(name: string, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
    const value = this.string(name);
    if (value === undefined) return fallback;
    const parsed = Number(value);
    if (!/^-?\d+$/.test(value) || !Number.isSafeInteger(parsed) || parsed < min || parsed > max) {
      this.problems.push(`${name} must be a whole number from ${min} to ${max} (got ${JSON.stringify(value)})`);
      return fallback;
    }
    return parsed;
  }

  oneOf<T extends string>(name: string, allowed: readonly T[], fallback: T): T {
    const value = this.string(name);
    if (value === undefined) return fallback;
    if ((allowed as readonly string[]).includes(value)) return value as T;
    this.problems.push(`${name} must be one of ${allowed.join(", ")} (got ${JSON.stringify(value)})`);
    return fallback;
  }

  /** An absolute http(s) URL without query or fragment, returned without a trailing slash. */
  baseUrl(name: string, fallback: string): string {
    const value = this.string(name) ?? fallback;
    let url: URL;
    try {
      url = new URL(value);
    } catch {
      this.problems.push(`${name} must be an absolute URL (got ${JSON.stringify(value)})`);
      return fallback;
    }
    if ((url.protocol !== "https:" && url.protocol !== "http:") || url.search || url.hash || url.username) {
      this.problems.push(`${name} must be an http(s) URL without credentials, query or fragment`);
      return fallback;
    }
    return url.href.replace(/\/+$/, "");
  }

  problem(message: string): void {
    this.problems.push(message);
  }

  finish(): void {
    if (this.problems.length > 0) throw new ConfigError(this.problems);
  }
}

/** A rule the operator may override: a count per window, in seconds. */
export interface LimitRule {
  limit: number;
  windowSeconds: number;
}

/**
 * Rate-limit overrides from one variable, `scope=count/seconds,...` (e.g.
 * `DIRECTORY_RATE_LIMITS="read=6000/60"`). Unknown scopes and bad entries are reported.
 */
export function readLimitOverrides<K extends string, R extends LimitRule>(
  reader: EnvReader,
  variable: string,
  defaults: Record<K, R>,
): Record<K, R> {
  const limits = { ...defaults };
  const value = reader.string(variable);
  if (value === undefined) return limits;
  const scopes = Object.keys(defaults) as K[];
  for (const entry of value.split(",")) {
    const match = /^\s*([a-z_]+)\s*=\s*(\d+)\s*\/\s*(\d+)\s*$/.exec(entry);
    const scope = match?.[1] as K | undefined;
    if (match === null || scope === undefined || !scopes.includes(scope) || Number(match[3]) < 1) {
      reader.problem(
        `${variable} entries are scope=count/seconds with scope one of ${scopes.join(", ")} (got ${JSON.stringify(entry)})`,
      );
      continue;
    }
    limits[scope] = { ...limits[scope], limit: Number(match[2]), windowSeconds: Number(match[3]) };
  }
  return limits;
}
