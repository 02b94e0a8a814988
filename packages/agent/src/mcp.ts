/**
 * An MCP client for the agent: the MCP SDK's `Client` over Streamable HTTP, authorised by the
 * agent's own key through `AgentMcpAuthProvider`, and the SDK's failures as `AgentError`s.
 */
import { readFileSync } from "node:fs";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { OAuthError } from "@modelcontextprotocol/sdk/server/auth/errors.js";
import { isLoopbackHttpUrl } from "@proto/protocol";
import type { Agent } from "./agent.js";
import { AgentError, AuthError, ServerError, UsageError } from "./errors.js";
import { oneLine } from "./http.js";
import { createMcpAuthProvider, type McpAuthProviderOptions } from "./mcp-auth.js";

export interface ConnectMcpOptions extends Omit<McpAuthProviderOptions, "serverUrl"> {
  /** How the client names itself to the server (default `proto-agent` and this package's version). */
  clientInfo?: { name: string; version: string };
  signal?: AbortSignal;
}

type ClientModule = typeof import("@modelcontextprotocol/sdk/client/index.js");
type TransportModule = typeof import("@modelcontextprotocol/sdk/client/streamableHttp.js");
type TypesModule = typeof import("@modelcontextprotocol/sdk/types.js");

/** The SDK's classes once loaded (an error of the SDK can only exist after that). */
let loaded:
  | {
      Client: ClientModule["Client"];
      StreamableHTTPClientTransport: TransportModule["StreamableHTTPClientTransport"];
      StreamableHTTPError: TransportModule["StreamableHTTPError"];
      McpError: TypesModule["McpError"];
    }
  | undefined;

/**
 * The SDK's client side, loaded on first use: it weighs about half a second of start-up (its
 * schemas), which every other use of this package and every other `proto` command would pay.
 */
async function loadSdk(): Promise<NonNullable<typeof loaded>> {
  const [client, transport, types] = await Promise.all([
    import("@modelcontextprotocol/sdk/client/index.js"),
    import("@modelcontextprotocol/sdk/client/streamableHttp.js"),
    import("@modelcontextprotocol/sdk/types.js"),
  ]);
  loaded = {
    Client: client.Client,
    StreamableHTTPClientTransport: transport.StreamableHTTPClientTransport,
    StreamableHTTPError: transport.StreamableHTTPError,
    McpError: types.McpError,
  };
  return loaded;
}

/**
 * Checks an MCP server URL: absolute, `https://` (`http://` only on a loopback host), no
 * credentials or fragment. It is kept as given otherwise: the server compares the token's
 * audience with it byte for byte.
 */
export function checkMcpUrl(value: string): URL {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UsageError("invalid_url", `MCP server URL ${JSON.stringify(value)} is not an absolute URL`);
  }
  if (url.protocol !== "https:" && !isLoopbackHttpUrl(url)) {
    throw new UsageError(
      "insecure_url",
      `MCP server URL must be https:// (http:// only for localhost), got ${url.origin}`,
    );
  }
  if (url.username !== "" || url.password !== "" || url.hash !== "") {
    throw new UsageError("invalid_url", "MCP server URL must not carry credentials or a fragment");
  }
  return url;
}

/**
 * A `Client` connected to the MCP server at `url` (initialised), with an access token from an
 * attestor the agent is linked with whenever the server asks for one. Close it when done.
 */
export async function connectMcp(agent: Agent, url: string | URL, options: ConnectMcpOptions = {}): Promise<Client> {
  const serverUrl = checkMcpUrl(String(url));
  const { clientInfo, signal, ...providerOptions } = options;
  const provider = createMcpAuthProvider(agent, { ...providerOptions, serverUrl: serverUrl.href });
  const { Client, StreamableHTTPClientTransport } = loaded ?? (await loadSdk());
  const transport = new StreamableHTTPClientTransport(serverUrl, { authProvider: provider, fetch: provider.fetch });
  const client = new Client(clientInfo ?? { name: "proto-agent", version: packageVersion() });
  try {
    await client.connect(transport, signal === undefined ? {} : { signal });
  } catch (error) {
    await client.close().catch(() => {});
    throw mcpError(error, serverUrl.href);
  }
  return client;
}

/**
 * An error of the MCP SDK as an `AgentError` with a stable code and a one-line message (ours,
 * and an abort's reason, pass through): the server's HTTP refusals, JSON-RPC errors, OAuth
 * errors the attestor gave through another `fetch`, and whatever else the SDK throws.
 */
export function mcpError(error: unknown, url: string): Error {
  if (error instanceof AgentError || (error instanceof Error && error.name === "AbortError")) return error;
  if (loaded !== undefined && error instanceof loaded.StreamableHTTPError) {
    const detail = oneLine(error.message.replace(/^Streamable HTTP error: /, ""), 200);
    if (error.code === 401) {
      return new AuthError(
        "token_refused",
        `${url} refused the access token from this agent's attestor (HTTP 401): it may not trust that attestor`,
      );
    }
    if (error.code === 403) return new AuthError("forbidden", `${url} refused the request (HTTP 403): ${detail}`);
    const status = error.code ?? 0;
    return new ServerError({
      status,
      code: status === 404 ? "not_found" : `http_${status}`,
      message:
        status === 404 ? `no MCP server at ${url} (HTTP 404)` : `${url} answered HTTP ${status}: ${detail}`.trim(),
      url,
    });
  }
  if (loaded !== undefined && error instanceof loaded.McpError) {
    return new AgentError("server", "mcp_error", `${url}: ${oneLine(error.message.replace(/^MCP error -?\d+: /, ""))}`);
  }
  if (error instanceof OAuthError) {
    return new AgentError("auth", error.errorCode, `the attestor refused the token: ${oneLine(error.message)}`);
  }
  const message = error instanceof Error ? error.message : String(error);
  return new AgentError("server", "mcp_error", `${url}: ${oneLine(message)}`);
}

function packageVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version?: string };
    return pkg.version ?? "0.0.0";
  } catch {
    return "0.0.0";
  }
}
