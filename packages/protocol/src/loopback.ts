/**
 * Which hosts are this machine, for the one place plain http is allowed: a server the developer runs
 * next to the program (the attestor and the directory of `npm run dev`). Nothing sent there leaves the
 * machine. The agent (attestor, directory and MCP URLs) and the kit (attestor URLs) apply the same
 * rule, so a URL one accepts the other accepts too.
 */

/**
 * Whether a URL's `hostname` (IPv6 in brackets, as `URL` gives it) is this machine: `localhost`,
 * 127.0.0.0/8 or `[::1]`. Names under `.localhost` are left out: not every resolver keeps them here.
 */
export function isLoopbackHostname(hostname: string): boolean {
  const host = hostname.toLowerCase();
  return host === "localhost" || host === "[::1]" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/** An `http:` URL on this machine (`http://localhost:8081`): plain http that never leaves it. */
export function isLoopbackHttpUrl(url: URL | string): boolean {
  let parsed: URL;
  try {
    parsed = typeof url === "string" ? new URL(url) : url;
  } catch {
    return false;
  }
  return parsed.protocol === "http:" && isLoopbackHostname(parsed.hostname);
}
