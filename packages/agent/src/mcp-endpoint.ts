/**
 * Which MCP endpoint a URL means. A URL with a path names the endpoint itself, as MCP clients take
 * it. The bare service URL (or its discovery URL) means "this service's MCP endpoint": its
 * discovery document says where (`mcp.url`, docs/discovery-mcp.md), so nobody has to guess `/mcp`.
 */
import { DiscoveryError } from "./errors.js";
import type { HttpOptions } from "./http.js";
import { DISCOVERY_PATH, discoverService, noMcpEndpoint } from "./service.js";

export interface McpTarget {
  /** The MCP endpoint to connect to. */
  url: string;
  /** How it was found: given as is, or read from the service's discovery document. */
  from: "given" | "discovery";
}

/**
 * The MCP endpoint `url` names. For `https://host` or `https://host/.well-known/proto`, the one the
 * service's discovery document names; a host without a discovery document (an MCP server at the
 * root of its host) is taken as given. A proto service whose document names none, and a discovery
 * URL without one: UsageError `no_mcp_endpoint`.
 */
export async function findMcpEndpoint(
  url: string,
  options: HttpOptions & { signal?: AbortSignal } = {},
): Promise<McpTarget> {
  const parsed = URL.canParse(url) ? new URL(url) : undefined;
  const bare = parsed !== undefined && parsed.search === "" && parsed.hash === "";
  const isRoot = bare && parsed.pathname === "/";
  const isDiscovery = bare && parsed.pathname === DISCOVERY_PATH;
  // Only https can have a discovery document; anything else is left to the MCP URL checks.
  if (parsed?.protocol !== "https:" || !(isRoot || isDiscovery)) return { url, from: "given" };
  try {
    const discovery = await discoverService(parsed, options);
    if (discovery.mcp !== undefined) return { url: discovery.mcp.url, from: "discovery" };
    throw noMcpEndpoint(discovery.discoveryUrl);
  } catch (error) {
    if (isRoot && error instanceof DiscoveryError && error.code === "discovery_fetch_failed") {
      return { url, from: "given" };
    }
    throw error;
  }
}
