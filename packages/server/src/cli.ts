import { parseArgs } from "node:util";
import { DIRECTORY_LINKS, listeningBanner, logsLine, TRUST_LINKS } from "./cli-banner.js";
import { isProductionEnv } from "./platform/config.js";
import { unavailableDependency } from "./platform/dependency.js";
import { ConfigError } from "./platform/env.js";

/**
 * Each service's modules are loaded only by the commands that run it: the attestor's (JOSE, OpenID,
 * mail) would otherwise take about 10 MB of a directory's memory, and the directory's an attestor's.
 */
const directoryModules = async () => {
  const [{ buildDirectoryApp }, { readDirectoryConfig }] = await Promise.all([
    import("./directory/app.js"),
    import("./directory/config.js"),
  ]);
  return { buildDirectoryApp, readDirectoryConfig };
};
const trustModules = async () => {
  const [{ buildTrustApp }, { readTrustConfig }] = await Promise.all([
    import("./trust/app.js"),
    import("./trust/config.js"),
  ]);
  return { buildTrustApp, readTrustConfig };
};

const USAGE = `usage: proto-server <command> [options]

commands:
  directory [--port N] [--host ADDR] [--mirror-of URL]
                                           the listing directory (default port 8080); with
                                           --mirror-of, a read-only mirror of the directory at URL
  trust [--port N] [--host ADDR]           the trust attestor (default port 8081)
  trust rotate-keys                        start a signing-key rotation now and exit
  all [--directory-port N] [--trust-port N] [--host ADDR] [--mirror-of URL]
                                           both services (directory 8080, attestor 8081);
                                           --port is refused here: it would name one port for two

--host defaults to 127.0.0.1 (this machine only), and to 0.0.0.0 when NODE_ENV=production.
Configuration comes from the environment; see the README.`;

interface Running {
  name: string;
  close(): Promise<void>;
  /** Where it listens and what to open (standard error). */
  banner: string;
  logLevel: string;
}

function port(value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new UsageError(`invalid port ${JSON.stringify(value)}`);
  return n;
}

class UsageError extends Error {}

/** A message as one line of the terminal: an error from a driver may span several. */
function oneLine(message: string): string {
  return message.replace(/\s*\n\s*/g, " ").trim();
}

/**
 * Outside production only this machine may connect: a development server has `/dev/outbox`, whose
 * links sign people in, and may have the test hooks. Production (containers) listens everywhere.
 */
function defaultHost(): string {
  return isProductionEnv(process.env.NODE_ENV) ? "0.0.0.0" : "127.0.0.1";
}

/** A service whose configuration was read (and found valid), ready to be built and started. */
interface Configured {
  start(listenPort: number, host: string): Promise<Running>;
}

/** `--mirror-of URL` is `DIRECTORY_MIRROR_OF=URL`, checked by the same rules. */
async function configureDirectory(mirrorOf: string | undefined): Promise<Configured> {
  const env = mirrorOf === undefined ? process.env : { ...process.env, DIRECTORY_MIRROR_OF: mirrorOf };
  const { buildDirectoryApp, readDirectoryConfig } = await directoryModules();
  const config = readDirectoryConfig(env);
  return {
    async start(listenPort, host) {
      const directory = await buildDirectoryApp(config);
      await directory.app.listen({ port: listenPort, host });
      const banner = listeningBanner({
        label: "directory",
        publicUrlVariable: "DIRECTORY_PUBLIC_URL",
        publicUrl: config.publicUrl,
        app: directory.app,
        links: DIRECTORY_LINKS,
      });
      return { name: "directory", close: directory.close, banner, logLevel: config.platform.logLevel };
    },
  };
}

async function configureTrust(): Promise<Configured> {
  const { buildTrustApp, readTrustConfig } = await trustModules();
  const config = readTrustConfig();
  return {
    async start(listenPort, host) {
      const trust = await buildTrustApp(config);
      await trust.app.listen({ port: listenPort, host });
      const banner = listeningBanner({
        label: "attestor",
        publicUrlVariable: "TRUST_PUBLIC_URL",
        publicUrl: config.publicUrl,
        app: trust.app,
        links: TRUST_LINKS,
      });
      return { name: "trust", close: trust.close, banner, logLevel: config.platform.logLevel };
    },
  };
}

/**
 * Both configurations are read before either service starts, and every problem of both is
 * reported at once, each under its service's name: an operator fixes them in one pass.
 */
