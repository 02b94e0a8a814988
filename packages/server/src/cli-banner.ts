/**
 * What `proto-server` tells the person who started it once a service listens: where it listens
 * and the addresses to open, on the public URL. It goes to standard error, as the command's other
 * lines for people do: standard output carries the JSON log lines alone, so a log collector
 * parses it in every environment, production included.
 */
import type { AddressInfo } from "node:net";
import type { FastifyInstance } from "fastify";

export interface ListeningService {
  /** `directory` or `attestor`, as people call them. */
  label: string;
  /** The variable that sets the public URL (`DIRECTORY_PUBLIC_URL`). */
  publicUrlVariable: string;
  publicUrl: string;
  app: FastifyInstance;
  /** The pages worth opening: path and what it is, shown when the route exists. */
  links: readonly [path: string, what: string][];
}

function listeningUrl(app: FastifyInstance): string | undefined {
  const address = app.server.address() as AddressInfo | string | null;
  if (address === null || typeof address === "string") return undefined;
  const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
  return `http://${host}:${address.port}`;
}

const LOOPBACK = new Set(["localhost", "127.0.0.1", "[::1]"]);

/**
 * For a public URL on this machine whose port is not the one listened on, the public URL it should
 * be: pages link to and agents sign for a server that is not this one (`all --trust-port 9081`
 * with the default public URL). Undefined when they agree, or when the URL is another machine's.
 */
function correctedPublicUrl(publicUrl: string, listening: string | undefined): string | undefined {
  if (listening === undefined) return undefined;
  const url = new URL(publicUrl);
  const port = url.port === "" ? (url.protocol === "https:" ? "443" : "80") : url.port;
  const listeningPort = new URL(listening).port;
  if (!LOOPBACK.has(url.hostname) || port === listeningPort) return undefined;
  url.port = listeningPort;
  return url.href.replace(/\/$/, "");
}

export function listeningBanner(service: ListeningService): string {
  const listening = listeningUrl(service.app);
  const links = service.links
    .filter(([path]) => service.app.hasRoute({ method: "GET", url: path }))
    .map(([path, what]) => [`${service.publicUrl}${path}`, what] as const);
  const width = Math.max(...links.map(([url]) => url.length));
  const lines = [
    `proto-server: ${service.label} listening on ${listening ?? "(unknown address)"}`,
    ...links.map(([url, what]) => `  ${url.padEnd(width)}  ${what}`),
  ];
  const corrected = correctedPublicUrl(service.publicUrl, listening);
  if (corrected !== undefined) {
    lines.push(
      `  note: ${service.publicUrlVariable} is ${service.publicUrl}, not this port: pages link to it and agents sign for it; set ${service.publicUrlVariable}=${corrected}`,
    );
  }
  return `${lines.join("\n")}\n`;
}

export const DIRECTORY_LINKS: readonly [string, string][] = [
  ["/", "browse the listings (curl: the API's index)"],
  ["/docs", "API docs"],
];

export const TRUST_LINKS: readonly [string, string][] = [
  ["/account", "your account and linked agents"],
  ["/docs", "API docs"],
  ["/dev/outbox", "sign-in mail (development outbox)"],
];

/** Once every service listens: why the lines on standard output are JSON. */
export function logsLine(logLevel: string): string {
  return `proto-server: logs are JSON lines on standard output, level ${logLevel} (LOG_LEVEL)\n`;
}
