/**
 * What `npm run dev` reads from its environment: where its data lives and which ports it takes.
 * The defaults are the ports the READMEs and the `proto` examples name; tests (and a person whose
 * port 8080 is busy) choose others.
 */
import { resolve } from "node:path";

export interface DevSettings {
  /** `PROTO_DEV_DATA_DIR`, default `./data`: the databases, the listing proof, the development CA. */
  dataDir: string;
  /** `PROTO_DEV_DIRECTORY_PORT`, default 8080: the directory, plain HTTP on this machine. */
  directoryPort: number;
  /** `PROTO_DEV_TRUST_PORT`, default 8081: the attestor, plain HTTP on this machine. */
  trustPort: number;
  /** `PROTO_DEV_NOTES_PORT`, default 3443: the notes service, HTTPS with the development CA. */
  notesPort: number;
  /** `LOG_LEVEL`, default `warn`: request logs would push the banner off the screen. */
  logLevel: string;
}

export class DevSettingsError extends Error {}

const LOG_LEVELS = new Set(["fatal", "error", "warn", "info", "debug", "trace", "silent"]);

function port(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name]?.trim();
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  // 0 (any free port) is refused: the banner and the agent's saved URLs need the real number.
  if (!/^\d{1,5}$/.test(raw) || !Number.isInteger(value) || value < 1 || value > 65535) {
    throw new DevSettingsError(`${name} must be a port number (1-65535), got ${JSON.stringify(raw)}`);
  }
  return value;
}

export function readDevSettings(env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): DevSettings {
  if (env.NODE_ENV?.trim().toLowerCase() === "production") {
    throw new DevSettingsError(
      "npm run dev is for development (outboxes instead of mail, a local CA); unset NODE_ENV=production",
    );
  }
  const settings: DevSettings = {
    dataDir: resolve(cwd, env.PROTO_DEV_DATA_DIR?.trim() || "data"),
    directoryPort: port(env, "PROTO_DEV_DIRECTORY_PORT", 8080),
    trustPort: port(env, "PROTO_DEV_TRUST_PORT", 8081),
    notesPort: port(env, "PROTO_DEV_NOTES_PORT", 3443),
    logLevel: env.LOG_LEVEL?.trim() || "warn",
  };
  if (!LOG_LEVELS.has(settings.logLevel)) {
    throw new DevSettingsError(`LOG_LEVEL must be one of ${[...LOG_LEVELS].join(", ")}`);
  }
  const ports = [settings.directoryPort, settings.trustPort, settings.notesPort];
  if (new Set(ports).size !== ports.length) {
    throw new DevSettingsError(`the directory, attestor and notes ports must differ, got ${ports.join(", ")}`);
  }
  return settings;
}
