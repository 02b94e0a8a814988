#!/usr/bin/env node
/**
 * `proto-conformance MODE URL`: runs the mode's probes against a live deployment and reports.
 * Exit 0 when nothing failed, 1 when a probe failed, 2 on a usage error, 3 when the agent stand-in
 * saw no request to check; errors are one line.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { Command, CommanderError, InvalidArgumentError } from "commander";
import { type AgentStandIn, startAgentStandIn } from "./agent/index.js";
import { attestorProbes } from "./attestor/index.js";
import { directoryProbes } from "./directory/index.js";
import { HttpClient } from "./http.js";
import type { PermissionRoute, Probe, ProbeOptions } from "./probe.js";
import { formatJson } from "./report/json.js";
import { formatJunit } from "./report/junit.js";
import { formatTable } from "./report/table.js";
import { type ProbeResult, runProbes, summarize } from "./runner.js";
import { parsePermissionRoute } from "./service/authority.js";
import { serviceProbes } from "./service/index.js";

class UsageError extends Error {}

/** The package's version, from its package.json (one folder up from both src/ and dist/). */
function packageVersion(): string {
  try {
    const pkg: unknown = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
    return typeof pkg === "object" && pkg !== null && "version" in pkg ? String(pkg.version) : "unknown";
  } catch {
    return "unknown";
  }
}

interface CommonFlags {
  json?: boolean;
  junit?: string;
  write?: boolean;
  timeout: number;
}

function targetUrl(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError(`not a URL: ${value}`);
  }
  if (url.protocol !== "https:" && url.protocol !== "http:")
    throw new InvalidArgumentError(`not an http(s) URL: ${value}`);
  if (url.search !== "" || url.hash !== "" || url.username !== "" || url.password !== "") {
    throw new InvalidArgumentError(`the URL must have no query, fragment or credentials: ${value}`);
  }
  return url.href.replace(/\/+$/, "");
}

function permissionRoute(value: string): PermissionRoute {
  const route = parsePermissionRoute(value);
  if (typeof route === "string") throw new InvalidArgumentError(route);
  return route;
}

/** `agent` mode: the session ended without one request to check. */
const NOTHING_CHECKED = 3;

const positiveInt =
  (max: number) =>
  (value: string): number => {
    if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > max) {
      throw new InvalidArgumentError(`must be a whole number from 1 to ${max}`);
    }
    return Number(value);
  };

function readFile(path: string, what: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (error) {
    throw new UsageError(`cannot read ${what} ${path}: ${error instanceof Error ? error.message : String(error)}`);
  }
}

async function runMode(
  mode: string,
  url: string,
  probes: readonly Probe[],
  flags: CommonFlags,
  options: ProbeOptions,
): Promise<void> {
  const http = new HttpClient({ timeoutMs: flags.timeout * 1000 });
  const results = await runProbes(probes, { baseUrl: url, http, options });
  writeReport(mode, url, results, flags);
}

const port = (value: string): number => {
  if (!/^\d+$/.test(value) || Number(value) > 65_535) throw new InvalidArgumentError("must be a port from 0 to 65535");
  return Number(value);
};

interface AgentFlags {
  listen: number;
  host: string;
  publicUrl?: string;
  attestor?: string;
  issuer: string;
  open?: boolean;
  requests?: number;
  timeout?: number;
  json?: boolean;
  junit?: string;
}

