/**
 * Real nginx and real Caddy (Debian's packages) as the TLS front of proto-gate, each run as a
 * child process of the test with everything it writes in a temporary folder: no root-owned
 * paths, no system service, no admin endpoint. The server blocks they run are the recipes of
 * docs/gate-tls-proxies.md, read from the page itself, so the documented recipe is the tested one;
 * only the names the page leaves to the operator (host, port, certificate files, the gate's port)
 * are replaced, and the test adds the process-level settings a system install would have.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { accessSync, chmodSync, constants, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { delimiter, join } from "node:path";
import { fileURLToPath } from "node:url";

export const RECIPES_FILE = fileURLToPath(new URL("../../../../docs/gate-tls-proxies.md", import.meta.url));

/** The operator's names in the recipes, replaced by the test's. */
const PLACEHOLDER = {
  host: "notes.example.com",
  cert: "/etc/ssl/notes.example.com/fullchain.pem",
  key: "/etc/ssl/notes.example.com/privkey.pem",
  gate: "127.0.0.1:8080",
} as const;

export type FrontName = "nginx" | "caddy";

export interface FrontOptions {
  /** A folder of the test's own: configuration, pid file, logs, temporary files. */
  dir: string;
  /** The https port the front listens on (127.0.0.1). */
  port: number;
  /** The host name its certificate names (agents call `https://HOST:PORT`). */
  host: string;
  /** PEM files of the certificate (chain) and its key. */
  certFile: string;
  keyFile: string;
  /** proto-gate's plain-http port on 127.0.0.1. */
  gatePort: number;
}

export interface Front {
  name: FrontName;
  /** `https://HOST:PORT`. */
  origin: string;
  stop(): Promise<void>;
}

/** The binary's path, or undefined when it is not installed (the caller skips, saying so). */
export function findBinary(name: FrontName): string | undefined {
  const dirs = [...(process.env.PATH ?? "").split(delimiter), "/usr/sbin", "/usr/local/sbin", "/sbin"];
  for (const dir of dirs) {
    if (dir === "") continue;
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not in this folder
    }
  }
  return undefined;
}

/** The one fenced block of `language` in the recipes page. */
export function recipe(language: "nginx" | "caddyfile"): string {
  const text = readFileSync(RECIPES_FILE, "utf8");
  const blocks = [...text.matchAll(/^```(\S*)\n([\s\S]*?)^```$/gm)].filter((match) => match[1] === language);
  if (blocks.length !== 1) {
    throw new Error(
      `${RECIPES_FILE}: expected exactly one \`\`\`${language} block (the recipe), found ${blocks.length}`,
    );
  }
  return blocks[0]![2]!;
}

/** Replaces each `from` (every occurrence); a `from` the recipe no longer holds is an error, not a silent skip. */
function substitute(text: string, language: string, replacements: [from: string, to: string][]): string {
  let out = text;
  for (const [from, to] of replacements) {
    if (!out.includes(from)) {
      throw new Error(`${RECIPES_FILE}: the ${language} recipe no longer contains ${JSON.stringify(from)}`);
    }
    out = out.split(from).join(to);
  }
  return out;
}

/** The nginx recipe's server block with the test's names. */
export function nginxServer(options: FrontOptions): string {
  return substitute(recipe("nginx"), "nginx", [
    // Loopback only: the test machine is shared.
    ["listen 443 ssl;", `listen 127.0.0.1:${options.port} ssl;`],
    [`server_name ${PLACEHOLDER.host};`, `server_name ${options.host};`],
    [PLACEHOLDER.cert, options.certFile],
    [PLACEHOLDER.key, options.keyFile],
    [PLACEHOLDER.gate, `127.0.0.1:${options.gatePort}`],
  ]);
}

/**
 * The whole nginx.conf: what Debian's /etc/nginx/nginx.conf provides around a site (events, the
 * http block), with every path in `dir` so that nginx needs no root-owned folder.
 */