async function configureBoth(mirrorOf: string | undefined): Promise<[Configured, Configured]> {
  const outcomes = await Promise.allSettled([configureDirectory(mirrorOf), configureTrust()]);
  // A shared setting (NODE_ENV, PROTO_TEST_HOOKS, REDIS_URL) is reported once, not once per service.
  const services = new Map<string, string[]>();
  outcomes.forEach((outcome, i) => {
    if (outcome.status === "fulfilled") return;
    if (!(outcome.reason instanceof ConfigError)) throw outcome.reason;
    for (const problem of outcome.reason.problems) {
      services.set(problem, [...(services.get(problem) ?? []), i === 0 ? "directory" : "trust"]);
    }
  });
  if (services.size > 0) {
    throw new ConfigError(
      [...services].map(([problem, names]) => (names.length > 1 ? problem : `${names[0]}: ${problem}`)),
    );
  }
  const [directory, trust] = outcomes as [PromiseFulfilledResult<Configured>, PromiseFulfilledResult<Configured>];
  return [directory.value, trust.value];
}

/** The operator's rotation: the same as the schedule and the test hook, then exit. */
async function rotateKeys(): Promise<void> {
  const { buildTrustApp, readTrustConfig } = await trustModules();
  const trust = await buildTrustApp(readTrustConfig());
  try {
    const rotation = await trust.keys.rotate();
    process.stdout.write(
      `${JSON.stringify({
        kid: rotation.kid,
        published_at: new Date(rotation.publish_at).toISOString(),
        signs_from: new Date(rotation.activate_at).toISOString(),
      })}\n`,
    );
  } finally {
    await trust.close();
  }
}

function parseOptions(args: string[]) {
  try {
    return parseArgs({
      args,
      options: {
        port: { type: "string" },
        "directory-port": { type: "string" },
        "trust-port": { type: "string" },
        host: { type: "string" },
        "mirror-of": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
    });
  } catch (error) {
    // An unknown option or a missing value is a usage mistake (exit 2), not a failure to start.
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
}

async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  if (command === "trust" && rest[0] === "rotate-keys") {
    await rotateKeys();
    return;
  }
  const { values } = parseOptions(rest);
  if (values.help || command === undefined || command === "help" || command === "--help" || command === "-h") {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const host = values.host ?? defaultHost();
  const mirrorOf = values["mirror-of"];
  if (mirrorOf !== undefined && command !== "directory" && command !== "all") {
    throw new UsageError("--mirror-of applies to the directory only");
  }
  if (command === "all" && values.port !== undefined) {
    throw new UsageError(
      "--port does not apply to `all`, which runs two services: give --directory-port N and --trust-port N",
    );
  }
  if (command !== "all" && (values["directory-port"] !== undefined || values["trust-port"] !== undefined)) {
    throw new UsageError("--directory-port and --trust-port apply to `all` only: give --port N");
  }
  const running: Running[] = [];
  switch (command) {
    case "directory":
      running.push(await (await configureDirectory(mirrorOf)).start(port(values.port, 8080), host));
      break;
    case "trust":
      running.push(await (await configureTrust()).start(port(values.port, 8081), host));
      break;
    case "all": {
      const directoryPort = port(values["directory-port"], 8080);
      const trustPort = port(values["trust-port"], 8081);
      const [directory, trust] = await configureBoth(mirrorOf);
      running.push(await directory.start(directoryPort, host));
      running.push(await trust.start(trustPort, host));
      break;
    }
    default:
      throw new UsageError(`unknown command ${JSON.stringify(command)}`);
  }
  const logLevel = running[0]?.logLevel ?? "info";
  process.stderr.write(`${running.map((r) => r.banner).join("")}${logLevel === "silent" ? "" : logsLine(logLevel)}`);
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    process.stderr.write(`proto-server: ${signal}, draining\n`);
    await Promise.allSettled(running.map((r) => r.close()));
    process.exit(0);
  };
  process.on("SIGTERM", () => void stop("SIGTERM"));
  process.on("SIGINT", () => void stop("SIGINT"));
  // A stray error from a dependency's client (an event or a promise nobody awaited) is a bug to
  // log, not a reason to drop every request in flight: the process exits only on a signal.
  const report = (kind: string) => (error: unknown) => {
    const message = error instanceof Error ? (error.stack ?? error.message) : String(error);
    process.stderr.write(`proto-server: ${kind} (kept running): ${message}\n`);
  };
  process.on("uncaughtException", report("uncaught exception"));
  process.on("unhandledRejection", report("unhandled rejection"));
}

main(process.argv.slice(2)).catch((error: unknown) => {
  if (error instanceof ConfigError || error instanceof UsageError) {
    process.stderr.write(`proto-server: ${error.message}\n`);
    if (error instanceof UsageError) process.stderr.write(`${USAGE}\n`);
    process.exit(2);
  }
  const message = error instanceof Error ? error.message : String(error);
  // Redis may be down at start (the service answers 503 until it is back); the database may not:
  // migrations and signing keys are read before anything is served. One line says so, and the
  // exit status lets a supervisor start the process again once the database answers.
  const dependency = unavailableDependency(error);
  const reason =
    dependency === "database"
      ? `the database is unavailable (${oneLine(message)}); it must answer at start: start it first, or let the supervisor retry`
      : oneLine(message);
  process.stderr.write(`proto-server: failed to start: ${reason}\n`);
  process.exit(1);
});