/** Runs the stand-in until --requests, --timeout or SIGINT, then reports like the other modes. */
async function runAgent(flags: AgentFlags): Promise<void> {
  let standIn: AgentStandIn;
  try {
    standIn = await startAgentStandIn({
      port: flags.listen,
      host: flags.host,
      ...(flags.publicUrl === undefined ? {} : { publicUrl: flags.publicUrl }),
      ...(flags.attestor === undefined ? {} : { attestor: { url: flags.attestor, issuer: flags.issuer } }),
      ...(flags.requests === undefined ? {} : { requests: flags.requests }),
    });
  } catch (error) {
    throw new UsageError(
      `cannot listen on ${flags.host}:${flags.listen}: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
  // The table goes to stdout after the run; with --json stdout holds the JSON document only.
  (flags.json ? process.stderr : process.stdout).write(`point the agent at ${standIn.url}\n`);
  let stop: () => void = () => {};
  const stopped = new Promise<void>((resolve) => {
    stop = resolve;
  });
  process.once("SIGINT", stop);
  const timer = flags.timeout === undefined ? undefined : setTimeout(stop, flags.timeout * 1000);
  await Promise.race([standIn.done, stopped]);
  process.off("SIGINT", stop);
  if (timer !== undefined) clearTimeout(timer);
  await standIn.close();
  writeReport("agent", standIn.url, standIn.report(), flags);
  // All skipped is not a pass: an agent that never arrived was not checked at all.
  if (standIn.checked() === 0 && process.exitCode === 0) {
    process.stderr.write("proto-conformance: no agent request reached the stand-in; nothing was checked\n");
    process.exitCode = NOTHING_CHECKED;
  }
}

function writeReport(
  mode: string,
  url: string,
  results: ProbeResult[],
  flags: { json?: boolean; junit?: string },
): void {
  process.stdout.write(flags.json ? formatJson(mode, url, results) : formatTable(results));
  if (flags.junit !== undefined) {
    try {
      writeFileSync(flags.junit, formatJunit(mode, results));
    } catch (error) {
      throw new UsageError(`cannot write ${flags.junit}: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  process.exitCode = summarize(results).failed > 0 ? 1 : 0;
}

function common(command: Command): Command {
  return command
    .option("--json", "print every result as JSON instead of the table")
    .option("--junit <file>", "also write the results as JUnit XML to FILE")
    .option("--write", "also run probes that create state on the target")
    .option("--timeout <seconds>", "timeout of each request", positiveInt(300), 10);
}

const baseOptions = (flags: CommonFlags): ProbeOptions => ({
  write: flags.write === true,
  mirror: false,
  pageSize: 20,
  maxPages: 50,
});

export function program(): Command {
  const cli = new Command("proto-conformance")
    .description("Checks a live proto deployment against the contract.")
    .version(packageVersion())
    .showHelpAfterError(false)
    .exitOverride()
    .configureOutput({ writeErr: () => {} });

  common(cli.command("attestor").argument("<url>", "the attestor's {trust_url}", targetUrl))
    .description("check a trust attestor (trust.md)")
    .option("--agent-key <file>", "Ed25519 private key PEM of an agent you linked (enables the mint probes)")
    .option("--aud <did>", "the audience DID to mint for (with --agent-key)")
    .action(async (url: string, flags: CommonFlags & { agentKey?: string; aud?: string }) => {
      if ((flags.agentKey === undefined) !== (flags.aud === undefined))
        throw new UsageError("--agent-key and --aud go together");
      if (flags.aud !== undefined && !/^did:(web|key):\S+$/.test(flags.aud))
        throw new UsageError(`--aud is not a did:web or did:key DID: ${flags.aud}`);
      const options: ProbeOptions = {
        ...baseOptions(flags),
        ...(flags.agentKey === undefined ? {} : { agentKeyPem: readFile(flags.agentKey, "the agent key") }),
        ...(flags.aud === undefined ? {} : { aud: flags.aud }),
      };
      await runMode("attestor", url, attestorProbes, flags, options);
    });

  common(cli.command("directory").argument("<url>", "the directory's {registry_url}", targetUrl))
    .description("check a listing directory (directory.md)")
    .option("--mirror", "the target is a read-only mirror: check that it refuses writes")
    .option("--page-size <n>", "limit used when walking the listings", positiveInt(100), 20)
    .option("--max-pages <n>", "stop the walk after this many pages", positiveInt(10_000), 50)
    .action(async (url: string, flags: CommonFlags & { mirror?: boolean; pageSize: number; maxPages: number }) => {
      const options: ProbeOptions = {
        ...baseOptions(flags),
        mirror: flags.mirror === true,
        pageSize: flags.pageSize,
        maxPages: flags.maxPages,
      };
      await runMode("directory", url, directoryProbes, flags, options);
    });

  common(cli.command("service").argument("<url>", "the service's origin (where /.well-known/proto is)", targetUrl))
    .description("check a service that accepts agents (trust.md, upstream.md)")
    .option("--agent-key <file>", "Ed25519 private key PEM of a linked agent (with --attestor: an attested account)")
    .option("--attestor <url>", "{trust_url} of the attestor that mints for --agent-key", targetUrl)
    .option(
      "--permission-route <route>",
      'METHOD /path permission: a route needing a permission --agent-key lacks, e.g. "DELETE /notes/x notes:delete"',
      permissionRoute,
    )
    .action(
      async (
        url: string,
        flags: CommonFlags & { agentKey?: string; attestor?: string; permissionRoute?: PermissionRoute },
      ) => {
        if ((flags.agentKey === undefined) !== (flags.attestor === undefined))
          throw new UsageError("--agent-key and --attestor go together");
        if (flags.permissionRoute !== undefined && flags.agentKey === undefined)
          throw new UsageError(
            "--permission-route needs --agent-key and --attestor (whose token lacks the permission)",
          );
        const options: ProbeOptions = {
          ...baseOptions(flags),
          ...(flags.agentKey === undefined ? {} : { agentKeyPem: readFile(flags.agentKey, "the agent key") }),
          ...(flags.attestor === undefined ? {} : { attestorUrl: flags.attestor }),
          ...(flags.permissionRoute === undefined ? {} : { permissionRoute: flags.permissionRoute }),
        };
        await runMode("service", url, serviceProbes, flags, options);
      },
    );

  cli
    .command("agent")
    .description("run a service stand-in and check what an agent sends to it (trust.md, upstream.md)")
    .requiredOption("--listen <port>", "port to listen on (0: any free port)", port)
    .option("--host <host>", "address to listen on", "127.0.0.1")
    .option("--public-url <url>", "the origin agents use, when a TLS front is before the stand-in", targetUrl)
    .option("--attestor <url>", "{trust_url} of the attestor whose attestations the stand-in accepts", targetUrl)
    .option("--issuer <name>", "that attestor's issuer name (iss)", "proto-trust")
    .option("--open", "an open service (unclaimed_mode free): no attestation asked")
    .option("--requests <n>", "stop after N requests were checked", positiveInt(1_000_000))
    .option("--timeout <seconds>", "stop after SECONDS", positiveInt(86_400))
    .option("--json", "print every result as JSON instead of the table")
    .option("--junit <file>", "also write the results as JUnit XML to FILE")
    .action(async (flags: AgentFlags, command: Command) => {
      if ((flags.attestor === undefined) === (flags.open !== true))
        throw new UsageError("give --attestor URL (an attested_only service) or --open, one of them");
      if (flags.open === true && command.getOptionValueSource("issuer") === "cli")
        throw new UsageError("--issuer goes with --attestor");
      await runAgent(flags);
    });
  return cli;
}

export async function main(argv: readonly string[]): Promise<number> {
  if (argv.length === 0) {
    // No mode is a usage error: the help says which modes there are.
    process.stderr.write(program().helpInformation());
    return 2;
  }
  try {
    await program().parseAsync([...argv], { from: "user" });
    return typeof process.exitCode === "number" ? process.exitCode : 0;
  } catch (error) {
    if (error instanceof CommanderError) {
      // --help and --version are not errors: commander has printed them already.
      if (error.exitCode === 0) return 0;
      process.stderr.write(`proto-conformance: ${error.message.replace(/^error: /, "").split("\n")[0]}\n`);
      return 2;
    }
    if (error instanceof UsageError) {
      process.stderr.write(`proto-conformance: ${error.message}\n`);
      return 2;
    }
    process.stderr.write(`proto-conformance: ${error instanceof Error ? error.message : String(error)}\n`);
    return 1;
  }
}

process.exitCode = await main(process.argv.slice(2));
