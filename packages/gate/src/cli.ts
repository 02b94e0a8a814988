/**
 * `proto-gate`: serve (the default), `init` (write a commented starting configuration) and `check`
 * (validate the configuration and probe the upstream and the attestors).
 *
 *   proto-gate [serve] [--config proto-gate.yaml]
 *   proto-gate init [proto-gate.yaml]
 *   proto-gate check [--config proto-gate.yaml]
 */
import { existsSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import pino from "pino";
import { checkConfig } from "./check.js";
import { loadConfigFile } from "./config.js";
import { createGate } from "./gate.js";
import { initTemplate } from "./init-template.js";

const DEFAULT_FILE = "proto-gate.yaml";

function fail(message: string, code = 1): never {
  process.stderr.write(`proto-gate: ${message}\n`);
  process.exit(code);
}

async function main(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    options: { config: { type: "string", short: "c" }, help: { type: "boolean", short: "h" } },
    allowPositionals: true,
    strict: true,
  });
  const [command = "serve", ...rest] = positionals;
  if (values.help === true) {
    process.stdout.write(
      "usage: proto-gate [serve] [--config FILE] | proto-gate init [FILE] | proto-gate check [--config FILE]\n",
    );
    return;
  }
  const file = resolve(values.config ?? process.env.PROTO_GATE_CONFIG ?? DEFAULT_FILE);
  if (command === "init") {
    const target = resolve(rest[0] ?? DEFAULT_FILE);
    if (existsSync(target)) fail(`${target} exists already; not overwritten`);
    writeFileSync(target, initTemplate(), { flag: "wx", mode: 0o644 });
    process.stdout.write(
      `wrote ${target}\nnext: set service.did, service.public_url and upstream.url, then run: proto-gate check --config ${target}\n`,
    );
    return;
  }
  if (command !== "serve" && command !== "check")
    fail(`unknown command ${JSON.stringify(command)} (serve, init, check)`, 2);
  const config = loadConfigFile(file);
  if (command === "check") {
    const ok = await checkConfig(config, (line) => process.stdout.write(`${line}\n`));
    process.exitCode = ok ? 0 : 1;
    return;
  }
  const logger = pino({ level: config.logLevel, base: { service: "proto-gate" } });
  const gate = await createGate(config, { logger });
  await new Promise<void>((resolveListen, reject) => {
    gate.server.once("error", reject);
    gate.server.listen(config.listen.port, config.listen.host, () => resolveListen());
  });
  const address = gate.server.address();
  const port = typeof address === "object" && address !== null ? address.port : config.listen.port;
  logger.info({ host: config.listen.host, port, upstream: config.upstream.url }, "proto-gate listening");
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, "stopping: finishing requests in flight");
    gate.close().then(
      () => process.exit(0),
      (error: unknown) => {
        logger.error({ err: error }, "stop failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
}

main(process.argv.slice(2)).catch((error: unknown) => {
  fail(error instanceof Error ? error.message : String(error));
});