export function nginxConf(options: FrontOptions): string {
  const dir = options.dir;
  return [
    `pid ${join(dir, "nginx.pid")};`,
    "error_log stderr warn;",
    "worker_processes 1;",
    "events { worker_connections 256; }",
    "http {",
    "    access_log off;",
    `    client_body_temp_path ${join(dir, "client_body")};`,
    `    proxy_temp_path ${join(dir, "proxy")};`,
    `    fastcgi_temp_path ${join(dir, "fastcgi")};`,
    `    uwsgi_temp_path ${join(dir, "uwsgi")};`,
    `    scgi_temp_path ${join(dir, "scgi")};`,
    nginxServer(options),
    "}",
    "",
  ].join("\n");
}

/** The Caddy recipe's site block with the test's names. */
export function caddySite(options: FrontOptions): string {
  return substitute(recipe("caddyfile"), "caddyfile", [
    [`${PLACEHOLDER.host} {`, `${options.host}:${options.port} {`],
    [PLACEHOLDER.cert, options.certFile],
    [PLACEHOLDER.key, options.keyFile],
    [PLACEHOLDER.gate, `127.0.0.1:${options.gatePort}`],
  ]);
}

/**
 * The whole Caddyfile: global options a test needs (no admin endpoint, storage in `dir`, no
 * port-80 redirect listener, loopback only), then the recipe's site.
 */
export function caddyfile(options: FrontOptions): string {
  return [
    "{",
    "\tadmin off",
    `\tstorage file_system ${join(options.dir, "caddy-storage")}`,
    "\tauto_https disable_redirects",
    "\tdefault_bind 127.0.0.1",
    // HTTP/3 would also take the UDP port; the test's clients speak HTTP/1.1.
    "\tservers {",
    "\t\tprotocols h1 h2",
    "\t}",
    "}",
    "",
    caddySite(options),
  ].join("\n");
}

/** Starts nginx in the foreground (`daemon off`), its prefix and configuration in `options.dir`. */
export async function startNginx(binary: string, options: FrontOptions): Promise<Front> {
  mkdirSync(options.dir, { recursive: true });
  // As root, nginx's workers run as nobody: they must be able to pass through the test's folder.
  chmodSync(options.dir, 0o711);
  writeFileSync(join(options.dir, "nginx.conf"), nginxConf(options));
  const child = spawn(binary, ["-p", options.dir, "-c", "nginx.conf", "-e", "stderr", "-g", "daemon off;"], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  // SIGTERM is nginx's fast shutdown: open streams are cut, not waited for.
  return started("nginx", child, options, "SIGTERM");
}

/** Starts `caddy run` on a Caddyfile in `options.dir`, its home and data folders there too. */
export async function startCaddy(binary: string, options: FrontOptions): Promise<Front> {
  mkdirSync(options.dir, { recursive: true });
  const file = join(options.dir, "Caddyfile");
  writeFileSync(file, caddyfile(options));
  const child = spawn(binary, ["run", "--config", file, "--adapter", "caddyfile"], {
    stdio: ["ignore", "pipe", "pipe"],
    env: {
      ...process.env,
      HOME: options.dir,
      XDG_CONFIG_HOME: join(options.dir, "config"),
      XDG_DATA_HOME: join(options.dir, "data"),
    },
  });
  // SIGQUIT: Caddy exits at once (SIGTERM would wait for open streams to end).
  return started("caddy", child, options, "SIGQUIT");
}

/** Resolves once the front accepts connections; rejects with its own words if it exits first. */
async function started(
  name: FrontName,
  child: ChildProcess,
  options: FrontOptions,
  stopSignal: NodeJS.Signals,
): Promise<Front> {
  let output = "";
  child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
    output += chunk;
  });
  child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
    output += chunk;
  });
  const exited = once(child, "exit").then(([code, signal]) => {
    throw new Error(`${name} exited at start (${code ?? signal}):\n${output}`);
  });
  // Keeps the rejection handled when the front started fine (and exits later, at stop).
  exited.catch(() => {});
  const deadline = Date.now() + 30_000;
  while (!(await accepts(options.port))) {
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`${name} did not listen on 127.0.0.1:${options.port} within 30 s:\n${output}`);
    }
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 50))]);
  }
  return {
    name,
    origin: `https://${options.host}:${options.port}`,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const gone = once(child, "exit");
      child.kill(stopSignal);
      const killer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await gone;
      clearTimeout(killer);
    },
  };
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}
